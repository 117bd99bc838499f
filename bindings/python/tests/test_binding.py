"""Tests of the ctypes binding: the CPU backend with NumPy always; CuPy and
PyTorch device arrays when a GPU is present (skipped otherwise, with a reason)."""

import numpy as np
import pytest

import ge2
from reference import gelu_erf, reference, rel_error


def test_api_version_and_library_version():
    assert ge2._lib.ge2_get_api_version() == 2
    assert ge2.library_version().startswith("2.")
    assert ge2.__version__ == ge2.library_version()


@pytest.mark.parametrize("dtype,bound", [(np.float16, 2e-3), (np.float32, 1e-5)])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu", "quick_gelu"])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_bias_act_matches_fp64(cpu, dtype, bound, act, trans_b):
    rng = np.random.default_rng()
    m, n, k = rng.integers(1, 40, size=3)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype(dtype)
    bias = rng.uniform(-1, 1, n).astype(dtype)
    out = np.full((m, n), np.nan, dtype=dtype)
    ge2.gemm_bias_act(a, b, bias, act=act, trans_b=trans_b, out=out, context=cpu)
    want = reference(a, b, bias, act, trans_b=trans_b)
    assert rel_error(out, want, reference(a, b, bias, None, trans_b=trans_b)) <= bound


def test_batched_and_strided_views(cpu):
    rng = np.random.default_rng()
    big = rng.uniform(-1, 1, (3, 20, 40)).astype(np.float32)
    a = big[:, :, :17]  # leading dimension 40, batch stride 800
    b = rng.uniform(-1, 1, (3, 17, 9)).astype(np.float32)
    y = ge2.gemm_bias_act(a, b, None, act="relu", context=cpu)
    assert isinstance(y, np.ndarray) and y.shape == (3, 20, 9)
    assert rel_error(y, reference(a, b, None, "relu")) <= 1e-5


def test_graph_builder_fuses_and_runs(cpu):
    rng = np.random.default_rng()
    g = ge2.Graph()
    x = g.input("x", (8, 16), "f32")
    w = g.input("w", (16, 12), "f32")
    bias = g.input("bias", (12,), "f32")
    h = g.activation(g.bias(g.gemm(x, w), bias), "gelu")
    g.output(h, "y")
    plan = g.compile(cpu)
    steps = plan.describe()["steps"]
    assert len(steps) == 1 and steps[0]["op"] == "gemm_bias_act"
    xs = rng.uniform(-1, 1, (8, 16)).astype(np.float32)
    ws = rng.uniform(-1, 1, (16, 12)).astype(np.float32)
    bs = rng.uniform(-1, 1, 12).astype(np.float32)
    y = np.full((8, 12), np.nan, dtype=np.float32)
    plan.execute({"x": xs, "w": ws, "bias": bs, "y": y})
    assert rel_error(y, reference(xs, ws, bs, "gelu")) <= 1e-5
    assert plan.describe()["graph_replay"] is False
    replayed = g.compile(cpu, graph_replay=True)  # passed through; the CPU backend runs eagerly
    assert replayed.describe()["graph_replay"] is True
    y.fill(np.nan)
    replayed.execute({"x": xs, "w": ws, "bias": bs, "y": y})
    assert rel_error(y, reference(xs, ws, bs, "gelu")) <= 1e-5


def test_errors_map_to_exception_classes_with_messages(cpu):
    g = ge2.Graph()
    a = g.input("a", (4, 8), "f16")
    b = g.input("b", (6, 5), "f16")
    with pytest.raises(ge2.ShapeMismatchError, match=r"argument 'b'.*K=6"):
        g.gemm(a, b)
    with pytest.raises(ge2.InvalidArgumentError, match=r"'name' = 'a' is already"):
        g.input("a", (4, 8), "f16")
    with pytest.raises(ge2.InvalidArgumentError, match="shape"):
        g.input("z", (0, 8), "f16")
    with pytest.raises(ValueError, match="argument .act. = .swish. is not one of"):
        g.activation(a, "swish")
    b_ok = g.input("b_ok", (8, 5), "f16")
    g.output(g.gemm(a, b_ok), "y")
    with pytest.raises(ge2.UnsupportedError, match="'lt_f16' was forced"):
        g.compile(cpu, force_kernel="lt_f16")
    plan = g.compile(cpu)
    with pytest.raises(ge2.InvalidArgumentError, match="'y' is not bound"):
        plan.execute({"a": np.ones((4, 8), np.float16), "b": np.ones((6, 5), np.float16),
                      "b_ok": np.ones((8, 5), np.float16)})
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'a'"):
        plan.execute({"a": np.ones((4, 9), np.float16), "b": np.ones((6, 5), np.float16),
                      "b_ok": np.ones((8, 5), np.float16), "y": np.ones((4, 5), np.float16)})
    with pytest.raises(TypeError, match="<f8 is not float16, float32 or ml_dtypes.bfloat16"):
        ge2.gemm_bias_act(np.zeros((2, 2), np.float64), np.zeros((2, 2), np.float64), context=cpu)


def test_no_device_is_a_clear_error_without_cuda():
    try:
        ctx = ge2.Context(device="cuda", tunedb="")
    except ge2.NoDeviceError as error:
        assert "ge2_context_create" in str(error)
        assert error.status == 4
    else:
        ctx.close()
        pytest.skip("a CUDA device is present")


def _cuda_or_skip(module):
    lib = pytest.importorskip(module)
    try:
        ctx = ge2.Context(device="cuda", tunedb="")
    except ge2.NoDeviceError:
        pytest.skip("SKIPPED: no CUDA device")
    return lib, ctx


@pytest.mark.gpu
def test_torch_tensors_in_place_on_current_stream():
    torch, ctx = _cuda_or_skip("torch")
    a = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    b = torch.randn(384, 128, device="cuda", dtype=torch.float16) / 20
    bias = torch.randn(128, device="cuda", dtype=torch.float16)
    for dtype in (torch.float16, torch.bfloat16):
        y = ge2.gemm_bias_act(a.to(dtype), b.to(dtype), bias.to(dtype), act="gelu", context=ctx)
        assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == dtype
        want = torch.nn.functional.gelu(a.double() @ b.to(dtype).double() + bias.to(dtype).double())
        assert ((y.double() - want).norm() / want.norm()).item() <= 1e-2
    ctx.close()


@pytest.mark.gpu
def test_cupy_arrays():
    cupy, ctx = _cuda_or_skip("cupy")
    a = cupy.random.uniform(-1, 1, (300, 200)).astype(cupy.float16)
    b = cupy.random.uniform(-1, 1, (200, 100)).astype(cupy.float16)
    y = ge2.gemm_bias_act(a, b, None, act="relu", context=ctx)
    want = cupy.maximum(a.astype(cupy.float64) @ b.astype(cupy.float64), 0)
    assert float(cupy.linalg.norm(y.astype(cupy.float64) - want) / cupy.linalg.norm(want)) <= 1e-2
    ctx.close()


def test_swiglu_block_with_residual_through_the_graph_builder(cpu):
    """y = x + down(silu(x @ Wg^T) * (x @ Wu^T)), weights in nn.Linear's [out, in] layout."""
    rng = np.random.default_rng()
    tokens, hidden, inter = 6, 16, 40
    g = ge2.Graph()
    x = g.input("x", (tokens, hidden), "f32")
    wg, wu = g.input("wg", (inter, hidden), "f32"), g.input("wu", (inter, hidden), "f32")
    wd = g.input("wd", (hidden, inter), "f32")
    gate = g.activation(g.gemm(x, wg, trans_b=True), "silu")
    h = g.mul(gate, g.gemm(x, wu, trans_b=True))
    g.output(g.add(g.gemm(h, wd, trans_b=True), x), "y")
    plan = g.compile(cpu)
    assert any("residual" in note for p in plan.describe()["passes"] for note in p["notes"])
    xs = rng.uniform(-1, 1, (tokens, hidden)).astype(np.float32)
    ws = {name: (rng.uniform(-1, 1, shape) / np.sqrt(shape[1])).astype(np.float32)
          for name, shape in (("wg", (inter, hidden)), ("wu", (inter, hidden)), ("wd", (hidden, inter)))}
    y = np.full((tokens, hidden), np.nan, np.float32)
    plan.execute({"x": xs, **ws, "y": y})
    x64 = xs.astype(np.float64)
    gate64 = x64 @ ws["wg"].T.astype(np.float64)
    h64 = gate64 / (1 + np.exp(-gate64)) * (x64 @ ws["wu"].T.astype(np.float64))
    assert rel_error(y, x64 + h64 @ ws["wd"].T.astype(np.float64)) <= 1e-5
    with pytest.raises(ge2.ShapeMismatchError, match="argument 'b'"):
        g.add(x, wd)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_swiglu_block_with_constant_weights_joins_gate_and_up(cpu, dtype):
    """Constant gate/up weights: one GEMM of width 2*inter computing the gated_mul in its
    epilogue (cpu_ref has the gated epilogue), same result."""
    rng = np.random.default_rng()
    tokens, hidden, inter = 5, 24, 36
    np_dtype = {"f16": np.float16, "f32": np.float32}[dtype]
    ws = {name: (rng.uniform(-1, 1, shape) / np.sqrt(shape[1])).astype(np_dtype)
          for name, shape in (("wg", (inter, hidden)), ("wu", (inter, hidden)), ("wd", (hidden, inter)))}
    g = ge2.Graph()
    x = g.input("x", (tokens, hidden), dtype)
    gate = g.activation(g.gemm(x, g.constant("wg", ws["wg"]), trans_b=True), "silu")
    h = g.mul(gate, g.gemm(x, g.constant("wu", ws["wu"]), trans_b=True))
    g.output(g.add(g.gemm(h, g.constant("wd", ws["wd"]), trans_b=True), x), "y")
    plan = g.compile(cpu)
    steps = plan.describe()["steps"]
    assert [s["op"] for s in steps] == ["gemm", "gemm_bias_act"]
    assert steps[0]["problem"]["n"] == 2 * inter
    assert "(silu(gate) * up) computed in the epilogue" in steps[0]["gated_epilogue"]
    xs = rng.uniform(-1, 1, (tokens, hidden)).astype(np_dtype)
    y = np.full((tokens, hidden), np.nan, np_dtype)
    plan.execute({"x": xs, "y": y})
    x64 = xs.astype(np.float64)
    g64 = x64 @ ws["wg"].T.astype(np.float64)
    h64 = g64 / (1 + np.exp(-g64)) * (x64 @ ws["wu"].T.astype(np.float64))
    assert rel_error(y, x64 + h64 @ ws["wd"].T.astype(np.float64)) <= (1e-5 if dtype == "f32" else 4e-3)


def test_constants_are_copied_and_not_bound(cpu):
    rng = np.random.default_rng()
    w = rng.uniform(-1, 1, (12, 8)).astype(np.float32)  # nn.Linear [out, in]
    given = w.copy()
    g = ge2.Graph()
    x = g.input("x", (3, 8), "f32")
    g.output(g.gemm(x, g.constant("w", w.T.T), trans_b=True), "y")
    w[:] = np.nan  # the graph copied it
    plan = g.compile(cpu)
    assert set(plan.io) == {"x", "y"}
    assert plan.describe()["constant_bytes"] == 12 * 8 * 4
    xs = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
    y = np.full((3, 12), np.nan, np.float32)
    plan.execute({"x": xs, "y": y})
    assert rel_error(y, xs.astype(np.float64) @ given.T.astype(np.float64)) <= 1e-5
    with pytest.raises(ValueError, match=r"argument 'name' = 'x'.*already an input"):
        g.constant("x", given)
    with pytest.raises(TypeError, match="argument 'array'"):
        g.constant("k", [[1.0]])


def test_auto_device_without_cuda_warns_that_it_runs_on_the_cpu():
    """device='auto' never falls back to the CPU silently."""
    try:
        probe = ge2.Context(device="cuda", tunedb="")
        probe.close()
        pytest.skip("a CUDA device is present: 'auto' picks it")
    except ge2.Ge2Error:
        pass
    with pytest.warns(RuntimeWarning, match="device AUTO: .*; the context runs on the CPU reference backend"):
        ctx = ge2.Context(device="auto", tunedb="")
    assert ctx.device == "cpu"
    ctx.close()


def test_log_level_filters_the_library_warnings():
    """log_level='error' keeps the device='auto' fallback warning out; an unknown level is refused."""
    import warnings as w
    with w.catch_warnings():
        w.simplefilter("error")  # any warning would raise here
        ctx = ge2.Context(device="auto", tunedb="", log_level="error")
    ctx.close()
    with pytest.raises(ge2.InvalidArgumentError, match="log_level"):
        ge2.Context(device="cpu", log_level="loud")


class DLPackOnly:
    """An array that offers only DLPack (as JAX's and TensorFlow's do), over NumPy memory."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@pytest.mark.parametrize("dtype,bound", [(np.float16, 2e-3), (np.float32, 1e-5)])
def test_dlpack_inputs_and_outputs(cpu, dtype, bound):
    rng = np.random.default_rng()
    m, n, k = rng.integers(2, 40, size=3)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    wide = rng.uniform(-1, 1, (n, k + 5)).astype(dtype)
    w = wide[:, :k]  # strided: DLPack carries the strides
    bias = rng.uniform(-1, 1, n).astype(dtype)
    out = np.full((m, n), np.nan, dtype=dtype)
    ge2.gemm_bias_act(DLPackOnly(a), DLPackOnly(w), DLPackOnly(bias), act="silu", trans_b=True,
                      out=DLPackOnly(out), context=cpu)
    want = reference(a, w, bias, "silu", trans_b=True)
    assert rel_error(out, want, reference(a, w, bias, None, trans_b=True)) <= bound
    # Without out=, the result of a host DLPack input is a NumPy array.
    y = ge2.gemm_bias_act(DLPackOnly(a), DLPackOnly(w), None, trans_b=True, context=cpu)
    assert isinstance(y, np.ndarray)
    assert rel_error(y, reference(a, w, None, None, trans_b=True)) <= bound
    # Through a compiled plan too (compiled for dense operands: the strided view is refused there).
    w = np.ascontiguousarray(w)
    g = ge2.Graph()
    x = g.input("x", (int(m), int(k)), "f16" if dtype == np.float16 else "f32")
    wv = g.input("w", (int(n), int(k)), "f16" if dtype == np.float16 else "f32")
    g.output(g.gemm(x, wv, trans_b=True), "y")
    out.fill(np.nan)
    g.compile(cpu).execute({"x": DLPackOnly(a), "w": DLPackOnly(w), "y": DLPackOnly(out)})
    assert rel_error(out, reference(a, w, None, None, trans_b=True)) <= bound


def test_ml_dtypes_bfloat16_arrays(cpu):
    """NumPy bfloat16 (ml_dtypes, what JAX hands to NumPy): one-shot results of that dtype, constants,
    plans; a structured 2-byte dtype, which has the same typestr, is refused also after a bfloat16
    array of its shape took the binding's fast path."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="SKIPPED: ml_dtypes is not installed")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng()
    m, n, k = (int(v) for v in rng.integers(2, 40, size=3))
    a = rng.uniform(-1, 1, (m, k)).astype(bf16)
    w = rng.uniform(-1, 1, (n, k)).astype(bf16)
    bias = rng.uniform(-1, 1, n).astype(bf16)
    f64 = [v.astype(np.float64) for v in (a, w, bias)]
    for _ in range(2):  # the second call takes the signature cache
        y = ge2.gemm_bias_act(a, w, bias, act="gelu", trans_b=True, context=cpu)
        assert y.dtype == bf16 and y.shape == (m, n)
        assert rel_error(y.astype(np.float64), reference(*f64, "gelu", trans_b=True)) <= 1e-2
    g = ge2.Graph()
    x = g.input("x", (m, k), "bf16")
    g.output(g.gemm(x, g.constant("w", w), trans_b=True), "y")
    plan = g.compile(cpu)
    out = np.full((m, n), np.nan, dtype=bf16)
    for _ in range(2):  # the second call takes Plan.execute's fast path
        plan.execute({"x": a, "y": out})
        assert rel_error(out.astype(np.float64), reference(f64[0], f64[1], None, None, trans_b=True)) <= 1e-2
    structured = np.zeros((m, k), dtype=[("x", "<f2")])
    with pytest.raises(TypeError, match="is not float16, float32 or ml_dtypes.bfloat16"):
        ge2.gemm_bias_act(structured, w, bias, act="gelu", trans_b=True, context=cpu)
    with pytest.raises(TypeError, match="is not float16, float32 or ml_dtypes.bfloat16"):
        plan.execute({"x": structured, "y": out})


def test_dlpack_refuses_what_ge2_cannot_take(cpu):
    with pytest.raises(TypeError, match="DLPack dtype .code 2, 64 bits"):
        ge2.gemm_bias_act(DLPackOnly(np.ones((2, 2))), DLPackOnly(np.ones((2, 2))), context=cpu)

    class OnAnotherDevice(DLPackOnly):
        def __dlpack_device__(self):
            return (8, 0)  # kDLMetal

    with pytest.raises(ge2.InvalidArgumentError, match="device type 8"):
        ge2.gemm_bias_act(OnAnotherDevice(np.ones((2, 2), np.float32)), np.ones((2, 2), np.float32),
                          context=cpu)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_dynamic_extent_one_plan_runs_every_token_count(cpu, dtype):
    """One GELU MLP plan with x's rows dynamic (bound 300): token counts 1..300 against fp64,
    each with arrays of exactly that many rows; mismatched and out-of-range rows are refused."""
    rng = np.random.default_rng()
    hidden, inter, bound = 16, 24, 300
    np_dtype = {"f16": np.float16, "f32": np.float32}[dtype]
    w1 = (rng.uniform(-1, 1, (inter, hidden)) / np.sqrt(hidden)).astype(np_dtype)
    w2 = (rng.uniform(-1, 1, (hidden, inter)) / np.sqrt(inter)).astype(np_dtype)
    b1 = rng.uniform(-1, 1, inter).astype(np_dtype)
    g = ge2.Graph()
    x = g.input("x", (bound, hidden), dtype, dynamic=True)
    h = g.activation(g.bias(g.gemm(x, g.constant("w1", w1), trans_b=True), g.constant("b1", b1)), "gelu")
    g.output(g.add(g.gemm(h, g.constant("w2", w2), trans_b=True), x), "y")
    plan = g.compile(cpu)
    assert plan.max_extent == bound
    assert plan.io["x"]["dynamic"] and plan.io["y"]["dynamic"]
    assert len(plan.describe()["dynamic"]["buckets"]) == 10  # 1, 2, 3-4, ..., 129-256, 257-300
    # Each count twice on new arrays: the second call takes the path of a signature checked before.
    for tokens in [t for t in list(range(1, 40)) + [64, 129, 256, 257, 299, 300] for _ in range(2)]:
        xs = rng.uniform(-1, 1, (tokens, hidden)).astype(np_dtype)
        y = np.full((tokens, hidden), np.nan, np_dtype)
        plan.execute({"x": xs, "y": y})
        x64 = xs.astype(np.float64)
        pre = x64 @ w1.T.astype(np.float64) + b1.astype(np.float64)
        want = x64 + gelu_erf(pre) @ w2.T.astype(np.float64)
        assert rel_error(y, want) <= (1e-5 if dtype == "f32" else 4e-3), tokens
    readonly = np.zeros((5, hidden), np_dtype)
    readonly.flags.writeable = False
    with pytest.raises(ge2.InvalidArgumentError, match="argument 'y' is an output but its array is read-only"):
        plan.execute({"x": np.zeros((5, hidden), np_dtype), "y": readonly})
    xs = np.zeros((5, hidden), np_dtype)
    with pytest.raises(ge2.InvalidArgumentError, match=r"argument 'y'.*\(5, 16\).*dynamic extent 5 set by 'x'"):
        plan.execute({"x": xs, "y": np.zeros((6, hidden), np_dtype)})
    with pytest.raises(ge2.InvalidArgumentError, match=r"leading dimension 301 is outside .*\[1, 300\]"):
        plan.execute({"x": np.zeros((301, hidden), np_dtype), "y": np.zeros((301, hidden), np_dtype)})
    with pytest.raises(ge2.ShapeMismatchError, match="dynamic leading dimension"):
        g.add(x, g.input("fixed", (bound, hidden), dtype))


def _fp8_layer(context, w, **options):
    g = ge2.Graph()
    x = g.input("x", (33, w.shape[1]), "f16")
    g.output(g.activation(g.gemm(x, g.constant("w", w), trans_b=True), "gelu"), "y")
    return g.compile(context, allow_fp8=True, **options)


def test_allow_fp8_runs_e4m3_within_its_measured_error_and_falls_back_past_it(cpu):
    rng = np.random.default_rng()
    w = (rng.uniform(-1, 1, (24, 64)) / 8).astype(np.float16)
    plan = _fp8_layer(cpu, w)
    layer = plan.describe()["fp8"]["layers"][0]
    assert layer["decision"] == "kept" and layer["kernel"] == "cpu_fp8_ref"
    assert 1e-3 < layer["worst_channel_error"] <= 0.1
    x = rng.standard_normal((33, 64)).astype(np.float16)
    y = np.full((33, 24), np.nan, np.float16)
    plan.execute({"x": x, "y": y})
    want = gelu_erf(x.astype(np.float64) @ w.astype(np.float64).T)
    assert 1e-3 < rel_error(y, want) <= 0.06  # really e4m3, and within the documented bound

    # A budget below the layer's worst channel: the gate refuses e4m3, the plan runs 16 bits.
    fallback = _fp8_layer(cpu, w, fp8_max_error=layer["worst_channel_error"] / 2)
    refused = fallback.describe()["fp8"]["layers"][0]
    assert refused["decision"] == "fallback to cpu_ref"
    assert refused["worst_channel_error"] == pytest.approx(layer["worst_channel_error"])
    fallback.execute({"x": x, "y": y})
    assert rel_error(y, want) <= 2e-3

    w[0, 0] = 1e4  # one outlier: its channel's own scale holds it, the other channels keep theirs
    outlier = _fp8_layer(cpu, w)
    layer = outlier.describe()["fp8"]["layers"][0]
    assert layer["decision"] == "kept" and layer["worst_channel_error"] <= 0.1
    outlier.execute({"x": x, "y": y})
    assert rel_error(y, gelu_erf(x.astype(np.float64) @ w.astype(np.float64).T)) <= 0.06

    with pytest.raises(ge2.InvalidArgumentError, match="fp8_max_error"):
        _fp8_layer(cpu, w, fp8_max_error=0.0)
    with pytest.raises(TypeError):
        _fp8_layer(cpu, w, fp8_max_error="tight")


def test_fp8_nan_stays_in_its_row_and_a_nan_weight_falls_back(cpu):
    """Row-wise scales: a NaN in one token makes that row of y NaN and every other row keeps its
    e4m3 accuracy; a NaN in a constant weight fails the gate (not finite), so the layer runs 16
    bits, NaN in that channel only (docs/fp8.md)."""
    rng = np.random.default_rng()
    w = (rng.uniform(-1, 1, (24, 64)) / 8).astype(np.float16)
    x = rng.standard_normal((33, 64)).astype(np.float16)
    x[3, 17] = np.nan
    plan = _fp8_layer(cpu, w)
    assert plan.describe()["fp8"]["layers"][0]["decision"] == "kept"
    y = np.zeros((33, 24), np.float16)
    plan.execute({"x": x, "y": y})
    assert np.isnan(y[3]).all()
    others = np.delete(np.arange(33), 3)
    want = gelu_erf(x[others].astype(np.float64) @ w.astype(np.float64).T)
    assert np.isfinite(y[others]).all() and rel_error(y[others], want) <= 0.06

    w_nan = w.copy()
    w_nan[5, 40] = np.nan
    x[3, 17] = 0.5
    plan = _fp8_layer(cpu, w_nan, fp8_max_error=1.0)
    layer = plan.describe()["fp8"]["layers"][0]
    assert layer["decision"] == "fallback to cpu_ref" and layer["worst_channel_error"] == "not finite"
    y[:] = 0
    plan.execute({"x": x, "y": y})
    assert np.isnan(y[:, 5]).all()
    keep = np.delete(np.arange(24), 5)
    want = gelu_erf(x.astype(np.float64) @ w.astype(np.float64).T)[:, keep]
    assert np.isfinite(y[:, keep]).all() and rel_error(y[:, keep], want) <= 2e-3
