"""Adapters from NumPy, CuPy and PyTorch arrays to (pointer, dtype, shape, element strides, device)."""
from __future__ import annotations

from . import _capi

_TYPESTR = {"<f2": _capi.DTYPE_F16, "<f4": _capi.DTYPE_F32}
_NUMPY = {"float16": _capi.DTYPE_F16, "float32": _capi.DTYPE_F32}
ELEMENT_SIZE = {_capi.DTYPE_F16: 2, _capi.DTYPE_BF16: 2, _capi.DTYPE_F32: 4}


class ArrayView:
    """pointer, dtype, shape, strides (elements), on_device, library ("numpy", "cupy" or
    "torch") and, for device arrays, the library's current stream. A slotted class:
    execute() builds one per array per call, so construction cost matters."""

    __slots__ = ("pointer", "dtype", "shape", "strides", "on_device", "library", "stream")

    def __init__(self, pointer, dtype, shape, strides, on_device, library, stream=None):
        self.pointer, self.dtype, self.shape, self.strides = pointer, dtype, shape, strides
        self.on_device, self.library, self.stream = on_device, library, stream

    def __repr__(self):
        return (f"ArrayView(pointer={self.pointer:#x}, dtype={self.dtype}, shape={self.shape}, "
                f"strides={self.strides}, on_device={self.on_device}, library={self.library!r})")


_TORCH_DTYPES = {}
_torch_stream_of = []  # [function(device) -> raw stream], filled on first use


def _torch_current_stream(torch, device) -> int:
    if not _torch_stream_of:
        # torch.cuda.current_stream() builds a Stream object per call (several µs);
        # the raw getter PyTorch's own kernel launchers use returns the pointer.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_stream_of.append((lambda d: raw(d.index)) if raw is not None
                                else (lambda d: torch.cuda.current_stream(d).cuda_stream))
    return _torch_stream_of[0](device)


def _torch_view(t, want_stream) -> ArrayView:
    import torch
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({torch.float16: _capi.DTYPE_F16, torch.bfloat16: _capi.DTYPE_BF16,
                              torch.float32: _capi.DTYPE_F32})
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        raise TypeError(f"ge2: torch dtype {t.dtype} is not float16, bfloat16 or float32")
    stream = _torch_current_stream(torch, t.device) if (want_stream and t.is_cuda) else None
    return ArrayView(t.data_ptr(), dtype, tuple(t.shape), tuple(t.stride()), t.is_cuda, "torch", stream)


def _element_strides(iface, dtype) -> tuple:
    size = ELEMENT_SIZE[dtype]
    strides = iface.get("strides")
    if strides is None:  # C-contiguous
        out, step = [], 1
        for extent in reversed(iface["shape"]):
            out.append(step)
            step *= extent
        return tuple(reversed(out))
    if any(s % size for s in strides):
        raise ValueError("ge2: array strides are not whole elements")
    return tuple(s // size for s in strides)


def view(array, want_stream: bool = True) -> ArrayView:
    """`want_stream`: also look up the array library's current stream (costs a call)."""
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        return _torch_view(array, want_stream)
    if hasattr(array, "__cuda_array_interface__"):  # CuPy and others
        iface = array.__cuda_array_interface__
        dtype = _TYPESTR.get(iface["typestr"])
        if dtype is None:
            raise TypeError(f"ge2: array typestr {iface['typestr']} is not float16 or float32")
        shape = tuple(iface["shape"])
        strides = _element_strides(iface, dtype)
        stream = None
        if module == "cupy" and want_stream:
            import cupy
            stream = cupy.cuda.get_current_stream().ptr
        return ArrayView(iface["data"][0], dtype, shape, strides, True, module, stream)
    iface = getattr(array, "__array_interface__", None)  # NumPy: one dict, no ctypes objects
    if iface is not None:
        dtype = _TYPESTR.get(iface["typestr"])
        if dtype is None:
            raise TypeError(f"ge2: NumPy dtype {iface['typestr']} is not float16 or float32 (bfloat16 needs PyTorch)")
        return ArrayView(iface["data"][0], dtype, tuple(iface["shape"]), _element_strides(iface, dtype), False, "numpy")
    raise TypeError(f"ge2: unsupported array type {type(array)!r}; use NumPy, CuPy or PyTorch")


def empty_like_library(library: str, shape: tuple, dtype: int, like):
    if library == "torch":
        import torch
        dt = {_capi.DTYPE_F16: torch.float16, _capi.DTYPE_BF16: torch.bfloat16, _capi.DTYPE_F32: torch.float32}[dtype]
        return torch.empty(shape, dtype=dt, device=like.device)
    if library == "cupy":
        import cupy
        return cupy.empty(shape, dtype={_capi.DTYPE_F16: "float16", _capi.DTYPE_F32: "float32"}[dtype])
    import numpy as np
    return np.empty(shape, dtype={_capi.DTYPE_F16: np.float16, _capi.DTYPE_F32: np.float32}[dtype])
