"""ge2.torch.convert's front end: an nn.Module traced with torch.fx into a recipe of ge2 graph
steps (linear layers, activations, elementwise steps with their constants), and the recipe built
into a ge2.Graph for a token count. What a module computes is read from torch.fx's graph, and
where torch.fx only records a call (modules of other libraries, elementwise code), by evaluating
it; anything else is refused naming the node."""
import inspect
import math
import operator
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

import ge2
from ge2._checks import invalid

_DTYPE_CODES = ge2._arrays.torch_dtype_codes()  # torch dtype -> ge2 dtype code

# ge2's activations computed by PyTorch: what the operators apply for an empty K, and what modules
# and code are compared with when they are recognized by evaluation.
TORCH_ACTIVATIONS = {"": lambda t: t, "none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
                     "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
                     "quick_gelu": lambda t: t * torch.sigmoid(1.702 * t)}


class Recipe:
    """A traced module as ge2 graph steps over its inputs [tokens, width]: built into a ge2.Graph
    for each token count or bound (build_graph)."""

    def __init__(self):
        self.steps = []  # (kind, fx node name, output slot, args...)
        self.constants = {}  # name -> host copy of the module's parameter, taken at conversion
        self.width = {}  # slot -> last dimension
        self.in_features = None  # the first input's width
        self.inputs = []  # (slot, name) of each input the module reads, in forward's order
        self.input_features = ()  # their widths
        self.output = None
        self.dtype = None  # of every constant: the module's
        self.output_dtype = None  # where the module returns another (a cast up to float32 at its end)
        self.min_rank = 1  # of the output: a parameter [1, w] added to a value makes it at least 2
        self.flatten_input = False  # the module flattens its input's dimensions after the first (nn.Flatten)


class QuantizedWeight:
    """A weight an FP8 module holds as e4m3 codes with scales (the checkpoint's own numbers),
    built into the graph as a quantized constant: codes [out, in] (uint8 on the host), scales
    (float32 on the host), and `block` (rows, cols) for one scale per block, else `axis` (None:
    one scale; 0: one per output channel)."""

    def __init__(self, codes: Tensor, scales: Tensor, block: Optional[tuple], axis: Optional[int]):
        self.codes, self.scales, self.block, self.axis = codes, scales, block, axis
        self.shape = codes.shape

    def dim(self) -> int:
        return 2


_SUPPORTED = ("nn.Linear, FP8 linear modules (e4m3 weight with weight_scale_inv or weight_scale: one scale, "
              "one per output channel, or one per block_size block), nn.ReLU, nn.GELU, nn.SiLU, nn.Identity, nn.Dropout (eval), F.linear, F.relu, F.gelu, "
              "F.silu, .relu(), +, - or * (.add, .sub, .mul, also in place) between two values of one shape, "
              "v + c, c * v, v - c, v / c with a number c, + or * with a parameter or buffer of one element or [..., w] (LayerScale), "
              "x @ w, torch.matmul and torch.mm with a 2-D parameter w (or w.T, w.t()), torch.addmm(bias, x, w), "
              "torch.einsum of a value and a 2-D parameter that is a linear layer ('...i,oi->...o'), "
              "casts (.float(), .to(dtype), .to(x.dtype), .type_as(x)) to the module's dtype or up to float32, "
              "nn.Flatten() (or flatten(1), view(x.size(0), -1)) of the input, chunk / split / [..., a:b] of a linear layer's output along dim=-1, elementwise code or modules without parameters that "
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
_NUMBER_OPS.update({f: op for op, fs in {"add": _ADDS, "mul": _MULS, "sub": _SUBS,
                                         "div": (operator.truediv, operator.itruediv, torch.div)}.items() for f in fs})


_MATMULS = (operator.matmul, torch.matmul, torch.mm)


def _transposes(node) -> bool:
    """Whether `node` is the transpose of a matrix: w.t(), w.T, w.mT, torch.t(w), w.transpose(0, 1)."""
    if node.op == "call_method":
        return node.target == "t" and len(node.args) == 1 or \
            node.target == "transpose" and len(node.args) == 3 and set(node.args[1:]) in ({0, 1}, {-1, -2})
    return node.target is torch.t and len(node.args) == 1 or \
        node.target is getattr and len(node.args) == 2 and node.args[1] in ("T", "mT")


def _einsum_linear(equation: str) -> Optional[tuple]:
    """For an einsum of a value and a 2-D weight that is a linear layer ("...i,oi->...o",
    "bsd,df->bsf", "oi,...i->...o"): (the value's operand index, whether the weight is [out, in]);
    None for any other equation."""
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        return None
    letters = [t.replace("...", "") for t in operands]
    if not arrow:  # implicit output: the letters used once, in alphabetical order, after the ellipsis
        once = sorted(c for c in set(letters[0] + letters[1]) if (letters[0] + letters[1]).count(c) == 1)
        output = ("..." if "..." in inputs else "") + "".join(once)
    for v in (0, 1):
        value, weight = operands[v], operands[1 - v]
        if len(weight) != 2 or weight[0] == weight[1] or not weight.isalpha() or not value or \
                not value[-1].isalpha():
            continue
        prefix, inner = value[:-1], value[-1]
        batch = prefix.replace("...", "", 1)  # the leading dimensions' letters
        if inner not in weight or inner in batch or not (batch == "" or batch.isalpha()) or \
                len(set(batch)) != len(batch):
            continue
        outer = weight.replace(inner, "")
        if outer in value or output != prefix + outer:
            continue
        return v, weight == outer + inner
    return None


def _reads_size(node) -> bool:
    """Whether `node` reads a size of a tensor (x.size(), x.size(0), x.shape, x.shape[0]), not its values."""
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op == "call_method" and node.target == "size" or _attribute_of(node, ("shape",)):
        return True
    return node.op == "call_function" and node.target is operator.getitem and _reads_size(node.args[0])


def _first_size_of(node, x) -> bool:
    """Whether `node` is x.size(0), x.size()[0] or x.shape[0]."""
    if node.op == "call_method" and node.target == "size":
        return node.args[0] is x and list(node.args[1:]) + list(node.kwargs.values()) == [0]
    return node.op == "call_function" and node.target is operator.getitem and node.args[1] == 0 and \
        isinstance(node.args[0], torch.fx.Node) and node.args[0].args[:1] == (x,) and \
        (_attribute_of(node.args[0], ("shape",)) is not None or
         node.args[0].op == "call_method" and node.args[0].target == "size" and len(node.args[0].args) == 1)


def _flattens_rows(node, traced) -> bool:
    """Whether `node` flattens the dimensions after the first of its operand into one, as nn.Flatten()
    does: nn.Flatten(), torch.flatten(x, 1), x.flatten(1), x.view(x.size(0), -1), x.reshape(x.shape[0], -1)."""
    if not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    x = node.args[0]
    if node.op == "call_module":
        m = traced.get_submodule(node.target)
        return isinstance(m, torch.nn.Flatten) and m.start_dim == 1 and m.end_dim == -1 and len(node.args) == 1
    named = dict(zip(("start_dim", "end_dim"), node.args[1:]), **node.kwargs)
    if node.target is torch.flatten or node.op == "call_method" and node.target == "flatten":
        return set(named) <= {"start_dim", "end_dim"} and named.get("start_dim") == 1 and named.get("end_dim", -1) == -1
    if node.op == "call_method" and node.target in ("view", "reshape") and not node.kwargs:
        shape = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) else node.args[1:]
        return len(shape) == 2 and shape[1] == -1 and isinstance(shape[0], torch.fx.Node) and _first_size_of(shape[0], x)
    return False


# Casts: method -> the dtype it casts to (None: given by its arguments, .to and .type; "like":
# that of its argument's tensor, .type_as).
_CAST_METHODS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
                 "double": torch.float64, "to": None, "type": None, "type_as": "like"}


def _attribute_of(node, names) -> Optional[str]:
    """The name among `names` when `node` reads that attribute of a tensor (x.dtype, x.device)."""
    return node.args[1] if isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        node.target is getattr and len(node.args) == 2 and node.args[1] in names else None


def _cast_of(node):
    """For a cast (x.float(), x.to(torch.bfloat16), x.to(y.dtype), x.to(y), x.type_as(y), x.to(y.device)):
    what it casts to, ("dtype", a torch.dtype), ("like", the node whose dtype it takes) or ("same",) for
    a move to the device the values are on already; None for any other node. Refuses a cast ge2 cannot
    follow (to a device named in the code, to a dtype given otherwise)."""
    if node.op != "call_method" or node.target not in _CAST_METHODS or not node.args or \
            not isinstance(node.args[0], torch.fx.Node):
        return None
    fixed = _CAST_METHODS[node.target]
    if node.target == "type" and len(node.args) == 1 and not node.kwargs:  # x.type(): the type's name
        return None
    if isinstance(fixed, torch.dtype):
        return ("dtype", fixed) if len(node.args) == 1 and not node.kwargs else None
    if fixed == "like":
        return ("like", node.args[1]) if len(node.args) == 2 and not node.kwargs else None
    found = []
    for key, a in [(None, a) for a in node.args[1:]] + list(node.kwargs.items()):
        if key in ("non_blocking", "copy", "memory_format"):
            continue
        if isinstance(a, torch.dtype):
            found.append(("dtype", a))
        elif _attribute_of(a, ("dtype",)):
            found.append(("like", a.args[0]))
        elif _attribute_of(a, ("device",)):
            found.append(("same",))
        elif isinstance(a, torch.fx.Node) and key is None and node.target == "to":
            found.append(("like", a))  # x.to(y): y's dtype (and device)
        else:
            raise _refused(f"'{_call_text(node)}' (ge2 follows casts to a dtype, to another value's dtype "
                           f"or device)", node)
    dtypes = [c for c in found if c[0] != "same"]
    if len(dtypes) > 1:
        raise _refused(f"'{_call_text(node)}'", node)
    return dtypes[0] if dtypes else ("same",)


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


_PROBE_ACTS = {name: f for name, f in TORCH_ACTIVATIONS.items() if name not in ("", "none")}  # ge2's, in PyTorch


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
        w = weight.detach().double()  # the reference in float64 on the weight's device
        for nk in (w, w.t()):  # the weight as [out, in], or transposed into it
            x = torch.randn(2, 3, nk.shape[1], generator=torch.Generator().manual_seed(11))
            x = x.to(device=weight.device, dtype=weight.dtype)
            try:
                y = m(x)
            except Exception:  # not this layout's input width, or not a function of one tensor
                continue
            if not isinstance(y, Tensor) or y.shape != x.shape[:-1] + nk.shape[:1]:
                continue
            want = x.double() @ nk.t() + (0 if bias is None else bias.detach().double())
            error, scale = (y.double() - want).norm().item(), want.norm().item()
            # Finite norms only: an overflowing one (weights of 1e38) would make any output match.
            if math.isfinite(error) and 0 < scale < math.inf and error <= tolerance * scale:
                found.append(nk is w)
    if len(found) != 1:  # neither layout, or both (a weight the probe cannot tell apart)
        return None
    return (weight if found[0] else weight.t()).detach().contiguous(), bias


def _fp8_linear(m: torch.nn.Module) -> Optional[tuple]:
    """(QuantizedWeight, bias) for an FP8 linear module (Hugging Face's FP8Linear of DeepSeek-V3 /
    Qwen3 FP8 checkpoints: an e4m3 `weight` [out, in] with `weight_scale_inv` per `block_size`
    block; fbgemm's and compressed-tensors' with `weight_scale` per output channel or tensor; each
    dequantizes as weight * scale), read from its tensors without running it; None for a module
    whose weight is not e4m3. Raises ge2.InvalidArgumentError for an e4m3 weight whose scales
    ge2 cannot place. What ge2 computes is x @ (weight * scale).T + bias with x as given: such
    modules may quantize x too (W8A8), so the two differ by that rounding."""
    f = "ge2.torch.convert"
    weight = getattr(m, "weight", None)
    if not isinstance(weight, Tensor) or weight.dtype != getattr(torch, "float8_e4m3fn", None):
        return None
    out, inp = weight.shape if weight.dim() == 2 else (0, 0)
    scale_name = next((n for n in ("weight_scale_inv", "weight_scale") if isinstance(getattr(m, n, None), Tensor)),
                      None)
    bias = getattr(m, "bias", None)
    if weight.dim() != 2 or scale_name is None or (bias is not None and tuple(bias.shape) != (out,)):
        raise invalid(f, f"module {type(m).__name__} has an e4m3 weight of shape {tuple(weight.shape)} without "
                         f"what ge2 reads with it (a 2-D weight, weight_scale_inv or weight_scale, a bias [out])")
    scale = getattr(m, scale_name).detach().to("cpu", torch.float32).contiguous()
    block = getattr(m, "block_size", None)
    codes = weight.detach().to("cpu").contiguous().view(torch.uint8)
    if scale.numel() == 1:
        q = QuantizedWeight(codes, scale.reshape(1), None, None)
    elif tuple(scale.shape) in ((out,), (out, 1)):
        q = QuantizedWeight(codes, scale.reshape(-1), None, 0)
    elif block is not None and len(block) == 2 and scale.dim() == 2 and \
            tuple(scale.shape) == (-(-out // int(block[0])), -(-inp // int(block[1]))):
        q = QuantizedWeight(codes, scale, (int(block[0]), int(block[1])), None)
    else:
        raise invalid(f, f"module {type(m).__name__}: {scale_name} of shape {tuple(scale.shape)} (block_size "
                         f"{block}) is not one scale, one per output channel ({out}) nor one per block of "
                         f"the weight [{out}, {inp}]")
    return q, None if bias is None else bias.detach()


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


def _infer_widths(r: Recipe, fixed: dict) -> None:
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


def _drop_cut_layers(r: Recipe, cut: set) -> None:
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


def _drop_default_checks(graph) -> None:
    """Removes the checks fx adds for arguments traced at their default (that a call passes that
    value: a converted module takes no such argument), leaving their placeholders unread."""
    checks = (torch._assert, getattr(torch.fx._symbolic_trace, "_assert_is_none", None))
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.target in checks:
            operands = node.all_input_nodes
            graph.erase_node(node)
            for operand in operands:
                if operand.op == "call_function" and operand.target is operator.eq and not operand.users:
                    graph.erase_node(operand)


def trace(module: torch.nn.Module, dtype: Optional[torch.dtype] = None) -> Recipe:
    """The recipe of `module`; `dtype`: the one it computes in when all its weights are e4m3 (FP8
    modules; else their parameters' dtype, which it must then equal)."""
    import torch.fx

    _refuse_hooks(module)
    if _fp8_linear(module) is not None:  # one FP8 layer: read as a child, its forward never traced
        module = torch.nn.Sequential(module)

    # Modules that are neither torch.nn's nor containers, recognized by evaluating them (before
    # tracing: a module called while fx traces would be traced): path -> ("act", name) or
    # ("linear", weight [out, in], bias).
    plain = torch.fx.Tracer()
    recognized = {}
    for path, m in module.named_modules():
        fp8 = _fp8_linear(m) if path else None  # read, never run: its forward may need a GPU kernel
        if fp8 is not None:
            recognized[path] = ("linear", *fp8)
        elif path and not plain.is_leaf_module(m, path):
            try:
                act = _probed_activation(m)
                linear = None if act is not None else _probed_linear(m)
            except Exception:  # not a function of one tensor, or parameters it cannot read: traced as it is
                act = linear = None
            if act is not None or linear is not None:
                recognized[path] = ("act", act) if act is not None else ("linear", *linear)

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, path):
            # A parametrized nn.Linear (weight_norm, orthogonal, ...): its weight, read at conversion,
            # is what the parametrization computes.
            return path in recognized or super().is_leaf_module(m, path) or \
                isinstance(m, torch.nn.Linear) and torch.nn.utils.parametrize.is_parametrized(m)

    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.device.type == "meta":
            raise invalid("ge2.torch.convert", f"'{name}' is on the meta device (a shape without values); load "
                                               f"the module's weights first")
    tracer = Tracer()
    try:
        # forward's arguments with a default that is not a tensor (scale=1.0, mask=None) take it,
        # as a call with the input alone does: fx folds them into the graph.
        defaults = {p.name: p.default for p in inspect.signature(module.forward).parameters.values()
                    if p.default is not inspect.Parameter.empty and not isinstance(p.default, Tensor) and
                    p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        graph = tracer.trace(module, concrete_args=defaults or None)
        _drop_default_checks(graph)
        traced = torch.fx.GraphModule(module, graph)
    except Exception as e:  # data-dependent control flow and the like
        raise invalid("ge2.torch.convert", f"torch.fx cannot trace the module ({type(e).__name__}: {e})") from e
    r = Recipe()
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
    piece_of = {}  # a piece cut from a layer's output (a view of it in PyTorch) -> that output's node
    taken = {}  # id of a tensor taken -> (its constant's name, the tensor, kept alive so ids stay unique)
    casts = {}  # cast node -> what it casts to (_cast_of); read once the module's dtype is known
    linear_nodes = set()  # nodes a linear step computes: in the module's dtype whatever they read
    output_node = []  # the node forward returns

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
        r.constants[name] = tensor if isinstance(tensor, QuantizedWeight) else tensor.detach().to("cpu", copy=True)
        taken[id(tensor)] = (name, tensor)
        return name

    derived = {}  # (id of a parameter, how) -> (the parameter, what `how` makes of it)

    def derive(t, how):
        """t.t(), t.flatten() or -t, one object per parameter and kind, so that a parameter read
        twice the same way is one constant (the map keeps t alive: its id stays its own)."""
        key = (id(t), how)
        if key not in derived:
            u = t.t() if how == "t" else t.reshape(-1) if how == "flat" else -t
            derived[key] = (t, u.detach())
            if how == "t":  # and the transpose's transpose is t itself
                derived[(id(derived[key][1]), "t")] = (derived[key][1], t)
        return derived[key][1]

    def transpose(t):
        return derive(t, "t")

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
        if op == "sub" and e.args[1] is tensors[0]:  # c - v = c + (-v)
            op, src = "add", negated(src, e)
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
            t = derive(t, "neg")
        kind = "mul_by" if target in _MULS else "add_by"
        out = new_slot(node)
        rank[out] = max(rank.get(src, 1), t.dim())
        if t.numel() == 1:
            r.steps.append((kind, node.name, out, src, float(t.detach().reshape(()).item())))
            return
        name = constant(p_node.target, derive(t, "flat"))
        need_width(src, t.shape[-1], node)
        fixed[out] = t.shape[-1]
        r.steps.append((kind, node.name, out, src, name))

    def sliced_linear(node, src, start, stop):
        """A linear step computing columns [start, stop) of the linear output `src`: its weight's
        rows and bias's entries in that range (Phi-3's fused gate_up_proj, cut by chunk)."""
        _, _, _, x, weight, bias = r.steps[producer[src]]
        if stop <= start:  # an empty piece (split sections of 0): no step; reading it is refused
            return
        if isinstance(r.constants[weight], QuantizedWeight):
            raise _refused("a piece of an FP8 layer's output (its e4m3 weight cut by rows)", node)
        cut.add(src)
        names = [None if name is None else constant(f"{name}_{start}_{stop}", r.constants[name][start:stop])
                 for name in (weight, bias)]
        out = new_slot(node)
        linear_nodes.add(node)
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
        if 0 in weight.shape:
            raise _refused(f"a linear layer of {weight.shape[1]} inputs and {weight.shape[0]} outputs (ge2's "
                           f"layers have at least one of each)", node)
        src = value_of(x, node)
        need_width(src, weight.shape[1], node)
        w = constant(prefix + "_weight", weight)
        b = None if bias is None else constant(prefix + "_bias", bias)
        out = new_slot(node)
        linear_nodes.add(node)
        fixed[out] = weight.shape[0]
        producer[out] = len(r.steps)
        r.steps.append(("linear", node.name, out, src, w, b))

    def matrix(p_node, node):
        """The 2-D parameter `p_node` names, the weight of the product `node` computes."""
        t = params[p_node]
        if not isinstance(t, Tensor) or t.dim() != 2:
            raise _refused(f"'{_call_text(node)}' with a parameter of shape {tuple(getattr(t, 'shape', ()))} "
                           f"(ge2 takes a 2-D one)", node)
        return t

    def visit(node):
        if node.op in ("call_module", "call_function", "call_method") and _flattens_rows(node, traced):
            src = node.args[0]
            if src.op != "placeholder":
                raise _refused(f"'{_call_text(node) if node.op != 'call_module' else node.target}' flattening a "
                               f"value that is not the module's input (ge2 keeps the rows of the values inside)", node)
            r.flatten_input = True
            slot[node] = value_of(src, node)
            return
        if node.op in ("call_function", "call_method") and _reads_size(node):  # read by a flatten
            return
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
            if _attribute_of(node, ("dtype", "device")):  # read by the cast that names it
                return
            cast = _cast_of(node)
            if cast is not None:  # the values it casts; its dtype is checked at the end (casts)
                casts[node] = cast
                if node.args[0] in params:
                    params[node] = params[node.args[0]]
                else:
                    slot[node] = value_of(node.args[0], node)
                    aliasing.add(node)
                return
            if target is torch.einsum:  # a linear layer written as an einsum
                operands = list(node.args[1:]) if len(node.args) != 2 or not isinstance(node.args[1], (list, tuple)) \
                    else list(node.args[1])
                found = _einsum_linear(node.args[0]) if node.args and isinstance(node.args[0], str) and \
                    not node.kwargs and len(operands) == 2 else None
                w = None if found is None else operands[1 - found[0]]
                if found is None or w not in params or operands[found[0]] in params:
                    raise _refused(f"'{_call_text(node)}' (ge2 takes an einsum of a value and a 2-D parameter that is "
                                   f"a linear layer, like '...i,oi->...o')", node)
                t = matrix(w, node)
                linear_step(node, operands[found[0]], t if found[1] else transpose(t), None, node.name)
                return
            if target is torch.addmm or method and node.target == "addmm":  # bias + x @ w
                named = dict(zip(("input", "mat1", "mat2"), node.args), **node.kwargs)
                if set(named) - {"beta", "alpha"} != {"input", "mat1", "mat2"} or \
                        named.get("beta", 1) != 1 or named.get("alpha", 1) != 1 or \
                        named["input"] not in params or named["mat2"] not in params or named["mat1"] in params:
                    raise _refused(f"'{_call_text(node)}' (ge2 takes torch.addmm(bias, x, w) with parameters bias "
                                   f"[out] and w [in, out], beta = alpha = 1)", node)
                linear_step(node, named["mat1"], transpose(matrix(named["mat2"], node)), params[named["input"]],
                            node.name)
                return
            if _transposes(node) and node.args[0] in params:  # w.t(), w.T: a parameter still
                t = params[node.args[0]]
                if not isinstance(t, Tensor) or t.dim() != 2:
                    raise _refused(f"transposing '{node.args[0].target}' of shape {tuple(getattr(t, 'shape', ()))}",
                                   node)
                params[node] = transpose(t)
                return
            if node.target in _MATMULS:  # x @ w with a parameter w [in, out]: a linear layer
                x, w = (list(node.args) + [None, None])[:2]
                if len(node.args) != 2 or node.kwargs or w not in params or x in params:
                    raise _refused(f"'{_call_text(node)}' (ge2 multiplies a value by a 2-D parameter, x @ w)", node)
                linear_step(node, x, transpose(matrix(w, node)), None, w.target if w.op == "get_attr" else w.name)
                return
            split = node.target if method and node.target in _SPLITS else \
                next((k for k, f in _SPLITS.items() if target is f), None)
            if split is not None:
                src = node.args[0] if node.args else None
                if not isinstance(src, torch.fx.Node) or src in expression or slot.get(src) not in producer:
                    raise _refused(f"'{split}' of a value that is not a linear layer's output", node)
                pieces[node] = (slot[src], _split_ranges(node, split, node.args[1:], node.kwargs,
                                                         fixed[slot[src]]))
                piece_of[node] = src
                return
            if target is operator.getitem and node.args[0] in pieces:
                src, ranges = pieces[node.args[0]]
                index = node.args[1]
                if not isinstance(index, int) or not -len(ranges) <= index < len(ranges):
                    raise _refused(f"piece {index!r} of {len(ranges)}", node)
                sliced_linear(node, src, *ranges[index])
                piece_of[node] = piece_of[node.args[0]]
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
                piece_of[node] = node.args[0]
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
            output_node.append(node.args[0])

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
            whole = piece_of.get(name)  # changing a piece changes the layer's output it is a view of
            later = [u for u in name.users if position[u] > position[node]]
            later_whole = [] if whole is None else [u for u in whole.users if position[u] > position[node]]
            if later_whole:
                raise _refused(f"'{_call_text(node) if node.op != 'call_module' else node.target}' changes "
                               f"'{name.name}', a view of '{whole.name}', in place, which node "
                               f"'{min(later_whole, key=position.get).name}' reads afterwards", node)
            if not later:
                continue
            if any(n in casts for n in group):  # PyTorch copies on a cast that changes the dtype, else aliases
                raise _refused(f"'{_call_text(node) if node.op != 'call_module' else node.target}' changes in place "
                               f"a value that is cast (or what it was cast from), which node "
                               f"'{min(later, key=position.get).name}' reads afterwards", node)
            # Elementwise code computed from the value before the change but read after it is
            # evaluated now, while its computation still reads the old value; a cut layer's pieces
            # were taken before the change.
            pending = [e for e in expression if e not in slot and position[e] < position[node] and
                       any(position[u] > position[node] for u in e.users) and
                       (e is name or name in computation(e, None))] if name in expression else []
            if name in expression and not (all_resolved(pending, node) and all_resolved([name], node)) or \
                    name in slot and slot[name] in cut or not all_resolved([node], node):
                raise _refused(f"'{_call_text(node) if node.op != 'call_module' else node.target}' changes "
                               f"'{name.name}' in place, which node '{min(later, key=position.get).name}' reads "
                               f"afterwards", node)
            expression.pop(name, None)  # from now on a value of its own
            slot[name] = slot[node]

    if r.flatten_input:
        inputs = [n for n in traced.graph.nodes if n.op == "placeholder" and n.users]
        flatten = [u for u in inputs[0].users if _flattens_rows(u, traced)]
        others = [u for u in inputs[0].users if u not in flatten and not _reads_size(u)]
        if len(inputs) != 1 or others:
            what = f"input '{inputs[1].target}' beside it" if len(inputs) != 1 else f"node '{others[0].name}' reading it"
            raise invalid("ge2.torch.convert", f"the module flattens its input (node '{flatten[0].name}') and has "
                                               f"{what} unflattened: ge2 takes a flattened input as the only one, "
                                               f"read flattened only")
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
    dtypes = {t.dtype for t in r.constants.values() if not isinstance(t, QuantizedWeight)}
    if dtype is not None:
        dtypes.add(dtype)
    elif not dtypes:  # FP8 weights only: their checkpoints compute in bfloat16
        dtypes = {torch.bfloat16}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPE_CODES:
        raise invalid("ge2.torch.convert", f"the module's parameters (and dtype) have dtypes "
                                           f"{sorted(map(str, dtypes))}; ge2 needs one of float16, bfloat16, "
                                           f"float32 for all (FP8 weights excepted)")
    r.dtype = next(iter(dtypes))
    r.output_dtype = _cast_dtypes(r.dtype, traced, casts, linear_nodes, params).get(output_node[0])
    if r.output_dtype == r.dtype:
        r.output_dtype = None
    return r


def _cast_dtypes(native: torch.dtype, traced, casts: dict, linear_nodes: set, params: dict) -> dict:
    """Each node's dtype in PyTorch: the module's, or float32 where a cast made it so (x.float() in a
    16-bit module, and what is computed from it until a cast back). ge2 computes such values in the
    module's dtype, its epilogues in float32 anyway, so a cast up and back costs at most a rounding per
    step; a cast to any other dtype is refused."""
    dtype = {}
    for n in traced.graph.nodes:
        if n in casts:
            kind, *what = casts[n]
            source = what[0] if kind == "like" else n.args[0]
            to = what[0] if kind == "dtype" else \
                getattr(params[source], "dtype", native) if source in params else dtype.get(source, native)
            if to not in (native, torch.float32):
                raise _refused(f"'{_call_text(n)}', a cast to {to} in a module that computes in {native} (ge2 "
                               f"follows casts to the module's dtype and up to float32)", n)
            dtype[n] = to
        elif n in linear_nodes or n.op in ("placeholder", "get_attr"):
            dtype[n] = native
        else:
            operands = []
            torch.fx.node.map_arg((n.args, n.kwargs), operands.append)
            dtype[n] = torch.float32 if any(dtype.get(a) == torch.float32 for a in operands) else native
    return dtype


def build_graph(r: Recipe, tokens: int, dtype: str, dynamic: bool) -> ge2.Graph:
    g = ge2.Graph()
    value = {s: g.input(name, (tokens, r.width[s]), dtype, dynamic=dynamic) for s, name in r.inputs}
    consts = {}

    def const(name):
        if name not in consts:
            t = r.constants[name]
            if isinstance(t, QuantizedWeight):
                consts[name] = g.quantized_constant(name, t.codes, t.scales.numpy(), scale_axis=t.axis, dtype=dtype,
                                                    block=t.block)
            else:
                consts[name] = g.constant(name, t.contiguous())
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
            # A vector added is a bias: the fusion pass folds it into the GEMM before it (x @ w + b).
            value[out] = (g.bias if kind == "add_by" else g.mul)(value[src], operand)
        elif kind == "add":
            value[out] = g.add(value[args[0]], value[args[1]])
        else:
            value[out] = g.mul(value[args[0]], value[args[1]])
    g.output(value[r.output], "y")
    return g
