"""ge2.torch: the custom operators and nn.Module conversion, against fp64 references computed by
PyTorch from the same weights. CPU always (where torch imports); CUDA when a GPU is present."""
import math
import os

import pytest

try:
    import torch
    import torch.nn.functional as F
except (ImportError, OSError) as e:  # OSError: a torch whose CUDA libraries are missing
    pytest.skip(f"SKIPPED: PyTorch is not importable here ({e})", allow_module_level=True)

import ge2
import ge2.torch as gt
from torch_support import devices, fresh, reference, rel_error

BOUNDS = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


class ResidualGelu(torch.nn.Module):
    def __init__(self, d, h, approximate="none"):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)
        self.approximate = approximate

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class LlamaMLP(torch.nn.Module):  # the gated form as transformers writes it
    def __init__(self, d, h):
        super().__init__()
        self.gate_proj = torch.nn.Linear(d, h, bias=False)
        self.up_proj = torch.nn.Linear(d, h, bias=False)
        self.down_proj = torch.nn.Linear(h, d, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class FunctionalLinear(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(h, d))
        self.b = torch.nn.Parameter(torch.empty(h))

    def forward(self, x):
        return F.relu(F.linear(x, self.w, self.b))


class MethodStyle(torch.nn.Module):  # tensor methods instead of functions
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu()).add(x)


class Sigmoid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).sigmoid()


class NewGELU(torch.nn.Module):  # GELU's tanh form written out, as transformers' "gelu_new"
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class FastGELU(torch.nn.Module):  # transformers' "gelu_fast": the same function, rounded constant
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


class SwishWrittenOut(torch.nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class QuickGELU(torch.nn.Module):  # CLIP's x * sigmoid(1.702 x), written out
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class SharperSwish(torch.nn.Module):  # x * sigmoid(1.5 x): none of ge2's activations
    def forward(self, x):
        return x * torch.sigmoid(1.5 * x)


class Conv1D(torch.nn.Module):  # GPT-2's linear layer: weight [in, out], addmm on flattened rows
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.empty(nx, nf))
        self.bias = torch.nn.Parameter(torch.empty(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2MLP(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(h, d), Conv1D(d, h)
        self.act, self.dropout = NewGELU(), torch.nn.Dropout(0.1)

    def forward(self, hidden_states):
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GatedFastGelu(torch.nn.Module):  # T5's gated-GELU feed-forward, a square Conv1D in front
    def __init__(self, d, h):
        super().__init__()
        self.square = Conv1D(d, d)  # [d, d]: either layout fits; the probe must tell them apart
        self.wi_0, self.wi_1 = torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False)
        self.wo, self.act = torch.nn.Linear(h, d, bias=False), FastGELU()

    def forward(self, x):
        x = self.square(x)
        return self.wo(self.act(self.wi_0(x)) * self.wi_1(x))


class Phi3MLP(torch.nn.Module):  # one fused gate_up_proj, cut by chunk, as transformers writes Phi-3
    def __init__(self, d, h):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(d, 2 * h, bias=False)
        self.down_proj = torch.nn.Linear(h, d, bias=False)
        self.activation_fn = torch.nn.SiLU()

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        return self.down_proj(up_states * self.activation_fn(gate))


class GlmSwiGLU(torch.nn.Module):  # ChatGLM's form: torch.chunk, pieces indexed, biases kept
    def __init__(self, d, h):
        super().__init__()
        self.dense_h_to_4h, self.dense_4h_to_h = torch.nn.Linear(d, 2 * h), torch.nn.Linear(h, d)

    def forward(self, x):
        x = torch.chunk(self.dense_h_to_4h(x), 2, dim=-1)
        return self.dense_4h_to_h(F.silu(x[0]) * x[1])


class InlineActivations(torch.nn.Module):  # activations written into forward, not as modules
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(d, h), torch.nn.Linear(h, h + 3), torch.nn.Linear(h, d)
        self.h = h

    def forward(self, x):
        h = self.fc1(x)
        h = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))  # BERT's gelu function
        g = self.fc2(h)
        a, b = g[..., :self.h], g[..., 3:]  # column ranges of one layer
        return x + self.fc3(F.relu(a * torch.sigmoid(a)) * b)  # SiLU written out, then a step ge2 has


class LayerScale(torch.nn.Module):  # as timm and DINOv2 write it: a parameter vector
    def __init__(self, d):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.empty(d))

    def forward(self, x):
        return x * self.gamma


class ScaledResidual(torch.nn.Module):  # numbers, a 0-d parameter, a buffer, LayerScale
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2, self.ls = torch.nn.Linear(d, h), torch.nn.Linear(h, d), LayerScale(d)
        self.alpha = torch.nn.Parameter(torch.empty(()))
        self.register_buffer("shift", torch.randn(1, d))

    def forward(self, x):
        h = F.gelu(self.fc1(x)) * 2.0 - 0.25
        return x * self.alpha + 0.5 * (self.ls(self.fc2(h / 3)) + self.shift)


class FunctionalDropout(torch.nn.Module):  # F.dropout(training=self.training), copies and views
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2, self.p = torch.nn.Linear(d, h), torch.nn.Linear(h, d), 0.1

    def forward(self, x):
        h = F.dropout(F.gelu(self.fc1(x)), p=self.p, training=self.training)
        kept, same = h.clone(), h.contiguous().detach()
        h.relu_()  # same is h; kept is not
        return self.fc2(kept + same)


class FalconLinear(torch.nn.Linear):  # transformers' Falcon: nn.Linear with its own forward
    def forward(self, input):
        hidden_states = input @ self.weight.T
        return hidden_states if self.bias is None else hidden_states + self.bias


class ReluSquared(torch.nn.Module):  # Nemotron's MLP: relu(x)² written out
    def __init__(self, d, h):
        super().__init__()
        self.up_proj, self.down_proj = FalconLinear(d, h, bias=False), FalconLinear(h, d)

    def forward(self, x):
        return self.down_proj(torch.square(F.relu(self.up_proj(x)))) + F.relu(x) ** 2


class MixedPrecision(torch.nn.Module):  # activations computed in float32, as mixed-precision code writes
    def __init__(self, d, h):
        super().__init__()
        self.gate, self.up, self.down = (torch.nn.Linear(d, h), torch.nn.Linear(d, h, bias=False),
                                         torch.nn.Linear(h, d))

    def forward(self, x):
        gate = self.gate(x).float()
        hidden = (F.silu(gate) * self.up(x).float()).to(x.dtype)
        return (x.float() + self.down(hidden).to(dtype=x.dtype, non_blocking=True)).type_as(x)


class AddmmLayers(torch.nn.Module):  # bias + x @ w as torch.addmm, function and method
    def __init__(self, d, h):
        super().__init__()
        self.w1, self.b1 = torch.nn.Parameter(torch.empty(d, h)), torch.nn.Parameter(torch.empty(h))
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        h = F.gelu(torch.addmm(self.b1, x, self.w1))  # w1 [in, out]
        return self.fc2.bias.addmm(h, self.fc2.weight.t(), beta=1, alpha=1) + x


class RawParameters(torch.nn.Module):  # an MLP written with bare parameters and @
    def __init__(self, d, h):
        super().__init__()
        self.w1, self.b1 = torch.nn.Parameter(torch.empty(d, h)), torch.nn.Parameter(torch.empty(h))
        self.w2, self.w3 = torch.nn.Parameter(torch.empty(d, h)), torch.nn.Parameter(torch.empty(h, d))

    def forward(self, x):
        h = F.gelu(x @ self.w1 + self.b1)  # w1 [in, out]; the add is the GEMM's bias
        return torch.matmul(h, self.w2.T) + F.linear(h, self.w3.t()) + x  # w2 [out, in], w3 [in, out]


def blocks(d, h):
    return {
        "sequential_gelu": torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                               torch.nn.Linear(h, d)),
        "sequential_relu_silu": torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                                                    torch.nn.SiLU(), torch.nn.Linear(h, d), torch.nn.Identity()),
        "residual_gelu_tanh": ResidualGelu(d, h, "tanh"),
        "residual_gelu": ResidualGelu(d, h),
        "llama_mlp": LlamaMLP(d, h),
        "functional": FunctionalLinear(d, h),
        "methods": MethodStyle(d, h),
        "gpt2_mlp": GPT2MLP(d, h),
        "gated_fast_gelu": GatedFastGelu(d, h),
        "swish_written_out": torch.nn.Sequential(torch.nn.Linear(d, h), SwishWrittenOut(), torch.nn.Linear(h, d)),
        "phi3_mlp": Phi3MLP(d, h),
        "glm_swiglu": GlmSwiGLU(d, h),
        "inline_activations": InlineActivations(d, h),
        "scaled_residual": ScaledResidual(d, h),
        "functional_dropout": FunctionalDropout(d, h),
        "relu_squared": ReluSquared(d, h),
        "quick_gelu": torch.nn.Sequential(torch.nn.Linear(d, h), QuickGELU(), torch.nn.Linear(h, d)),
        "raw_parameters": RawParameters(d, h),
        "mixed_precision": MixedPrecision(d, h),
    }


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(blocks(8, 8)))
def test_converted_blocks_match_fp64(device, dtype, name):
    d, h = 48, 136
    module = fresh(blocks(d, h)[name], dtype, device)
    converted = gt.convert(module)
    assert (converted.in_features, converted.out_features) == (d, h if name == "functional" else d)
    for shape in [(37, d), (2, 5, d), (d,)]:
        x = torch.randn(shape, device=device).to(dtype)
        with torch.no_grad():
            y = converted(x)
        want = reference(module, x)
        assert y.shape == want.shape and y.dtype == dtype and y.device == x.device
        assert rel_error(y, want) <= BOUNDS[dtype], (name, shape)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("form", ["phi3_mlp", "glm_swiglu"])
def test_a_cut_gate_up_layer_is_joined_into_one_gated_gemm(device, form):
    module = fresh(blocks(32, 48)[form], torch.float16, device)
    converted = gt.convert(module)
    x = torch.randn(5, 32, device=device).half()
    steps = converted.plan_for(x).describe()["steps"]
    ops = [s["op"] for s in steps]
    # Both halves in one GEMM; the gated product in its epilogue where the chosen kernel has
    # one (cpu_ref, CUTLASS), else in a gated_mul pass after it (cuBLASLt, chosen untuned).
    gemms = [op for op in ops if op in ("gemm", "gemm_bias_act")]
    assert len(gemms) == 2 and ops[0] == gemms[0] and ops[1:-1] in ([], ["gated_mul"]), steps
    assert (steps[0]["problem"]["n"], steps[0]["problem"]["k"]) == (96, 32)
    if len(ops) == 2:
        assert "silu(gate) * up" in steps[0]["gated_epilogue"]
    if device == "cpu":
        assert len(ops) == 2
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float16]


class RandomBlock(torch.nn.Module):
    """A module written as a random program over its input: nn.Linear layers (with or without
    bias; called, as F.linear or as an einsum) reading any earlier value, activations as modules,
    functions or methods, + and * (as operators, functions or methods) between values of one width,
    Identity and Dropout, casts up to float32 and back. What convert must read from torch.fx however
    a user happened to write it."""

    def __init__(self, rng, d):
        super().__init__()
        self.program, self.layers, self.acts = [], torch.nn.ModuleList(), torch.nn.ModuleList()
        self.vectors = torch.nn.ParameterList()
        widths, multiplies = [d], 0
        lifted = [False]  # values a [1, w] parameter broadcast to rank 2 (an in-place step cannot take them)
        the_input = [True]  # values that are the input tensor itself (Identity): never changed in place
        cast = False  # after a cast no step changes a value in place (convert refuses: copy or alias?)
        for _ in range(int(rng.integers(1, 9))):
            kind = str(rng.choice(["linear", "linear", "act", "combine", "identity", "pieces", "number", "vector",
                                   "in_place", "cast"]))
            src = len(widths) - 1 if rng.random() < 0.6 else int(rng.integers(0, len(widths)))
            if kind == "pieces":  # one layer's output cut into two values of one width
                out = int(rng.integers(1, 20))
                self.layers.append(torch.nn.Linear(widths[src], 2 * out, bias=bool(rng.random() < 0.7)))
                self.program.append(("pieces", src, len(self.layers) - 1, str(rng.choice(["chunk", "split", "slice"]))))
                widths += [out, out]
            elif kind == "linear" or src == 0 and kind != "combine":
                out = int(rng.integers(1, 40))
                self.layers.append(torch.nn.Linear(widths[src], out, bias=bool(rng.random() < 0.7)))
                self.program.append(("linear", src, len(self.layers) - 1,
                                     str(rng.choice(["module", "module", "function", "einsum"]))))
                widths.append(out)
            elif kind == "act":
                style = str(rng.choice(["module", "function", "method", "inline"]))
                name = str(rng.choice({"method": ["relu"], "function": ["relu", "gelu", "gelu_tanh", "silu"]}.get(
                    style, ["relu", "gelu", "gelu_tanh", "silu", "quick_gelu"])))
                if style == "module":
                    self.acts.append({"relu": torch.nn.ReLU(), "gelu": torch.nn.GELU(), "silu": torch.nn.SiLU(),
                                      "gelu_tanh": torch.nn.GELU(approximate="tanh"), "quick_gelu": QuickGELU()}[name])
                self.program.append(("act", src, style, name, len(self.acts) - 1))
                widths.append(widths[src])
            elif kind == "number":  # v + c, c * v, v - c, v / c, as operators or methods
                op, c = str(rng.choice(["add", "mul", "sub", "div"])), float(rng.choice([-1.5, 0.5, 3.0]))
                self.program.append(("number", src, op, c, bool(rng.random() < 0.5)))
                widths.append(widths[src])
            elif kind == "vector":  # a parameter [w] or [1, w] added or multiplied along the last dimension
                shape = (widths[src],) if rng.random() < 0.5 else (1, widths[src])
                self.vectors.append(torch.nn.Parameter(torch.empty(shape)))
                self.program.append(("vector", src, str(rng.choice(["add", "mul"])), len(self.vectors) - 1))
                widths.append(widths[src])
            elif kind == "cast":  # up to float32 and back: an activation computed there, or nothing
                form = str(rng.choice(["activation", "like_input", "type_as"]))
                self.program.append(("cast", src, form, str(rng.choice(["relu", "gelu", "silu"]))))
                widths.append(widths[src])
                cast = True
            elif kind == "in_place" and not the_input[src] and not cast:  # changes an earlier value: later reads see it
                how = str(rng.choice(["relu_", "mul_", "add_", "relu module"]))
                if how == "relu module":
                    self.acts.append(torch.nn.ReLU(inplace=True))
                partners = [i for i, w in enumerate(widths) if w == widths[src] and (lifted[src] or not lifted[i])]
                self.program.append(("in_place", src, how, int(rng.choice(partners)), len(self.acts) - 1))
                widths.append(widths[src])
            elif kind == "combine" or kind == "in_place":
                partners = [i for i, w in enumerate(widths) if w == widths[src]]
                other = int(rng.choice(partners))
                op = "mul" if rng.random() < 0.4 and multiplies < 2 else str(rng.choice(["add", "sub"]))
                multiplies += op == "mul"
                self.program.append((op, src, other, str(rng.choice(["operator", "function", "method"]))))
                widths.append(widths[src])
            else:
                self.acts.append(torch.nn.Identity() if rng.random() < 0.5 else torch.nn.Dropout(0.25))
                self.program.append(("module", src, len(self.acts) - 1))
                widths.append(widths[src])
            step = self.program[-1]
            sources = [step[1]] + ([step[2]] if step[0] in ("add", "mul", "sub") else []) + \
                ([step[3]] if step[0] == "in_place" else [])
            lift = any(lifted[i] for i in sources) or step[0] == "vector" and self.vectors[step[3]].dim() == 2
            lifted += [lift] * (len(widths) - len(lifted))
            the_input += [step[0] == "module" and the_input[src]] * (len(widths) - len(the_input))
        if not any(step[0] == "linear" for step in self.program):  # convert needs a layer to fix the width
            self.layers.append(torch.nn.Linear(widths[-1], d))
            self.program.append(("linear", len(widths) - 1, len(self.layers) - 1, "module"))
            widths.append(d)

    def forward(self, x):
        values = [x]
        for step in self.program:
            kind, src = step[0], values[step[1]]
            if kind == "linear":
                layer = self.layers[step[2]]
                if step[3] == "module":
                    values.append(layer(src))
                elif step[3] == "function":
                    values.append(F.linear(src, layer.weight, layer.bias))
                else:
                    y = torch.einsum("...i,oi->...o", src, layer.weight)
                    values.append(y if layer.bias is None else y + layer.bias)
            elif kind == "cast":
                _, _, form, name = step
                if form == "activation":
                    values.append({"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[name](src.float()).to(src.dtype))
                elif form == "like_input":
                    values.append(src.to(values[0].dtype))
                else:
                    values.append(src.float().type_as(src))
            elif kind == "pieces":
                layer = self.layers[step[2]]
                y, half = layer(src), layer.out_features // 2
                if step[3] == "chunk":
                    first, second = y.chunk(2, dim=-1)
                elif step[3] == "split":
                    first, second = torch.split(y, half, dim=-1)
                else:
                    second, first = y[..., :half], y[..., half:]
                values += [first, second]
            elif kind == "number":
                _, _, op, c, method = step
                if method:
                    values.append(getattr(src, op)(c))
                else:
                    values.append({"add": lambda: src + c, "mul": lambda: c * src, "sub": lambda: src - c,
                                   "div": lambda: src / c}[op]())
            elif kind == "vector":
                v = self.vectors[step[3]]
                values.append(src + v if step[2] == "add" else v * src)
            elif kind == "act":
                _, _, style, name, index = step
                if style == "module":
                    values.append(self.acts[index](src))
                elif style == "method":
                    values.append(src.relu())
                elif style == "inline":
                    values.append(INLINE[name](src))
                else:
                    values.append(F.gelu(src, approximate="tanh") if name == "gelu_tanh" else
                                  {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[name](src))
            elif kind in ("add", "mul", "sub"):
                other, style = values[step[2]], step[3]
                if style == "operator":
                    values.append({"add": lambda: src + other, "mul": lambda: src * other,
                                   "sub": lambda: src - other}[kind]())
                elif style == "function":
                    values.append(getattr(torch, kind)(src, other))
                else:
                    values.append(getattr(src, kind)(other))
            elif kind == "in_place":
                _, _, how, other, index = step
                if how == "relu module":
                    values.append(self.acts[index](src))
                elif how == "relu_":
                    values.append(src.relu_())
                else:  # by a number or by another value (itself included)
                    values.append(getattr(src, how)(values[other] if other != step[1] else 0.75))
            else:
                values.append(self.acts[step[2]](src))
        return values[-1]


INLINE = {  # activations as a user writes them into forward
    "relu": lambda x: torch.where(x > 0, x, 0.0),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x * (1 / math.sqrt(2)))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * torch.sigmoid(x),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}


# A deep random program in a 16-bit dtype can lose more than a two-layer block (cancelling adds):
# the bound is the dtype's, or twice PyTorch's own error running the module in that dtype.
RANDOM_BOUNDS = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("seed", range(int(os.environ.get("GE2_RANDOM_MODULES", "32"))))
def test_random_modules_convert_and_match_fp64(device, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    dtype = [torch.float32, torch.float16, torch.bfloat16][seed % 3]
    d = int(rng.integers(1, 40))
    module = fresh(RandomBlock(rng, d), dtype, device)
    converted = gt.convert(module, dynamic=bool(seed % 2))
    for shape in [(int(rng.integers(1, 70)), d), (2, int(rng.integers(1, 9)), d), (d,)]:
        x = torch.randn(shape, device=device).to(dtype)
        with torch.no_grad():
            y, own = converted(x), module(x)
        want = reference(module, x)
        assert y.shape == want.shape and y.dtype == dtype
        error, bound = rel_error(y, want), max(RANDOM_BOUNDS[dtype], 2 * rel_error(own, want))
        assert error <= bound, (seed, shape, dtype, error, bound, module.program)


@pytest.mark.parametrize("device", devices())
def test_plans_per_row_count_are_kept_lru(device):
    module = fresh(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()), torch.float32, device)
    converted = gt.convert(module, dynamic=False, max_plans=2)
    for rows in (1, 3, 1, 5, 0):
        x = torch.randn(rows, 16, device=device)
        with torch.no_grad():
            y = converted(x)
        assert y.shape == (rows, 32)
        if rows:
            assert rel_error(y, reference(module, x)) <= 1e-5
    assert len(converted._plans) == 2
    plan = converted.plan_for(torch.randn(5, 16, device=device))
    kernels = [s.get("kernel") for s in plan.describe()["steps"]]
    assert kernels and all(kernels)


@pytest.mark.parametrize("device", devices())
def test_one_dynamic_plan_runs_every_token_count_and_grows_its_bound(device):
    """By default one plan per device: token counts 1..70 run through the first plan (bound 64,
    then 128 when 65 comes); 300 tokens double the bound again to 512."""
    module = fresh(torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.GELU(), torch.nn.Linear(48, 16)),
                   torch.float32, device)
    converted = gt.convert(module)
    first = None
    for rows in list(range(1, 71)) + [300, 3]:
        x = torch.randn(rows, 16, device=device)
        with torch.no_grad():
            y = converted(x)
        assert rel_error(y, reference(module, x)) <= 1e-5, rows
        first = first or converted.plan_for(x)
    assert len(converted._plans) == 1
    plan = converted.plan_for(torch.randn(3, 16, device=device))
    assert plan.max_extent == 512 and first.max_extent == 64
    assert plan.describe()["dynamic"]["buckets"][-1]["last"] == 512
    x = torch.randn(2, 5, 16, device=device)  # leading dimensions flattened into 10 tokens
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= 1e-5


def test_a_module_of_its_own_tuning_mode_uses_its_own_context():
    module = fresh(torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.SiLU()), torch.float32, "cpu")
    converted = gt.convert(module, tune="off")
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= 1e-5
    assert list(converted._contexts) == [("cpu", 0)]
    assert converted._contexts[("cpu", 0)] is not gt.context_for("cpu")


def test_weights_are_taken_at_conversion():
    module = fresh(torch.nn.Sequential(torch.nn.Linear(16, 8)), torch.float32, "cpu")
    x = torch.randn(4, 16)
    want = reference(module, x)
    converted = gt.convert(module)
    with torch.no_grad():
        module[0].weight.add_(1.0)
        assert rel_error(converted(x), want) <= 1e-5


@pytest.mark.parametrize("device", devices())
def test_torch_compile_traces_without_graph_break(device):
    module = fresh(LlamaMLP(32, 64), torch.float32, device)
    converted = gt.convert(module)
    compiled = torch.compile(converted, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(9, 32, device=device)
    with torch.no_grad():
        y = compiled(x)
    assert rel_error(y, reference(module, x)) <= 1e-5

    def f(a, w, b):
        return gt.linear(a, w, b, act="gelu") * 2

    a, w, b = torch.randn(3, 7, 32, device=device), torch.randn(24, 32, device=device), torch.randn(24, device=device)
    got = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(a, w, b)
    assert rel_error(got, 2 * F.gelu(F.linear(a.double(), w.double(), b.double()))) <= 1e-5


@pytest.mark.parametrize("device", devices())
def torch_act(t, act):
    return {None: t, "relu": F.relu(t), "gelu": F.gelu(t), "silu": F.silu(t), "gelu_tanh": F.gelu(t, approximate="tanh"),
            "quick_gelu": t * torch.sigmoid(1.702 * t)}[act]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu", "quick_gelu"])
def test_linear_and_one_shot_operator_match_fp64(device, act):
    dtype = torch.float16 if device == "cuda" else torch.float32
    x = torch.randn(3, 11, 40, device=device).to(dtype)
    w = (torch.randn(24, 40, device=device) / 6).to(dtype)
    b = torch.randn(24, device=device).to(dtype)
    want = F.linear(x.double(), w.double(), b.double())
    want = torch_act(want, act)
    assert rel_error(gt.linear(x, w, b, act=act), want) <= BOUNDS[dtype] * 3
    a, bt = torch.randn(2, 40, 9, device=device).to(dtype), torch.randn(2, 13, 40, device=device).to(dtype)
    got = gt.gemm_bias_act(a, bt, None, act, trans_a=True, trans_b=True, alpha=0.5)
    want = 0.5 * a.double().transpose(1, 2) @ bt.double().transpose(1, 2)
    want = torch_act(want, act)
    assert got.shape == (2, 9, 13) and rel_error(got, want) <= BOUNDS[dtype] * 3
    empty_k = gt.linear(torch.randn(5, 0, device=device).to(dtype), torch.randn(6, 0, device=device).to(dtype), b[:6],
                        act=act)
    assert rel_error(empty_k, torch_act(b[:6], act).double().expand(5, 6)) <= 1e-3


@pytest.mark.parametrize("device", devices())
def test_one_shot_signature_cache_sees_new_data_and_layouts(device):
    # The second call of a signature skips the binding's checks: it must still read the new
    # tensors, and a call whose tensors are not dense (or of another dtype) must take the
    # checked path.
    w, b = torch.randn(24, 40, device=device), torch.randn(24, device=device)
    for _ in range(3):
        x = torch.randn(7, 40, device=device)
        want = F.relu(F.linear(x.double(), w.double(), b.double()))
        assert rel_error(gt.linear(x, w, b, act="relu"), want) <= 1e-5
    xt, wt = torch.randn(40, 7, device=device).T, torch.randn(40, 24, device=device).T
    assert rel_error(gt.linear(xt, wt, b), F.linear(xt.double(), wt.double(), b.double())) <= 1e-5
    with pytest.raises(TypeError, match="argument 'bias' is float16"):
        gt.linear(x, w, b.half())
    with pytest.raises(TypeError, match="argument 'b' is bfloat16"):
        gt.linear(x, w.bfloat16(), b)


@pytest.mark.parametrize("device", devices())
def test_repeated_eager_calls_skip_the_checks_but_not_a_changed_argument(device, monkeypatch):
    # An eager call whose tensors' signatures (dtype, device, shape, strides, requires_grad), scalar
    # arguments and grad mode match a call checked before runs the stored GEMM on the new pointers;
    # anything else is checked again.
    checked = []
    real = gt._gemm_bias_act_run
    monkeypatch.setattr(gt, "_gemm_bias_act_run", lambda *args: checked.append(1) or real(*args))
    w, b = torch.randn(24, 40, device=device), torch.randn(24, device=device)
    for _ in range(3):  # rank 3: the rows of x are A in place
        x = torch.randn(2, 7, 40, device=device)
        want = F.gelu(F.linear(x.double(), w.double(), b.double()))
        got = gt.linear(x, w, b, act="gelu")
        assert got.shape == (2, 7, 24) and rel_error(got, want) <= 1e-5
    assert len(checked) == 1
    x = torch.randn(2, 7, 40, device=device)
    for act in ("relu", None):  # another activation: checked once, then remembered
        for _ in range(2):
            want = F.linear(x.double(), w.double(), b.double())
            assert rel_error(gt.linear(x, w, b, act=act), F.relu(want) if act else want) <= 1e-5
    assert len(checked) == 3
    xt = torch.randn(2, 40, 7, device=device).transpose(1, 2)  # x's shape, other strides: a copy
    for _ in range(2):
        assert rel_error(gt.linear(xt, w, b), F.linear(xt.double(), w.double(), b.double())) <= 1e-5
    assert len(checked) == 5
    neg = torch._neg_view(x)  # a negated view: its memory holds -x, so it is never taken as is
    for _ in range(2):
        assert rel_error(gt.linear(neg, w, b), F.linear(-x.double(), w.double(), b.double())) <= 1e-5
    assert len(checked) == 7
    a2 = torch.randn(7, 40, device=device)
    for alpha in (0.5, 0.5, 2.0):
        want = alpha * (a2.double() @ w.double().T) + b.double()
        assert rel_error(gt.gemm_bias_act(a2, w, b, trans_b=True, alpha=alpha), want) <= 1e-5
    assert len(checked) == 9
    # The same tensors once a weight requires grad, with grad enabled: refused, not run unchecked.
    wg = w.clone().requires_grad_()
    with torch.no_grad():
        for _ in range(2):
            gt.linear(x, wg, b)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        gt.linear(x, wg, b)
    with pytest.raises(ge2.InvalidArgumentError, match="act"):
        gt.linear(x, w, b, act=["gelu"])  # unhashable: not a key, the checks name it


@pytest.mark.parametrize("device", devices())
def test_operands_of_any_strides_are_taken_as_pytorch_takes_them(device):
    """Broadcast (expand) and every-other-element views, which ge2 cannot read in place, are copied
    first; calls repeated with such operands and fresh values stay right (no remembered fast path
    reads them as dense)."""
    for _ in range(3):
        x = torch.randn(1, 24, device=device).expand(7, 24)  # stride 0
        w = torch.randn(10, 48, device=device)[:, ::2]  # [out, in], every other column
        b = torch.randn(20, device=device)[::2]
        want = x.double() @ w.double().t() + b.double()
        with torch.no_grad():
            assert rel_error(gt.linear(x, w, b), want) <= BOUNDS[torch.float32]
            assert rel_error(gt.linear(x, w, b, act="relu"), want.relu()) <= BOUNDS[torch.float32]
            dense_x = torch.randn(7, 24, device=device)  # only the weight copied
            assert rel_error(gt.linear(dense_x, w), dense_x.double() @ w.double().t()) <= BOUNDS[torch.float32]
            a3 = torch.randn(5, 24, device=device)
            batch = torch.randn(24, 10, device=device).expand(3, 24, 10)  # one weight over a batch
            got = gt.gemm_bias_act(a3.expand(3, 5, 24), batch)
            assert rel_error(got, (a3.double() @ batch[0].double()).expand(3, 5, 10)) <= BOUNDS[torch.float32]


@pytest.mark.parametrize("device", devices())
def test_operators_pass_opcheck(device):
    x, w, b = torch.randn(6, 16, device=device), torch.randn(10, 16, device=device), torch.randn(10, device=device)
    torch.library.opcheck(torch.ops.ge2.gemm_bias_act.default, (x, w, b, "relu", False, True, 1.0))
    converted = gt.convert(fresh(torch.nn.Sequential(torch.nn.Linear(16, 8)), torch.float32, device))
    torch.library.opcheck(torch.ops.ge2.module_forward.default, (converted._id, [x]))


@pytest.mark.parametrize("device", devices())
def test_plan_function(device):
    g = ge2.Graph()
    x = g.input("x", (12, 20), "f32")
    r = g.input("r", (12, 20), "f32")
    w = torch.randn(20, 20) / 4
    g.output(g.add(g.activation(g.gemm(x, g.constant("w", w), trans_b=True), "silu"), r), "y")
    g.output(g.gemm(x, g.constant("w2", w), trans_b=True), "z")
    fn = gt.PlanFunction(g.compile(gt.context_for(device)))
    assert fn.input_names == ["x", "r"] and fn.output_names == ["y", "z"]
    xs, rs = torch.randn(12, 20, device=device), torch.randn(12, 20, device=device)
    y, z = fn(xs, rs)
    want_z = xs.double() @ w.double().to(device).T
    assert rel_error(y, F.silu(want_z) + rs.double()) <= 1e-5 and rel_error(z, want_z) <= 1e-5
    y2, _ = torch.compile(fn, fullgraph=True, backend="aot_eager")(xs, rs)
    assert torch.equal(y, y2)
    with pytest.raises(ge2.InvalidArgumentError, match="1 inputs given; the plan takes 2"):
        fn(xs)
    # A plan with a dynamic extent: its outputs have the rows of each call.
    g = ge2.Graph()
    x = g.input("x", (64, 20), "f32", dynamic=True)
    g.output(g.activation(g.gemm(x, g.constant("w", w), trans_b=True), "relu"), "y")
    fn = gt.PlanFunction(g.compile(gt.context_for(device)))
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for rows in (1, 5, 64, 37):
        xs = torch.randn(rows, 20, device=device)
        want = (xs.double() @ w.double().to(device).T).relu()
        for f in (fn, compiled):
            y = f(xs)
            assert y.shape == (rows, 20) and rel_error(y, want) <= 1e-5
    with pytest.raises(ge2.InvalidArgumentError, match=r"leading dimension 65 is outside the plan's dynamic "
                                                       r"extent \[1, 64\]"):
        fn(torch.randn(65, 20, device=device))


def test_arguments_that_are_not_tensors_are_refused_by_name():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with torch.no_grad():
        for call, message in [(lambda: gt.linear([1.0] * 8, w), r"ge2.torch.linear: argument 'x' must be a "
                                                                r"torch.Tensor, not builtins.list"),
                              (lambda: gt.linear(x, None), r"argument 'weight' must be a torch.Tensor, not "
                                                           r"builtins.NoneType"),
                              (lambda: gt.linear(x, w, x.numpy()[0, :6]), r"argument 'bias' must be a "
                                                                                 r"torch.Tensor, not numpy.ndarray"),
                              (lambda: gt.gemm_bias_act(x, "w", trans_b=True), r"ge2.torch.gemm_bias_act: "
                                                                               r"argument 'b' must be"),
                              (lambda: gt.convert(torch.nn.Sequential(torch.nn.Linear(8, 6)))(x.numpy()),
                               r"ge2.torch.Ge2Module: input 0 must be a torch.Tensor, not numpy.ndarray")]:
            with pytest.raises(TypeError, match=message):
                call()
    with pytest.raises(TypeError, match=r"input 0 must be a torch.Tensor, not builtins.NoneType"):
        gt.convert(torch.nn.Sequential(torch.nn.Linear(8, 6)))(None)  # checked before the grad rule


def test_bad_modules_and_inputs_are_refused():
    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(self.fc(x))

    with pytest.raises(ge2.InvalidArgumentError, match=r"module 'norm' \(LayerNorm\) at node 'norm' is not supported"):
        gt.convert(Norm())
    with pytest.raises(ge2.InvalidArgumentError, match=r"computation \[sigmoid = sigmoid\(fc\)\] \(none of ge2's "
                                                       r"activations relu, gelu, gelu_tanh, silu, quick_gelu\) at node "
                                                       r"'sigmoid'"):
        gt.convert(Sigmoid())
    # Elementwise code, in a module or not, must compute one of ge2's activations: SharperSwish is
    # traced into and its computation named.
    with pytest.raises(ge2.InvalidArgumentError, match=r"\[mul = mul\(1.5, _0\); sigmoid = sigmoid\(mul\); "
                                                       r"mul_1 = mul\(_0, sigmoid\)\]"):
        gt.convert(torch.nn.Sequential(torch.nn.Linear(8, 8), SharperSwish()))

    class Numbers(torch.nn.Module):  # what a number or a parameter cannot be in a step
        def __init__(self, how):
            super().__init__()
            self.fc, self.how, self.table = torch.nn.Linear(8, 8), how, torch.nn.Parameter(torch.ones(3, 8))

        def forward(self, x):
            y = self.fc(x)
            return {"minus": lambda: 1.0 - y, "zero": lambda: y / 0.0, "table": lambda: y * self.table}[self.how]()

    for how, message in [("minus", r"\[rsub = rsub\(fc, 1.0\)\]|\[sub = sub\(1.0, fc\)\]"),
                         ("zero", r"\[truediv = truediv\(fc, 0.0\)\]"),
                         ("table", r"'mul' with parameter 'table' of shape \(3, 8\) \(ge2 takes one number or a "
                                   r"vector along the last dimension\)")]:
        with pytest.raises(ge2.InvalidArgumentError, match=message):
            gt.convert(Numbers(how))

    with pytest.raises(ge2.InvalidArgumentError, match=r"dropout that drops \(p=0.1, training=True\) at node "
                                                       r"'dropout'"):
        gt.convert(FunctionalDropout(8, 8).train())
    hooked = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())  # hooks: torch.fx does not see them
    handle = hooked[0].register_forward_hook(lambda m, args, out: out * 3)
    with pytest.raises(ge2.InvalidArgumentError, match=r"module '0' \(Linear\) has forward hooks or pre-hooks"):
        gt.convert(hooked)
    handle.remove()
    handle = hooked.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    with pytest.raises(ge2.InvalidArgumentError, match=r"module 'Sequential' \(Sequential\) has forward hooks"):
        gt.convert(hooked)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out)
    try:
        with pytest.raises(ge2.InvalidArgumentError, match="global forward hooks are registered"):
            gt.convert(hooked)
    finally:
        handle.remove()
    gt.convert(hooked)

    class Products(torch.nn.Module):  # products that are no linear layer of the input's rows
        def __init__(self, how):
            super().__init__()
            self.how, self.w, self.v = how, torch.nn.Parameter(torch.ones(8, 8)), torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return {"w @ x": lambda: self.w @ x, "x @ v": lambda: x @ self.v, "x @ x": lambda: x @ x}[self.how]()

    for how, message in [("w @ x", r"'matmul\(w, x\)' \(ge2 multiplies a value by a 2-D parameter, x @ w\)"),
                         ("x @ v", r"'matmul\(x, v\)' with a parameter of shape \(8,\) \(ge2 takes a 2-D one\)"),
                         ("x @ x", r"'matmul\(x, x\)' \(ge2 multiplies a value by a 2-D parameter")]:
        with pytest.raises(ge2.InvalidArgumentError, match=message):
            gt.convert(Products(how))

    class Cut(torch.nn.Module):  # chunk and slices ge2 cannot take from a layer's weight rows
        def __init__(self, how):
            super().__init__()
            self.fc, self.how = torch.nn.Linear(8, 8), how

        def forward(self, x):
            y = self.fc(x)
            if self.how == "tokens":
                return y.chunk(2)[0]
            if self.how == "activation":
                return F.relu(y).chunk(2, dim=-1)[0]
            if self.how == "sections":
                return torch.split(y, [3, 4], dim=-1)[1]
            if self.how == "rows":
                return y[:2]
            return y[..., 6:2]

    for how, message in [("tokens", r"'chunk' along dimension 0 \(ge2 cuts a linear layer's output along its last "
                                    r"dimension, dim=-1\) at node 'chunk'"),
                         ("activation", "'chunk' of a value that is not a linear layer's output at node 'chunk'"),
                         ("sections", r"'split' into sections \[3, 4\] of a value of width 8 at node 'split'"),
                         ("rows", r"index slice\(None, 2, None\) \(ge2 takes columns of a linear layer's output"),
                         ("empty", r"the empty column range \(Ellipsis, slice\(6, 2, None\)\) of a value of width 8")]:
        with pytest.raises(ge2.InvalidArgumentError, match=message):
            gt.convert(Cut(how))

    class ScaledConv1D(Conv1D):  # a weight and a bias, but not x @ weight + bias
        def forward(self, x):
            return 2 * super().forward(x)

    scaled = fresh(ScaledConv1D(8, 12), torch.float32, "cpu")  # one layout fits a width-12 input
    for magnitude in (1, 3e37):  # huge weights overflow the outputs' norms (inf <= tol * inf): no match
        with torch.no_grad():
            scaled.weight.mul_(magnitude)
        with pytest.raises(ge2.InvalidArgumentError, match="is not supported"):
            gt.convert(torch.nn.Sequential(scaled, torch.nn.Linear(8, 8)))

    class Scalable(torch.nn.Module):  # recognized as SiLU with its default, called with another
        def forward(self, x, scale=1.0):
            return scale * x * torch.sigmoid(x)

    class CallsScalable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = torch.nn.Linear(8, 8), Scalable()

        def forward(self, x):
            return self.act(self.fc(x), scale=2.0)

    with pytest.raises(ge2.InvalidArgumentError, match=r"module 'act' \(Scalable\) called with arguments"):
        gt.convert(CallsScalable())
    with pytest.raises(ge2.InvalidArgumentError, match="function 'bilinear' at node 'bilinear'"):
        gt.convert(torch.nn.Bilinear(4, 4, 4))
    with pytest.raises(ge2.InvalidArgumentError, match="widths"):
        gt.convert(_Mismatch())
    with pytest.raises(ge2.InvalidArgumentError, match="Dropout"):
        gt.convert(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train())
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        gt.convert(lambda x: x)
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'tune'"):
        gt.convert(torch.nn.Linear(4, 4), tune="sometimes")
    converted = gt.convert(torch.nn.Linear(8, 4))
    with pytest.raises(ge2.InvalidArgumentError, match=r"last dimension must be 8"):
        with torch.no_grad():
            converted(torch.randn(3, 7))
    with pytest.raises(TypeError, match="torch.float16 but the module's weights are torch.float32"):
        with torch.no_grad():
            converted(torch.randn(3, 8).half())
    with pytest.raises(RuntimeError, match="for inference"):
        converted(torch.randn(3, 8, requires_grad=True))
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'act'"):
        gt.linear(torch.randn(2, 8), torch.randn(4, 8), act="tanh")
    with pytest.raises(ge2.InvalidArgumentError, match="K = 7"):
        gt.gemm_bias_act(torch.randn(2, 8), torch.randn(4, 7), trans_b=True)


class InPlace(torch.nn.Module):  # values changed in place and read again afterwards
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2, self.act = torch.nn.Linear(d, h), torch.nn.Linear(h, d), torch.nn.ReLU(inplace=True)
        self.swish, self.drop = SwishInPlace(), torch.nn.Dropout(0.1)

    def forward(self, x):
        h = self.fc1(x)
        y = self.act(h)  # h is now relu(h)
        z = self.drop(y)  # in eval mode z is y
        h.mul_(0.5)  # and y and z with it
        g = self.fc2(y + h - z * 0.25)
        self.swish(g)  # g is now silu(g)
        g += x
        return g * 2 - x


class SwishInPlace(torch.nn.Module):  # recognized by evaluation only if it left its input alone
    def forward(self, x):
        return x.mul_(torch.sigmoid(x))


def test_bare_parameter_products_fold_their_bias_into_the_gemm():
    module = fresh(RawParameters(16, 40), torch.float32, "cpu")
    converted = gt.convert(module)
    x = torch.randn(6, 16)
    steps = converted.plan_for(x).describe()["steps"]
    assert steps[0]["op"] == "gemm_bias_act" and steps[0]["problem"]["has_bias"], steps[0]
    assert steps[0]["problem"]["activation"] == "gelu_erf"
    assert len(converted._recipe.constants) == 4  # w1, b1, w2, w3: each copied once
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]
        twice = torch.nn.Sequential(module, module)  # w1 read by two products, w2.T and w3.t() twice
        converted = gt.convert(twice)
        assert len(converted._recipe.constants) == 4
        assert rel_error(converted(x), reference(twice, x)) <= BOUNDS[torch.float32]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_layers_and_a_result_cast_up_match_fp64(device, dtype):
    module = fresh(AddmmLayers(24, 72), dtype, device)
    converted = gt.convert(module)
    x = torch.randn(9, 24, device=device).to(dtype)  # addmm: 2-D only
    with torch.no_grad():
        y = converted(x)
    assert converted._recipe.steps[0][0] == "linear" and y.dtype == dtype
    assert rel_error(y, reference(module, x)) <= BOUNDS[dtype]

    class CastUp(torch.nn.Module):  # returns float32 from a 16-bit module
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(24, 72), torch.nn.Linear(72, 24)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x))).float()

    module = fresh(CastUp(), dtype, device)
    converted = gt.convert(module)
    assert converted.output_dtype == torch.float32
    for shape in [(9, 24), (0, 24)]:
        x = torch.randn(shape, device=device).to(dtype)
        with torch.no_grad():
            y, own = converted(x), module(x)
        assert y.dtype == own.dtype == torch.float32 and y.shape == own.shape
        if x.numel():
            assert rel_error(y, reference(module, x)) <= BOUNDS[dtype]


class EinsumLayers(torch.nn.Module):  # linear layers written as einsums, weights in both layouts
    def __init__(self, d, h):
        super().__init__()
        self.w1, self.b1 = torch.nn.Parameter(torch.empty(h, d)), torch.nn.Parameter(torch.empty(h))  # [out, in]
        self.w2, self.w3 = torch.nn.Parameter(torch.empty(h, d)), torch.nn.Parameter(torch.empty(d, d))  # [in, out]

    def forward(self, x):
        h = F.silu(torch.einsum("...i,oi->...o", x, self.w1) + self.b1)
        return torch.einsum("bsf, fd -> bsd", h, self.w2) + torch.einsum("io,...i", self.w3.t(), x)


@pytest.mark.parametrize("device", devices())
def test_einsum_layers_match_fp64(device):
    module = fresh(EinsumLayers(24, 40), torch.float32, device)
    converted = gt.convert(module)
    assert [step[0] for step in converted._recipe.steps].count("linear") == 3
    x = torch.randn(2, 7, 24, device=device)  # 'bsf': 3-D, as the module takes it
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]

    class Einsum(torch.nn.Module):
        def __init__(self, equation):
            super().__init__()
            self.fc, self.w, self.equation = torch.nn.Linear(8, 8), torch.nn.Parameter(torch.ones(8, 8)), equation

        def forward(self, x):
            h = self.fc(x)
            return torch.einsum(self.equation, h, self.w if self.equation != "bi,bi->bi" else h)

    # A result with its dimensions moved, a diagonal, a sum over rows, and a product of two values.
    for equation in ["bsd,df->bfs", "bdd,df->bdf", "...i,io->o", "bi,bi->bi"]:
        with pytest.raises(ge2.InvalidArgumentError, match=r"ge2 takes an einsum of a value and a 2-D parameter "
                                                           r"that is a linear layer"):
            gt.convert(Einsum(equation))


class FlattenMLP(torch.nn.Module):  # the tutorial MLP on images: [batch, channels, h, w] flattened first
    def __init__(self, how):
        super().__init__()
        self.fc1, self.fc2, self.how = torch.nn.Linear(48, 40), torch.nn.Linear(40, 10), how
        self.flatten = torch.nn.Flatten()

    def forward(self, x):
        rows = {"module": lambda: self.flatten(x), "function": lambda: torch.flatten(x, 1),
                "view": lambda: x.view(x.size(0), -1), "reshape": lambda: x.reshape(x.shape[0], -1)}[self.how]()
        return self.fc2(F.gelu(self.fc1(rows)))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("how", ["module", "function", "view", "reshape"])
def test_a_flattened_input_runs_as_rows(device, how):
    module = fresh(FlattenMLP(how), torch.float32, device)
    converted = gt.convert(module)
    for shape in [(5, 3, 4, 4), (2, 48), (1, 6, 8)]:
        x = torch.randn(shape, device=device)
        with torch.no_grad():
            y = converted(x)
        assert y.shape == (shape[0], 10)
        assert rel_error(y, reference(module, x)) <= BOUNDS[torch.float32]
    with torch.no_grad():
        assert torch.equal(torch.compile(converted, fullgraph=True, backend="aot_eager")(x), y)
    with pytest.raises(ge2.InvalidArgumentError, match=r"input of shape \(5, 47\): the module flattens the "
                                                       r"dimensions after the first, which must hold 48"):
        converted(torch.randn(5, 47, device=device))


def test_arguments_with_defaults_are_traced_at_them_and_meta_weights_refused():
    class Defaults(torch.nn.Module):  # forward(x) means scale = 0.5, mask = None, act = "gelu"
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 24), torch.nn.Linear(24, 16)

        def forward(self, x, scale: float = 0.5, mask=None, act: str = "gelu"):
            h = self.fc1(x)
            h = F.gelu(h) if act == "gelu" else F.relu(h)
            if mask is not None:
                h = h * mask
            return x + scale * self.fc2(h)

    module = fresh(Defaults(), torch.float32, "cpu")
    converted = gt.convert(module)
    assert converted.input_features == (16,)  # x alone
    x = torch.randn(6, 16)
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]
    with pytest.raises(ge2.InvalidArgumentError, match=r"2 inputs given; the module takes 1"):
        converted(x, torch.ones(6, 24))
    with pytest.raises(ge2.InvalidArgumentError, match=r"'0.weight' is on the meta device"):
        gt.convert(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta")))


@pytest.mark.parametrize("how", ["weight_norm", "orthogonal", "spectral_norm"])
def test_parametrized_linear_layers_read_their_computed_weight(how):
    from torch.nn.utils import parametrizations
    torch.manual_seed(1)
    layer = getattr(parametrizations, how)(torch.nn.Linear(16, 16))
    module = torch.nn.Sequential(layer, torch.nn.SiLU(), torch.nn.Linear(16, 8)).eval()
    converted = gt.convert(module)
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]


def test_flattening_anything_but_the_input_is_refused():
    class Inside(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 6), torch.nn.Linear(24, 10)

        def forward(self, x):
            return self.fc2(self.fc1(x).flatten(1))

    with pytest.raises(ge2.InvalidArgumentError, match=r"'flatten\(fc1, 1\)' flattening a value that is not the "
                                                       r"module's input"):
        gt.convert(Inside())
    with pytest.raises(ge2.InvalidArgumentError, match=r"module '0' \(Flatten\)"):  # from dimension 0: no rows
        gt.convert(torch.nn.Sequential(torch.nn.Flatten(0), torch.nn.Linear(48, 10)))


def test_layers_of_zero_width_are_refused_and_empty_pieces_left_unread():
    for module in [torch.nn.Linear(8, 0), torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 0)),
                   torch.nn.Linear(0, 8)]:
        with pytest.raises(ge2.InvalidArgumentError, match=r"a linear layer of (8|16) inputs and 0 outputs|"
                                                           r"a linear layer of 0 inputs and 8 outputs"):
            gt.convert(module)

    class EmptyPiece(torch.nn.Module):  # split sections of 0: PyTorch makes an empty tensor
        def __init__(self, read_it):
            super().__init__()
            self.fc, self.out, self.read_it = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), read_it

        def forward(self, x):
            empty, h = self.fc(x).split([0, 16], dim=-1)
            return torch.cat([empty, h], -1) if self.read_it else self.out(F.relu(h))

    module = fresh(EmptyPiece(False), torch.float32, "cpu")
    x = torch.randn(5, 8)
    with torch.no_grad():
        assert rel_error(gt.convert(module)(x), reference(module, x)) <= BOUNDS[torch.float32]
    with pytest.raises(ge2.InvalidArgumentError, match=r"at node 'cat'"):
        gt.convert(EmptyPiece(True))


def test_casts_ge2_cannot_follow_are_refused():
    class Cast(torch.nn.Module):
        def __init__(self, how):
            super().__init__()
            self.fc1, self.fc2, self.how = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), how

        def forward(self, x):
            h = self.fc1(x)
            if self.how == "double":
                return self.fc2(F.relu(h.double()).to(x.dtype))
            if self.how == "half":  # another 16-bit dtype than the module's
                return self.fc2(F.relu(h.half()).to(x.dtype))
            if self.how == "device":
                return self.fc2(F.relu(h)).to("cpu")
            if self.how == "in_place":  # h.float() copies h or is h, depending on h's dtype
                g = h.float()
                g.mul_(2)
                return self.fc2(F.relu(h))
            return torch.addmm(self.fc2.bias, F.relu(h), self.fc2.weight.t(), beta=0.5)

    messages = {"double": r"'double\(fc1\)', a cast to torch.float64 in a module that computes in torch.bfloat16",
                "half": r"'half\(fc1\)', a cast to torch.float16 in a module that computes in torch.bfloat16",
                "device": r"'to\(fc2, 'cpu'\)' \(ge2 follows casts to a dtype, to another value's dtype or device\)",
                "in_place": r"'mul_\(float_1, 2\)' changes in place a value that is cast \(or what it was cast from\), "
                            r"which node 'relu' reads afterwards",
                "addmm_beta": r"'addmm\(fc2_bias, relu, t, beta=0.5\)' \(ge2 takes torch.addmm\(bias, x, w\)"}
    for how, message in messages.items():
        with pytest.raises(ge2.InvalidArgumentError, match=message):
            gt.convert(Cast(how).to(torch.bfloat16))


def test_values_changed_in_place_are_read_changed():
    module = fresh(InPlace(12, 20), torch.float32, "cpu")
    converted = gt.convert(module)
    x = torch.randn(7, 12)
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]

    class ChangesACutLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            a = y[..., :4]
            y.relu_()
            return a + y[..., 4:]

    with pytest.raises(ge2.InvalidArgumentError, match=r"'relu_\(fc\)' changes 'fc' in place, which node "
                                                       r"'getitem_1' reads afterwards"):
        gt.convert(ChangesACutLayer())

    class ChangesAPiece(torch.nn.Module):  # a piece is a view of the layer's output: changing one changes both
        def __init__(self, read_whole):
            super().__init__()
            self.fc, self.read_whole = torch.nn.Linear(8, 8), read_whole

        def forward(self, x):
            y = self.fc(x)
            a, b = y.chunk(2, dim=-1)
            a.relu_()
            return y + 1 if self.read_whole else a + b

    module = fresh(ChangesAPiece(False), torch.float32, "cpu")
    x = torch.randn(5, 8)
    with torch.no_grad():
        assert rel_error(gt.convert(module)(x), reference(module, x)) <= BOUNDS[torch.float32]
    with pytest.raises(ge2.InvalidArgumentError, match=r"'relu_\(getitem\)' changes 'getitem', a view of 'fc', in "
                                                       r"place, which node 'add' reads afterwards"):
        gt.convert(ChangesAPiece(True))


def test_elementwise_code_read_after_its_value_changes_in_place_keeps_the_old_value():
    class ChangedAfterElementwise(torch.nn.Module):  # random-module seed 2973, written out
        def __init__(self):
            super().__init__()
            self.fc, self.out, self.out2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)

        def forward(self, x):
            h = self.fc(x)
            scaled = h.mul_(0.75)  # in place: scaled is h
            r = torch.where(scaled > 0, scaled, 0.0)  # relu written inline, on the scaled value
            h.add_(scaled)  # changed again: r keeps the scaled value
            return self.out(r) + self.out2(scaled * torch.sigmoid(1.702 * scaled))  # QuickGELU of the new one

    module = fresh(ChangedAfterElementwise(), torch.float32, "cpu")
    x = torch.randn(6, 8)
    with torch.no_grad():
        assert rel_error(gt.convert(module)(x), reference(module, x)) <= BOUNDS[torch.float32]


def dropout_add(x, residual, prob, training):  # transformers' Bloom helper
    return residual + F.dropout(x, p=prob, training=training)


class BloomMLP(torch.nn.Module):  # the residual comes in as a second argument (Bloom, MPT)
    def __init__(self, d, h):
        super().__init__()
        self.dense_h_to_4h, self.dense_4h_to_h = torch.nn.Linear(d, h), torch.nn.Linear(h, d)
        self.gelu_impl, self.hidden_dropout = NewGELU(), 0.1

    def forward(self, hidden_states, residual, unused=None):
        hidden_states = self.gelu_impl(self.dense_h_to_4h(hidden_states))
        return dropout_add(self.dense_4h_to_h(hidden_states), residual, self.hidden_dropout, self.training)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dynamic", [True, False])
def test_modules_of_several_inputs(device, dynamic):
    module = fresh(BloomMLP(24, 40), torch.float16, device)
    converted = gt.convert(module, dynamic=dynamic)
    assert converted.input_features == (24, 24)
    for shape in [(5, 24), (2, 3, 24), (24,)]:
        x, residual = (torch.randn(shape, device=device).half() for _ in range(2))
        with torch.no_grad():
            y = converted(x, residual)
            want = reference(module, x, residual)
        assert y.shape == want.shape and rel_error(y, want) <= BOUNDS[torch.float16]
    torch.library.opcheck(torch.ops.ge2.module_forward.default, (converted._id, [x, residual]))
    with pytest.raises(ge2.InvalidArgumentError, match=r"1 inputs given; the module takes 2 \(hidden_states, "
                                                       r"residual\)"):
        with torch.no_grad():
            converted(x)
    with pytest.raises(ge2.InvalidArgumentError, match=r"input 1 \(residual\) of shape \(1, 24\) on .*: the "
                                                       r"inputs must share their leading dimensions"):
        with torch.no_grad():
            converted(x, residual[None])
    with pytest.raises(ge2.InvalidArgumentError, match=r"input 1 \(residual\) of shape \(23,\): the last "
                                                       r"dimension must be 24"):
        with torch.no_grad():
            converted(x, residual[:23])

    class Unfixed(torch.nn.Module):  # nothing says how wide `scale` is
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x, scale):
            F.relu(scale)
            return self.fc(x)

    with pytest.raises(ge2.InvalidArgumentError, match="no linear layer determines the width of the module's "
                                                       "input 'scale'"):
        gt.convert(Unfixed())


def test_each_parameter_is_one_constant_of_its_own():
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.b(x)

    class Names(torch.nn.Module):  # 'a.b' and 'a_b' both suggest the name a_b_weight; shared is called twice
        def __init__(self):
            super().__init__()
            self.a, self.a_b, self.shared = Inner(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.shared(self.a_b(self.shared(self.a(x))))

    module = fresh(Names(), torch.float32, "cpu")
    converted = gt.convert(module)
    assert len(converted._recipe.constants) == 6  # a.b, a_b, shared: a weight and a bias each
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert rel_error(converted(x), reference(module, x)) <= BOUNDS[torch.float32]


@pytest.mark.parametrize("device", devices())
def test_negated_views_are_read_as_their_values_and_sparse_tensors_refused(device):
    """A negated view (is_neg(): the imaginary part of a conj()) holds its values' negatives in
    memory: the torch operators read its values as PyTorch's do; the array-level API refuses it,
    also after a plain tensor of the same signature took its fast path."""
    a = torch.randn(6, 8, device=device)
    w = torch.randn(5, 8, device=device)
    c = torch.complex(torch.randn(6, 8, device=device), a)
    na, nw = c.conj().imag, torch.complex(torch.randn(5, 8, device=device), -w).conj().imag
    assert na.is_neg() and nw.is_neg() and torch.equal(na, -a) and torch.equal(nw, w)
    want = (-a).double() @ w.double().t()
    with torch.no_grad():
        assert rel_error(gt.linear(na, nw), want) <= 1e-6
        assert rel_error(gt.gemm_bias_act(na, nw, trans_b=True), want) <= 1e-6
        module = torch.nn.Linear(8, 5, bias=False).to(device).eval()
        module.weight.copy_(w)
        assert rel_error(gt.convert(module)(na), want) <= 1e-6
    g = ge2.Graph()
    g.output(g.gemm(g.input("a", (6, 8), "f32"), g.constant("w", w.cpu()), trans_b=True), "y")
    plan = g.compile(gt.context_for(torch.device(device)))
    assert rel_error(gt.PlanFunction(plan)(na), want) <= 1e-6
    y = torch.empty(6, 5, device=device)
    for _ in range(2):  # the second call of a signature takes the fast path
        plan.execute({"a": a, "y": y})
        ge2.gemm_bias_act(a, w, trans_b=True, context=gt.context_for(torch.device(device)))
    with pytest.raises(ge2.InvalidArgumentError, match=r"argument 'a' is a negated view \(is_neg\(\)\); pass "
                                                       r"\.resolve_neg\(\)"):
        plan.execute({"a": na, "y": y})
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'y' is a negated view"):
        plan.execute({"a": a, "y": torch.complex(y, y).conj().imag})
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'a' is a negated view"):
        ge2.gemm_bias_act(na, w, trans_b=True, context=gt.context_for(torch.device(device)))
    sparse = a.to_sparse()
    for call in (lambda: gt.linear(sparse, w), lambda: gt.convert(module)(sparse), lambda: plan.execute({"a": sparse,
                                                                                                          "y": y}),
                 lambda: ge2.gemm_bias_act(sparse, w, trans_b=True, context=gt.context_for(torch.device(device)))):
        with pytest.raises(ge2.InvalidArgumentError, match=r"has layout torch.sparse_coo; ge2 takes dense"):
            with torch.no_grad():
                call()


class _Mismatch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(8, 12)

    def forward(self, x):
        return self.a(x) * self.b(x)


@pytest.mark.gpu
def test_cuda_graph_capture_of_a_converted_module():
    if not torch.cuda.is_available():
        pytest.skip("SKIPPED: no CUDA device")
    module = fresh(ResidualGelu(256, 1024), torch.float16, "cuda")
    converted = gt.convert(module)
    static_x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        converted(static_x)  # warm-up: compiles the plan, allocates the stream's workspace
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = converted(static_x)
    for _ in range(2):
        static_x.copy_(torch.randn(64, 256, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(static_y, reference(module, static_x)) <= BOUNDS[torch.float16]


@pytest.mark.parametrize("device", devices())
def test_convert_with_allow_fp8_stays_within_the_fp8_bound(device):
    # K = 64 (a multiple of 16): the FP8 rows can run it; on the CPU cpu_fp8_ref is rated faster,
    # on the GPU the model keeps 16 bits at these sizes. Either way the result is within e4m3's bound.
    module = fresh(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)),
                   torch.float16, device)
    converted = gt.convert(module, allow_fp8=True, dynamic=False)
    x = torch.randn(40, 64, device=device).to(torch.float16)
    with torch.no_grad():
        y = converted(x)
    error = rel_error(y, reference(module, x))
    assert error <= 0.06
    if device == "cpu":
        assert error > 1e-3  # the layers really ran on e4m3 operands
    with pytest.raises(TypeError):
        gt.convert(module, allow_fp8=True, fp8_max_error="loose")
    for budget in (-1.0, 0.0, 1.5, float("nan"), float("inf")):  # refused at conversion, not at the first call
        with pytest.raises(ge2.InvalidArgumentError, match=r"argument 'fp8_max_error' = .* is not a finite value"):
            gt.convert(module, allow_fp8=True, fp8_max_error=budget)
