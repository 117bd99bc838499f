"""ge2.torch.convert on FP8 linear modules (an e4m3 weight with its scales, as Hugging Face's
FP8Linear of DeepSeek-V3 / Qwen3 FP8 checkpoints and fbgemm / compressed-tensors' per-channel forms
hold them): the weights become quantized constants read as stored, against fp64 on weight * scale.
The stand-in modules below carry the attributes those classes have; their forward raises, as the
real ones do without a GPU kernel (Triton): convert reads them, never runs them."""
import pytest

try:
    import torch
    import torch.nn.functional as F
except (ImportError, OSError) as e:  # OSError: a torch whose CUDA libraries are missing
    pytest.skip(f"SKIPPED: PyTorch is not importable here ({e})", allow_module_level=True)
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("SKIPPED: this PyTorch has no torch.float8_e4m3fn", allow_module_level=True)

import ge2
import ge2.torch as gt
from torch_support import devices, rel_error


class FP8Linear(torch.nn.Linear):
    """Hugging Face's finegrained FP8Linear: weight e4m3 [out, in], weight_scale_inv one float per
    block_size block (multiplied), bias optional."""

    def __init__(self, i, o, block=(128, 128), bias=False, scale_name="weight_scale_inv", scale_shape=None):
        super().__init__(i, o, bias=bias)
        codes = (torch.randn(o, i) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        self.weight = torch.nn.Parameter(codes, requires_grad=False)
        shape = scale_shape if scale_shape is not None else (-(-o // block[0]), -(-i // block[1]))
        scales = (torch.rand(shape) * 3.75 + 0.25) / (64 * i ** 0.5)
        setattr(self, scale_name, torch.nn.Parameter(scales, requires_grad=False))
        self.scale_name = scale_name
        self.block_size = block
        if bias:
            with torch.no_grad():
                self.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        raise RuntimeError("FP8Linear.forward needs a GPU kernel; ge2.torch.convert must not run it")

    def dequantized(self):
        s = getattr(self, self.scale_name).double()
        if s.numel() == 1:
            per_element = s.reshape(1, 1)
        elif s.shape in ((self.out_features,), (self.out_features, 1)):
            per_element = s.reshape(-1, 1)
        else:
            b0, b1 = self.block_size
            per_element = s.repeat_interleave(b0, 0).repeat_interleave(b1, 1)[:self.out_features, :self.in_features]
        return self.weight.double() * per_element


class Fp8Mlp(torch.nn.Module):
    """Qwen3's MLP on FP8Linear layers: down(silu(gate(x)) * up(x))."""

    def __init__(self, d, h, **kw):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = FP8Linear(d, h, **kw), FP8Linear(d, h, **kw), FP8Linear(h, d, **kw)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def reference(self, x):
        x = x.double()
        gate, up = x @ self.gate_proj.dequantized().T, x @ self.up_proj.dequantized().T
        return (F.silu(gate) * up) @ self.down_proj.dequantized().T


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype,bound", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
def test_block_scaled_fp8_mlp_matches_fp64(device, dtype, bound):
    # 200 -> 300 -> 200 with 128 x 128 blocks: every weight ends inside a block on both axes
    # (the gate/up halves of 300 rows do not join on a block boundary: two GEMMs).
    module = Fp8Mlp(200, 300)
    converted = gt.convert(module, dtype=dtype)
    assert converted.dtype == dtype
    for tokens in (1, 5, 40):
        x = torch.randn(tokens, 200).to(device=device, dtype=dtype)
        with torch.no_grad():
            y = converted(x)
        assert y.dtype == dtype and y.shape == (tokens, 200)
        assert rel_error(y.cpu(), module.reference(x.cpu())) <= bound


def test_fp8_modules_default_to_bfloat16_and_join_on_block_boundaries():
    module = Fp8Mlp(256, 384)  # 384 = 3 blocks: gate and up join into one GEMM
    converted = gt.convert(module, dynamic=False)
    assert converted.dtype == torch.bfloat16
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        y = converted(x)
    assert rel_error(y, module.reference(x)) <= 2e-2
    plan = next(iter(converted._plans.values()))
    text = plan.describe()
    given = [c for c in text["constants"] if "given_as" in c]
    assert [c["name"] for c in given] == ["gate_proj_weight+up_proj_weight", "down_proj_weight"]
    assert all("one scale per 128x128 block" in c["given_as"] for c in given)


@pytest.mark.parametrize("scale_shape,name", [((300, 1), "weight_scale"), ((300,), "weight_scale_inv"),
                                              ((), "weight_scale")])
def test_per_channel_and_per_tensor_fp8_layers_with_bias(scale_shape, name):
    layer = FP8Linear(200, 300, bias=True, scale_name=name, scale_shape=scale_shape)
    module = torch.nn.Sequential(layer, torch.nn.GELU())
    converted = gt.convert(module)
    assert converted.dtype == torch.float32  # the bias's
    x = torch.randn(6, 200)
    with torch.no_grad():
        y = converted(x)
    want = F.gelu(x.double() @ layer.dequantized().T + layer.bias.double())
    assert rel_error(y, want) <= 1e-5


def test_one_fp8_layer_converts_alone():
    layer = FP8Linear(200, 300, bias=True)
    converted = gt.convert(layer, dtype=torch.float32)
    x = torch.randn(3, 200)
    with torch.no_grad():
        y = converted(x)
    assert rel_error(y, x.double() @ layer.dequantized().T + layer.bias.double()) <= 1e-5


def test_fp8_refusals_name_the_module_and_what_is_wrong():
    bad_scales = FP8Linear(200, 300, scale_shape=(3, 3))  # blocks of 128: the grid is 3 x 2
    with pytest.raises(ge2.InvalidArgumentError, match=r"weight_scale_inv of shape \(3, 3\) \(block_size "
                                                       r"\(128, 128\)\) is not one scale"):
        gt.convert(torch.nn.Sequential(bad_scales))
    no_scale = FP8Linear(64, 64)
    del no_scale.weight_scale_inv
    with pytest.raises(ge2.InvalidArgumentError, match="has an e4m3 weight of shape \\(64, 64\\) without"):
        gt.convert(torch.nn.Sequential(no_scale))
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'dtype' = torch.int8"):
        gt.convert(Fp8Mlp(64, 128), dtype=torch.int8)
    biased = torch.nn.Sequential(FP8Linear(64, 64, bias=True))  # a float32 bias, asked for float16
    with pytest.raises(ge2.InvalidArgumentError, match=r"dtypes \['torch.float16', 'torch.float32'\]"):
        gt.convert(biased, dtype=torch.float16)

    class Chunked(torch.nn.Module):  # a piece of an FP8 layer's output: its rows would be cut
        def __init__(self):
            super().__init__()
            self.gate_up = FP8Linear(64, 256)

        def forward(self, x):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return F.silu(gate) * up

    with pytest.raises(ge2.InvalidArgumentError, match="a piece of an FP8 layer's output"):
        gt.convert(Chunked())
