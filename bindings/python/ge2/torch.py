"""PyTorch integration: ge2 as `torch.library` custom operators, and nn.Module conversion.

    import torch, ge2.torch
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    fast = ge2.torch.convert(mlp.half().cuda())     # an nn.Module running one ge2 plan per input shape
    y = fast(x)                                     # x: [..., 1024] float16 on the GPU
    y = torch.compile(fast)(x)                      # traces through: no graph break

Three operators are registered under the `ge2` namespace, each with a fake (meta) implementation
so that `torch.compile` and `torch.export` trace them without running them:

- `torch.ops.ge2.gemm_bias_act(a, b, bias, act, trans_a, trans_b, alpha)`: the one-shot call
  (`ge2.gemm_bias_act`); `ge2.torch.linear(x, weight, bias, act)` is `F.linear` followed by the
  activation on top of it.
- `torch.ops.ge2.plan_execute(plan_id, inputs)`: a compiled `ge2.Plan`, wrapped by `PlanFunction`.
- `torch.ops.ge2.module_forward(module_id, x)`: a converted module (`convert`).

They run on the tensors' device (a CPU or CUDA ge2 context per device, made on first use) and on
PyTorch's current stream, so `torch.cuda.graph` captures them after one warm-up call (which
compiles the plan and allocates the stream's workspace). They are for inference: none has an
autograd formula, and calling one on tensors that require grad under autograd raises.
"""
import ctypes
import math
import threading
import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "opcheck"):
    raise ImportError(f"ge2.torch needs PyTorch 2.4 or newer (torch.library.custom_op); this is torch "
                      f"{torch.__version__}")

import ge2
from ge2._checks import invalid
from ge2._torch_trace import TORCH_ACTIVATIONS, Recipe, build_graph, trace

__all__ = ["Ge2Module", "PlanFunction", "context_for", "convert", "linear"]

_DTYPE_CODES = ge2._arrays.torch_dtype_codes()  # torch dtype -> ge2 dtype code
_TORCH_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}

_lock = threading.Lock()
_contexts: dict = {}  # (device type, index) -> ge2.Context, one per device for the process
_objects: dict = {}  # id -> weakref to a PlanFunction or Ge2Module the operators run
_next_id = [1]


def _device_key(device) -> tuple:
    """(ge2 device kind, ordinal) of a torch device: a CUDA device without an index is the current one."""
    device = torch.device(device)
    if device.type == "cuda":
        return ("cuda", torch.cuda.current_device() if device.index is None else device.index)
    if device.type == "cpu":
        return ("cpu", 0)
    raise invalid("ge2.torch", f"tensors on device {device} are not supported (CPU and CUDA are)")


def context_for(device) -> ge2.Context:
    """The ge2 context the operators use for tensors on `device` (a CPU context for CPU tensors, a
    CUDA context on the same ordinal for CUDA tensors), made on first use and kept."""
    key = _device_key(device)
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = ge2.Context(device=key[0], ordinal=key[1])
            _contexts[key] = context
        return context


def _register(obj) -> int:
    with _lock:
        ident = _next_id[0]
        _next_id[0] += 1
        _objects[ident] = weakref.ref(obj, lambda _ref, i=ident: _objects.pop(i, None))
        return ident


def _lookup(ident: int, function: str):
    ref = _objects.get(ident)
    obj = ref() if ref is not None else None
    if obj is None:
        raise invalid(function, f"argument 'id' {ident} names no live ge2 plan or module")
    return obj


def _compiling() -> bool:
    """Whether torch.compile / torch.export is tracing (then the custom operators must be called)."""
    return _is_compiling()


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: True)


def _refuse_grad(function: str, *tensors) -> None:
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(f"{function}: ge2's operators are for inference and have no autograd formula; "
                           f"call them under torch.no_grad() or torch.inference_mode(), or on tensors that do "
                           f"not require grad")


def _require_tensors(function: str, **arguments) -> None:
    """A TypeError naming the first argument that is not a tensor (as F.linear's); only `bias`
    may be None."""
    for argument, value in arguments.items():
        if not isinstance(value, Tensor) and not (value is None and argument == "bias"):
            _refuse_non_tensor(function, f"argument '{argument}'", value)


def _require_inputs(function: str, inputs: tuple) -> None:
    """A TypeError naming the first of a module's inputs that is not a tensor."""
    for i, value in enumerate(inputs):
        if not isinstance(value, Tensor):
            _refuse_non_tensor(function, f"input {i}", value)


def _refuse_non_tensor(function: str, what: str, value) -> None:
    raise TypeError(f"{function}: {what} must be a torch.Tensor, not "
                    f"{type(value).__module__}.{type(value).__name__}")


def _plain(t: Optional[Tensor], argument: str, function: str) -> Optional[Tensor]:
    """`t` with its values in memory: a negated view (is_neg(): the imaginary part of a conj(),
    whose memory holds the negatives) materialized, as PyTorch's own operators read it; a sparse
    or other non-strided tensor refused."""
    if t is None:
        return t
    ge2._arrays.refuse_non_strided(t, argument, function)
    return t.resolve_neg() if t.is_neg() else t


# --- the one-shot call ------------------------------------------------------------------------

def _gemm_shape(a: Tensor, b: Tensor, trans_a: bool, trans_b: bool) -> tuple:
    f = "ge2.torch.gemm_bias_act"
    if a.dim() not in (2, 3) or b.dim() != a.dim():
        raise invalid(f, f"arguments 'a' {tuple(a.shape)} and 'b' {tuple(b.shape)} must both be matrices or "
                         f"both batches of matrices")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if kb != k:
        raise invalid(f, f"argument 'b' {tuple(b.shape)} (trans_b={trans_b}) has K = {kb}; a's K is {k}")
    if a.dim() == 3:
        if a.shape[0] != b.shape[0]:
            raise invalid(f, f"argument 'b': batch {b.shape[0]} does not match a's batch {a.shape[0]}")
        return (a.shape[0], m, n)
    return (m, n)


_FAST_GEMMS: dict = {}  # signature of contiguous torch operands -> (ge2 context, GemmParams)
_FAST_GEMMS_MAX = 1024


def _gemm_signature(a: Tensor, b: Tensor, bias, act: str, trans_a: bool, trans_b: bool, alpha: float) -> tuple:
    """What a one-shot call's GemmParams depend on, for dense operands of one dtype and device."""
    return (a.shape, b.shape, a.dtype, a.device, bias is not None, act, trans_a, trans_b, alpha)


def _fast_gemm_params(a: Tensor, b: Tensor, bias, act: str, trans_a: bool, trans_b: bool, alpha: float):
    """(context, GemmParams) for dense operands already checked once by ge2.gemm_bias_act."""
    key = _gemm_signature(a, b, bias, act, trans_a, trans_b, alpha)
    found = _FAST_GEMMS.get(key)
    if found is None:
        batch = a.shape[0] if a.dim() == 3 else 1
        m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
        n = b.shape[-2] if trans_b else b.shape[-1]
        params = ge2._capi.GemmParams()
        ge2._check(ge2._lib.ge2_gemm_params_init_sized(ctypes.byref(params), ctypes.sizeof(params)))
        params.m, params.n, params.k, params.batch = m, n, k, batch
        params.trans_a, params.trans_b = trans_a, trans_b
        params.lda, params.stride_a = a.shape[-1], (a.shape[-2] * a.shape[-1] if batch > 1 else 0)
        params.ldb, params.stride_b = b.shape[-1], (b.shape[-2] * b.shape[-1] if batch > 1 else 0)
        params.ldd, params.stride_d = n, (m * n if batch > 1 else 0)
        params.dtype, params.activation, params.alpha = _DTYPE_CODES[a.dtype], ge2._capi.ACTIVATIONS[act or None], alpha
        params.has_bias = bias is not None
        if len(_FAST_GEMMS) >= _FAST_GEMMS_MAX:
            _FAST_GEMMS.clear()
        found = _FAST_GEMMS[key] = (context_for(a.device), params)
    return found


def _dense(*tensors) -> bool:
    return all(t is None or t.is_contiguous() for t in tensors)


def _readable(t: Tensor) -> bool:
    """Whether ge2 reads `t` where it is: a vector of unit stride, or matrices (of a batch) with
    contiguous rows or columns that do not overlap, and no broadcast (stride 0) dimension."""
    if any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride())):
        return False
    if t.dim() == 1:
        return t.shape[0] <= 1 or t.stride(0) == 1
    (rows, cols), (row_stride, col_stride) = t.shape[-2:], t.stride()[-2:]
    return (col_stride == 1 or cols == 1) and (row_stride >= cols or rows == 1) or \
        (row_stride == 1 or rows == 1) and (col_stride >= rows or cols == 1)


def _readable_copies(*tensors) -> tuple:
    """The tensors, each copied densely where ge2 cannot read it in place (a broadcast
    (expand) or every-other-element view): PyTorch's operators take any strides, and so do these."""
    return tuple(t if t is None or t.is_contiguous() or _readable(t) else t.contiguous() for t in tensors)


def _gemm_bias_act_impl(a: Tensor, b: Tensor, bias: Optional[Tensor], act: str, trans_a: bool, trans_b: bool,
                        alpha: float) -> Tensor:
    return _gemm_bias_act_run(a, b, bias, act, trans_a, trans_b, alpha)[0]


def _gemm_bias_act_run(a: Tensor, b: Tensor, bias: Optional[Tensor], act: str, trans_a: bool, trans_b: bool,
                       alpha: float) -> tuple:
    """(the result, and the (context, GemmParams) it ran with where the operands were dense, else None)."""
    f = "ge2.torch.gemm_bias_act"
    a, b, bias = _plain(a, "a", f), _plain(b, "b", f), _plain(bias, "bias", f)
    given = (a, b, bias)
    a, b, bias = _readable_copies(a, b, bias)
    copied = any(t is not u for t, u in zip(given, (a, b, bias)))
    out = a.new_empty(_gemm_shape(a, b, trans_a, trans_b))
    if out.numel() == 0:
        return out, None
    if a.shape[-2 if trans_a else -1] == 0:  # K = 0: the empty sum, then the epilogue
        return _apply_act(out.zero_() if bias is None else out.zero_() + bias, act), None
    # One lookup: another thread may clear the cache between two.
    found = _FAST_GEMMS.get(_gemm_signature(a, b, bias, act, trans_a, trans_b, alpha))
    if found is not None and _dense(a, b, bias) and b.dtype == a.dtype and b.device == a.device and (
            bias is None or (bias.dtype == a.dtype and bias.device == a.device and bias.shape == out.shape[-1:])):
        # The signature passed ge2.gemm_bias_act's checks before: only the pointers change.
        context, params = found
        stream = ge2._arrays._torch_current_stream(torch, a.device) if a.is_cuda else None
        ge2._check(ge2._lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), a.data_ptr(), b.data_ptr(),
                                              None if bias is None else bias.data_ptr(), out.data_ptr(), stream))
        return out, None if copied else found
    ge2.gemm_bias_act(a, b, bias, act or None, trans_a=trans_a, trans_b=trans_b, alpha=alpha, out=out,
                      context=context_for(a.device))
    # A call whose operands were copied is not remembered (its parameters are the copies'): the
    # next one of that signature must copy too.
    if _dense(a, b, bias) and not copied:
        return out, _fast_gemm_params(a, b, bias, act, trans_a, trans_b, alpha)
    return out, None


# Eager calls of gemm_bias_act and linear whose arguments were all checked before: the call's
# kind and scalar arguments, the grad mode and the fast_binding signatures of its tensors (class,
# dtype, device, shape, strides, requires_grad) -> (context, GemmParams, the result's shape; its
# dtype and device are the first tensor's). Such a call reads only the tensors' pointers, as Plan.execute's repeated call does:
# the checks behind gemm_bias_act cost several times its C call on small work.
_CHECKED_CALLS: dict = {}
_CHECKED_CALLS_MAX = 1024
_SCALARS = (str, type(None), bool, int, float)


def _checked_call_key(kind: str, tensors: tuple, scalars: tuple):
    """(key, pointers, the first tensor's CUDA device or None) of a call whose tensors fast_binding
    reads, else (None, None, None)."""
    for value in scalars:
        if type(value) not in _SCALARS:
            return None, None, None  # an unhashable or odd argument: the checks say what is wrong
    key, pointers = [kind, torch.is_grad_enabled(), *scalars], []
    device = None
    for t in tensors:
        if t is None:
            key.append(None)
            pointers.append(None)
            continue
        fast = ge2._arrays.fast_binding(t)
        if fast is None:
            return None, None, None
        key.append(fast[0])
        pointers.append(fast[1])
        device = device or fast[2]
    return tuple(key), pointers, device


def _run_checked_call(found: tuple, first: Tensor, pointers: list, device) -> Tensor:
    """The checked call again, with these pointers: the result is new, of `first`'s dtype and device."""
    context, params, shape = found
    out = first.new_empty(shape)
    stream = ge2._arrays._torch_current_stream(torch, device) if device is not None else None
    ge2._check(ge2._lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), *pointers, out.data_ptr(), stream))
    return out


def _remember_checked_call(key, gemm, out: Tensor) -> None:
    if key is None or gemm is None:
        return
    if len(_CHECKED_CALLS) >= _CHECKED_CALLS_MAX:
        _CHECKED_CALLS.clear()
    _CHECKED_CALLS[key] = (*gemm, out.shape)


@torch.library.custom_op("ge2::gemm_bias_act", mutates_args=())
def _gemm_bias_act_op(a: Tensor, b: Tensor, bias: Optional[Tensor], act: str, trans_a: bool, trans_b: bool,
                      alpha: float) -> Tensor:
    return _gemm_bias_act_impl(a, b, bias, act, trans_a, trans_b, alpha)


@_gemm_bias_act_op.register_fake
def _(a, b, bias, act, trans_a, trans_b, alpha):
    return a.new_empty(_gemm_shape(a, b, trans_a, trans_b))


def _apply_act(t: Tensor, act: str) -> Tensor:
    return TORCH_ACTIVATIONS[act](t)


def _act_name(act, function: str) -> str:
    if act is None:
        return ""
    if not isinstance(act, str) or act not in TORCH_ACTIVATIONS:
        raise invalid(function, f"argument 'act' is {act!r}; it must be None, 'relu', 'gelu', 'gelu_tanh', "
                                f"'silu' or 'quick_gelu'")
    return act


def gemm_bias_act(a: Tensor, b: Tensor, bias: Tensor | None = None, act: str | None = None, *,
                  trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0) -> Tensor:
    """act(alpha * op(a) @ op(b) + bias) through `torch.ops.ge2.gemm_bias_act` (see
    `ge2.gemm_bias_act` for the operand rules); returns a new tensor."""
    f = "ge2.torch.gemm_bias_act"
    if _compiling():  # traced: through the operator
        _require_tensors(f, a=a, b=b, bias=bias)
        _refuse_grad(f, a, b, bias)
        return torch.ops.ge2.gemm_bias_act(a, b, bias, _act_name(act, f), bool(trans_a), bool(trans_b),
                                           float(alpha))
    # Eager calls skip the operator's Python dispatch (tens of µs), and a call like one checked
    # before skips the checks.
    key, pointers, device = _checked_call_key("gemm_bias_act", (a, b, bias), (act, trans_a, trans_b, alpha))
    found = _CHECKED_CALLS.get(key) if key is not None else None
    if found is not None:
        return _run_checked_call(found, a, pointers, device)
    _require_tensors(f, a=a, b=b, bias=bias)
    _refuse_grad(f, a, b, bias)
    out, gemm = _gemm_bias_act_run(a, b, bias, _act_name(act, f), bool(trans_a), bool(trans_b), float(alpha))
    _remember_checked_call(key, gemm, out)
    return out


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, act: str | None = None) -> Tensor:
    """act(F.linear(x, weight, bias)) in one ge2 call: x is [..., in], weight nn.Linear's [out, in],
    bias [out]; the leading dimensions of x are flattened into the GEMM's rows."""
    f = "ge2.torch.linear"
    compiling = _compiling()
    key = None
    if not compiling:  # a call like one checked before: x's rows are the GEMM's A, in place
        key, pointers, device = _checked_call_key("linear", (x, weight, bias), (act,))
        found = _CHECKED_CALLS.get(key) if key is not None else None
        if found is not None:
            return _run_checked_call(found, x, pointers, device)
    _require_tensors(f, x=x, weight=weight, bias=bias)
    if x.dim() < 1 or weight.dim() != 2:
        raise invalid(f, f"arguments 'x' {tuple(x.shape)} and 'weight' {tuple(weight.shape)}: x needs a last "
                         f"dimension and weight must be [out, in]")
    if not compiling:  # traced, the operator reads x at run time (and is_neg() would break the graph)
        x = _plain(x, "x", f)
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    if compiling:
        y = gemm_bias_act(rows, weight, bias, act, trans_b=True)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    _refuse_grad(f, rows, weight, bias)
    y, gemm = _gemm_bias_act_run(rows, weight, bias, _act_name(act, f), False, True, 1.0)
    out = y.reshape(*x.shape[:-1], weight.shape[0])
    if rows.data_ptr() == x.data_ptr() and x.is_contiguous():  # rows is x's memory: A's pointer is x's
        _remember_checked_call(key, gemm, out)
    return out


# --- compiled plans ---------------------------------------------------------------------------

@torch.library.custom_op("ge2::plan_execute", mutates_args=())
def _plan_execute_op(plan_id: int, inputs: list[Tensor]) -> list[Tensor]:
    return _lookup(plan_id, "ge2.torch.plan_execute")._run(inputs)


@_plan_execute_op.register_fake
def _(plan_id, inputs):
    function = _lookup(plan_id, "ge2.torch.plan_execute")
    device = inputs[0].device if inputs else torch.device("cpu")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in function.output_specs(inputs)]


class PlanFunction(torch.nn.Module):
    """A compiled `ge2.Plan` as a module: `f(*inputs)` binds the plan's inputs in the order of
    `input_names`, runs it (through `torch.ops.ge2.plan_execute` when traced) and returns its
    outputs (new tensors, in the order of `output_names`; a single output as a tensor). A module
    so that torch.compile specialises on the plan it runs. A plan with a dynamic extent runs at
    the leading dimension of its first dynamic input, and its dynamic outputs have that many rows."""

    def __init__(self, plan: ge2.Plan):
        super().__init__()
        if not isinstance(plan, ge2.Plan):
            raise TypeError(f"ge2.torch.PlanFunction: argument 'plan' is a {type(plan).__name__}, not a ge2.Plan")
        self.plan = plan
        self.input_names = [n for n, io in plan.io.items() if not io["output"]]
        self.output_names = [n for n, io in plan.io.items() if io["output"]]
        self._outputs = [(plan.io[n]["shape"], _TORCH_DTYPES[plan.io[n]["dtype"]], plan.io[n]["dynamic"])
                         for n in self.output_names]
        self._dynamic_inputs = [i for i, n in enumerate(self.input_names) if plan.io[n]["dynamic"]]
        self.id = _register(self)

    def output_specs(self, inputs: list) -> list:
        """(shape, dtype) of each output for these inputs: a dynamic output's rows are the extent
        the first dynamic input sets."""
        extent = next((inputs[i].shape[0] for i in self._dynamic_inputs if i < len(inputs) and inputs[i].dim()),
                      None)
        return [((extent,) + tuple(shape[1:]) if dynamic and extent is not None else shape, dtype)
                for shape, dtype, dynamic in self._outputs]

    def _run(self, inputs: list) -> list:
        f = "ge2.torch.PlanFunction"
        if len(inputs) != len(self.input_names):
            raise invalid(f, f"{len(inputs)} inputs given; the plan takes {len(self.input_names)} "
                             f"({', '.join(self.input_names)})")
        device = inputs[0].device if inputs else torch.device("cpu")
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.output_specs(inputs)]
        arrays = {name: _plain(t, name, f).contiguous() for name, t in zip(self.input_names, inputs)}
        arrays.update(zip(self.output_names, outputs))
        self.plan.execute(arrays)
        return outputs

    def forward(self, *inputs: Tensor):
        _require_inputs("ge2.torch.PlanFunction", inputs)
        _refuse_grad("ge2.torch.PlanFunction", *inputs)
        outputs = torch.ops.ge2.plan_execute(self.id, list(inputs)) if _compiling() else self._run(list(inputs))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


# --- nn.Module conversion: ge2/_torch_trace.py traces the module into a recipe -----------------

@torch.library.custom_op("ge2::module_forward", mutates_args=())
def _module_forward_op(module_id: int, inputs: list[Tensor]) -> Tensor:
    return _lookup(module_id, "ge2.torch.module_forward")._run(inputs)


@_module_forward_op.register_fake
def _(module_id, inputs):
    module = _lookup(module_id, "ge2.torch.module_forward")
    module._check_inputs(inputs)
    return inputs[0].new_empty(module.output_shape(inputs[0]), dtype=module.output_dtype)


class Ge2Module(torch.nn.Module):
    """A module converted by `convert`: forward(x) with x [..., in_features] (or one tensor per
    input the original forward reads, widths `input_features`, leading dimensions shared) runs a
    ge2 plan on x's device. Dynamic (the default): one plan per device whose token count is dynamic, compiled on
    first use with a bound of max(max_tokens, the call's count rounded up to a power of two) and
    recompiled with a doubled bound when a larger count comes. Otherwise one plan per row count
    and device, the `max_plans` most recent kept. Each plan holds its own copy of the weights on
    its device."""

    def __init__(self, recipe: Recipe, name: str, tune: str, graph_replay: bool, fuse: bool, allow_tf32: bool,
                 max_plans: int, dynamic: bool, max_tokens: int, allow_fp8: bool = False,
                 fp8_max_error: float = 0.1):
        super().__init__()
        self._recipe = recipe
        self._name = name
        self.in_features = recipe.in_features
        self._flatten_input = recipe.flatten_input
        self.input_features = recipe.input_features
        self._input_names = [name for _, name in recipe.inputs]
        self._names = [name.encode() for name in self._input_names] + [b"y"]
        # The bindings go to C packed; _names holds the names' bytes.
        self._pack = ge2._capi.BindingPacker([ge2._capi.name_address(name) for name in self._names])
        self.out_features = recipe.width[recipe.output]
        self.dtype = recipe.dtype
        #: The dtype forward returns: the weights' (dtype), or float32 where the module casts its
        #: result up (the plan's result, cast).
        self.output_dtype = recipe.output_dtype or recipe.dtype
        self._options = dict(fuse=fuse, allow_tf32=allow_tf32, graph_replay=graph_replay, allow_fp8=allow_fp8,
                             fp8_max_error=fp8_max_error)
        self._tune = tune
        self._max_plans = max_plans
        self._dynamic = dynamic
        self._max_tokens = max_tokens
        self._plans: OrderedDict = OrderedDict()
        self._plans_lock = threading.Lock()
        self._contexts = {}  # device -> a context of this module's tuning mode (tune != 'cached')
        self._id = _register(self)

    def extra_repr(self) -> str:
        return (f"{self._name}, in_features={self.in_features}, out_features={self.out_features}, "
                f"dtype={self.dtype}, plans={len(self._plans)}")

    def _check_inputs(self, inputs: list) -> None:
        f = "ge2.torch.Ge2Module"
        if len(inputs) == 1 == len(self.input_features):  # the usual module, checked without a loop
            x = inputs[0]
            if x.dim() >= 1 and x.shape[-1] == self.in_features and x.dtype == self.dtype and \
                    not self._flatten_input:
                return
        self._check_count(inputs)
        for i, (x, width) in enumerate(zip(inputs, self.input_features)):
            if self._flatten_input:  # nn.Flatten(): [batch, ...] whose dimensions after the first make a row
                if x.dim() < 2 or math.prod(x.shape[1:]) != width:
                    raise invalid(f, f"{self._what(i)} of shape {tuple(x.shape)}: the module flattens the dimensions "
                                     f"after the first, which must hold {width} elements")
            elif x.dim() < 1 or x.shape[-1] != width:
                raise invalid(f, f"{self._what(i)} of shape {tuple(x.shape)}: the last dimension must be {width}")
            if x.dtype != self.dtype:
                raise TypeError(f"{f}: {self._what(i)} is {x.dtype} but the module's weights are {self.dtype}; "
                                f"convert the module in the input's dtype")
            if i and (x.shape[:-1] != inputs[0].shape[:-1] or x.device != inputs[0].device):
                raise invalid(f, f"{self._what(i)} of shape {tuple(x.shape)} on {x.device}: the inputs must share "
                                 f"their leading dimensions and device ({tuple(inputs[0].shape)} on "
                                 f"{inputs[0].device})")

    def _check_count(self, inputs: list) -> None:
        if len(inputs) != len(self.input_features):
            raise invalid("ge2.torch.Ge2Module", f"{len(inputs)} inputs given; the module takes "
                                                 f"{len(self.input_features)} ({', '.join(self._input_names)})")

    def _what(self, i: int) -> str:
        return "input" if len(self._input_names) == 1 else f"input {i} ({self._input_names[i]})"

    def output_shape(self, x: Tensor) -> tuple:
        """x's leading dimensions and out_features, with leading 1s up to the rank that parameters
        [1, ..., w] broadcast the result to (as PyTorch broadcasts them)."""
        lead = tuple(x.shape[:1] if self._flatten_input else x.shape[:-1])
        return (1,) * (self._recipe.min_rank - len(lead) - 1) + lead + (self.out_features,)

    def plan_for(self, x: Tensor) -> ge2.Plan:
        """The plan that runs x (compiled now if none of this module's plans on x's device runs its
        row count)."""
        tokens = x.numel() // self.in_features
        key = ("dynamic", x.device) if self._dynamic else (tokens, x.device)
        with self._plans_lock:
            plan = self._plans.get(key)
            if plan is not None and (not self._dynamic or tokens <= plan.max_extent):
                self._plans.move_to_end(key)
                return plan
        bound = tokens
        if self._dynamic:
            bound = max(self._max_tokens, 1 << (tokens - 1).bit_length())
            if plan is not None:
                bound = max(bound, 2 * plan.max_extent)
        context = context_for(x.device) if self._tune == "cached" else self._tuning_context(x.device)
        graph = build_graph(self._recipe, bound, ge2._DTYPE_TEXT[_DTYPE_CODES[x.dtype]], self._dynamic)
        plan = graph.compile(context, **self._options)
        with self._plans_lock:
            self._plans[key] = plan
            while len(self._plans) > self._max_plans:
                self._plans.popitem(last=False)
        return plan

    def _tuning_context(self, device):
        key = _device_key(device)
        with self._plans_lock:
            if key not in self._contexts:
                self._contexts[key] = ge2.Context(device=key[0], ordinal=key[1], tune=self._tune)
            return self._contexts[key]

    def _run(self, inputs: list) -> Tensor:
        if len(inputs) == 1:  # the usual module: no lists on the per-call path
            x = _plain(inputs[0], self._input_names[0], "ge2.torch.Ge2Module")
            inputs = [x]
        else:
            self._check_count(inputs)  # before zip, which would drop an extra input unread
            inputs = [_plain(t, name, "ge2.torch.Ge2Module") for t, name in zip(inputs, self._input_names)]
            x = inputs[0]
        self._check_inputs(inputs)
        tokens = x.numel() // self.in_features
        y = x.new_empty(self.output_shape(x))
        if tokens == 0:
            return y.to(self.output_dtype)
        if len(inputs) == 1:
            rows = x if x.is_contiguous() else x.contiguous()
            plan = self.plan_for(rows)
            pointers = [rows.data_ptr(), y.data_ptr()]
        else:
            rows = [t if t.is_contiguous() else t.contiguous() for t in inputs]
            plan = self.plan_for(rows[0])
            pointers = [t.data_ptr() for t in rows] + [y.data_ptr()]
        bindings = self._pack(pointers)
        # The plan runs this row count, dtype and device, and the arrays are dense: only the
        # pointers are new, so the binding's per-array checks are skipped.
        stream = ge2._arrays._torch_current_stream(torch, x.device) if x.is_cuda else None
        if plan.max_extent:
            ge2._check(ge2._lib.ge2_plan_execute_dynamic_packed(plan._handle, tokens, bindings, len(self._names),
                                                                stream))
        else:
            ge2._check(ge2._lib.ge2_plan_execute_packed(plan._handle, bindings, len(self._names), stream))
        return y if self.output_dtype is self.dtype else y.to(self.output_dtype)

    def forward(self, *inputs: Tensor) -> Tensor:
        _require_inputs("ge2.torch.Ge2Module", inputs)
        _refuse_grad("ge2.torch.Ge2Module", *inputs)
        return torch.ops.ge2.module_forward(self._id, list(inputs)) if _compiling() else self._run(list(inputs))


def convert(module: torch.nn.Module, *, tune: str = "cached", graph_replay: bool = False, fuse: bool = True,
            allow_tf32: bool = False, dynamic: bool = True, max_tokens: int = 64, max_plans: int = 8,
            allow_fp8: bool = False, fp8_max_error: float = 0.1, dtype: torch.dtype | None = None) -> Ge2Module:
    """An nn.Module computing what `module` computes, through ge2: `module` is traced with torch.fx
    (nn.Sequential, an FFN block's forward with residual adds, the gated form
    `down(act(gate(x)) * up(x))`, Phi-3's one gate_up_proj cut by `chunk`, activations written out
    as code such as `x * torch.sigmoid(x)`) and its parameters copied to host memory now; each plan
    compiled from them holds them as constants, so later changes to `module`'s weights are not
    seen (convert again). tune: 'cached' (the
    process's shared contexts), 'off' or 'tune' (a context of that mode for this module);
    graph_replay, fuse, allow_tf32, allow_fp8, fp8_max_error: the compile options (allow_fp8: FP8
    e4m3 GEMMs where faster, each kept only within its measured error, docs/fp8.md). dynamic: one plan per device runs every
    token count (its intermediates sized for a bound of at least max_tokens, doubled when a larger
    count comes; kernels chosen per bucket of counts, see ge2_plan_execute_dynamic); False: one
    plan per token count, the max_plans most recent kept. FP8 linear modules (an e4m3 weight with
    weight_scale_inv per block_size block, as Hugging Face's FP8Linear of DeepSeek-V3 / Qwen3 FP8
    checkpoints, or weight_scale per output channel or tensor) are read as quantized constants, the
    codes and scales as stored (Graph.quantized_constant), and x is not quantized (under allow_fp8,
    GEMMs on 128 x 128 block-scaled weights may quantize it per row and 128 columns, the modules'
    own W8A8 recipe, each kept within fp8_max_error: docs/fp8.md); dtype: what the
    module computes in when all its weights are e4m3 (default bfloat16), else its parameters'
    (dtype must then equal it). Raises ge2.InvalidArgumentError naming the first layer or function
    ge2 cannot run."""
    f = "ge2.torch.convert"
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{f}: argument 'module' is a {type(module).__name__}, not a torch.nn.Module")
    ge2._checks.choice(tune, ge2._capi.TUNE_MODES, "tune", f)
    max_plans = ge2._checks.integer(max_plans, "max_plans", f, 1, 1 << 16)
    max_tokens = ge2._checks.integer(max_tokens, "max_tokens", f, 1, 1 << 31)
    fp8_max_error = ge2._checks.real(fp8_max_error, "fp8_max_error", f)
    if allow_fp8 and not 0 < fp8_max_error <= 1:  # as ge2_plan_compile would, at the first call
        raise invalid(f, f"argument 'fp8_max_error' = {fp8_max_error!r} is not a finite value in (0, 1]")
    if dtype is not None and dtype not in _DTYPE_CODES:
        raise invalid(f, f"argument 'dtype' = {dtype} is not float16, bfloat16 or float32")
    return Ge2Module(trace(module, dtype), type(module).__name__, tune, bool(graph_replay), bool(fuse), bool(allow_tf32),
                     max_plans, bool(dynamic), max_tokens, bool(allow_fp8), fp8_max_error)
