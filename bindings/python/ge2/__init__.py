"""ge2: Python binding (ctypes) of the ge2 GPU graph executor.

    import numpy as np, ge2
    with ge2.Context(device="cpu") as ctx:
        y = ge2.gemm_bias_act(a, b, bias, act="relu", context=ctx)

NumPy arrays run on the CPU backend (or are staged through the GPU on a CUDA
context); CuPy arrays and PyTorch CUDA tensors are used in place, on the
library's current stream. Errors raise a subclass of ge2.Ge2Error that carries
the library's message.
"""
from __future__ import annotations

import ctypes
import json
import warnings

from . import _capi
from ._arrays import ELEMENT_SIZE, empty_like_library, view
from .errors import *  # noqa: F401,F403
from .errors import BY_STATUS, Ge2Error, InvalidArgumentError, VersionMismatchError

API_VERSION = _capi.API_VERSION  # the GE2_API_VERSION this binding was written for

__all__ = ["Context", "Graph", "Plan", "Value", "gemm_bias_act", "library_version", "Ge2Error"]

_lib = _capi.load_library()
if _lib.ge2_get_api_version() != _capi.API_VERSION:
    raise VersionMismatchError(
        f"libge2 implements GE2_API_VERSION {_lib.ge2_get_api_version()}, this binding was written for "
        f"{_capi.API_VERSION}; install matching versions", 9)

_DTYPE_NAMES = {"f16": _capi.DTYPE_F16, "float16": _capi.DTYPE_F16, "bf16": _capi.DTYPE_BF16,
                "bfloat16": _capi.DTYPE_BF16, "f32": _capi.DTYPE_F32, "float32": _capi.DTYPE_F32}


def _check(status: int) -> None:
    if status != _capi.OK:
        message = _lib.ge2_last_error().decode(errors="replace")
        raise BY_STATUS.get(status, Ge2Error)(message, status)


def library_version() -> str:
    return _lib.ge2_get_version_string().decode()


def _activation(act) -> int:
    if isinstance(act, int):
        return act
    try:
        return _capi.ACTIVATIONS[act]
    except KeyError:
        raise ValueError(f"ge2: unknown activation {act!r}; use None, 'relu', 'gelu' (erf), 'gelu_tanh'") from None


def _desc(dtype: int, shape, strides=None) -> _capi.TensorDesc:
    desc = _capi.TensorDesc()
    desc.dtype = dtype
    desc.rank = len(shape)
    for i, extent in enumerate(shape):
        desc.shape[i] = int(extent)
        desc.strides[i] = int(strides[i]) if strides is not None else 0
    return desc


class Context:
    """A device, its cuBLASLt handle and tuning cache. device: 'auto', 'cuda' or 'cpu'."""

    def __init__(self, device: str = "auto", tune: str = "cached", tunedb: str | None = None, ordinal: int = 0):
        options = _capi.ContextOptions()
        _check(_lib.ge2_context_options_init(ctypes.byref(options)))
        options.device = _capi.DEVICES[device]
        options.tune_mode = _capi.TUNE_MODES[tune]
        options.device_ordinal = ordinal
        self._tunedb = tunedb.encode() if tunedb is not None else None
        options.tunedb_path = self._tunedb
        handle = ctypes.c_void_p()
        _check(_lib.ge2_context_create(_capi.API_VERSION, ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self._one_shot_keepalive = []

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("ge2: the context is closed")
        return self._handle

    @property
    def device(self) -> str:
        kind = ctypes.c_int()
        _check(_lib.ge2_context_get_device_kind(self.handle, ctypes.byref(kind)))
        return "cuda" if kind.value == 1 else "cpu"

    def describe(self) -> dict:
        text = ctypes.c_char_p()
        _check(_lib.ge2_context_describe(self.handle, ctypes.byref(text)))
        return json.loads(text.value)

    def close(self) -> None:
        if self._handle is not None:
            _lib.ge2_context_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class Value(int):
    """A value of a graph (its id)."""


class Graph:
    """A graph under construction."""

    def __init__(self):
        handle = ctypes.c_void_p()
        _check(_lib.ge2_graph_create(ctypes.byref(handle)))
        self._handle = handle

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _lib.ge2_graph_destroy(self._handle)
            self._handle = None

    def input(self, name: str, shape, dtype="f16", strides=None) -> Value:
        out = ctypes.c_int32()
        dt = _DTYPE_NAMES[dtype] if isinstance(dtype, str) else dtype
        _check(_lib.ge2_graph_add_input(self._handle, name.encode(), ctypes.byref(_desc(dt, shape, strides)), ctypes.byref(out)))
        return Value(out.value)

    @staticmethod
    def _attrs(trans_a, trans_b, alpha, beta):
        attrs = _capi.GemmAttrs()
        _check(_lib.ge2_gemm_attrs_init(ctypes.byref(attrs)))
        attrs.trans_a, attrs.trans_b, attrs.alpha, attrs.beta = int(trans_a), int(trans_b), alpha, beta
        return attrs

    def gemm(self, a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0) -> Value:
        out = ctypes.c_int32()
        attrs = self._attrs(trans_a, trans_b, alpha, beta)
        _check(_lib.ge2_graph_add_gemm(self._handle, a, b, _capi.NO_VALUE if c is None else c, ctypes.byref(attrs), ctypes.byref(out)))
        return Value(out.value)

    def bias(self, x, bias) -> Value:
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_bias(self._handle, x, bias, ctypes.byref(out)))
        return Value(out.value)

    def activation(self, x, act) -> Value:
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_activation(self._handle, x, _activation(act), ctypes.byref(out)))
        return Value(out.value)

    def gemm_bias_act(self, a, b, bias=None, act=None, trans_a=False, trans_b=False, alpha=1.0) -> Value:
        out = ctypes.c_int32()
        attrs = self._attrs(trans_a, trans_b, alpha, 0.0)
        _check(_lib.ge2_graph_add_gemm_bias_act(self._handle, a, b, _capi.NO_VALUE if bias is None else bias,
                                                ctypes.byref(attrs), _activation(act), ctypes.byref(out)))
        return Value(out.value)

    def output(self, value, name: str) -> None:
        _check(_lib.ge2_graph_mark_output(self._handle, value, name.encode(), None))

    def compile(self, context: Context, fuse=True, allow_tf32=False, force_kernel: str | None = None,
                graph_replay=False) -> "Plan":
        """graph_replay: on CUDA, record the plan's work as a CUDA graph and replay it while
        the bound arrays stay the same (see ge2_compile_options_t.graph_replay)."""
        return Plan(context, self, fuse=fuse, allow_tf32=allow_tf32, force_kernel=force_kernel,
                    graph_replay=graph_replay)


class Plan:
    """A compiled graph. execute() binds arrays by name."""

    def __init__(self, context: Context, graph: Graph, fuse=True, allow_tf32=False, force_kernel=None,
                 graph_replay=False):
        options = _capi.CompileOptions()
        _check(_lib.ge2_compile_options_init(ctypes.byref(options)))
        options.fuse, options.allow_tf32 = int(fuse), int(allow_tf32)
        options.graph_replay = int(graph_replay)
        self._force = force_kernel.encode() if force_kernel else None
        options.force_kernel = self._force
        handle = ctypes.c_void_p()
        _check(_lib.ge2_plan_compile(context.handle, graph._handle, ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self.context = context  # keeps the context alive at least as long as the plan
        self._on_cuda = context.device == "cuda"
        self.io = self._io()
        self._names = {name: name.encode() for name in self.io}

    def _io(self) -> dict:
        count = ctypes.c_size_t()
        _check(_lib.ge2_plan_io_count(self._handle, ctypes.byref(count)))
        io = {}
        for i in range(count.value):
            info = _capi.IoInfo()
            _check(_lib.ge2_plan_io_info(self._handle, i, ctypes.byref(info)))
            rank = info.desc.rank
            io[info.name.decode()] = {"output": bool(info.is_output), "dtype": info.desc.dtype,
                                      "shape": tuple(info.desc.shape[:rank]), "strides": tuple(info.desc.strides[:rank])}
        return io

    def describe(self) -> dict:
        text = ctypes.c_char_p()
        _check(_lib.ge2_plan_describe(self._handle, ctypes.byref(text)))
        return json.loads(text.value)

    def execute(self, arrays: dict, stream: int | None = None) -> None:
        """Binds arrays by name and runs the plan. Device arrays run on `stream`, by
        default the current stream of the first device array's library."""
        bindings = (_capi.Binding * len(arrays))()
        keep = []
        need_stream = stream is None and self._on_cuda
        for i, (name, array) in enumerate(arrays.items()):
            v = view(array, want_stream=need_stream)
            expected = self.io.get(name)
            if expected is not None and (v.dtype != expected["dtype"] or v.shape != expected["shape"]
                                         or v.strides != expected["strides"]):
                raise InvalidArgumentError(
                    f"ge2.Plan.execute: argument '{name}': dtype/shape/strides {v.dtype}/{v.shape}/{v.strides} "
                    f"differ from the plan's {expected['dtype']}/{expected['shape']}/{expected['strides']}", 1)
            if need_stream and v.on_device:
                stream, need_stream = v.stream, False
            encoded = self._names.get(name)
            if encoded is None:
                encoded = name.encode()
                keep.append(encoded)
            bindings[i].name = encoded
            bindings[i].data = v.pointer
        _check(_lib.ge2_plan_execute(self._handle, bindings, len(arrays), stream))

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _lib.ge2_plan_destroy(self._handle)
            self._handle = None


_default_context = None


def gemm_bias_act(a, b, bias=None, act=None, *, trans_a=False, trans_b=False, alpha=1.0, out=None,
                  context: Context | None = None, stream: int | None = None):
    """D = act(alpha * op(a) @ op(b) + bias) in one call; returns `out` or a new array of a's library."""
    global _default_context
    if context is None:
        if _default_context is None:
            _default_context = Context()
        context = _default_context
    va, vb = view(a), view(b)
    if len(va.shape) != len(vb.shape) or len(va.shape) not in (2, 3):
        raise ValueError("ge2.gemm_bias_act: a and b must both be 2-D, or both 3-D (batched)")
    batch = va.shape[0] if len(va.shape) == 3 else 1
    rows_a, cols_a = va.shape[-2:]
    rows_b, cols_b = vb.shape[-2:]
    m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
    n = rows_b if trans_b else cols_b

    def leading(v, name):
        if v.strides[-1] != 1:
            raise ValueError(f"ge2.gemm_bias_act: argument '{name}' must have unit stride in its last dimension")
        return v.strides[-2], (v.strides[0] if len(v.shape) == 3 else 0)

    if out is None:
        out = empty_like_library(va.library, (batch, m, n) if batch > 1 else (m, n), va.dtype, a)
    vd = view(out)
    params = _capi.GemmParams()
    _check(_lib.ge2_gemm_params_init(ctypes.byref(params)))
    params.m, params.n, params.k, params.batch = m, n, k, batch
    params.trans_a, params.trans_b = int(trans_a), int(trans_b)
    params.lda, params.stride_a = leading(va, "a")
    params.ldb, params.stride_b = leading(vb, "b")
    params.ldd, params.stride_d = leading(vd, "out")
    params.dtype, params.activation, params.alpha = va.dtype, _activation(act), alpha
    bias_pointer = None
    if bias is not None:
        vbias = view(bias)
        if vbias.shape != (n,) or vbias.strides != (1,):
            raise ValueError(f"ge2.gemm_bias_act: argument 'bias' must be contiguous with shape ({n},), got {vbias.shape}")
        params.has_bias, bias_pointer = 1, vbias.pointer
    for name, v in (("b", vb), ("out", vd)):
        if v.dtype != va.dtype:
            raise ValueError(f"ge2.gemm_bias_act: argument '{name}' dtype differs from a's")
    if stream is None and va.on_device:
        stream = va.stream
    _check(_lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), va.pointer, vb.pointer, bias_pointer, vd.pointer, stream))
    return out
