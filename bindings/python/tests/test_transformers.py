"""ge2.torch.convert on the feed-forward modules of Hugging Face transformers, as the library
writes them (fused gate/up projections cut by chunk, Conv1D, FalconLinear, activations as its own
classes, residuals passed in): each converted module against the module run in float64 on fresh
random weights. Needs transformers (scripts/setup-deps.sh installs 4.57.1 next to the tests'
PyTorch); skipped with a message without it, and each class the installed version lacks is
skipped with its name (transformers 5.17 has neither MixtralBlockSparseTop2MLP nor ViTIntermediate)."""
import importlib

import pytest

try:
    import torch
    import transformers
except (ImportError, OSError) as e:
    pytest.skip(f"SKIPPED: PyTorch or transformers is not importable here ({e})", allow_module_level=True)

import ge2
import ge2.torch as gt
from torch_support import devices, fresh, reference, rel_error

H, I = 64, 176  # hidden and intermediate sizes: small, not multiples of each other's tiles

# name -> (model folder, module class, config class, config arguments, how the module takes them)
MODULES = {
    "llama": ("llama", "LlamaMLP", "LlamaConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "mistral": ("mistral", "MistralMLP", "MistralConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "qwen2": ("qwen2", "Qwen2MLP", "Qwen2Config", dict(hidden_size=H, intermediate_size=I), "config"),
    "qwen2_moe_expert": ("qwen2_moe", "Qwen2MoeMLP", "Qwen2MoeConfig", dict(hidden_size=H), "config, I"),
    "mixtral_expert": ("mixtral", "MixtralBlockSparseTop2MLP", "MixtralConfig",
                       dict(hidden_size=H, intermediate_size=I), "config"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3MLP", "DeepseekV3Config", dict(hidden_size=H, intermediate_size=I),
                    "config"),
    "gemma": ("gemma", "GemmaMLP", "GemmaConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "gemma2": ("gemma2", "Gemma2MLP", "Gemma2Config", dict(hidden_size=H, intermediate_size=I), "config"),
    "phi3": ("phi3", "Phi3MLP", "Phi3Config", dict(hidden_size=H, intermediate_size=I), "config"),
    "glm": ("glm", "GlmMLP", "GlmConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "phi": ("phi", "PhiMLP", "PhiConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "gpt2": ("gpt2", "GPT2MLP", "GPT2Config", dict(n_embd=H), "I, config"),
    "gpt_bigcode": ("gpt_bigcode", "GPTBigCodeMLP", "GPTBigCodeConfig", dict(n_embd=H), "I, config"),
    "gptj": ("gptj", "GPTJMLP", "GPTJConfig", dict(n_embd=H), "I, config"),
    "gpt_neox": ("gpt_neox", "GPTNeoXMLP", "GPTNeoXConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "falcon": ("falcon", "FalconMLP", "FalconConfig", dict(hidden_size=H), "config"),
    "bloom": ("bloom", "BloomMLP", "BloomConfig", dict(hidden_size=H), "config"),
    "mpt": ("mpt", "MptMLP", "MptConfig", dict(d_model=H, expansion_ratio=3), "config"),
    "t5": ("t5", "T5DenseActDense", "T5Config", dict(d_model=H, d_ff=I), "config"),
    "t5_gated_gelu": ("t5", "T5DenseGatedActDense", "T5Config",
                      dict(d_model=H, d_ff=I, feed_forward_proj="gated-gelu"), "config"),
    "bert_intermediate": ("bert", "BertIntermediate", "BertConfig", dict(hidden_size=H, intermediate_size=I),
                          "config"),
    "vit_intermediate": ("vit", "ViTIntermediate", "ViTConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "siglip": ("siglip", "SiglipMLP", "SiglipVisionConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "olmo": ("olmo", "OlmoMLP", "OlmoConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "starcoder2": ("starcoder2", "Starcoder2MLP", "Starcoder2Config", dict(hidden_size=H, intermediate_size=I),
                   "config"),
    "granite": ("granite", "GraniteMLP", "GraniteConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "cohere": ("cohere", "CohereMLP", "CohereConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "nemotron": ("nemotron", "NemotronMLP", "NemotronConfig", dict(hidden_size=H, intermediate_size=I), "config"),
    "clip_quick_gelu": ("clip", "CLIPMLP", "CLIPTextConfig", dict(hidden_size=H, intermediate_size=I), "config"),
}

# What ge2 cannot run, refused with a message naming it (CLIP's QuickGELU was, before 2.6).
REFUSED = {
    "t5_layer_norm": (("t5", "T5LayerFF", "T5Config", dict(d_model=H, d_ff=I), "config"),
                      "torch.fx cannot trace the module"),
}

BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def build(spec, dtype, device="cpu"):
    folder, cls, config_cls, kwargs, style = spec
    modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    config = getattr(importlib.import_module(f"transformers.models.{folder}.configuration_{folder}"),
                     config_cls)(**kwargs)
    args = {"config": (config,), "config, I": (config, I), "I, config": (I, config)}[style]
    if not hasattr(modeling, cls):  # e.g. transformers 5 fused Mixtral's experts, dropped ViTIntermediate
        pytest.skip(f"SKIPPED: transformers {transformers.__version__} has no {folder}.{cls}")
    torch.manual_seed(0)
    return fresh(getattr(modeling, cls)(*args), dtype, device)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(MODULES))
def test_transformers_mlp_converts_and_matches_fp64(device, dtype, name):
    module = build(MODULES[name], dtype, device)
    converted = gt.convert(module)
    inputs = [torch.randn(3, 7, H, device=device).to(dtype) for _ in converted.input_features]
    with torch.no_grad():
        got, own = converted(*inputs), module(*inputs)
    want = reference(module, *inputs)
    assert got.shape == want.shape and got.dtype == dtype
    error, bound = rel_error(got, want), max(BOUNDS[dtype], 2 * rel_error(own, want))
    assert error <= bound, (name, transformers.__version__, error, bound)


@pytest.mark.parametrize("name", list(REFUSED))
def test_transformers_modules_ge2_cannot_run_are_refused(name):
    spec, message = REFUSED[name]
    with pytest.raises(ge2.InvalidArgumentError, match=message):
        gt.convert(build(spec, torch.float32))


def _hf_fp8_mlp(d, h):
    """A Qwen3-style MLP of transformers' own FP8Linear layers (128 x 128 block scales) with
    random e4m3 codes and scales, and its weights dequantized in fp64."""
    from transformers.integrations.finegrained_fp8 import FP8Linear
    import torch.nn.functional as F

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = (FP8Linear(d, h, block_size=(128, 128), device="cuda") for _ in range(2))
            self.down_proj = FP8Linear(h, d, block_size=(128, 128), device="cuda")

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    module = Mlp()
    dequantized = {}
    with torch.no_grad():
        for name in ("gate_proj", "up_proj", "down_proj"):
            layer = getattr(module, name)
            layer.weight.copy_((torch.randn_like(layer.weight, dtype=torch.float32) * 64).clamp(-448, 448)
                               .to(torch.float8_e4m3fn))
            layer.weight_scale_inv.copy_((torch.rand_like(layer.weight_scale_inv) * 3.75 + 0.25)
                                         / (64 * layer.in_features ** 0.5))
            s = layer.weight_scale_inv.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
            dequantized[name] = layer.weight.double() * s[:layer.out_features, :layer.in_features]
    return module, dequantized


def _hf_fp8_importable():
    if not torch.cuda.is_available():
        pytest.skip("SKIPPED: transformers' FP8Linear runs its forward with Triton on a GPU")
    try:
        from transformers.integrations.finegrained_fp8 import FP8Linear  # noqa: F401
    except Exception as e:  # no Triton, or a version without the class
        pytest.skip(f"SKIPPED: transformers' FP8Linear is not importable here ({type(e).__name__}: {e})")


def _hf_fp8_run(tokens, h=1408, **options):
    """The MLP of _hf_fp8_mlp (hidden 1536, intermediate h: 11 blocks of 128 by default) on
    `tokens` rows of bfloat16 x, through ge2.torch.convert(module, dynamic=False, **options) and
    through the module's own forward: (ge2's y, the module's y, fp64 on the dequantized weights,
    the plan's text)."""
    import torch.nn.functional as F

    d = 1536
    module, dequantized = _hf_fp8_mlp(d, h)
    x = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    xd = x.double()
    want = (F.silu(xd @ dequantized["gate_proj"].T) * (xd @ dequantized["up_proj"].T)) @ dequantized["down_proj"].T
    converted = gt.convert(module, dynamic=False, **options)  # all weights e4m3: bfloat16
    with torch.no_grad():
        got = converted(x)
        own = module(x)
    return got, own, want, next(iter(converted._plans.values())).describe()


def gemm_kernels(described):
    return [s["kernel"]["name"] for s in described["steps"] if "selection" in s]


def test_hf_fp8linear_mlp_reads_the_checkpoint_numbers():
    """transformers' own FP8Linear (DeepSeek-V3 / Qwen3 FP8 checkpoints: e4m3 weights, a scale per
    128 x 128 block in weight_scale_inv) in a Qwen3-style MLP: ge2 reads the codes and scales as
    stored and, keeping x in 16 bits, is as close to fp64 on weight * scale as bfloat16 allows;
    the module's own forward (Triton, x quantized per 128 elements too: W8A8) is within its FP8
    bound of the same reference, which shows both read the attributes alike. Every GEMM has
    columns enough for cuda_skinny_fp8w's grid (run 32d: with d = 512 the down projection's 32
    column tiles gave half an H100 no block, and it ran lt_bf16 as the selector's rule says)."""
    _hf_fp8_importable()
    got, own, want, described = _hf_fp8_run(8)
    assert rel_error(got, want) <= 2e-2
    assert rel_error(own, want) <= 0.1
    kernels = gemm_kernels(described)
    assert kernels and all(k == "cuda_skinny_fp8w" for k in kernels), kernels


def test_hf_fp8linear_mlp_prefill_under_allow_fp8_computes_the_modules_w8a8(monkeypatch):
    """The same MLP (intermediate 2048: the block-scale mode takes K a multiple of 512) at 256
    tokens under allow_fp8, every GEMM forced onto lt_fp8_e4m3: x is quantized per row and 128
    columns and cuBLASLt's block-scale mode reads the checkpoint's 128 x 128 scales (the joined
    gate/up weight's grids meet on a block boundary), which is the recipe the module's own Triton
    forward runs: the two agree far closer than either is to fp64."""
    _hf_fp8_importable()
    monkeypatch.setenv("GE2_FORCE_KERNEL", "lt_fp8_e4m3")
    got, own, want, described = _hf_fp8_run(256, h=2048, allow_fp8=True)
    assert gemm_kernels(described) == ["lt_fp8_e4m3", "lt_fp8_e4m3"], gemm_kernels(described)
    for step in described["steps"]:
        if "selection" in step:
            assert "BLK128x128_32F" in step["kernel"]["scales"], step["kernel"]
    assert all(layer["decision"] == "kept" for layer in described["fp8"]["layers"])
    assert rel_error(got, want) <= 0.1
    assert rel_error(own, want) <= 0.1
    assert rel_error(got, own) <= 0.25 * rel_error(own, want), (rel_error(got, own), rel_error(own, want))