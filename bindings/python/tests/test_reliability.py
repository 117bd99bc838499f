"""The Python binding as a hostile caller meets it: every bad argument raises
TypeError or ge2.InvalidArgumentError (a ValueError) naming it, before the C
library is called; and a property test of the one-shot call and Plan.execute
against NumPy on random shapes, strides, layouts and dtypes."""
import numpy as np
import pytest

import ge2
from reference import reference, rel_error


@pytest.fixture
def c_calls(monkeypatch):
    """Counts calls of the C functions that read arrays, so a test can show that
    Python refused an argument before C saw it."""
    calls = {"ge2_gemm_bias_act": 0, "ge2_plan_execute": 0, "ge2_plan_execute_packed": 0,
             "ge2_plan_execute_dynamic_packed": 0, "ge2_graph_add_input": 0, "ge2_context_create": 0}
    for name in calls:
        real = getattr(ge2._lib, name)

        def spy(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)
        monkeypatch.setattr(ge2._lib, name, spy)
    return calls


def stored(rng, logical, dtype, layout):
    """An array whose values are `logical` in one of several memory layouts."""
    if layout == "dense":
        return np.ascontiguousarray(logical, dtype=dtype)
    if layout == "padded":  # rows longer than the matrix: a slice of a wider array
        shape = logical.shape[:-1] + (logical.shape[-1] + int(rng.integers(1, 5)),)
        wide = np.full(shape, np.nan, dtype=dtype)
        wide[..., : logical.shape[-1]] = logical
        return wide[..., : logical.shape[-1]]
    if layout == "column":  # column-major: the transposed view of a row-major array
        return np.ascontiguousarray(np.swapaxes(logical, -1, -2), dtype=dtype).swapaxes(-1, -2)
    raise AssertionError(layout)


@pytest.mark.parametrize("seed", range(120))
def test_one_shot_property_against_numpy(cpu, seed):
    rng = np.random.default_rng(seed)
    dtype = [np.float16, np.float32][seed % 2]
    bound = 3e-3 if dtype == np.float16 else 1e-5
    batch = [None, 1, int(rng.integers(2, 4))][int(rng.integers(0, 3))]
    m, n, k = (int(x) for x in rng.integers(1, 24, size=3))
    trans_a, trans_b = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    lead = () if batch is None else (batch,)
    a_logical = rng.uniform(-1, 1, lead + ((k, m) if trans_a else (m, k)))
    b_logical = rng.uniform(-1, 1, lead + ((n, k) if trans_b else (k, n)))
    a = stored(rng, a_logical, dtype, rng.choice(["dense", "padded", "column"]))
    b = stored(rng, b_logical, dtype, rng.choice(["dense", "padded", "column"]))
    bias = rng.uniform(-1, 1, n).astype(dtype) if rng.integers(0, 2) else None
    act = [None, "relu", "gelu", "gelu_tanh"][int(rng.integers(0, 4))]
    alpha = float(rng.choice([1.0, 0.5, -2.0]))
    out = stored(rng, np.full(lead + (m, n), np.nan), dtype, rng.choice(["dense", "padded"]))
    result = ge2.gemm_bias_act(a, b, bias, act=act, trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                               out=out, context=cpu)
    assert result is out
    want = reference(a.astype(dtype), b.astype(dtype), bias, act, trans_a, trans_b, alpha)
    before_activation = reference(a.astype(dtype), b.astype(dtype), bias, None, trans_a, trans_b, alpha)
    assert rel_error(out, want, before_activation) <= bound


@pytest.mark.parametrize("seed", range(30))
def test_plan_execute_property_against_numpy(cpu, seed):
    rng = np.random.default_rng(1000 + seed)
    dtype = [np.float16, np.float32][seed % 2]
    name = {np.float16: "f16", np.float32: "f32"}[dtype]
    m, n, k = (int(x) for x in rng.integers(1, 20, size=3))
    g = ge2.Graph()
    x = g.input("x", (m, k), name)
    w = g.input("w", (n, k), name)  # nn.Linear's [out, in] layout
    bias = g.input("bias", (n,), name)
    y = g.activation(g.bias(g.gemm(x, w, trans_b=True), bias), "relu")
    g.output(y, "y")
    plan = g.compile(cpu, fuse=bool(seed % 3))
    xs, ws, bs = (rng.uniform(-1, 1, s).astype(dtype) for s in ((m, k), (n, k), (n,)))
    out = np.full((m, n), np.nan, dtype)
    plan.execute({"x": xs, "w": ws, "bias": bs, "y": out})
    want = reference(xs, ws, bs, "relu", False, True, 1.0)
    assert rel_error(out, want) <= (3e-3 if dtype == np.float16 else 1e-5)


def _refused(c_calls, error, pattern, call):
    before = dict(c_calls)
    with pytest.raises(error, match=pattern) as caught:
        call()
    assert not isinstance(caught.value, ge2.Ge2Error) or isinstance(caught.value, ge2.InvalidArgumentError)
    assert c_calls == before, "the C library was called with a bad argument"
    return caught.value


def test_one_shot_refuses_bad_arguments_before_calling_c(cpu, c_calls, tmp_path):
    f16 = np.float16
    a = np.ones((8, 6), f16)
    b = np.ones((6, 5), f16)
    out = np.zeros((8, 5), f16)
    call = ge2.gemm_bias_act
    V, T = ValueError, TypeError
    _refused(c_calls, V, r"argument 'b'.*K = 7 does not match a's K = 6",
             lambda: call(a, np.ones((7, 5), f16), out=out, context=cpu))
    _refused(c_calls, V, r"argument 'b'.*K = 4",
             lambda: call(a, np.ones((5, 4), f16), trans_b=True, out=out, context=cpu))
    _refused(c_calls, V, r"argument 'b': batch 3 does not match a's batch 2",
             lambda: call(np.ones((2, 8, 6), f16), np.ones((3, 6, 5), f16), context=cpu))
    _refused(c_calls, V, r"must both be 2-D or both 3-D",
             lambda: call(np.ones((2, 8, 6), f16), b, context=cpu))
    _refused(c_calls, V, r"argument 'out' has shape \(8, 4\); the result is \(8, 5\)",
             lambda: call(a, b, out=np.zeros((8, 4), f16), context=cpu))
    _refused(c_calls, V, r"argument 'out' has shape \(4, 8, 5\)",
             lambda: call(a, b, out=np.zeros((4, 8, 5), f16), context=cpu))
    _refused(c_calls, T, r"argument 'out' is float32 but 'a' is float16",
             lambda: call(a, b, out=np.zeros((8, 5), np.float32), context=cpu))
    _refused(c_calls, T, r"argument 'b' is float32",
             lambda: call(a, b.astype(np.float32), context=cpu))
    _refused(c_calls, T, r"argument 'a': NumPy dtype <f8",
             lambda: call(a.astype(np.float64), b, context=cpu))
    _refused(c_calls, T, r"argument 'a'.*big-endian|argument 'a': NumPy dtype >f2",
             lambda: call(a.astype(">f2"), b, context=cpu))
    # Broadcast (stride 0) and reversed (negative stride) views.
    _refused(c_calls, V, r"argument 'a' is a broadcast \(stride 0\) view",
             lambda: call(np.broadcast_to(np.ones(6, f16), (8, 6)), b, context=cpu))
    _refused(c_calls, V, r"argument 'b' is a reversed \(negative stride\) view",
             lambda: call(a, b[::-1], context=cpu))
    _refused(c_calls, V, r"argument 'out' is a broadcast",
             lambda: call(a, b, out=np.broadcast_to(np.zeros(5, f16), (8, 5)), context=cpu))
    _refused(c_calls, V, r"argument 'a'.*neither contiguous rows nor contiguous columns",
             lambda: call(np.ones((8, 12), f16)[:, ::2], b, context=cpu))
    _refused(c_calls, V, r"argument 'out'.*must have contiguous rows",
             lambda: call(a, b, out=np.zeros((5, 8), f16).T, context=cpu))
    # Read-only outputs: a flag, and a read-only memory map (writing it would crash).
    frozen = np.zeros((8, 5), f16)
    frozen.flags.writeable = False
    _refused(c_calls, V, r"argument 'out' is read-only", lambda: call(a, b, out=frozen, context=cpu))
    path = tmp_path / "out.bin"
    np.zeros((8, 5), f16).tofile(path)
    mapped = np.memmap(path, dtype=f16, mode="r", shape=(8, 5))
    _refused(c_calls, V, r"argument 'out' is read-only", lambda: call(a, b, out=mapped, context=cpu))
    # Bias.
    _refused(c_calls, V, r"argument 'bias' must be contiguous with shape \(5,\)",
             lambda: call(a, b, np.ones(6, f16), context=cpu))
    _refused(c_calls, V, r"argument 'bias' must be contiguous",
             lambda: call(a, b, np.ones(10, f16)[::2], context=cpu))
    _refused(c_calls, T, r"argument 'bias' is float32",
             lambda: call(a, b, np.ones(5, np.float32), context=cpu))
    # Strings name their choices; numbers are checked for type and range.
    _refused(c_calls, V, r"argument 'act' = 'gpu' is not one of None, 'none', 'relu'",
             lambda: call(a, b, act="gpu", context=cpu))
    _refused(c_calls, T, r"argument 'trans_a' = 2 must be True or False",
             lambda: call(a, b, trans_a=2, context=cpu))
    _refused(c_calls, T, r"argument 'alpha' = '2' is not a real number",
             lambda: call(a, b, alpha="2", context=cpu))
    _refused(c_calls, T, r"argument 'context' is a str",
             lambda: call(a, b, context="cpu"))
    _refused(c_calls, T, r"argument 'stream' = 1.5 is not an integer",
             lambda: call(a, b, stream=1.5, context=cpu))
    _refused(c_calls, V, r"argument 'stream' = -1 is outside",
             lambda: call(a, b, stream=-1, context=cpu))
    _refused(c_calls, T, r"argument 'a' is a builtins.list",
             lambda: call([[1.0]], b, context=cpu))
    _refused(c_calls, V, r"argument 'a' has shape \(0, 6\): dimension 0 is empty",
             lambda: call(np.ones((0, 6), f16), b, context=cpu))
    _refused(c_calls, V, r"argument 'a' has shape \(6,\)",
             lambda: call(np.ones(6, f16), b, context=cpu))
    # The good call still works and C was not reached by any of the above.
    assert c_calls["ge2_gemm_bias_act"] == 0
    ge2.gemm_bias_act(a, b, out=out, context=cpu)
    assert c_calls["ge2_gemm_bias_act"] == 1
    assert np.all(out == 6)


def test_one_shot_output_overlapping_an_input_is_refused_by_the_library(cpu):
    buffer = np.ones((8, 8), np.float32)
    with pytest.raises(ge2.InvalidArgumentError, match=r"output 'd'.*overlaps input 'a'"):
        ge2.gemm_bias_act(buffer, np.ones((8, 8), np.float32), out=buffer, context=cpu)
    assert np.all(buffer == 1)


def test_graph_and_context_arguments(cpu, c_calls):
    g = ge2.Graph()
    V, T = ValueError, TypeError
    _refused(c_calls, V, r"argument 'name' = 'x\\x00y' must have 1 to 255 UTF-8 bytes and no NUL",
             lambda: g.input("x\0y", (2, 2), "f32"))
    _refused(c_calls, V, r"argument 'name' = ''", lambda: g.input("", (2, 2), "f32"))
    _refused(c_calls, V, r"argument 'name'", lambda: g.input("n" * 256, (2, 2), "f32"))
    _refused(c_calls, T, r"argument 'name' = b'x' is not a str", lambda: g.input(b"x", (2, 2), "f32"))
    _refused(c_calls, V, r"argument 'shape\[0\]' = 9223372036854775808 is outside",
             lambda: g.input("x", (2**63, 2), "f32"))
    _refused(c_calls, V, r"argument 'shape\[1\]' = -9223372036854775809 is outside",
             lambda: g.input("x", (2, -2**63 - 1), "f32"))
    _refused(c_calls, T, r"argument 'shape\[0\]' = 51.9 is not an integer",
             lambda: g.input("x", (51.9, 2), "f32"))
    _refused(c_calls, V, r"argument 'shape' = \(\) must have 1 to 3", lambda: g.input("x", (), "f32"))
    _refused(c_calls, V, r"argument 'strides' = \(1,\) must have 2 entries",
             lambda: g.input("x", (2, 2), "f32", strides=(1,)))
    _refused(c_calls, T, r"argument 'strides' = 7 is not a sequence of ints",
             lambda: g.input("x", (2, 2), "f32", strides=7))
    _refused(c_calls, V, r"argument 'dtype' = 'fp16' is not one of 'f16', 'float16'",
             lambda: g.input("x", (2, 2), "fp16"))
    _refused(c_calls, V, r"argument 'device' = 'gpu' is not one of 'auto', 'cuda', 'cpu'",
             lambda: ge2.Context(device="gpu"))
    _refused(c_calls, V, r"argument 'tune' = 'fast' is not one of 'off', 'cached', 'tune'",
             lambda: ge2.Context(device="cpu", tune="fast"))
    _refused(c_calls, V, r"argument 'tunedb' = 'a\\x00b' contains a NUL",
             lambda: ge2.Context(device="cpu", tunedb="a\0b"))
    _refused(c_calls, V, r"argument 'ordinal' = -1 is outside", lambda: ge2.Context(device="cpu", ordinal=-1))
    _refused(c_calls, V, r"argument 'one_shot_cache_size' = -1 is outside",
             lambda: ge2.Context(device="cpu", one_shot_cache_size=-1))
    x = g.input("x", (2, 2), "f32")
    _refused(c_calls, V, r"argument 'a' = 2147483648 is outside", lambda: g.gemm(2**31, x))
    _refused(c_calls, V, r"argument 'act' = 'swish'", lambda: g.activation(x, "swish"))
    # Ids are indices: another graph's value 0 would silently name this graph's value 0.
    other = ge2.Graph()
    y = other.input("y", (2, 2), "f32")
    assert int(y) == int(x) == 0
    _refused(c_calls, V, r"argument 'b' = 0 is a value of another ge2.Graph", lambda: g.gemm(x, y))
    _refused(c_calls, V, r"argument 'value' = 0 is a value of another ge2.Graph", lambda: g.output(y, "out"))
    assert g.gemm(x, 0) == 1  # a plain id is taken as this graph's
    ctx = ge2.Context(device="cpu", tunedb="", one_shot_cache_size=2)
    assert ctx.describe()["one_shot_cache"]["capacity"] == 2
    ctx.close()


def _refuses_bad_xwy_bindings(c_calls, plan, xs, ws, ys):
    """Bindings a plan with f32 inputs x [4, 3], w [3, 2] and output y [4, 2] must refuse before C."""
    V = ValueError
    _refused(c_calls, V, r"output 'y' is not bound", lambda: plan.execute({"x": xs, "w": ws}))
    _refused(c_calls, V, r"argument 'x': float32 \(4, 4\)", lambda: plan.execute(
        {"x": np.ones((4, 4), np.float32), "w": ws, "y": ys}))
    _refused(c_calls, V, r"argument 'x': float16", lambda: plan.execute(
        {"x": xs.astype(np.float16), "w": ws, "y": ys}))
    _refused(c_calls, V, r"argument 'x' is a broadcast", lambda: plan.execute(
        {"x": np.broadcast_to(np.ones(3, np.float32), (4, 3)), "w": ws, "y": ys}))
    _refused(c_calls, V, r"argument 'y': float32 \(4, 2\) with element strides \(4, 1\)", lambda: plan.execute(
        {"x": xs, "w": ws, "y": np.zeros((4, 4), np.float32)[:, :2]}))
    frozen = ys.copy()
    frozen.flags.writeable = False
    _refused(c_calls, V, r"argument 'y' is an output but its array is read-only",
             lambda: plan.execute({"x": xs, "w": ws, "y": frozen}))


def test_plan_execute_refuses_bad_bindings_before_calling_c(cpu, c_calls):
    g = ge2.Graph()
    x = g.input("x", (4, 3), "f32")
    w = g.input("w", (3, 2), "f32")
    g.output(g.activation(g.gemm(x, w), "relu"), "y")
    plan = g.compile(cpu)
    xs, ws, ys = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32), np.zeros((4, 2), np.float32)
    V, T = ValueError, TypeError
    _refused(c_calls, T, r"argument 'arrays' is a list", lambda: plan.execute([xs, ws, ys]))
    _refused(c_calls, V, r"'z' is not an input or output of the plan \(it has 'x', 'w', 'y'\)",
             lambda: plan.execute({"x": xs, "w": ws, "y": ys, "z": ys}))
    _refuses_bad_xwy_bindings(c_calls, plan, xs, ws, ys)
    # A read-only input is fine; extent-1 dimensions may carry any stride.
    frozen_x = xs.copy()
    frozen_x.flags.writeable = False
    plan.execute({"x": frozen_x, "w": ws, "y": ys})
    assert np.all(ys == 3)
    g1 = ge2.Graph()
    row = g1.input("row", (1, 3), "f32")
    g1.output(g1.activation(row, "relu"), "out")
    p1 = g1.compile(cpu)
    wide = np.arange(30, dtype=np.float32).reshape(10, 3)[::5][:1]  # row stride 15 elements
    result = np.zeros((1, 3), np.float32)
    p1.execute({"row": wide, "out": result})
    assert np.all(result == wide)


@pytest.mark.gpu
def test_device_arrays_are_checked_too(cpu, c_calls):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("SKIPPED: no CUDA device")
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    w = torch.randn(48, 32, device="cuda", dtype=torch.float16)  # nn.Linear's [out, in]
    _refused(c_calls, ValueError, r"argument 'a' is a CUDA torch array but the context runs on the CPU",
             lambda: ge2.gemm_bias_act(a, w, trans_b=True, context=cpu))
    with ge2.Context(device="cuda", tunedb="") as ctx:
        _refused(c_calls, ValueError, r"argument 'b'.*K = 48 does not match a's K = 32",
                 lambda: ge2.gemm_bias_act(a, w, context=ctx))
        _refused(c_calls, ValueError, r"argument 'out' has shape \(64, 40\)",
                 lambda: ge2.gemm_bias_act(a, w, trans_b=True, out=torch.empty(64, 40, device="cuda",
                                                                             dtype=torch.float16), context=ctx))
        _refused(c_calls, ValueError, r"argument 'out' is read-only",
                 lambda: ge2.gemm_bias_act(a, w, trans_b=True, context=ctx, out=torch.empty(
                     64, 48, device="cuda", dtype=torch.float16, requires_grad=True)))
        _refused(c_calls, ValueError, r"argument 'a' is a broadcast",
                 lambda: ge2.gemm_bias_act(a[:1].expand(64, 32), w, trans_b=True, context=ctx))
        # w.t() is column-major: used as the transposed operand, no copy.
        y = ge2.gemm_bias_act(a, w.t(), context=ctx)
        want = a.double() @ w.double().t()
        assert ((y.double() - want).norm() / want.norm()).item() <= 1e-2


def test_plan_execute_reuses_checks_only_for_arrays_of_the_checked_signature(cpu, c_calls):
    """Plan.execute keeps the signatures of the arrays of a call it checked and reads only the
    pointers of a later call of those signatures: every other call is checked again."""
    g = ge2.Graph()
    x = g.input("x", (4, 3), "f32")
    w = g.input("w", (3, 2), "f32")
    g.output(g.gemm(x, w), "y")
    plan = g.compile(cpu)
    rng = np.random.default_rng(7)
    ws, ys = rng.standard_normal((3, 2)).astype(np.float32), np.zeros((4, 2), np.float32)
    for _ in range(3):  # checked once, then the cached signature: fresh values each time
        xs = rng.standard_normal((4, 3)).astype(np.float32)
        plan.execute({"x": xs, "w": ws, "y": ys})
        assert rel_error(ys, xs.astype(np.float64) @ ws) < 1e-6
    # The repeated calls passed their bindings packed by struct; the order of the dict's names is
    # part of the signature (a new order is checked, then packed in that order).
    assert (c_calls["ge2_plan_execute"], c_calls["ge2_plan_execute_packed"]) == (1, 2)
    for _ in range(2):
        xs, ws2 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
        ys = np.full((4, 2), np.nan, np.float32)
        plan.execute({"y": ys, "w": ws2, "x": xs})
        assert rel_error(ys, xs.astype(np.float64) @ ws2) < 1e-6
    assert (c_calls["ge2_plan_execute"], c_calls["ge2_plan_execute_packed"]) == (2, 3)
    V = ValueError
    _refuses_bad_xwy_bindings(c_calls, plan, xs, ws, ys)
    try:
        import torch
    except ImportError:
        return
    xt, wt, yt = torch.from_numpy(xs), torch.from_numpy(ws), torch.zeros(4, 2)
    for _ in range(2):
        plan.execute({"x": xt, "w": wt, "y": yt})
        assert rel_error(yt.numpy(), xs.astype(np.float64) @ ws) < 1e-6
    _refused(c_calls, V, r"argument 'y' is an output but its array is read-only",
             lambda: plan.execute({"x": xt, "w": wt, "y": torch.zeros(4, 2, requires_grad=True)}))
    # The same shape in column-major order: another signature, checked and refused.
    _refused(c_calls, V, r"argument 'x': float32 \(4, 3\) with element strides \(1, 4\)",
             lambda: plan.execute({"x": torch.zeros(3, 4).t(), "w": wt, "y": yt}))


def test_one_shot_reuses_checks_only_for_calls_of_the_checked_signature(cpu, c_calls):
    """gemm_bias_act keeps the checked parameter block of a call signature (flags and the
    arrays' signatures); a call that differs in anything but the arrays' values is checked again."""
    rng = np.random.default_rng(11)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    first = None
    for act in ("relu", "relu", "gelu_tanh", "relu"):
        a = rng.standard_normal((4, 6)).astype(np.float32)
        d = ge2.gemm_bias_act(a, b, act=act, context=cpu)
        ref = a.astype(np.float64) @ b
        want = np.maximum(ref, 0) if act == "relu" else 0.5 * ref * (1 + np.tanh(
            np.sqrt(2 / np.pi) * (ref + 0.044715 * ref ** 3)))
        assert rel_error(d, want) < 1e-5, act
        assert d is not first  # a new output every call
        first = d
    out = np.zeros((4, 5), np.float32)
    for _ in range(2):
        ge2.gemm_bias_act(a, b, out=out, context=cpu)
        assert rel_error(out, a.astype(np.float64) @ b) < 1e-5
    V, T = ValueError, TypeError
    frozen = out.copy()
    frozen.flags.writeable = False
    _refused(c_calls, V, r"argument 'out' is read-only", lambda: ge2.gemm_bias_act(a, b, out=frozen, context=cpu))
    _refused(c_calls, T, r"argument 'out' is float16", lambda: ge2.gemm_bias_act(
        a, b, out=out.astype(np.float16), context=cpu))
    _refused(c_calls, V, r"argument 'out' has shape \(5, 4\)", lambda: ge2.gemm_bias_act(
        a, b, out=np.zeros((5, 4), np.float32), context=cpu))
    _refused(c_calls, V, r"K = 5 does not match", lambda: ge2.gemm_bias_act(
        a, b[:5], out=out, context=cpu))
    try:
        import torch
    except ImportError:
        return
    # PyTorch operands without out=: the repeated call makes its result like a (a new tensor of a's
    # dtype and device each time, a plain tensor for a Parameter) without checking again.
    bt = torch.from_numpy(b)
    for make in (torch.from_numpy, lambda v: torch.nn.Parameter(torch.from_numpy(v), requires_grad=False)):
        results = []
        for _ in range(3):
            a = rng.standard_normal((4, 6)).astype(np.float32)
            d = ge2.gemm_bias_act(make(a), bt, act="relu", context=cpu)
            assert type(d) is torch.Tensor and d.dtype == torch.float32 and d.shape == (4, 5)
            assert rel_error(d.numpy(), np.maximum(a.astype(np.float64) @ b, 0)) < 1e-5
            assert all(d.data_ptr() != r.data_ptr() for r in results)
            results.append(d)
