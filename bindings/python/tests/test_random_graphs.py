"""Differential test: random graphs of every op, compiled with and without fusion, against an fp64
NumPy evaluation of the same graph.

The targeted tests check each fusion rule on the graph it was written for; this one builds graphs
no one wrote by hand (values used twice, outputs that are also intermediates, activations between
gated and residual patterns, broadcasts, batches, nn.Linear and [in, out] weights, constants and
bound weights, dynamic extents run below their bound) so that a rule firing where it must not shows
up as a wrong number. Each plan runs twice, the second time on inputs changed in place (and on CUDA
sometimes as the replay of the CUDA graph the first execution recorded). Each seed is one graph;
GE2_RANDOM_GRAPHS=<count> runs more of them.
"""
import math
import os

import numpy as np
import pytest

import ge2

from reference import activation, rel_error

ACTS = ["relu", "gelu", "gelu_tanh", "silu", "quick_gelu"]
SEEDS = range(int(os.environ.get("GE2_RANDOM_GRAPHS", "64")))
# Relative Frobenius error of a graph's output against fp64: 16-bit values are rounded at every
# node boundary the plan keeps (up to ~8 here) and inside the GEMMs' fp32 accumulation.
BOUND = {np.float16: 1.5e-2, np.float32: 2e-5}
try:  # NumPy's bfloat16 (ml_dtypes); without it the graphs are f16 and f32 only
    import ml_dtypes

    BOUND[ml_dtypes.bfloat16] = 5e-2
    DTYPES = [np.float16, np.float32, ml_dtypes.bfloat16]
except ImportError:
    DTYPES = [np.float16, np.float32]


# The kernels a CUDA plan may be forced onto, by dtype (the ones that cannot run a GEMM refuse it).
FORCED = {np.float16: ["lt_f16", "cutlass_f16_128x256", "cutlass_f16_64x128", "cutlass_f16_128x128",
                       "cuda_f32", "cuda_skinny"],
          np.float32: ["lt_f32", "lt_tf32", "cuda_f32", "cuda_skinny"]}
if len(DTYPES) == 3:
    FORCED[DTYPES[2]] = ["lt_bf16", "cutlass_bf16_128x256", "cutlass_bf16_64x128", "cutlass_bf16_128x128",
                         "cuda_f32", "cuda_skinny"]


class RandomGraph:
    """Builds a ge2.Graph and, beside it, the list of operations an fp64 evaluation replays."""

    def __init__(self, rng, dtype, dynamic):
        self.rng, self.dtype, self.dynamic = rng, dtype, dynamic
        self.graph = ge2.Graph()
        self.batch = int(rng.integers(2, 4)) if rng.random() < 0.2 else 0
        self.rows = int(rng.integers(1, 40)) if rng.random() < 0.7 else int(rng.integers(1, 33) * 8)
        self.values = []  # (ge2.Value, shape, carries the row/batch dimension, operation)
        self.inputs = {}  # name -> array at the full extent
        self.count = 0

    def _name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def _data(self, shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(self.dtype)

    def _lead(self):
        return (self.batch, self.rows) if self.batch else (self.rows,)

    def _add(self, value, shape, leading, op):
        self.values.append((value, tuple(shape), leading, op))
        return len(self.values) - 1

    def _maybe_padded(self, data):
        """`data`, or sometimes a view of it with padded rows whose padding is NaN (a kernel that
        reads past a row's end, or assumes dense strides, returns NaN)."""
        if data.ndim < 2 or self.rng.random() < 0.8:
            return data
        base = np.full(data.shape[:-1] + (data.shape[-1] + int(self.rng.integers(1, 9)),), np.nan, self.dtype)
        base[..., :data.shape[-1]] = data
        return base[..., :data.shape[-1]]

    def _input(self, name, data, dynamic=False):
        data = self._maybe_padded(data)
        self.inputs[name] = data
        strides = tuple(s // data.itemsize for s in data.strides)
        return self.graph.input(name, data.shape, dtype=self.dtype.__name__, strides=strides, dynamic=dynamic)

    def input_rows(self, cols, scale=1.0):
        """An input of the graph's leading shape: dynamic when the graph is."""
        name = self._name("x")
        shape = self._lead() + (cols,)
        value = self._input(name, self._data(shape, scale), self.dynamic)
        return self._add(value, shape, True, ("input", name))

    def weight(self, shape, scale, constant=None):
        """A fixed-shape operand: a constant (copied now, maybe from a strided view) or an input
        bound at execution."""
        name = self._name("w")
        data = self._data(shape, scale)
        if constant if constant is not None else self.rng.random() < 0.5:
            value = self.graph.constant(name, self._maybe_padded(data))
            return self._add(value, shape, False, ("constant", data))
        return self._add(self._input(name, data), shape, False, ("input", name))

    def pick(self, cols=None):
        """An existing row-carrying value (of `cols` columns when given), often the newest, or None."""
        found = [i for i, (_, shape, leading, _) in enumerate(self.values)
                 if leading and (cols is None or shape[-1] == cols)]
        if not found:
            return None
        return found[-1] if self.rng.random() < 0.5 else int(self.rng.choice(found))

    def extent(self):
        """Mostly small odd sizes (partial tiles, unaligned rows); sometimes a multiple of 8 up to 256,
        the aligned sizes the tensor-core kernels take."""
        return int(self.rng.integers(1, 33) * 8) if self.rng.random() < 0.25 else int(self.rng.integers(1, 48))

    def gemm(self, x, n, bias=False, act="none", trans_b=None, alpha=None, constant=None):
        """x @ W (W [K, N] or nn.Linear's [N, K]) with alpha, maybe + bias, maybe act; what is not
        given is drawn."""
        k = self.values[x][1][-1]
        trans_b = bool(self.rng.random() < 0.5) if trans_b is None else trans_b
        w = self.weight((n, k) if trans_b else (k, n), 1.0 / math.sqrt(k), constant)
        alpha = float(self.rng.choice([1.0, 0.5, -1.25])) if alpha is None else alpha
        b = self.weight((n,), 1.0, constant) if bias else None
        out = self.graph.gemm_bias_act(self.values[x][0], self.values[w][0], None if b is None else self.values[b][0],
                                       act=act, trans_b=trans_b, alpha=alpha)
        shape = self.values[x][1][:-1] + (n,)
        return self._add(out, shape, True, ("gemm", x, w, None, trans_b, alpha, 0.0, b, act))

    def step(self):
        rng = self.rng
        kind = rng.choice(["gemm", "gemm", "gemm_bias_act", "gated", "residual", "bias", "act", "add", "mul"]
                          + ([] if self.dynamic or self.batch else ["trans_a"]))
        x = self.pick()
        value, shape, _, _ = self.values[x]
        k = shape[-1]
        if kind == "trans_a":  # op(a) = a^T: A stored [K, M] (a fixed input; M is not the dynamic extent)
            k, n, trans_b = self.extent(), self.extent(), bool(rng.random() < 0.5)
            name = self._name("t")
            a = self._add(self._input(name, self._data((k, self.rows))), (k, self.rows), False, ("input", name))
            w = self.weight((n, k) if trans_b else (k, n), 1.0 / math.sqrt(k))
            out = self.graph.gemm(self.values[a][0], self.values[w][0], trans_a=True, trans_b=trans_b)
            return self._add(out, (self.rows, n), True, ("gemm_ta", a, w, trans_b))
        if kind == "gated":  # act(x @ Wg) * (x @ Wu), either operand order: a gated unit to join
            n = self.extent()
            # Mostly GEMMs the gate/up pass may join (same layout, alpha, bias or not, constant weights).
            same = {"trans_b": bool(rng.random() < 0.5), "alpha": float(rng.choice([1.0, -0.5])),
                    "bias": bool(rng.random() < 0.3), "constant": True} if rng.random() < 0.7 else {}
            gate = self.gemm(x, n, **(same or {"bias": rng.random() < 0.3}))
            up = self.gemm(x, n, **(same or {"bias": rng.random() < 0.3}))
            act = str(rng.choice(ACTS))
            gated = self._add(self.graph.activation(self.values[gate][0], act), self.values[gate][1], True,
                              ("act", gate, act))
            pair = (gated, up) if rng.random() < 0.5 else (up, gated)
            return self._add(self.graph.mul(self.values[pair[0]][0], self.values[pair[1]][0]),
                             self.values[up][1], True, ("mul",) + pair)
        if kind == "residual":  # x + act(x @ W1) @ W2, either operand order: a residual add to fuse
            hidden = self.gemm(x, self.extent(), bias=rng.random() < 0.5, act=str(rng.choice(ACTS)))
            down = self.gemm(hidden, k, bias=rng.random() < 0.5)
            pair = (x, down) if rng.random() < 0.5 else (down, x)
            return self._add(self.graph.add(self.values[pair[0]][0], self.values[pair[1]][0]), shape, True,
                             ("add",) + pair)
        if kind == "gemm_bias_act":
            return self.gemm(x, self.extent(), bias=rng.random() < 0.7, act=str(rng.choice(ACTS + ["none"])))
        if kind == "gemm":  # ge2_graph_add_gemm, with C and beta sometimes
            n = self.extent()
            trans_b = bool(rng.random() < 0.5)
            w = self.weight((n, k) if trans_b else (k, n), 1.0 / math.sqrt(k))
            alpha = float(rng.choice([1.0, 0.5, -1.25]))
            c, beta = None, 0.0
            if rng.random() < 0.25:
                c = self.pick(n)
                if c is None:
                    c = self.input_rows(n)
                beta = float(rng.choice([1.0, -0.5]))
            out = self.graph.gemm(self.values[x][0], self.values[w][0], None if c is None else self.values[c][0],
                                  trans_b=trans_b, alpha=alpha, beta=beta)
            return self._add(out, shape[:-1] + (n,), True, ("gemm", x, w, c, trans_b, alpha, beta, None, None))
        if kind == "bias":
            bias = self.weight((k,), 1.0)
            return self._add(self.graph.bias(value, self.values[bias][0]), shape, True, ("bias", x, bias))
        if kind == "act":
            act = str(rng.choice(ACTS))
            return self._add(self.graph.activation(value, act), shape, True, ("act", x, act))
        # add / mul: another value of the same shape (possibly x itself), a new input, or a broadcast row
        other = self.pick(k)
        if other is None or rng.random() < 0.25:
            other = self.input_rows(k) if rng.random() < 0.6 else self.weight((k,), 1.0)
        if kind == "mul":  # powers of a value overflow f16 after a few multiplies: add those instead
            now = self.evaluate(self.inputs)
            if np.abs(now[x]).max() * np.abs(now[other]).max() > 256:
                kind = "add"
        op = self.graph.add if kind == "add" else self.graph.mul
        return self._add(op(value, self.values[other][0]), shape, True, (kind, x, other))

    def evaluate(self, feeds):
        """Every value in fp64, with `feeds` (name -> array) for the inputs."""
        out = []
        for _, _, _, op in self.values:
            kind = op[0]
            if kind == "input":
                out.append(feeds[op[1]].astype(np.float64))
            elif kind == "constant":
                out.append(op[1].astype(np.float64))
            elif kind == "gemm":
                _, x, w, c, trans_b, alpha, beta, bias, act = op
                d = alpha * (out[x] @ (out[w].T if trans_b else out[w]))
                if c is not None:
                    d = d + beta * out[c]
                if bias is not None:
                    d = d + out[bias]
                out.append(activation(d, act))
            elif kind == "gemm_ta":
                out.append(out[op[1]].T @ (out[op[2]].T if op[3] else out[op[2]]))
            elif kind == "bias":
                out.append(out[op[1]] + out[op[2]])
            elif kind == "act":
                out.append(activation(out[op[1]], op[2]))
            elif kind == "add":
                out.append(out[op[1]] + out[op[2]])
            else:
                out.append(out[op[1]] * out[op[2]])
        return out


def _build(seed):
    rng = np.random.default_rng(1000 + seed)
    dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
    g = RandomGraph(rng, dtype, dynamic=bool(rng.random() < 0.3))
    g.input_rows(g.extent())
    for _ in range(int(rng.integers(1, 8))):
        g.step()
    # Every computed value nothing reads (so no work is dead), and sometimes an intermediate too: an
    # output the fusion pass must keep.
    computed = [i for i, (_, _, leading, op) in enumerate(g.values) if leading and op[0] != "input"]
    read = {operand for _, _, _, op in g.values if op[0] not in ("input", "constant")
            for operand in op[1:] if isinstance(operand, int) and not isinstance(operand, bool)}
    outputs = {i for i in computed if i not in read}
    if len(computed) > 1 and rng.random() < 0.5:
        outputs.add(int(rng.choice(computed)))
    for i in outputs:
        g.graph.output(g.values[i][0], f"y{i}")
    return g, sorted(outputs)


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def context(request):
    try:
        ctx = ge2.Context(device=request.param, tunedb="")
    except ge2.NoDeviceError:
        pytest.skip("SKIPPED: no CUDA device")
    yield ctx
    ctx.close()


class TorchArrays:
    """NumPy arrays as PyTorch tensors on `device` with the same strides, the padding of a padded
    view NaN as in NumPy; on CUDA ge2 then runs on device pointers (NumPy arrays are staged
    through fresh, aligned device buffers instead)."""

    def __init__(self, device):
        self.torch = pytest.importorskip("torch", reason="SKIPPED: PyTorch is not importable")
        self.device = device

    def _dtype(self, dtype):
        t = self.torch
        return {np.dtype(np.float16): t.float16, np.dtype(np.float32): t.float32}.get(np.dtype(dtype), t.bfloat16)

    def tensor(self, array):
        t = self.torch
        strides = tuple(s // array.itemsize for s in array.strides)
        span = 1 + sum((n - 1) * s for n, s in zip(array.shape, strides))
        dense = np.ascontiguousarray(array)
        host = t.from_numpy(dense.view(np.uint16)).view(t.bfloat16) if dense.dtype.name == "bfloat16" else \
            t.from_numpy(dense)
        out = t.full((span,), float("nan"), dtype=self._dtype(array.dtype), device=self.device)
        out.as_strided(array.shape, strides).copy_(host)
        return out.as_strided(array.shape, strides)

    def output(self, shape, dtype):
        return self.torch.full(shape, float("nan"), dtype=self._dtype(dtype), device=self.device)

    def to_numpy(self, tensor, dtype):
        host = tensor.cpu()
        if host.dtype == self.torch.bfloat16:
            return host.view(self.torch.int16).numpy().view(dtype)
        return host.numpy()


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("seed", SEEDS)
def test_random_graph_matches_fp64_with_and_without_fusion(context, library, seed):
    g, outputs = _build(seed)
    extent = int(g.rng.integers(1, (g.batch or g.rows) + 1)) if g.dynamic else None
    # Drawn apart from the graph's generator, so that a seed names the same graph as before.
    replay_draws = np.random.default_rng(5000 + seed)
    feeds = {}
    for name, array in g.inputs.items():
        dynamic = g.dynamic and name.startswith("x")
        feeds[name] = array[:extent] if dynamic else array  # a view: padded rows keep their strides
    arrays_of = TorchArrays(context.device) if library == "torch" else None
    variants = [(True, None), (False, None)]
    if context.device == "cuda":  # every GEMM forced onto one family: it runs them right or refuses
        variants.append((bool(replay_draws.random() < 0.5), str(replay_draws.choice(FORCED[g.dtype]))))
    for fuse, forced in variants:
        # graph_replay (CUDA): the second execution replays the graph the first recorded, on
        # inputs whose values changed in place.
        replay = bool(replay_draws.random() < 0.3)
        try:
            plan = g.graph.compile(context, fuse=fuse, graph_replay=replay, force_kernel=forced,
                                   allow_tf32=forced == "lt_tf32")
        except ge2.UnsupportedError as e:
            # A GEMM the kernel cannot run, or a build without that family: refused with its reason.
            assert forced is not None and f"kernel '{forced}' was forced but" in str(e), str(e)
            continue
        bound = 1.5e-2 if forced == "lt_tf32" else BOUND[g.dtype]  # TF32 keeps f16's 10-bit mantissa
        if arrays_of is None:
            arrays = dict(feeds)
        else:
            arrays = {name: arrays_of.tensor(array) for name, array in feeds.items()}
        for run in range(2):
            want = g.evaluate(feeds)
            for i in outputs:  # poisoned: every element must be written
                if arrays_of is None:
                    arrays[f"y{i}"] = np.full(want[i].shape, np.nan, dtype=g.dtype)
                else:
                    arrays[f"y{i}"] = arrays_of.output(want[i].shape, g.dtype)
            plan.execute(arrays)
            for i in outputs:
                got = arrays[f"y{i}"] if arrays_of is None else arrays_of.to_numpy(arrays[f"y{i}"], g.dtype)
                error = rel_error(got, want[i])
                assert error <= bound, (
                    f"seed {seed} fuse={fuse} forced={forced} graph_replay={replay} execution {run + 1} output y{i} "
                    f"({g.dtype.__name__}, extent {extent}): relative error {error:.3g}; graph "
                    f"{[str(op[0]) for _, _, _, op in g.values]}, "
                    f"steps {[s.get('kernel', s.get('op')) for s in plan.describe().get('steps', [])]}")
            for name, array in feeds.items():  # new values, same memory: exact in every dtype
                array *= -1  # np.negative(out=) on an [N, 1] view with padded rows wrote NaN (NumPy 2.4.6)
                if arrays_of is not None:
                    arrays[name].neg_()
