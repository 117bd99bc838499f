"""Graph.quantized_constant: weights given as e4m3 codes with their scales (NumPy uint8,
ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn) on the CPU backend, against fp64 on
e4m3 * scale; refusals name the argument."""

import numpy as np
import pytest

import ge2
from reference import reference, rel_error


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """The e4m3 ("fn") value of each code, independently of ge2 and ml_dtypes."""
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    exponent = (c >> 3) & 0xF
    mantissa = c & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    subnormal = mantissa / 8.0 * np.exp2(-6.0)
    value = sign * np.where(exponent == 0, subnormal, normal)
    return np.where((c & 0x7F) == 0x7F, np.nan, value)


def random_codes(rng, shape):
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    return np.where((codes & 0x7F) == 0x7F, codes - 1, codes).astype(np.uint8)  # no NaN code


@pytest.mark.parametrize("dtype,bound", [("f16", 2e-3), ("f32", 1e-5)])  # bf16: the C++ tests
@pytest.mark.parametrize("scale_axis", [None, 0, 1])
def test_linear_layout_against_fp64(cpu, dtype, bound, scale_axis):
    rng = np.random.default_rng()
    m, n, k = 7, 24, 40
    codes = random_codes(rng, (n, k))  # nn.Linear's [out, in]
    count = 1 if scale_axis is None else (n, k)[scale_axis]
    scales = rng.uniform(0.5, 2.0, count).astype(np.float32) / 200.0
    g = ge2.Graph()
    x = g.input("x", (m, k), dtype)
    w = g.quantized_constant("w", codes, scales if scale_axis is not None else float(scales[0]),
                             scale_axis=scale_axis, dtype=dtype)
    g.output(g.gemm(x, w, trans_b=True), "y")
    plan = g.compile(cpu)
    given = [c for c in plan.describe()["constants"] if c["name"] == "w"]
    assert given and given[0]["given_as"].startswith("f8_e4m3")
    np_dtype = np.float16 if dtype == "f16" else np.float32
    xs = rng.uniform(-1, 1, (m, k)).astype(np_dtype)
    y = np.full((m, n), np.nan, dtype=np_dtype)
    plan.execute({"x": xs, "y": y})
    scale = scales[0] if scale_axis is None else (scales[:, None] if scale_axis == 0 else scales[None, :])
    weight = e4m3_decode(codes) * scale.astype(np.float64)
    assert rel_error(y, reference(xs, weight, None, None, trans_b=True)) <= bound


def test_ml_dtypes_and_torch_codes_give_the_same_constant(cpu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng()
    values = rng.normal(0, 8, (16, 32)).astype(np.float32)
    as_fp8 = values.astype(ml_dtypes.float8_e4m3fn)
    codes = as_fp8.view(np.uint8)
    xs = rng.uniform(-1, 1, (3, 32)).astype(np.float16)
    outputs = []
    sources = [codes, as_fp8]
    try:
        import torch
        if hasattr(torch, "float8_e4m3fn"):
            sources.append(torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn))
    except ImportError:
        pass
    for data in sources:
        g = ge2.Graph()
        x = g.input("x", (3, 32), "f16")
        w = g.quantized_constant("w", data, 0.25, dtype="f16")
        g.output(g.gemm(x, w, trans_b=True), "y")
        y = np.full((3, 16), np.nan, dtype=np.float16)
        g.compile(cpu).execute({"x": xs, "y": y})
        outputs.append(y)
    for y in outputs[1:]:
        np.testing.assert_array_equal(y, outputs[0])
    weight = as_fp8.astype(np.float64) * 0.25
    assert rel_error(outputs[0], reference(xs, weight, None, None, trans_b=True)) <= 2e-3


def test_refusals_name_the_argument():
    g = ge2.Graph()
    codes = np.zeros((4, 8), dtype=np.uint8)
    f = "ge2_graph_add_quantized_constant"
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'scale_count' = 3 must be 4"):
        g.quantized_constant("w", codes, [1.0, 2.0, 3.0], scale_axis=0)
    with pytest.raises(ge2.InvalidArgumentError, match=r"scales\[0\] = nan is not finite"):
        g.quantized_constant("w", codes, float("nan"))
    nan_code = codes.copy()
    nan_code[2, 5] = 0x7F
    with pytest.raises(ge2.InvalidArgumentError, match=r"element \[2, 5\] is an e4m3 NaN code"):
        g.quantized_constant("w", nan_code, 1.0)
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'data' has dtype float16"):
        g.quantized_constant("w", codes.astype(np.float16), 1.0)
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'data' has 1 dimensions"):
        g.quantized_constant("w", codes.reshape(-1), 1.0)
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'scale_axis'"):
        g.quantized_constant("w", codes, 1.0, scale_axis=2)
    with pytest.raises(TypeError, match="argument 'scales'"):
        g.quantized_constant("w", codes, "big")
    big = np.full((4, 8), 0x7E, dtype=np.uint8)  # 448
    with pytest.raises(ge2.InvalidArgumentError, match=f"{f}: element \\[0, 0\\] = 448 \\* scale 1000 overflows f16"):
        g.quantized_constant("w", big, 1000.0)
    g.quantized_constant("w", big, 1000.0, dtype="f32")  # f32 holds 448000
    with pytest.raises(ge2.InvalidArgumentError, match="'w' is already a constant"):
        g.quantized_constant("w", codes, 1.0)


@pytest.mark.parametrize("block", [(128, 128), (16, 32), (1, 64), (100, 1)])
def test_block_scales_against_fp64(cpu, block):
    """Scales per block as DeepSeek-V3 and Qwen3 FP8 checkpoints give them (weight_scale_inv,
    ceil-divided grid, multiplied), the matrix ending inside a block on both axes."""
    rng = np.random.default_rng()
    m, n, k = 5, 72, 200
    codes = random_codes(rng, (n, k))
    grid = (-(-n // block[0]), -(-k // block[1]))
    scales = (rng.uniform(0.25, 4.0, grid) / 200.0).astype(np.float32)
    g = ge2.Graph()
    x = g.input("x", (m, k), "f32")
    w = g.quantized_constant("w", codes, scales, dtype="f32", block=block)
    g.output(g.gemm(x, w, trans_b=True), "y")
    plan = g.compile(cpu)
    given = [c["given_as"] for c in plan.describe()["constants"] if c["name"] == "w"]
    assert given and given[0].startswith("f8_e4m3 with one scale")
    xs = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    y = np.full((m, n), np.nan, dtype=np.float32)
    plan.execute({"x": xs, "y": y})
    per_element = np.repeat(np.repeat(scales.astype(np.float64), block[0], axis=0), block[1], axis=1)
    weight = e4m3_decode(codes) * per_element[:n, :k]
    assert rel_error(y, reference(xs, weight, None, None, trans_b=True)) <= 1e-5


def test_block_refusals_name_the_argument():
    g = ge2.Graph()
    codes = np.zeros((4, 8), dtype=np.uint8)
    with pytest.raises(ge2.InvalidArgumentError,
                       match=r"argument 'scale_count' = 3 must be 2 \(1 x 2 blocks of 4 x 4 in shape \[4, 8\]\)"):
        g.quantized_constant("w", codes, [1.0, 2.0, 3.0], block=(4, 4))
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'block_rows' = 0 must be at least 1"):
        g.quantized_constant("w", codes, [1.0], block=(0, 4))
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'scale_axis' = 0 with block"):
        g.quantized_constant("w", codes, [1.0, 2.0], scale_axis=0, block=(4, 4))
    with pytest.raises(TypeError, match="argument 'block' = 4 is not a pair"):
        g.quantized_constant("w", codes, [1.0, 2.0], block=4)
    with pytest.raises(TypeError, match=r"argument 'block\[1\]' = 4.0 is not an integer"):
        g.quantized_constant("w", codes, [1.0, 2.0], block=(4, 4.0))
    with pytest.raises(ge2.InvalidArgumentError,
                       match=r"argument 'scales' has shape \(2, 1\); blocks of 4 x 4 of data \(4, 8\) make a grid "
                             r"of \(1, 2\)"):
        g.quantized_constant("w", codes, np.ones((2, 1), dtype=np.float32), block=(4, 4))  # transposed
    g.quantized_constant("w", codes, np.ones((1, 2), dtype=np.float32), block=(4, 4))


def test_torch_scales_and_codes_as_a_checkpoint_holds_them(cpu):
    """weight (torch.float8_e4m3fn) and weight_scale_inv (a float32 tensor, bfloat16 in some
    checkpoints) passed as they are, the grid 2-D."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("SKIPPED: this PyTorch has no torch.float8_e4m3fn")
    rng = np.random.default_rng()
    codes = random_codes(rng, (40, 72))
    grid = (rng.uniform(0.25, 4.0, (2, 3)) / 100).astype(np.float32)
    for scales in (torch.from_numpy(grid), torch.from_numpy(grid).to(torch.bfloat16)):
        g = ge2.Graph()
        x = g.input("x", (3, 72), "f32")
        w = g.quantized_constant("w", torch.from_numpy(codes).view(torch.float8_e4m3fn), scales, dtype="f32",
                                 block=(32, 32))
        g.output(g.gemm(x, w, trans_b=True), "y")
        xs = rng.uniform(-1, 1, (3, 72)).astype(np.float32)
        y = np.full((3, 40), np.nan, dtype=np.float32)
        g.compile(cpu).execute({"x": xs, "y": y})
        given = scales.float().double().numpy()
        weight = e4m3_decode(codes) * np.repeat(np.repeat(given, 32, 0), 32, 1)[:40, :72]
        assert rel_error(y, reference(xs, weight, None, None, trans_b=True)) <= 1e-5
