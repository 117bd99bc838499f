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
import operator
import threading
import weakref
from collections import OrderedDict
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "opcheck"):
    raise ImportError(f"ge2.torch needs PyTorch 2.4 or newer (torch.library.custom_op); this is torch "
                      f"{torch.__version__}")

import ge2
from ge2._checks import invalid

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


def _plain(t: Optional[Tensor], argument: str, function: str) -> Optional[Tensor]:
    """`t` with its values in memory: a negated view (is_neg(): the imaginary part of a conj(),
    whose memory holds the negatives) materialized, as PyTorch's own operators read it; a sparse
    or other non-strided tensor refused."""
    if t is None:
        return t
    if t.layout is not torch.strided:
        raise invalid(function, f"argument '{argument}' has layout {t.layout}; ge2 takes dense (strided) tensors "
                                f"(.to_dense())")
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


def _gemm_bias_act_impl(a: Tensor, b: Tensor, bias: Optional[Tensor], act: str, trans_a: bool, trans_b: bool,
                        alpha: float) -> Tensor:
    f = "ge2.torch.gemm_bias_act"
    a, b, bias = _plain(a, "a", f), _plain(b, "b", f), _plain(bias, "bias", f)
    out = a.new_empty(_gemm_shape(a, b, trans_a, trans_b))
    if out.numel() == 0:
        return out
    if a.shape[-2 if trans_a else -1] == 0:  # K = 0: the empty sum, then the epilogue
        return _apply_act(out.zero_() if bias is None else out.zero_() + bias, act)
    # One lookup: another thread may clear the cache between two.
    found = _FAST_GEMMS.get(_gemm_signature(a, b, bias, act, trans_a, trans_b, alpha))
    if found is not None and _dense(a, b, bias) and b.dtype == a.dtype and b.device == a.device and (
            bias is None or (bias.dtype == a.dtype and bias.device == a.device and bias.shape == out.shape[-1:])):
        # The signature passed ge2.gemm_bias_act's checks before: only the pointers change.
        context, params = found
        stream = ge2._arrays._torch_current_stream(torch, a.device) if a.is_cuda else None
        ge2._check(ge2._lib.ge2_gemm_bias_act(context.handle, ctypes.byref(params), a.data_ptr(), b.data_ptr(),
                                              None if bias is None else bias.data_ptr(), out.data_ptr(), stream))
        return out
    ge2.gemm_bias_act(a, b, bias, act or None, trans_a=trans_a, trans_b=trans_b, alpha=alpha, out=out,
                      context=context_for(a.device))
    if _dense(a, b, bias):
        _fast_gemm_params(a, b, bias, act, trans_a, trans_b, alpha)
    return out


@torch.library.custom_op("ge2::gemm_bias_act", mutates_args=())
def _gemm_bias_act_op(a: Tensor, b: Tensor, bias: Optional[Tensor], act: str, trans_a: bool, trans_b: bool,
                      alpha: float) -> Tensor:
    return _gemm_bias_act_impl(a, b, bias, act, trans_a, trans_b, alpha)


@_gemm_bias_act_op.register_fake
def _(a, b, bias, act, trans_a, trans_b, alpha):
    return a.new_empty(_gemm_shape(a, b, trans_a, trans_b))


_ACTIVATIONS = {"": lambda t: t, "none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
                "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}


def _apply_act(t: Tensor, act: str) -> Tensor:
    return _ACTIVATIONS[act](t)


def _act_name(act, function: str) -> str:
    if act is None:
        return ""
    if act not in _ACTIVATIONS:
        raise invalid(function, f"argument 'act' is {act!r}; it must be None, 'relu', 'gelu', 'gelu_tanh' or "
                                f"'silu'")
    return act


def gemm_bias_act(a: Tensor, b: Tensor, bias: Tensor | None = None, act: str | None = None, *,
                  trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0) -> Tensor:
    """act(alpha * op(a) @ op(b) + bias) through `torch.ops.ge2.gemm_bias_act` (see
    `ge2.gemm_bias_act` for the operand rules); returns a new tensor."""
    f = "ge2.torch.gemm_bias_act"
    _refuse_grad(f, a, b, bias)
    args = (a, b, bias, _act_name(act, f), bool(trans_a), bool(trans_b), float(alpha))
    # Eager calls skip the operator's Python dispatch (tens of µs); traced ones need the operator.
    return torch.ops.ge2.gemm_bias_act(*args) if _compiling() else _gemm_bias_act_impl(*args)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, act: str | None = None) -> Tensor:
    """act(F.linear(x, weight, bias)) in one ge2 call: x is [..., in], weight nn.Linear's [out, in],
    bias [out]; the leading dimensions of x are flattened into the GEMM's rows."""
    f = "ge2.torch.linear"
    if x.dim() < 1 or weight.dim() != 2:
        raise invalid(f, f"arguments 'x' {tuple(x.shape)} and 'weight' {tuple(weight.shape)}: x needs a last "
                         f"dimension and weight must be [out, in]")
    if not _compiling():  # traced, the operator reads x at run time (and is_neg() would break the graph)
        x = _plain(x, "x", f)
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    y = gemm_bias_act(rows, weight, bias, act, trans_b=True)
    return y.reshape(*x.shape[:-1], weight.shape[0])


# --- compiled plans ---------------------------------------------------------------------------

@torch.library.custom_op("ge2::plan_execute", mutates_args=())
def _plan_execute_op(plan_id: int, inputs: list[Tensor]) -> list[Tensor]:
    return _lookup(plan_id, "ge2.torch.plan_execute")._run(inputs)


@_plan_execute_op.register_fake
def _(plan_id, inputs):
    function = _lookup(plan_id, "ge2.torch.plan_execute")
    device = inputs[0].device if inputs else torch.device("cpu")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in function.output_specs]


class PlanFunction(torch.nn.Module):
    """A compiled `ge2.Plan` as a module: `f(*inputs)` binds the plan's inputs in the order of
    `input_names`, runs it (through `torch.ops.ge2.plan_execute` when traced) and returns its
    outputs (new tensors, in the order of `output_names`; a single output as a tensor). A module
    so that torch.compile specialises on the plan it runs."""

    def __init__(self, plan: ge2.Plan):
        super().__init__()
        if not isinstance(plan, ge2.Plan):
            raise TypeError(f"ge2.torch.PlanFunction: argument 'plan' is a {type(plan).__name__}, not a ge2.Plan")
        self.plan = plan
        self.input_names = [n for n, io in plan.io.items() if not io["output"]]
        self.output_names = [n for n, io in plan.io.items() if io["output"]]
        self.output_specs = [(plan.io[n]["shape"], _TORCH_DTYPES[plan.io[n]["dtype"]]) for n in self.output_names]
        self.id = _register(self)

    def _run(self, inputs: list) -> list:
        f = "ge2.torch.PlanFunction"
        if len(inputs) != len(self.input_names):
            raise invalid(f, f"{len(inputs)} inputs given; the plan takes {len(self.input_names)} "
                             f"({', '.join(self.input_names)})")
        device = inputs[0].device if inputs else torch.device("cpu")
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.output_specs]
        arrays = {name: _plain(t, name, f).contiguous() for name, t in zip(self.input_names, inputs)}
        arrays.update(zip(self.output_names, outputs))
        self.plan.execute(arrays)
        return outputs

    def forward(self, *inputs: Tensor):
        _refuse_grad("ge2.torch.PlanFunction", *inputs)
        outputs = torch.ops.ge2.plan_execute(self.id, list(inputs)) if _compiling() else self._run(list(inputs))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


# --- nn.Module conversion ---------------------------------------------------------------------

class _Recipe:
    """A traced module as ge2 graph steps over one input [tokens, in_features]: rebuilt into a
    ge2.Graph for each token count (plans have fixed shapes)."""

    def __init__(self):
        self.steps = []  # (kind, fx node name, output slot, args...)
        self.constants = {}  # name -> host copy of the module's parameter, taken at conversion
        self.width = {}  # slot -> last dimension
        self.in_features = None  # the first input's width
        self.inputs = []  # (slot, name) of each input the module reads, in forward's order
        self.input_features = ()  # their widths
        self.output = None
        self.dtype = None  # of every constant: the module's
        self.min_rank = 1  # of the output: a parameter [1, w] added to a value makes it at least 2


_SUPPORTED = ("nn.Linear, nn.ReLU, nn.GELU, nn.SiLU, nn.Identity, nn.Dropout (eval), F.linear, F.relu, F.gelu, "
              "F.silu, .relu(), +, - or * (.add, .sub, .mul, also in place) between two values of one shape, v + c, c * v, v - c, v / c "
              "with a number c, + or * with a parameter or buffer of one element or [..., w] (LayerScale), "
              "chunk / split / [..., a:b] "
              "of a linear layer's output along dim=-1, elementwise code or modules without parameters that "
              "compute one of those activations, and modules with a 2-D weight (and 1-D bias) that compute "
              "x @ weight.T + bias or x @ weight + bias (GPT-2's Conv1D)")


def _refused(what: str, node) -> Exception:
    return invalid("ge2.torch.convert", f"{what} at node '{node.name}' is not supported; ge2 converts {_SUPPORTED}")


_MODULE_ACTS = {torch.nn.ReLU: lambda m: "relu", torch.nn.SiLU: lambda m: "silu",
                torch.nn.GELU: lambda m: "gelu_tanh" if m.approximate == "tanh" else "gelu"}
_FUNCTION_ACTS = {F.relu: "relu", torch.relu: "relu", F.silu: "silu", F.gelu: "gelu"}
_ADDS = (operator.add, operator.iadd, torch.add)
_MULS = (operator.mul, operator.imul, torch.mul)
_SUBS = (operator.sub, operator.isub, torch.sub)  # a - b: a + (-1 * b)
_METHODS = {"relu": F.relu, "relu_": F.relu, "add": operator.add, "add_": operator.add, "mul": operator.mul,
            "mul_": operator.mul, "sub": operator.sub, "sub_": operator.sub}


_SPLITS = {"chunk": torch.chunk, "split": torch.split}  # method -> the function it is
# + - * / with a number, as functions, operators and methods -> the step's operation
_NUMBER_OPS = {"add": "add", "add_": "add", "mul": "mul", "mul_": "mul", "sub": "sub", "sub_": "sub",
               "div": "div", "div_": "div"}
_NUMBER_OPS.update({f: op for op, fs in {"add": _ADDS, "mul": _MULS,
                                         "sub": (operator.sub, operator.isub, torch.sub),
                                         "div": (operator.truediv, operator.itruediv, torch.div)}.items() for f in fs})


_IN_PLACE_FUNCTIONS = (operator.iadd, operator.imul, operator.isub, operator.itruediv, torch.relu_)


def _mutated_operand(node, traced):
    """The node whose tensor `node` changes in place (x.relu_(), x += y, F.relu(x, inplace=True),
    nn.ReLU(inplace=True)), or None."""
    if not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    if node.op == "call_method":
        in_place = node.target.endswith("_")
    elif node.op == "call_function":
        in_place = node.target in _IN_PLACE_FUNCTIONS or node.kwargs.get("inplace") is True or (
            node.target in (F.relu, F.silu) and len(node.args) > 1 and node.args[1] is True)
    else:
        in_place = node.op == "call_module" and getattr(traced.get_submodule(node.target), "inplace", False) is True
    return node.args[0] if in_place else None


def _same_values(node) -> Optional[str]:
    """"alias" for a call returning its operand's tensor (F.dropout in eval mode or with p = 0,
    .contiguous(), .detach()), "copy" for one returning a copy (.clone()), else None; dropout
    that drops is refused."""
    if not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    if node.op == "call_method":
        return {"contiguous": "alias", "detach": "alias", "clone": "copy"}.get(node.target) \
            if len(node.args) == 1 and not node.kwargs else None
    if node.target is torch.clone and len(node.args) == 1 and not node.kwargs:
        return "copy"
    if node.target is not F.dropout:
        return None
    named = dict(zip(("input", "p", "training", "inplace"), node.args), **node.kwargs)
    if named.get("training", True) is not False and named.get("p", 0.5) != 0:
        raise _refused(f"dropout that drops (p={named.get('p', 0.5)!r}, training={named.get('training', True)!r})",
                       node)
    return "alias"


def _is_number(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


class _Name:  # a node shown by its name in a refusal's text
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


def _call_text(n) -> str:
    """`callee(arg, ...)` of an fx call node, its node arguments by name."""
    callee = n.target if n.op == "call_method" else getattr(n.target, "__name__", str(n.target))
    args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: _Name(a.name))
    return f"{callee}({', '.join([repr(a) for a in args] + [f'{k}={v!r}' for k, v in kwargs.items()])})"


def _split_ranges(node, callee: str, args: tuple, kwargs: dict, width: int) -> list:
    """The column ranges [start, stop) of the pieces `chunk` or `split` cuts a value of `width`
    columns into along its last dimension (as torch.chunk and torch.split cut them)."""
    names = ("chunks",) if callee == "chunk" else ("split_size", "split_size_or_sections")
    pieces = args[0] if args else next((kwargs[k] for k in names if k in kwargs), None)
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if dim != -1:
        raise _refused(f"'{callee}' along dimension {dim!r} (ge2 cuts a linear layer's output along its last "
                       f"dimension, dim=-1)", node)
    if isinstance(pieces, (list, tuple)) and callee == "split":
        if not all(isinstance(n, int) and n >= 0 for n in pieces) or sum(pieces) != width:
            raise _refused(f"'split' into sections {list(pieces)} of a value of width {width}", node)
        stops = [sum(pieces[:i + 1]) for i in range(len(pieces))]
        return [(stop - n, stop) for n, stop in zip(pieces, stops)]
    if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces < 1:
        raise _refused(f"'{callee}' into {pieces!r}", node)
    size = -(-width // pieces) if callee == "chunk" else pieces
    return [(start, min(start + size, width)) for start in range(0, width, size)]


_PROBE_ACTS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
               "silu": F.silu}


def _activation_computed_by(function) -> Optional[str]:
    """The activation `function` of one tensor computes, found by evaluating it in float64 against
    each of ge2's on a spread of values and on a 3-D tensor (elementwise, shape kept); None if none
    matches. A function that is not one of one tensor raises: the callers catch it."""
    line = torch.linspace(-12.0, 12.0, 4801, dtype=torch.float64)
    cube = torch.randn(2, 3, 17, dtype=torch.float64, generator=torch.Generator().manual_seed(7)) * 4
    given = [line.clone(), cube.clone()]
    with torch.no_grad():
        outputs = [(function(given[0]), line), (function(given[1]), cube)]
    if not (torch.equal(given[0], line) and torch.equal(given[1], cube)):
        return None  # it changes its input in place: traced into, where that is seen
    for name, act in _PROBE_ACTS.items():
        if all(isinstance(y, Tensor) and y.shape == x.shape and y.dtype == x.dtype and
               torch.allclose(y, act(x), rtol=1e-6, atol=1e-9) for y, x in outputs):
            return name
    return None


def _probed_activation(m: torch.nn.Module) -> Optional[str]:
    """The activation a parameter-free module computes (as Hugging Face's NewGELUActivation computes
    GELU's tanh form from tanh and pow); None if it is none of ge2's."""
    if any(True for _ in m.children()) or any(True for _ in m.parameters()) or any(True for _ in m.buffers()):
        return None
    return _activation_computed_by(m)


def _probed_linear(m: torch.nn.Module) -> Optional[tuple]:
    """(weight as [out, in], bias) for a module that is a linear map of its last dimension through
    its own `weight` [out, in] or [in, out] and optional `bias` [out] (GPT-2's Conv1D computes
    addmm(bias, x, weight) on a weight [in, out]), found by evaluating it on random rows in its
    dtype and device; None otherwise (nn.Linear itself, and subclasses keeping its forward, are
    F.linear already; Falcon's FalconLinear computes input @ weight.T + bias in its own)."""
    if type(m).forward is torch.nn.Linear.forward or any(True for _ in m.children()) or \
            any(True for _ in m.buffers()):
        return None
    params = dict(m.named_parameters(recurse=False))
    weight, bias = params.get("weight"), params.get("bias")
    if weight is None or set(params) - {"weight", "bias"} or weight.dim() != 2 or (bias is not None and bias.dim() != 1):
        return None
    tolerance = 1e-5 if weight.dtype in (torch.float32, torch.float64) else 2e-2
    found = []
    with torch.no_grad():  # weights it cannot read (meta tensors, other dtypes) raise: _trace catches it
        w = weight.detach().float()  # the reference in float32 on the weight's device
        for nk in (w, w.t()):  # the weight as [out, in], or transposed into it
            x = torch.randn(2, 3, nk.shape[1], generator=torch.Generator().manual_seed(11))
            x = x.to(device=weight.device, dtype=weight.dtype)
            try:
                y = m(x)
            except Exception:  # not this layout's input width, or not a function of one tensor
                continue
            want = x.float() @ nk.t() + (0 if bias is None else bias.detach().float())
            if isinstance(y, Tensor) and y.shape == want.shape and \
                    (y.float() - want).norm().item() <= tolerance * want.norm().item():
                found.append(nk is w)
    if len(found) != 1:  # neither layout, or both (a weight the probe cannot tell apart)
        return None
    return (weight if found[0] else weight.t()).detach().contiguous(), bias


# Recipe steps (kind, fx node name, output slot, *args):
#   ("linear", _, out, src, weight constant, bias constant or None)
#   ("act", _, out, src, activation name)
#   ("add" | "mul", _, out, src, other src)
#   ("add_by" | "mul_by", _, out, src, a number or a vector constant [width]): src + c, src * c
def _reads(kind: str, args: list) -> list:
    """The slots a step reads."""
    return list(args) if kind in ("add", "mul") else list(args[:1])


def _constants_read(kind: str, args: list) -> list:
    return [a for a in args[1:] if isinstance(a, str)] if kind in ("linear", "add_by", "mul_by") else []


def _infer_widths(r: _Recipe, fixed: dict) -> None:
    """Every slot's last dimension from the linear layers' (`fixed`: slot -> width they need or
    make) through the activations and elementwise steps, which keep it; a conflict is refused."""
    groups = [[out, *_reads(kind, args)] for kind, _, out, *args in r.steps if kind != "linear"]
    names = {out: name for _, name, out, *_ in r.steps}
    width = dict(fixed)
    changed = True
    while changed:
        changed = False
        for group in groups:
            known = {width[s] for s in group if s in width}
            if len(known) > 1:
                raise invalid("ge2.torch.convert", f"node '{names[group[0]]}': operands of widths "
                                                   f"{sorted(known)} (they must agree)")
            if known:
                w = known.pop()
                for s in group:
                    if s not in width:
                        width[s], changed = w, True
    r.width = width


def _drop_cut_layers(r: _Recipe, cut: set) -> None:
    """Drops the linear steps of `cut` (layers whose pieces became layers of their own: a fused
    gate_up_proj) that nothing reads whole, and their constants."""
    read = {r.output} | {a for kind, _, _, *args in r.steps for a in _reads(kind, args)}
    r.steps = [step for step in r.steps if step[2] not in cut or step[2] in read]
    names = {a for kind, _, _, *args in r.steps for a in _constants_read(kind, args)}
    r.constants = {k: v for k, v in r.constants.items() if k in names}


def _refuse_hooks(module: torch.nn.Module) -> None:
    """Forward hooks change what a module computes, but torch.fx records calls without them."""
    import torch.nn.modules.module as nn_module
    if getattr(nn_module, "_global_forward_hooks", None) or getattr(nn_module, "_global_forward_pre_hooks", None):
        raise invalid("ge2.torch.convert", "global forward hooks are registered "
                                           "(torch.nn.modules.module.register_module_forward_hook); torch.fx does "
                                           "not trace them")
    for path, m in module.named_modules():
        if getattr(m, "_forward_hooks", None) or getattr(m, "_forward_pre_hooks", None):
            raise invalid("ge2.torch.convert", f"module '{path or type(module).__name__}' ({type(m).__name__}) has "
                                               f"forward hooks or pre-hooks, which torch.fx does not trace; remove "
                                               f"them or write what they do into the module")


def _trace(module: torch.nn.Module) -> _Recipe:
    import torch.fx

    _refuse_hooks(module)

    # Modules that are neither torch.nn's nor containers, recognized by evaluating them (before
    # tracing: a module called while fx traces would be traced): path -> ("act", name) or
    # ("linear", weight [out, in], bias).
    plain = torch.fx.Tracer()
    recognized = {}
    for path, m in module.named_modules():
        if path and not plain.is_leaf_module(m, path):
            try:
                act = _probed_activation(m)
                linear = None if act is not None else _probed_linear(m)
            except Exception:  # not a function of one tensor, or parameters it cannot read: traced as it is
                act = linear = None
            if act is not None or linear is not None:
                recognized[path] = ("act", act) if act is not None else ("linear", *linear)

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, path):
            return path in recognized or super().is_leaf_module(m, path)

    tracer = Tracer()
    try:
        traced = torch.fx.GraphModule(module, tracer.trace(module))
    except Exception as e:  # data-dependent control flow and the like
        raise invalid("ge2.torch.convert", f"torch.fx cannot trace the module ({type(e).__name__}: {e})") from e
    r = _Recipe()
    slot = {}  # fx node -> slot name
    params = {}  # get_attr node -> tensor
    fixed = {}  # slot -> width a linear layer needs or makes
    producer = {}  # slot -> index in r.steps of the linear step that makes it
    pieces = {}  # chunk / split node -> (the linear output's slot, column ranges of its pieces)
    cut = set()  # slots of linear outputs that pieces were taken from
    # Nodes computing elementwise from one value what no single ge2 step does (x * sigmoid(x),
    # GELU written out): node -> that value's slot. Recognized when a step reads them.
    expression = {}
    unresolvable = {}  # expression node -> its refusal

    rank = {}  # slot -> the least rank broadcasting gives it, where more than 1
    negations = {}  # slot -> the slot of its negation
    aliasing = set()  # nodes that return their operand itself (Identity, eval Dropout, .contiguous())
    taken = {}  # id of a tensor taken -> (its constant's name, the tensor, kept alive so ids stay unique)

    def constant(hint, tensor):
        """The name of a host copy of `tensor` among the recipe's constants: one copy per tensor (a
        layer called twice), a name of its own per tensor (modules 'a.b' and 'a_b' both read
        'a_b_weight' as a hint)."""
        if id(tensor) in taken:
            return taken[id(tensor)][0]
        base = hint.replace(".", "_")
        name, n = base, 1
        while name in r.constants:
            n += 1
            name = f"{base}_{n}"
        r.constants[name] = tensor.detach().to("cpu", copy=True)
        taken[id(tensor)] = (name, tensor)
        return name

    def new_slot(node):
        slot[node] = f"v{len(slot)}"
        return slot[node]

    def value_of(arg, node):
        if isinstance(arg, torch.fx.Node) and arg in expression and arg not in slot:
            slot[arg] = activation_of_expression(arg)
        if not isinstance(arg, torch.fx.Node) or arg not in slot:
            raise _refused(f"argument {arg!r}", node)
        return slot[arg]

    def all_resolved(operands, node):
        try:
            for a in operands:
                value_of(a, node)
            return True
        except ge2.InvalidArgumentError:
            return False

    def node_args(node):
        found = []
        torch.fx.node.map_arg((node.args, node.kwargs), found.append)
        return found

    def computation(e, leaf):
        """The expression nodes `e` is computed from, in graph order, down to the expression's value
        or, given `leaf` (one of them), down to `leaf`; None if `e` also reads the value beside
        `leaf` (then it is no function of `leaf` alone)."""
        needed, stack = set(), [e]
        while stack:
            n = stack.pop()
            if n in needed or n is leaf:
                continue
            needed.add(n)
            for a in node_args(n):
                if a in expression:
                    stack.append(a)
                elif leaf is not None:
                    return None
        return [n for n in traced.graph.nodes if n in needed]

    def activation_between(e, leaf, order):
        def run(value):
            env = {} if leaf is None else {leaf: value}
            for n in order:  # on copies: an in-place step (x.mul_(s)) leaves its operands alone
                args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env.get(a, value).clone())
                env[n] = n.target(*args, **kwargs) if n.op == "call_function" else \
                    getattr(args[0], n.target)(*args[1:], **kwargs)
            return env[e]

        try:
            return _activation_computed_by(run)
        except Exception:  # not computable on a float64 tensor alone
            return None

    def activation_of_expression(e):
        """The slot of an activation step computing the expression node `e`: one of ge2's
        activations of the expression's value (evaluated like a module of unknown class), or of an
        inner node that is itself such a chain (SiLU then GELU, both written out)."""
        if e in unresolvable:
            raise unresolvable[e]
        order = computation(e, None)
        src, act = expression[e], activation_between(e, None, order)
        for leaf in reversed(order[:-1] if act is None else []):
            above = computation(e, leaf)
            act = None if above is None else activation_between(e, leaf, above)
            if act is not None and all_resolved([leaf], e):
                src = slot[leaf]
                break
            act = None
        if act is None:
            out = number_step(e) or square_step(e)
            if out is not None:
                return out
            steps = "; ".join(f"{n.name} = {_call_text(n)}" for n in order)
            unresolvable[e] = _refused(f"the elementwise computation [{steps}] (none of ge2's activations "
                                       f"{', '.join(_PROBE_ACTS)})", e)
            raise unresolvable[e]
        out = new_slot(e)
        r.steps.append(("act", e.name, out, src, act))
        return out

    def number_step(e):
        """The slot of a step adding a number to, or multiplying by one, the value the expression
        node `e` reads (v + c, c * v, v - c, v / c: a residual scale), or None."""
        op = _NUMBER_OPS.get(e.target)
        if op is None or len(e.args) != 2 or e.kwargs:
            return None
        numbers = [a for a in e.args if _is_number(a)]
        tensors = [a for a in e.args if isinstance(a, torch.fx.Node)]
        if len(numbers) != 1 or len(tensors) != 1 or (op in ("sub", "div") and e.args[0] is not tensors[0]):
            return None
        c = float(numbers[0])
        if op == "div" and c == 0 or not math.isfinite(c) or not all_resolved(tensors, e):
            return None
        src = slot[tensors[0]]
        if op == "sub" and e.args[1] is tensors[0]:  # c - v
            op, c, src = "add", c, negated(src, e)
        kind, c = {"add": ("add_by", c), "sub": ("add_by", -c), "mul": ("mul_by", c), "div": ("mul_by", 1 / c)}[op]
        out = new_slot(e)
        r.steps.append((kind, e.name, out, src, c))
        return out

    def square_step(e):
        """The slot of v * v for an expression node squaring v (torch.square(v), v ** 2, v.pow(2),
        v * v: Nemotron's relu²), or None."""
        callee = e.target if e.op == "call_method" else getattr(e.target, "__name__", None)
        args = list(e.args) + [e.kwargs[k] for k in ("exponent",) if k in e.kwargs]
        squares = (callee == "square" and len(args) == 1 or callee in ("pow", "pow_") and len(args) == 2 and
                   args[1] == 2 and not isinstance(args[1], bool) or callee == "mul" and len(args) == 2 and
                   args[0] is args[1])
        if not squares or not isinstance(args[0], torch.fx.Node) or set(e.kwargs) - {"exponent"} or \
                not all_resolved([args[0]], e):
            return None
        out = new_slot(e)
        r.steps.append(("mul", e.name, out, slot[args[0]], slot[args[0]]))
        return out

    def negated(src, node):
        """The slot of -src (one step per value, for a - b)."""
        if src not in negations:
            negations[src] = f"{src}_negated"
            r.steps.append(("mul_by", node.name, negations[src], src, -1.0))
        return negations[src]

    def parameter_step(node, target):
        """A step adding or multiplying a value by a parameter or buffer: a number (one element)
        or a vector along the last dimension ([w], [1, w], ...: LayerScale's gamma)."""
        (p_node,) = [a for a in node.args if a in params]
        (v_node,) = [a for a in node.args if a is not p_node]
        t = params[p_node]
        subtract = target in _SUBS
        if not isinstance(t, Tensor) or not t.is_floating_point() or t.numel() == 0 or \
                t.numel() > 1 and any(n != 1 for n in t.shape[:-1]):
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise _refused(f"'{target.__name__}' with parameter '{p_node.target}' of shape {shape} (ge2 takes "
                           f"one number or a vector along the last dimension)", node)
        src = value_of(v_node, node)
        if subtract and node.args[1] is v_node:  # p - v
            src = negated(src, node)
        elif subtract:  # v - p
            t = -t.detach()
        kind = "mul_by" if target in _MULS else "add_by"
        out = new_slot(node)
        rank[out] = max(rank.get(src, 1), t.dim())
        if t.numel() == 1:
            r.steps.append((kind, node.name, out, src, float(t.detach().reshape(()).item())))
            return
        name = constant(p_node.target, t.reshape(-1))
        need_width(src, t.shape[-1], node)
        fixed[out] = t.shape[-1]
        r.steps.append((kind, node.name, out, src, name))

    def sliced_linear(node, src, start, stop):
        """A linear step computing columns [start, stop) of the linear output `src`: its weight's
        rows and bias's entries in that range (Phi-3's fused gate_up_proj, cut by chunk)."""
        _, _, _, x, weight, bias = r.steps[producer[src]]
        cut.add(src)
        names = [None if name is None else constant(f"{name}_{start}_{stop}", r.constants[name][start:stop])
                 for name in (weight, bias)]
        out = new_slot(node)
        fixed[out] = stop - start
        producer[out] = len(r.steps)
        r.steps.append(("linear", node.name, out, x, *names))

    def need_width(s, width, node):
        if fixed.setdefault(s, width) != width:
            raise invalid("ge2.torch.convert", f"node '{node.name}': a layer of {width} inputs reads a value of "
                                               f"width {fixed[s]}")

    def linear_step(node, x, weight, bias, prefix):
        if weight is None or weight.dim() != 2 or (bias is not None and bias.shape != weight.shape[:1]):
            raise _refused("a linear layer whose weight is not [out, in] (or bias not [out])", node)
        src = value_of(x, node)
        need_width(src, weight.shape[1], node)
        w = constant(prefix + "_weight", weight)
        b = None if bias is None else constant(prefix + "_bias", bias)
        out = new_slot(node)
        fixed[out] = weight.shape[0]
        producer[out] = len(r.steps)
        r.steps.append(("linear", node.name, out, src, w, b))

    def visit(node):
        if node.op == "placeholder":
            if node.users:  # an argument forward does not read is not an input
                slot[node] = f"x{len(r.inputs)}"
                r.inputs.append((slot[node], node.target))
        elif node.op == "get_attr":
            params[node] = operator.attrgetter(node.target)(traced)
        elif node.op == "call_module":
            sub = traced.get_submodule(node.target)
            found = recognized.get(node.target)
            if found is not None and (len(node.args) != 1 or node.kwargs):  # evaluated on one tensor only
                raise _refused(f"module '{node.target}' ({type(sub).__name__}) called with arguments "
                               f"{node.args[1:]} {node.kwargs}", node)
            if found is not None and found[0] == "act":
                r.steps.append(("act", node.name, new_slot(node), value_of(node.args[0], node), found[1]))
            elif found is not None:
                linear_step(node, node.args[0], found[1], found[2], node.target)
            elif isinstance(sub, torch.nn.Linear):
                linear_step(node, node.args[0], sub.weight, sub.bias, node.target)
            elif type(sub) in _MODULE_ACTS:
                src = value_of(node.args[0], node)
                r.steps.append(("act", node.name, new_slot(node), src, _MODULE_ACTS[type(sub)](sub)))
            elif isinstance(sub, torch.nn.Identity) or (isinstance(sub, torch.nn.Dropout)
                                                       and (not sub.training or sub.p == 0)):
                slot[node] = value_of(node.args[0], node)
                aliasing.add(node)
            else:
                raise _refused(f"module '{node.target}' ({type(sub).__name__})", node)
        elif node.op in ("call_function", "call_method"):
            # x.relu(), x.add(y), x.mul(y) are the functions F.relu, + and * on their receiver.
            method = node.op == "call_method"
            target = _METHODS.get(node.target) if method else node.target
            split = node.target if method and node.target in _SPLITS else \
                next((k for k, f in _SPLITS.items() if target is f), None)
            if split is not None:
                src = node.args[0] if node.args else None
                if not isinstance(src, torch.fx.Node) or src in expression or slot.get(src) not in producer:
                    raise _refused(f"'{split}' of a value that is not a linear layer's output", node)
                pieces[node] = (slot[src], _split_ranges(node, split, node.args[1:], node.kwargs,
                                                         fixed[slot[src]]))
                return
            if target is operator.getitem and node.args[0] in pieces:
                src, ranges = pieces[node.args[0]]
                index = node.args[1]
                if not isinstance(index, int) or not -len(ranges) <= index < len(ranges):
                    raise _refused(f"piece {index!r} of {len(ranges)}", node)
                sliced_linear(node, src, *ranges[index])
                return
            if target is operator.getitem and slot.get(node.args[0]) in producer and node.args[0] not in expression:
                index = node.args[1]
                width = fixed[slot[node.args[0]]]
                if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis and
                        isinstance(index[1], slice) and index[1].step in (None, 1)):
                    raise _refused(f"index {index!r} (ge2 takes columns of a linear layer's output, "
                                   f"[..., start:stop])", node)
                start, stop, _ = index[1].indices(width)
                if stop <= start:
                    raise _refused(f"the empty column range {index!r} of a value of width {width}", node)
                sliced_linear(node, slot[node.args[0]], start, stop)
                return
            same = _same_values(node)
            if same is not None:
                slot[node] = value_of(node.args[0], node)
                if same == "alias":
                    aliasing.add(node)
                return
            operands = node_args(node)
            roots = {expression.get(a, slot.get(a)) for a in operands}
            handled = target is F.linear or target in _FUNCTION_ACTS or target in _ADDS or target in _MULS or \
                target in _SUBS
            scalar_operand = (target in _ADDS or target in _MULS or target in _SUBS) and \
                any(not isinstance(a, torch.fx.Node) for a in node.args)
            # A step ge2 has stays a step when the expressions it reads are activations themselves
            # (relu(x * sigmoid(x))); otherwise the node extends the expression.
            if operands and len(roots) == 1 and None not in roots and target is not F.linear and \
                    target is not operator.getitem and \
                    (not handled or scalar_operand or
                     any(a in expression for a in operands) and not all_resolved(operands, node)):
                expression[node] = roots.pop()
                return
            if target is None:
                raise _refused(f"method '{node.target}'", node)
            if target is F.linear:
                args = list(node.args) + [None] * (3 - len(node.args))
                if "bias" in node.kwargs:
                    args[2] = node.kwargs["bias"]
                if any(a is not None and a not in params for a in args[1:3]):
                    raise _refused("F.linear with a weight or bias that is not a parameter", node)
                linear_step(node, args[0], params.get(args[1]), params.get(args[2]), node.name)
            elif target in _FUNCTION_ACTS:
                act = _FUNCTION_ACTS[target]
                extra = dict(node.kwargs)
                extra.pop("inplace", None)
                if act == "gelu" and extra.pop("approximate", "none") == "tanh":
                    act = "gelu_tanh"
                if len(node.args) != 1 or extra:
                    raise _refused(f"'{target.__name__}' with arguments {node.args[1:]} {extra}", node)
                src = value_of(node.args[0], node)
                r.steps.append(("act", node.name, new_slot(node), src, act))
            elif target in _ADDS or target in _MULS or target in _SUBS:
                if len(node.args) != 2 or node.kwargs:
                    raise _refused(f"'{target.__name__}' with arguments {node.args} {node.kwargs}", node)
                if sum(a in params for a in node.args) == 1:
                    parameter_step(node, target)
                    return
                a, b = (value_of(arg, node) for arg in node.args)
                if target in _SUBS:
                    b = negated(b, node)
                r.steps.append(("mul" if target in _MULS else "add", node.name, new_slot(node), a, b))
            else:
                raise _refused(f"function '{getattr(target, '__name__', target)}'", node)
        elif node.op == "output":
            if not isinstance(node.args[0], torch.fx.Node):
                raise _refused("an output that is not one tensor", node)
            r.output = value_of(node.args[0], node)

    position = {node: i for i, node in enumerate(traced.graph.nodes)}
    aliases = {}  # node -> the nodes naming one tensor (an in-place step returns its operand)
    for node in traced.graph.nodes:
        visit(node)
        if node in aliasing:
            group = aliases.setdefault(node.args[0], [node.args[0]])  # Identity, Dropout: the same tensor
            group.append(node)
            aliases[node] = group
        mutated = _mutated_operand(node, traced)
        if mutated is None:
            continue
        group = aliases.setdefault(mutated, [mutated])
        group.append(node)
        aliases[node] = group
        # PyTorch changed the tensor in place: what reads any of its names later reads this value.
        for name in group[:-1]:
            later = [u for u in name.users if position[u] > position[node]]
            if not later:
                continue
            # An expression read by an earlier one is evaluated through its computation, which the
            # change does not reach; a cut layer's pieces were taken before it.
            if name in expression and (any(u in expression and position[u] < position[node] for u in name.users)
                                       or not all_resolved([name], node)) or \
                    name in slot and slot[name] in cut or not all_resolved([node], node):
                raise _refused(f"'{_call_text(node) if node.op != 'call_module' else node.target}' changes "
                               f"'{name.name}' in place, which node '{min(later, key=position.get).name}' reads "
                               f"afterwards", node)
            expression.pop(name, None)  # from now on a value of its own
            slot[name] = slot[node]

    _drop_cut_layers(r, cut)
    for kind, _, out, *args in r.steps:  # in order: a step's operands are made before it
        rank[out] = max([rank.get(out, 1)] + [rank.get(a, 1) for a in _reads(kind, args)])
    r.min_rank = rank.get(r.output, 1)
    _infer_widths(r, fixed)
    unknown = [name for s, name in r.inputs if s not in r.width]
    if unknown or not r.inputs:
        raise invalid("ge2.torch.convert", f"no linear layer determines the width of the module's input "
                                           f"'{unknown[0] if unknown else 'x'}'")
    r.input_features = tuple(r.width[s] for s, _ in r.inputs)
    r.in_features = r.input_features[0]
    if r.output is None or r.output in dict(r.inputs) or not r.steps:
        raise invalid("ge2.torch.convert", "the module computes nothing ge2 can run from its input")
    dtypes = {t.dtype for t in r.constants.values()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPE_CODES:
        raise invalid("ge2.torch.convert", f"the module's parameters have dtypes {sorted(map(str, dtypes))}; "
                                           f"ge2 needs one of float16, bfloat16, float32 for all")
    r.dtype = next(iter(dtypes))
    return r


def _build_graph(r: _Recipe, tokens: int, dtype: str, dynamic: bool) -> ge2.Graph:
    g = ge2.Graph()
    value = {s: g.input(name, (tokens, r.width[s]), dtype, dynamic=dynamic) for s, name in r.inputs}
    consts = {}

    def const(name):
        if name not in consts:
            consts[name] = g.constant(name, r.constants[name].contiguous())
        return consts[name]

    for kind, _, out, *args in r.steps:
        if kind == "linear":
            src, w, b = args
            v = g.gemm(value[src], const(w), trans_b=True)
            value[out] = g.bias(v, const(b)) if b is not None else v
        elif kind == "act":
            value[out] = g.activation(value[args[0]], args[1])
        elif kind in ("add_by", "mul_by"):
            src, c = args
            if isinstance(c, str):
                operand = const(c)
            else:  # a number, as a vector of the value's width
                operand = g.constant(f"{out}_number", torch.full((r.width[src],), c, dtype=r.dtype))
            value[out] = (g.add if kind == "add_by" else g.mul)(value[src], operand)
        elif kind == "add":
            value[out] = g.add(value[args[0]], value[args[1]])
        else:
            value[out] = g.mul(value[args[0]], value[args[1]])
    g.output(value[r.output], "y")
    return g


@torch.library.custom_op("ge2::module_forward", mutates_args=())
def _module_forward_op(module_id: int, inputs: list[Tensor]) -> Tensor:
    return _lookup(module_id, "ge2.torch.module_forward")._run(inputs)


@_module_forward_op.register_fake
def _(module_id, inputs):
    module = _lookup(module_id, "ge2.torch.module_forward")
    module._check_inputs(inputs)
    return inputs[0].new_empty(module.output_shape(inputs[0]))


class Ge2Module(torch.nn.Module):
    """A module converted by `convert`: forward(x) with x [..., in_features] (or one tensor per
    input the original forward reads, widths `input_features`, leading dimensions shared) runs a
    ge2 plan on x's device. Dynamic (the default): one plan per device whose token count is dynamic, compiled on
    first use with a bound of max(max_tokens, the call's count rounded up to a power of two) and
    recompiled with a doubled bound when a larger count comes. Otherwise one plan per row count
    and device, the `max_plans` most recent kept. Each plan holds its own copy of the weights on
    its device."""

    def __init__(self, recipe: _Recipe, name: str, tune: str, graph_replay: bool, fuse: bool, allow_tf32: bool,
                 max_plans: int, dynamic: bool, max_tokens: int, allow_fp8: bool = False,
                 fp8_max_error: float = 0.1):
        super().__init__()
        self._recipe = recipe
        self._name = name
        self.in_features = recipe.in_features
        self.input_features = recipe.input_features
        self._input_names = [name for _, name in recipe.inputs]
        self._names = [name.encode() for name in self._input_names] + [b"y"]
        self._binding_type = ge2._capi.Binding * len(self._names)
        self.out_features = recipe.width[recipe.output]
        self.dtype = recipe.dtype
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
            if x.dim() >= 1 and x.shape[-1] == self.in_features and x.dtype == self.dtype:
                return
        if len(inputs) != len(self.input_features):
            raise invalid(f, f"{len(inputs)} inputs given; the module takes {len(self.input_features)} "
                             f"({', '.join(self._input_names)})")
        for i, (x, width) in enumerate(zip(inputs, self.input_features)):
            if x.dim() < 1 or x.shape[-1] != width:
                raise invalid(f, f"{self._what(i)} of shape {tuple(x.shape)}: the last dimension must be {width}")
            if x.dtype != self.dtype:
                raise TypeError(f"{f}: {self._what(i)} is {x.dtype} but the module's weights are {self.dtype}; "
                                f"convert the module in the input's dtype")
            if i and (x.shape[:-1] != inputs[0].shape[:-1] or x.device != inputs[0].device):
                raise invalid(f, f"{self._what(i)} of shape {tuple(x.shape)} on {x.device}: the inputs must share "
                                 f"their leading dimensions and device ({tuple(inputs[0].shape)} on "
                                 f"{inputs[0].device})")

    def _what(self, i: int) -> str:
        return "input" if len(self._input_names) == 1 else f"input {i} ({self._input_names[i]})"

    def output_shape(self, x: Tensor) -> tuple:
        """x's leading dimensions and out_features, with leading 1s up to the rank that parameters
        [1, ..., w] broadcast the result to (as PyTorch broadcasts them)."""
        lead = tuple(x.shape[:-1])
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
        graph = _build_graph(self._recipe, bound, ge2._DTYPE_TEXT[_DTYPE_CODES[x.dtype]], self._dynamic)
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
            inputs = [_plain(t, name, "ge2.torch.Ge2Module") for t, name in zip(inputs, self._input_names)]
            x = inputs[0]
        self._check_inputs(inputs)
        tokens = x.numel() // self.in_features
        y = x.new_empty(self.output_shape(x))
        if tokens == 0:
            return y
        if len(inputs) == 1:
            rows = x if x.is_contiguous() else x.contiguous()
            plan = self.plan_for(rows)
            bindings = self._binding_type((self._names[0], rows.data_ptr()), (b"y", y.data_ptr()))
        else:
            rows = [t if t.is_contiguous() else t.contiguous() for t in inputs]
            plan = self.plan_for(rows[0])
            bindings = self._binding_type(*zip(self._names, [t.data_ptr() for t in rows] + [y.data_ptr()]))
        # The plan runs this row count, dtype and device, and the arrays are dense: only the
        # pointers are new, so the binding's per-array checks are skipped.
        stream = ge2._arrays._torch_current_stream(torch, x.device) if x.is_cuda else None
        if plan.max_extent:
            ge2._check(ge2._lib.ge2_plan_execute_dynamic(plan._handle, tokens, bindings, len(self._names), stream))
        else:
            ge2._check(ge2._lib.ge2_plan_execute(plan._handle, bindings, len(self._names), stream))
        return y

    def forward(self, *inputs: Tensor) -> Tensor:
        _refuse_grad("ge2.torch.Ge2Module", *inputs)
        return torch.ops.ge2.module_forward(self._id, list(inputs)) if _compiling() else self._run(list(inputs))


def convert(module: torch.nn.Module, *, tune: str = "cached", graph_replay: bool = False, fuse: bool = True,
            allow_tf32: bool = False, dynamic: bool = True, max_tokens: int = 64, max_plans: int = 8,
            allow_fp8: bool = False, fp8_max_error: float = 0.1) -> Ge2Module:
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
    plan per token count, the max_plans most recent kept. Raises ge2.InvalidArgumentError naming
    the first layer or function ge2 cannot run."""
    f = "ge2.torch.convert"
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{f}: argument 'module' is a {type(module).__name__}, not a torch.nn.Module")
    ge2._checks.choice(tune, ge2._capi.TUNE_MODES, "tune", f)
    max_plans = ge2._checks.integer(max_plans, "max_plans", f, 1, 1 << 16)
    max_tokens = ge2._checks.integer(max_tokens, "max_tokens", f, 1, 1 << 31)
    fp8_max_error = ge2._checks.real(fp8_max_error, "fp8_max_error", f)
    return Ge2Module(_trace(module), type(module).__name__, tune, bool(graph_replay), bool(fuse), bool(allow_tf32),
                     max_plans, bool(dynamic), max_tokens, bool(allow_fp8), fp8_max_error)
