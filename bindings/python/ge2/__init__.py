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
import logging
import warnings

from . import _capi, _checks
from ._arrays import empty_like_library, fast_binding, torch_stream, view
from ._checks import invalid
from .errors import *  # noqa: F401,F403
from .errors import BY_STATUS, Ge2Error, InvalidArgumentError, VersionMismatchError

API_VERSION = _capi.API_VERSION  # the GE2_API_VERSION this binding was written for

__all__ = ["Context", "Graph", "Plan", "Value", "gemm_bias_act", "library_version", "Ge2Error", "__version__"]

_lib = _capi.load_library()
if _lib.ge2_get_api_version() != _capi.API_VERSION:
    raise VersionMismatchError(
        f"libge2 implements GE2_API_VERSION {_lib.ge2_get_api_version()}, this binding was written for "
        f"{_capi.API_VERSION}; install matching versions", 9)

# One source for the version: the loaded library's own (ge2_get_version_string).
__version__ = _lib.ge2_get_version_string().decode()

_DTYPE_NAMES = {"f16": _capi.DTYPE_F16, "float16": _capi.DTYPE_F16, "bf16": _capi.DTYPE_BF16,
                "bfloat16": _capi.DTYPE_BF16, "f32": _capi.DTYPE_F32, "float32": _capi.DTYPE_F32}
_DTYPE_TEXT = {_capi.DTYPE_F16: "float16", _capi.DTYPE_BF16: "bfloat16", _capi.DTYPE_F32: "float32"}


def _check(status: int) -> None:
    if status != _capi.OK:
        message = _lib.ge2_last_error().decode(errors="replace")
        raise BY_STATUS.get(status, Ge2Error)(message, status)


def library_version() -> str:
    return _lib.ge2_get_version_string().decode()


def _activation(act, function: str) -> int:
    return _checks.choice(act, _capi.ACTIVATIONS, "act", function)


def _dtype(dtype, function: str) -> int:
    return _checks.choice(dtype, _DTYPE_NAMES, "dtype", function)


def _desc(dtype: int, shape, strides, function: str) -> _capi.TensorDesc:
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"{function}: argument 'shape' = {shape!r} is not a sequence of ints") from None
    if not 1 <= len(shape) <= 3:
        raise invalid(function, f"argument 'shape' = {shape} must have 1 to 3 dimensions")
    if strides is not None:
        try:
            strides = tuple(strides)
        except TypeError:
            raise TypeError(f"{function}: argument 'strides' = {strides!r} is not a sequence of ints") from None
        if len(strides) != len(shape):
            raise invalid(function, f"argument 'strides' = {strides} must have {len(shape)} entries like "
                                    f"'shape'")
    desc = _capi.TensorDesc()
    desc.dtype = dtype
    desc.rank = len(shape)
    for i, extent in enumerate(shape):
        desc.shape[i] = _checks.integer(extent, f"shape[{i}]", function)
        desc.strides[i] = _checks.integer(strides[i], f"strides[{i}]", function) if strides is not None else 0
    return desc


def _forward_log(_user_data, level, message):
    """The library's diagnostics: warnings and errors as RuntimeWarning, information to
    logging.getLogger('ge2')."""
    text = message.decode(errors="replace")
    if level <= _capi.LOG_LEVELS["warning"]:
        warnings.warn(f"ge2: {text}", RuntimeWarning, stacklevel=3)
    else:
        logging.getLogger("ge2").info(text)


_LOG_CALLBACK = _capi.LOG_CALLBACK(_forward_log)  # lives as long as the module


class Context:
    """A device, its cuBLASLt handle and tuning cache. device: 'auto', 'cuda' or 'cpu';
    tune: 'off', 'cached' or 'tune'; one_shot_cache_size: plans gemm_bias_act keeps (LRU);
    log_level: 'default' ($GE2_LOG_LEVEL, else 'warning'), 'off', 'error', 'warning' or 'info'.
    The library's warnings (a tuning database it cannot use, device='auto' running on the CPU)
    arrive as RuntimeWarning, its information on logging.getLogger('ge2')."""

    def __init__(self, device: str = "auto", tune: str = "cached", tunedb: str | None = None, ordinal: int = 0,
                 one_shot_cache_size: int | None = None, log_level: str = "default"):
        f = "ge2.Context"
        options = _capi.ContextOptions()
        _check(_lib.ge2_context_options_init_sized(ctypes.byref(options), ctypes.sizeof(options)))
        options.device = _checks.choice(device, _capi.DEVICES, "device", f)
        options.tune_mode = _checks.choice(tune, _capi.TUNE_MODES, "tune", f)
        options.device_ordinal = _checks.integer(ordinal, "ordinal", f, 0, _checks.INT32_MAX)
        if one_shot_cache_size is not None:
            options.one_shot_cache_size = _checks.integer(one_shot_cache_size, "one_shot_cache_size", f, 0,
                                                          (1 << 32) - 1)
        self._tunedb = _checks.path(tunedb, "tunedb", f) if tunedb is not None else None
        options.tunedb_path = self._tunedb
        options.log_level = _checks.choice(log_level, _capi.LOG_LEVELS, "log_level", f)
        options.log_callback = _LOG_CALLBACK
        handle = ctypes.c_void_p()
        _check(_lib.ge2_context_create(_capi.API_VERSION, ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self._device = None

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidArgumentError("ge2.Context: the context is closed", 1)
        return self._handle

    @property
    def device(self) -> str:
        if self._device is None:  # fixed for the context's life: asked once (the one-shot call reads it)
            kind = ctypes.c_int()
            _check(_lib.ge2_context_get_device_kind(self.handle, ctypes.byref(kind)))
            self._device = "cuda" if kind.value == 1 else "cpu"
        return self._device

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
    """A value of a graph: its id there (an int), refused by any other graph."""

    _graph = None  # the token of the Graph that made it


class Graph:
    """A graph under construction."""

    def __init__(self):
        handle = ctypes.c_void_p()
        _check(_lib.ge2_graph_create(ctypes.byref(handle)))
        self._handle = handle
        self._token = object()  # identifies this graph's values

    def _new_value(self, value_id: int) -> Value:
        value = Value(value_id)
        value._graph = self._token
        return value

    def _operand(self, value, argument: str, function: str) -> int:
        # A Value knows its graph: ids are indices, so another graph's value would name
        # whatever this graph has under the same index.
        if isinstance(value, Value) and value._graph not in (None, self._token):
            raise invalid(function, f"argument '{argument}' = {int(value)} is a value of another ge2.Graph")
        return _checks.integer(value, argument, function, _checks.INT32_MIN, _checks.INT32_MAX)

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _lib.ge2_graph_destroy(self._handle)
            self._handle = None

    def input(self, name: str, shape, dtype="f16", strides=None, dynamic: bool = False) -> Value:
        """A named tensor bound at every execution: shape of 1 to 3 dimensions, dtype "f16", "bf16" or
        "f32", element strides (None: dense row-major). dynamic: shape[0] (the rows, or the batch of
        a rank-3 tensor) is the graph's dynamic extent with shape[0] as its bound; a plan then runs
        any extent up to it (see ge2_graph_add_dynamic_input)."""
        f = "ge2.Graph.input"
        encoded = _checks.name(name, "name", f)
        desc = _desc(_dtype(dtype, f), shape, strides, f)
        add = _lib.ge2_graph_add_dynamic_input if _checks.flag(dynamic, "dynamic", f) else _lib.ge2_graph_add_input
        out = ctypes.c_int32()
        _check(add(self._handle, encoded, ctypes.byref(desc), ctypes.byref(out)))
        return self._new_value(out.value)

    def constant(self, name: str, array) -> Value:
        """A named tensor whose values are copied from `array` now (NumPy, or a CPU tensor):
        typically a weight. Plans keep their own copy (on the GPU for CUDA contexts), so it is
        not bound at execution. Device arrays are refused: pass `array.cpu()`."""
        f = "ge2.Graph.constant"
        encoded = _checks.name(name, "name", f)
        v = view(array, "array", f, want_stream=False)
        if v.on_device:
            raise invalid(f, f"argument 'array' is a CUDA {v.library} array; constants are copied from host "
                             f"memory (pass array.cpu() or a NumPy array)")
        desc = _desc(v.dtype, v.shape, v.strides, f)
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_constant(self._handle, encoded, ctypes.byref(desc), v.pointer, ctypes.byref(out)))
        return self._new_value(out.value)

    def quantized_constant(self, name: str, data, scales, scale_axis=None, dtype="f16",
                           block=None) -> Value:
        """A constant given in FP8 e4m3 with its scales, as FP8 checkpoints store weights: its value
        in the graph is e4m3(data) * scale in `dtype` ("f16", "bf16" or "f32"); see
        ge2_graph_add_quantized_constant. data: a 2-D host array of e4m3 codes (NumPy uint8 or
        ml_dtypes.float8_e4m3fn, or a CPU torch tensor of torch.float8_e4m3fn or torch.uint8).
        scales: one float (scale_axis None) or one per row (scale_axis 0) or column (1). As an
        nn.Linear weight [out, in] read with trans_b=True and per-output-channel scales
        (scale_axis 0), CUDA plans run it at decode sizes on the weight-only FP8 kernel, reading
        the bytes as given. scales may also be a torch tensor on any device (copied to the host).
        block=(rows, cols): one scale per block of that many rows and columns instead
        (ge2_graph_add_block_quantized_constant), scales the grid of ceil(rows / block rows) x
        ceil(cols / block cols) values in row-major order, as block-scaled checkpoints store
        them (DeepSeek-V3, Qwen3 FP8: weight_scale_inv with weight_block_size [128, 128])."""
        import numpy as np

        f = "ge2.Graph.quantized_constant"
        encoded = _checks.name(name, "name", f)
        value_dtype = _dtype(dtype, f)
        if type(data).__module__.startswith("torch"):
            if data.device.type != "cpu":
                raise invalid(f, f"argument 'data' is on {data.device}; constants are copied from host memory "
                                 f"(pass data.cpu())")
            if str(data.dtype) not in ("torch.float8_e4m3fn", "torch.uint8"):
                raise invalid(f, f"argument 'data' has dtype {data.dtype}; e4m3 codes are torch.float8_e4m3fn "
                                 f"or torch.uint8")
            import torch
            codes = data.contiguous().view(torch.uint8).numpy()
        else:
            array = np.asarray(data)
            if array.dtype == np.uint8:
                codes = array
            elif array.dtype.name == "float8_e4m3fn" and array.dtype.itemsize == 1:
                codes = array.view(np.uint8)
            else:
                raise invalid(f, f"argument 'data' has dtype {array.dtype}; e4m3 codes are uint8 or "
                                 f"ml_dtypes.float8_e4m3fn")
        if codes.ndim != 2:
            raise invalid(f, f"argument 'data' has {codes.ndim} dimensions; a quantized constant is a matrix")
        codes = np.ascontiguousarray(codes)
        if type(scales).__module__.startswith("torch"):  # a checkpoint's scales, on any device: few floats
            scales = scales.detach().float().cpu().numpy()
        try:
            scale_array = np.ascontiguousarray(np.asarray(scales, dtype=np.float32).reshape(-1))
        except (TypeError, ValueError):
            raise TypeError(f"{f}: argument 'scales' = {scales!r} is not a float or a sequence of floats") from None
        desc = _desc(value_dtype, codes.shape, None, f)
        out = ctypes.c_int32()
        scale_pointer = scale_array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if block is not None:
            if scale_axis is not None:
                raise invalid(f, f"argument 'scale_axis' = {scale_axis!r} with block = {block!r}: "
                                 f"give one of them")
            try:
                block_rows, block_cols = block
            except (TypeError, ValueError):
                raise TypeError(f"{f}: argument 'block' = {block!r} is not a pair (rows, cols)") from None
            grid_shape = np.shape(scales)
            if len(grid_shape) == 2 and all(isinstance(b, int) and b > 0 for b in (block_rows, block_cols)):
                # A grid of the right count but another shape (transposed) would be read wrongly.
                want = (-(-codes.shape[0] // block_rows), -(-codes.shape[1] // block_cols))
                if tuple(grid_shape) != want:
                    raise invalid(f, f"argument 'scales' has shape {tuple(grid_shape)}; blocks of {block_rows} x "
                                     f"{block_cols} of data {tuple(codes.shape)} make a grid of {want}")
            _check(_lib.ge2_graph_add_block_quantized_constant(
                self._handle, encoded, ctypes.byref(desc), _capi.DTYPE_F8_E4M3, codes.ctypes.data,
                scale_pointer, scale_array.size, _checks.integer(block_rows, "block[0]", f),
                _checks.integer(block_cols, "block[1]", f), ctypes.byref(out)))
            return self._new_value(out.value)
        axis = -1 if scale_axis is None else _checks.integer(scale_axis, "scale_axis", f, -1, 1)
        _check(_lib.ge2_graph_add_quantized_constant(
            self._handle, encoded, ctypes.byref(desc), _capi.DTYPE_F8_E4M3, codes.ctypes.data,
            scale_pointer, scale_array.size, axis, ctypes.byref(out)))
        return self._new_value(out.value)

    @staticmethod
    def _attrs(trans_a, trans_b, alpha, beta, function):
        attrs = _capi.GemmAttrs()
        _check(_lib.ge2_gemm_attrs_init_sized(ctypes.byref(attrs), ctypes.sizeof(attrs)))
        attrs.trans_a = _checks.flag(trans_a, "trans_a", function)
        attrs.trans_b = _checks.flag(trans_b, "trans_b", function)
        attrs.alpha = _checks.real(alpha, "alpha", function)
        attrs.beta = _checks.real(beta, "beta", function)
        return attrs

    def gemm(self, a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0) -> Value:
        """alpha * op(a) @ op(b) (+ beta * c). op transposes when trans_a / trans_b: an nn.Linear weight
        [out, in] is gemm(x, w, trans_b=True). Rank-3 operands are batches of matrices."""
        f = "ge2.Graph.gemm"
        out = ctypes.c_int32()
        attrs = self._attrs(trans_a, trans_b, alpha, beta, f)
        _check(_lib.ge2_graph_add_gemm(self._handle, self._operand(a, "a", f), self._operand(b, "b", f),
                                       _capi.NO_VALUE if c is None else self._operand(c, "c", f),
                                       ctypes.byref(attrs), ctypes.byref(out)))
        return self._new_value(out.value)

    def bias(self, x, bias) -> Value:
        """x + bias, with bias of shape [N] added to every row (fused into the GEMM before it)."""
        f = "ge2.Graph.bias"
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_bias(self._handle, self._operand(x, "x", f), self._operand(bias, "bias", f), ctypes.byref(out)))
        return self._new_value(out.value)

    def activation(self, x, act) -> Value:
        """act(x) for act "relu", "gelu" (exact erf), "gelu_tanh", "silu" or "quick_gelu". Fused into the GEMM before
        it, or into the multiply after it (silu(gate) * up)."""
        f = "ge2.Graph.activation"
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_activation(self._handle, self._operand(x, "x", f), _activation(act, f),
                                             ctypes.byref(out)))
        return self._new_value(out.value)

    def _elementwise(self, op: int, a, b, function: str) -> Value:
        out = ctypes.c_int32()
        _check(_lib.ge2_graph_add_elementwise(self._handle, op, self._operand(a, "a", function), self._operand(b, "b", function),
                                              ctypes.byref(out)))
        return self._new_value(out.value)

    def add(self, a, b) -> Value:
        """a + b; b has a's shape or a trailing part of it (broadcast). A residual add after a
        GEMM is fused into the GEMM (C operand, beta 1) when the plan is compiled with fuse=True."""
        return self._elementwise(_capi.ELEMENTWISE_ADD, a, b, "ge2.Graph.add")

    def mul(self, a, b) -> Value:
        """a * b, elementwise; b has a's shape or a trailing part of it (broadcast)."""
        return self._elementwise(_capi.ELEMENTWISE_MUL, a, b, "ge2.Graph.mul")

    def gemm_bias_act(self, a, b, bias=None, act=None, trans_a=False, trans_b=False, alpha=1.0) -> Value:
        """act(alpha * op(a) @ op(b) + bias) as one node."""
        f = "ge2.Graph.gemm_bias_act"
        out = ctypes.c_int32()
        attrs = self._attrs(trans_a, trans_b, alpha, 0.0, f)
        _check(_lib.ge2_graph_add_gemm_bias_act(self._handle, self._operand(a, "a", f), self._operand(b, "b", f),
                                                _capi.NO_VALUE if bias is None else self._operand(bias, "bias", f),
                                                ctypes.byref(attrs), _activation(act, f), ctypes.byref(out)))
        return self._new_value(out.value)

    def output(self, value, name: str) -> None:
        """Marks `value` as an output bound by `name` at execution (dense row-major)."""
        f = "ge2.Graph.output"
        _check(_lib.ge2_graph_mark_output(self._handle, self._operand(value, "value", f), _checks.name(name, "name", f),
                                          None))

    def compile(self, context: Context, fuse=True, allow_tf32=False, force_kernel: str | None = None,
                graph_replay=False, allow_fp8=False, fp8_max_error: float = 0.1) -> "Plan":
        """graph_replay: on CUDA, record the plan's work as a CUDA graph and replay it while
        the bound arrays stay the same (see ge2_compile_options_t.graph_replay).
        allow_fp8: f16/bf16 GEMMs may run on FP8 e4m3 copies of their operands where that is
        estimated faster, each kept only if its measured error (the worst output channel's
        relative error against the 16-bit kernel) is at most fp8_max_error; the plan's
        describe()["fp8"] lists every layer's error and decision (docs/fp8.md)."""
        return Plan(context, self, fuse=fuse, allow_tf32=allow_tf32, force_kernel=force_kernel,
                    graph_replay=graph_replay, allow_fp8=allow_fp8, fp8_max_error=fp8_max_error)


def _stream(stream, function: str):
    return None if stream is None else _checks.integer(stream, "stream", function, 0, (1 << 64) - 1)


def _on_the_context(v, argument: str, on_cuda: bool, function: str) -> None:
    """A CPU context dereferences every pointer on the host: device memory would crash it."""
    if v.on_device and not on_cuda:
        raise invalid(function, f"argument '{argument}' is a CUDA {v.library} array but the context runs on "
                                f"the CPU backend")


def _expected_strides(io: dict, shape: tuple) -> tuple:
    """The io's strides as ArrayView reports them for an array of `shape`: extent-1 dimensions
    get the dense stride."""
    strides, dense = list(io["stored_strides"]), 1
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            strides[d] = dense
        dense *= shape[d]
    return tuple(strides)


class Plan:
    """A compiled graph. execute() binds arrays by name; a plan with a dynamic extent
    (`max_extent` > 0) runs at the leading dimension of its dynamic arrays."""

    def __init__(self, context: Context, graph: Graph, fuse=True, allow_tf32=False, force_kernel=None,
                 graph_replay=False, allow_fp8=False, fp8_max_error=0.1):
        f = "ge2.Graph.compile"
        if not isinstance(context, Context):
            raise TypeError(f"{f}: argument 'context' is a {type(context).__name__}, not a ge2.Context")
        options = _capi.CompileOptions()
        _check(_lib.ge2_compile_options_init_sized(ctypes.byref(options), ctypes.sizeof(options)))
        options.fuse = _checks.flag(fuse, "fuse", f)
        options.allow_tf32 = _checks.flag(allow_tf32, "allow_tf32", f)
        options.graph_replay = _checks.flag(graph_replay, "graph_replay", f)
        options.allow_fp8 = _checks.flag(allow_fp8, "allow_fp8", f)
        options.fp8_max_error = _checks.real(fp8_max_error, "fp8_max_error", f)
        self._force = _checks.name(force_kernel, "force_kernel", f) if force_kernel else None
        options.force_kernel = self._force
        handle = ctypes.c_void_p()
        _check(_lib.ge2_plan_compile(context.handle, graph._handle, ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self.context = context  # keeps the context alive at least as long as the plan
        self._on_cuda = context.device == "cuda"
        bound = ctypes.c_int64()
        _check(_lib.ge2_plan_get_max_extent(self._handle, ctypes.byref(bound)))
        #: The bound of the plan's dynamic extent (0: fixed shapes).
        self.max_extent = bound.value
        self.io = self._io()
        self._names = {name: name.encode() for name in self.io}
        # The address of each name's bytes (held by _names), for the packed bindings.
        self._name_addresses = {name: _capi.name_address(encoded) for name, encoded in self._names.items()}
        self._io_names = set(self.io)
        # (names in order, the arrays' fast_binding signatures) of a call that passed execute's
        # checks -> (its dynamic extent: 0 for fixed shapes, a dynamic plan's checks depend on the
        # extent the first dynamic array sets; the packer of its names, in order). Cleared when full.
        self._checked_calls = {}

    def _io(self) -> dict:
        count = ctypes.c_size_t()
        _check(_lib.ge2_plan_io_count(self._handle, ctypes.byref(count)))
        io = {}
        for i in range(count.value):
            info = _capi.IoInfo()
            _check(_lib.ge2_plan_io_info(self._handle, i, ctypes.byref(info)))
            dynamic = ctypes.c_int()
            _check(_lib.ge2_plan_io_is_dynamic(self._handle, i, ctypes.byref(dynamic)))
            rank = info.desc.rank
            entry = {"output": bool(info.is_output), "dtype": info.desc.dtype,
                     "shape": tuple(info.desc.shape[:rank]), "stored_strides": tuple(info.desc.strides[:rank]),
                     "dynamic": bool(dynamic.value)}
            entry["strides"] = _expected_strides(entry, entry["shape"])
            io[info.name.decode()] = entry
        return io

    def describe(self) -> dict:
        text = ctypes.c_char_p()
        _check(_lib.ge2_plan_describe(self._handle, ctypes.byref(text)))
        return json.loads(text.value)

    def execute(self, arrays: dict, stream: int | None = None) -> None:
        """Binds arrays by name (every input and output exactly once) and runs the plan. Device
        arrays run on `stream`, by default the current stream of the first device array's library."""
        f = "ge2.Plan.execute"
        key = None
        if type(arrays) is dict and arrays.keys() == self._io_names:
            # The repeated call: arrays of signatures checked together before, only pointers read.
            key, pointers, device = [*arrays], [], None
            for array in arrays.values():
                fast = fast_binding(array)
                if fast is None:
                    key = None
                    break
                key.append(fast[0])
                pointers.append(fast[1])
                device = device or fast[2]
            key = key and tuple(key)
            checked = self._checked_calls.get(key) if key else None
            if checked is not None:
                extent, pack = checked
                stream = _stream(stream, f)
                if stream is None and self._on_cuda and device is not None:
                    stream = torch_stream(device)
                packed = pack(pointers)
                if self.max_extent:
                    _check(_lib.ge2_plan_execute_dynamic_packed(self._handle, extent, packed, len(pointers), stream))
                else:
                    _check(_lib.ge2_plan_execute_packed(self._handle, packed, len(pointers), stream))
                return
        if not isinstance(arrays, dict):
            raise TypeError(f"{f}: argument 'arrays' is a {type(arrays).__name__}, not a dict of name -> array")
        unknown = [name for name in arrays if name not in self.io]
        if unknown:
            raise invalid(f, f"argument 'arrays': {unknown[0]!r} is not an input or output of the plan "
                             f"(it has {', '.join(map(repr, self.io))})")
        missing = [name for name in self.io if name not in arrays]
        if missing:
            kind = "output" if self.io[missing[0]]["output"] else "input"
            raise invalid(f, f"argument 'arrays': {kind} {missing[0]!r} is not bound")
        stream = _stream(stream, f)
        bindings = (_capi.Binding * len(arrays))()
        need_stream = stream is None and self._on_cuda
        extent, extent_of = None, None  # the dynamic extent, and the array that set it
        for i, (name, array) in enumerate(arrays.items()):
            v = view(array, name, f, want_stream=need_stream)
            expected = self.io[name]
            shape, strides = expected["shape"], expected["strides"]
            if expected["dynamic"] and v.shape:
                if extent is None:
                    if not 1 <= v.shape[0] <= self.max_extent:
                        raise invalid(f, f"argument '{name}': leading dimension {v.shape[0]} is outside the "
                                         f"plan's dynamic extent [1, {self.max_extent}]")
                    extent, extent_of = v.shape[0], name
                shape = (extent,) + shape[1:]
                strides = _expected_strides(expected, shape)
            if v.dtype != expected["dtype"] or v.shape != shape or v.strides != strides:
                dynamic = f" (the dynamic extent {extent} set by '{extent_of}')" if expected["dynamic"] else ""
                raise invalid(f, f"argument '{name}': {_DTYPE_TEXT[v.dtype]} {v.shape} with element strides "
                                 f"{v.strides} differs from the plan's {_DTYPE_TEXT[expected['dtype']]} "
                                 f"{shape} with strides {strides}{dynamic}")
            if expected["output"] and v.readonly:
                raise invalid(f, f"argument '{name}' is an output but its array is read-only")
            _on_the_context(v, name, self._on_cuda, f)
            if need_stream and v.on_device:
                stream, need_stream = v.stream, False
            bindings[i].name = self._names[name]
            bindings[i].data = v.pointer
        extent = extent or 0
        self._run(extent, bindings, stream)
        if key and all(pointer == bindings[i].data for i, pointer in enumerate(pointers)):
            if len(self._checked_calls) >= 256:
                self._checked_calls.clear()
            self._checked_calls[key] = (extent, _capi.BindingPacker([self._name_addresses[name] for name in arrays]))

    def _run(self, extent: int, bindings, stream) -> None:
        if self.max_extent:
            _check(_lib.ge2_plan_execute_dynamic(self._handle, extent, bindings, len(bindings), stream))
        else:
            _check(_lib.ge2_plan_execute(self._handle, bindings, len(bindings), stream))

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _lib.ge2_plan_destroy(self._handle)
            self._handle = None


_default_context = None
# gemm_bias_act's checked calls: signature of the call (its context, flags and the fast_binding
# signatures of its arrays) -> (the parameter block, never changed once stored; out's shape,
# dtype and library). Cleared when full.
_one_shot_checked: dict = {}
_ONE_SHOT_CHECKED_MAX = 1024


def _one_shot_key(context, a, b, bias, out, act, trans_a, trans_b, alpha):
    """The call's signature, or None where an argument is not a plain value or a NumPy / PyTorch
    array (that call is checked in full)."""
    if type(trans_a) is not bool or type(trans_b) is not bool or type(alpha) not in (int, float) or \
            (act is not None and type(act) is not str):
        return None, None
    arrays = [fast_binding(a), fast_binding(b), fast_binding(bias) if bias is not None else (None,) * 3,
              fast_binding(out) if out is not None else (None,) * 3]
    if None in arrays:
        return None, None
    return (id(context), context.device, act, trans_a, trans_b, alpha, *(f[0] for f in arrays)), arrays


def _row_major(v, argument: str, function: str):
    """(rows, cols, ld, batch stride, transposed) of a matrix or batch of matrices whose rows or
    columns are contiguous; a column-major matrix is the row-major view of its transpose."""
    rows, cols = v.shape[-2:]
    row_stride, col_stride = v.strides[-2:]
    batch_stride = v.strides[0] if len(v.shape) == 3 else 0
    if col_stride == 1 and row_stride >= cols:
        return rows, cols, row_stride, batch_stride, False
    if row_stride == 1 and col_stride >= rows:
        return cols, rows, col_stride, batch_stride, True
    raise invalid(function, f"argument '{argument}' (shape {v.shape}, element strides {v.strides}) has neither "
                            f"contiguous rows nor contiguous columns; pass a contiguous copy")


def gemm_bias_act(a, b, bias=None, act=None, *, trans_a=False, trans_b=False, alpha=1.0, out=None,
                  context: Context | None = None, stream: int | None = None):
    """D = act(alpha * op(a) @ op(b) + bias) in one call; returns `out` or a new array of a's library.

    a is [M, K] (trans_a: [K, M]) and b is [K, N] (trans_b: [N, K]), or both carry the same leading
    batch dimension; there is no broadcasting here (build a Graph for that). Rows or columns must be
    contiguous: a column-major operand (e.g. `w.T`) is used as such. bias is [N], out is [M, N] (or
    [batch, M, N]) with contiguous rows and must be writeable. Every argument is checked before
    the library is called; a bad one raises TypeError or ge2.InvalidArgumentError (a ValueError)
    naming it.
    """
    global _default_context
    f = "ge2.gemm_bias_act"
    if context is None:
        if _default_context is None:
            _default_context = Context()
        context = _default_context
    elif not isinstance(context, Context):
        raise TypeError(f"{f}: argument 'context' is a {type(context).__name__}, not a ge2.Context")
    key, fast = _one_shot_key(context, a, b, bias, out, act, trans_a, trans_b, alpha)
    checked = _one_shot_checked.get(key) if key is not None else None
    if checked is not None:  # a call of this signature passed every check below: only pointers differ
        params, d_shape, dtype, library = checked
        stream = _stream(stream, f)
        if out is None:  # of a's library, dtype and device; only its pointer is read
            out = empty_like_library(library, d_shape, dtype, a)
            fast[3] = (None, out.data_ptr() if library == "torch" else out.__array_interface__["data"][0], None)
        if stream is None and fast[0][2] is not None:
            stream = torch_stream(fast[0][2])
        _check(_lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), fast[0][1], fast[1][1],
                                      fast[2][1], fast[3][1], stream))
        return out
    on_cuda = context.device == "cuda"
    trans_a, trans_b = _checks.flag(trans_a, "trans_a", f), _checks.flag(trans_b, "trans_b", f)
    alpha = _checks.real(alpha, "alpha", f)
    activation = _activation(act, f)
    stream = _stream(stream, f)
    va, vb = view(a, "a", f), view(b, "b", f)
    for name, v in (("a", va), ("b", vb)):
        if len(v.shape) not in (2, 3):
            raise invalid(f, f"argument '{name}' has shape {v.shape}; it must be a matrix or a batch of matrices")
        _on_the_context(v, name, on_cuda, f)
    if len(va.shape) != len(vb.shape):
        raise invalid(f, f"arguments 'a' {va.shape} and 'b' {vb.shape} must both be 2-D or both 3-D (the "
                         f"one-shot call does not broadcast a batch)")
    if vb.dtype != va.dtype:
        raise TypeError(f"{f}: argument 'b' is {_DTYPE_TEXT[vb.dtype]} but 'a' is {_DTYPE_TEXT[va.dtype]}")
    batch = va.shape[0] if len(va.shape) == 3 else 1
    if len(vb.shape) == 3 and vb.shape[0] != batch:
        raise invalid(f, f"argument 'b': batch {vb.shape[0]} does not match a's batch {batch}")
    rows_a, cols_a, lda, stride_a, a_transposed = _row_major(va, "a", f)
    rows_b, cols_b, ldb, stride_b, b_transposed = _row_major(vb, "b", f)
    trans_a ^= a_transposed
    trans_b ^= b_transposed
    m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
    kb, n = (cols_b, rows_b) if trans_b else (rows_b, cols_b)
    if kb != k:
        raise invalid(f, f"argument 'b' {vb.shape}{' transposed' if trans_b != b_transposed else ''}: K = {kb} "
                         f"does not match a's K = {k} ({va.shape}{' transposed' if trans_a != a_transposed else ''})")
    d_shape = (batch, m, n) if len(va.shape) == 3 else (m, n)
    if out is None:
        out = empty_like_library(va.library, d_shape, va.dtype, a)
    vd = view(out, "out", f)
    if vd.dtype != va.dtype:
        raise TypeError(f"{f}: argument 'out' is {_DTYPE_TEXT[vd.dtype]} but 'a' is {_DTYPE_TEXT[va.dtype]}")
    if vd.shape != d_shape:
        raise invalid(f, f"argument 'out' has shape {vd.shape}; the result is {d_shape}")
    if vd.readonly:
        raise invalid(f, "argument 'out' is read-only")
    _on_the_context(vd, "out", on_cuda, f)
    _, _, ldd, stride_d, d_transposed = _row_major(vd, "out", f)
    if d_transposed and m > 1 and n > 1:
        raise invalid(f, f"argument 'out' (element strides {vd.strides}) must have contiguous rows")
    params = _capi.GemmParams()
    _check(_lib.ge2_gemm_params_init_sized(ctypes.byref(params), ctypes.sizeof(params)))
    params.m, params.n, params.k, params.batch = m, n, k, batch
    params.trans_a, params.trans_b = trans_a, trans_b
    params.lda, params.stride_a = lda, stride_a
    params.ldb, params.stride_b = ldb, stride_b
    params.ldd, params.stride_d = (n if d_transposed else ldd), stride_d
    params.dtype, params.activation, params.alpha = va.dtype, activation, alpha
    bias_pointer = None
    if bias is not None:
        vbias = view(bias, "bias", f)
        if vbias.dtype != va.dtype:
            raise TypeError(f"{f}: argument 'bias' is {_DTYPE_TEXT[vbias.dtype]} but 'a' is {_DTYPE_TEXT[va.dtype]}")
        if vbias.shape != (n,) or vbias.strides != (1,):
            raise invalid(f, f"argument 'bias' must be contiguous with shape ({n},); it has shape {vbias.shape}, "
                             f"element strides {vbias.strides}")
        _on_the_context(vbias, "bias", on_cuda, f)
        params.has_bias, bias_pointer = 1, vbias.pointer
    if stream is None and va.on_device:
        stream = va.stream
    _check(_lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), va.pointer, vb.pointer, bias_pointer,
                                  vd.pointer, stream))
    if key is not None and va.library in ("numpy", "torch"):
        if len(_one_shot_checked) >= _ONE_SHOT_CHECKED_MAX:
            _one_shot_checked.clear()
        _one_shot_checked[key] = (params, d_shape, va.dtype, va.library)
    return out
