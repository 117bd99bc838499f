"""Adapters from NumPy, CuPy and PyTorch arrays, and from any array that offers DLPack
(`__dlpack__` and `__dlpack_device__`: JAX, TensorFlow, ...), to (pointer, dtype, shape, element
strides, device)."""
from __future__ import annotations

import ctypes
import sys

from . import _capi
from ._checks import invalid

_TYPESTR = {"<f2": _capi.DTYPE_F16, "<f4": _capi.DTYPE_F32}
ELEMENT_SIZE = {_capi.DTYPE_F16: 2, _capi.DTYPE_BF16: 2, _capi.DTYPE_F32: 4}


def _numpy_dtype(array, typestr: str):
    """The ge2 dtype of a NumPy array: float16, float32, or ml_dtypes' bfloat16 (JAX's NumPy
    bfloat16), whose typestr is a bare 2-byte void like a structured dtype's, so its name decides."""
    dtype = _TYPESTR.get(typestr)
    if dtype is None and typestr == "<V2" and getattr(getattr(array, "dtype", None), "name", None) == "bfloat16":
        return _capi.DTYPE_BF16
    return dtype


class ArrayView:
    """pointer, dtype, shape, strides (elements), on_device, library ("numpy", "cupy" or
    "torch") and, for device arrays, the library's current stream. A slotted class:
    execute() builds one per array per call, so construction cost matters."""

    __slots__ = ("pointer", "dtype", "shape", "strides", "on_device", "library", "stream", "readonly",
                 "keepalive")

    def __init__(self, pointer, dtype, shape, strides, on_device, library, stream=None, readonly=False,
                 keepalive=None):
        self.pointer, self.dtype, self.shape, self.strides = pointer, dtype, shape, strides
        self.on_device, self.library, self.stream, self.readonly = on_device, library, stream, readonly
        self.keepalive = keepalive  # a DLPack capsule: its deleter runs when the view goes

    def __repr__(self):
        return (f"ArrayView(pointer={self.pointer:#x}, dtype={self.dtype}, shape={self.shape}, "
                f"strides={self.strides}, on_device={self.on_device}, library={self.library!r})")


_TORCH_DTYPES = {}  # torch dtype -> ge2 dtype code, filled on first use (torch is optional)


def torch_dtype_codes() -> dict:
    """{torch dtype: ge2 dtype code} for the dtypes ge2 takes: the one table every torch path uses."""
    if not _TORCH_DTYPES:
        import torch
        _TORCH_DTYPES.update({torch.float16: _capi.DTYPE_F16, torch.bfloat16: _capi.DTYPE_BF16,
                              torch.float32: _capi.DTYPE_F32})
    return _TORCH_DTYPES
_torch_stream_of = []  # [function(device) -> raw stream], filled on first use


def _torch_current_stream(torch, device) -> int:
    if not _torch_stream_of:
        # torch.cuda.current_stream() builds a Stream object per call (several µs);
        # the raw getter PyTorch's own kernel launchers use returns the pointer.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_stream_of.append((lambda d: raw(d.index)) if raw is not None
                                else (lambda d: torch.cuda.current_stream(d).cuda_stream))
    return _torch_stream_of[0](device)


def refuse_non_strided(t, argument: str, function: str) -> None:
    """A sparse (or other non-strided) torch tensor has no strided memory ge2 could read."""
    if t.layout is not sys.modules["torch"].strided:
        raise invalid(function, f"argument '{argument}' has layout {t.layout}; ge2 takes dense (strided) tensors "
                                f"(.to_dense())")


def _torch_view(t, want_stream, argument, function) -> ArrayView:
    import torch
    dtype = torch_dtype_codes().get(t.dtype)
    if dtype is None:
        raise TypeError(f"{function}: argument '{argument}': torch dtype {t.dtype} is not float16, "
                        f"bfloat16 or float32")
    if t.device.type not in ("cpu", "cuda"):
        raise invalid(function, f"argument '{argument}' is on device {t.device}; ge2 takes CPU and CUDA tensors")
    refuse_non_strided(t, argument, function)
    if t.is_neg():  # its memory holds the negatives of its values (the imaginary part of a conj())
        raise invalid(function, f"argument '{argument}' is a negated view (is_neg()); pass .resolve_neg()")
    stream = _torch_current_stream(torch, t.device) if (want_stream and t.is_cuda) else None
    # Writing through the pointer would bypass autograd: such a tensor is read-only to ge2.
    readonly = t.requires_grad
    return ArrayView(t.data_ptr(), dtype, tuple(t.shape), tuple(t.stride()), t.is_cuda, "torch", stream,
                     readonly)


def _row_major_strides(shape) -> tuple:
    """Element strides of a dense row-major array of `shape`."""
    out, step = [], 1
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def _element_strides(iface, dtype, argument, function) -> tuple:
    size = ELEMENT_SIZE[dtype]
    strides = iface.get("strides")
    if strides is None:  # C-contiguous
        return _row_major_strides(iface["shape"])
    if any(s % size for s in strides):
        raise invalid(function, f"argument '{argument}': byte strides {tuple(strides)} are not whole "
                                f"{size}-byte elements")
    return tuple(s // size for s in strides)


def _checked(v: ArrayView, argument: str, function: str) -> ArrayView:
    """Refuses what the C API cannot express: empty, broadcast (stride 0) and reversed (negative
    stride) dimensions. Strides of dimensions of extent 1 address nothing: they are replaced by
    the dense row-major value, so that equal layouts compare equal."""
    if not 1 <= len(v.shape) <= 3:
        raise invalid(function, f"argument '{argument}' has {len(v.shape)} dimensions; ge2 takes 1 to 3")
    strides, dense = list(v.strides), 1
    for i in reversed(range(len(v.shape))):
        extent = v.shape[i]
        if extent <= 0:
            raise invalid(function, f"argument '{argument}' has shape {v.shape}: dimension {i} is empty")
        if extent == 1:
            strides[i] = dense
        elif strides[i] <= 0:
            kind = "broadcast (stride 0)" if strides[i] == 0 else "reversed (negative stride)"
            raise invalid(function, f"argument '{argument}' is a {kind} view (shape {v.shape}, element "
                                    f"strides {v.strides}); pass a copy (np.ascontiguousarray, "
                                    f".contiguous())")
        dense *= extent
    v.strides = tuple(strides)
    return v


# DLPack's C structs (dlpack.h, the unversioned DLManagedTensor that `__dlpack__()` returns
# without max_version, "dltensor" capsules).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_DTYPES = {(2, 16): _capi.DTYPE_F16, (2, 32): _capi.DTYPE_F32, (4, 16): _capi.DTYPE_BF16}  # kDLFloat, kDLBfloat
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _dlpack_view(array, argument, function) -> ArrayView:
    device_type, _ = array.__dlpack_device__()
    if device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise invalid(function, f"argument '{argument}' is a DLPack array on device type {device_type}; "
                                f"ge2 takes CPU and CUDA memory")
    # The producer's stream is left to the caller: DLPack's stream=None means "the producer's
    # legacy default stream", and ge2 runs on the stream the call names.
    capsule = array.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dtype = _DL_DTYPES.get((tensor.dtype.code, tensor.dtype.bits)) if tensor.dtype.lanes == 1 else None
    if dtype is None:
        raise TypeError(f"{function}: argument '{argument}': DLPack dtype (code {tensor.dtype.code}, "
                        f"{tensor.dtype.bits} bits, {tensor.dtype.lanes} lanes) is not float16, bfloat16 "
                        f"or float32")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(tensor.ndim))
    else:  # NULL: compact row-major
        strides = _row_major_strides(shape)
    pointer = (tensor.data or 0) + tensor.byte_offset
    on_device = device_type in (_DL_CUDA, _DL_CUDA_MANAGED)
    return _checked(ArrayView(pointer, dtype, shape, strides, on_device, "dlpack", None, False, capsule),
                    argument, function)


_FAST_KINDS = {}  # type -> "numpy", "torch" or None: which arrays fast_binding reads
_TORCH_STRIDED = []  # [torch.strided] once a tensor came (torch is optional)


def fast_binding(array):
    """(signature, pointer, torch CUDA device or None) of a NumPy array or PyTorch tensor, read
    from its cheapest attributes; None for other arrays. Two arrays of one signature give view()
    the same dtype, shape, strides, device and writability, so a check view() and the plan made
    for one holds for the other (Plan.execute's cache); only the pointer differs."""
    cls = type(array)
    kind = _FAST_KINDS.get(cls, False)
    if kind is False:
        module = cls.__module__.split(".")[0]
        kind = _FAST_KINDS[cls] = ("torch" if module == "torch" and hasattr(array, "data_ptr") else
                                   "numpy" if module == "numpy" and hasattr(array, "__array_interface__")
                                   else None)
        if kind == "torch" and not _TORCH_STRIDED:
            _TORCH_STRIDED.append(sys.modules["torch"].strided)
    if kind == "numpy":
        iface = array.__array_interface__
        pointer, readonly = iface["data"]
        typestr = iface["typestr"]
        # A void typestr is bfloat16 or a structured dtype: the dtype itself tells them apart.
        element = typestr if typestr[1] != "V" else array.dtype
        return (cls, element, iface["shape"], iface["strides"], readonly), pointer, None
    if kind == "torch":
        if array.is_neg() or array.layout is not _TORCH_STRIDED[0]:
            return None  # view() refuses it with a message
        device = array.device
        return ((cls, array.dtype, device, array.shape, array.stride(), array.requires_grad), array.data_ptr(),
                device if array.is_cuda else None)
    return None


def torch_stream(device) -> int:
    """The current stream of a torch CUDA device (torch is imported: a tensor of it was bound)."""
    return _torch_current_stream(sys.modules["torch"], device)


def view(array, argument: str = "array", function: str = "ge2", want_stream: bool = True) -> ArrayView:
    """`want_stream`: also look up the array library's current stream (costs a call)."""
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        return _checked(_torch_view(array, want_stream, argument, function), argument, function)
    if hasattr(array, "__cuda_array_interface__"):  # CuPy and others
        iface = array.__cuda_array_interface__
        dtype = _TYPESTR.get(iface["typestr"])
        if dtype is None:
            raise TypeError(f"{function}: argument '{argument}': typestr {iface['typestr']} is not float16 "
                            f"or float32")
        shape = tuple(iface["shape"])
        strides = _element_strides(iface, dtype, argument, function)
        stream = None
        if module == "cupy" and want_stream:
            import cupy
            stream = cupy.cuda.get_current_stream().ptr
        pointer, readonly = iface["data"]
        return _checked(ArrayView(pointer, dtype, shape, strides, True, module, stream, bool(readonly)),
                        argument, function)
    iface = getattr(array, "__array_interface__", None)  # NumPy: one dict, no ctypes objects
    if iface is not None:
        dtype = _numpy_dtype(array, iface["typestr"])
        if dtype is None:
            raise TypeError(f"{function}: argument '{argument}': NumPy dtype {iface['typestr']} is not "
                            f"float16, float32 or ml_dtypes.bfloat16")
        pointer, readonly = iface["data"]
        return _checked(ArrayView(pointer, dtype, tuple(iface["shape"]),
                                  _element_strides(iface, dtype, argument, function), False, "numpy",
                                  None, bool(readonly)), argument, function)
    if hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):
        return _dlpack_view(array, argument, function)
    raise TypeError(f"{function}: argument '{argument}' is a {type(array).__module__}.{type(array).__name__}; "
                    f"use a NumPy, CuPy or PyTorch array, or one that offers DLPack (__dlpack__)")


def empty_like_library(library: str, shape: tuple, dtype: int, like):
    """A new output for an input of `library`; a DLPack input's is made by NumPy (host memory)
    or by CuPy / PyTorch (device memory)."""
    if library == "dlpack":
        if like.__dlpack_device__()[0] in (_DL_CUDA, _DL_CUDA_MANAGED):
            try:
                import cupy  # noqa: F401
                library = "cupy"
            except ImportError:
                library = "torch"
        else:
            library = "numpy"
    if library == "torch":
        import torch
        if type(like) is torch.Tensor and torch_dtype_codes().get(like.dtype) == dtype:
            return like.new_empty(shape)  # half the cost of torch.empty with a dtype and device
        dt = next(t for t, code in torch_dtype_codes().items() if code == dtype)
        return torch.empty(shape, dtype=dt, device=like.device)
    if library == "cupy":
        import cupy
        return cupy.empty(shape, dtype={_capi.DTYPE_F16: "float16", _capi.DTYPE_F32: "float32"}[dtype])
    import numpy as np
    if dtype == _capi.DTYPE_BF16:
        if isinstance(like, np.ndarray):  # an ml_dtypes.bfloat16 input: its dtype holds the result
            return np.empty(shape, dtype=like.dtype)
        raise TypeError("ge2: NumPy has no bfloat16 of its own to hold the result; pass out= (an "
                        "ml_dtypes.bfloat16 array, a PyTorch tensor or another DLPack array)")
    return np.empty(shape, dtype={_capi.DTYPE_F16: np.float16, _capi.DTYPE_F32: np.float32}[dtype])
