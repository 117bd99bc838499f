"""The FFN-block benchmark (bench/ffn_blocks.py) and its plot (bench/plot_ffn.py) on the CPU backend,
tiny blocks: every block kind with and without the residual runs through ge2 and matches PyTorch,
and the JSON the plot reads has what it needs. Device time is scarce; a broken benchmark script
should be caught here, not there."""
import json
import os
import subprocess
import sys

import pytest

try:
    import torch  # noqa: F401
except Exception as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"SKIPPED: PyTorch is not importable here ({e})", allow_module_level=True)

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")


def run(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [BENCH])
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_ffn_blocks_runs_every_block_kind_on_the_cpu_and_matches_pytorch(tmp_path):
    blocks = ["gelu", "gelu_tanh", "relu", "swiglu", "geglu"]
    run("ffn_blocks.py", "--out", str(tmp_path), "--device", "cpu", "--hidden", "48", "--inter", "80",
        "--tokens", "5", "--dtypes", "f32", "bf16", "--blocks", *blocks, "--residual", "yes", "no",
        "--groups", "1")
    data = json.load(open(tmp_path / "ffn_blocks.json"))
    rows = data["rows"]
    assert len(rows) == 2 * len(blocks) * 2
    assert {(r["dtype"], r["block"], r["residual"]) for r in rows} == {
        (d, b, res) for d in ("f32", "bf16") for b in blocks for res in (True, False)}
    for r in rows:
        bound = 1e-5 if r["dtype"] == "f32" else 2e-2
        for name, error in r["rel_errors_vs_torch"].items():
            assert 0 <= error < bound, (r["dtype"], r["block"], r["residual"], name, error)
        assert set(r["ratios"]) == {"torch eager"} and r["ratios"]["torch eager"] > 0
        # the residual add is fused into the last GEMM's C operand, or absent
        assert r["ge2_steps"][-1].endswith("+C") == r["residual"], r["ge2_steps"]


def test_plot_ffn_draws_the_ratios(tmp_path):
    pytest.importorskip("matplotlib", reason="SKIPPED: matplotlib is not importable here")
    run("ffn_blocks.py", "--out", str(tmp_path), "--device", "cpu", "--hidden", "32", "--inter", "64",
        "--tokens", "3", "--dtypes", "f32", "--blocks", "swiglu", "relu", "--groups", "1")
    out = run("plot_ffn.py", str(tmp_path / "ffn_blocks.json"), str(tmp_path / "ratios.png"))
    assert "1 series over 2 rows" in out
    assert (tmp_path / "ratios.png").stat().st_size > 1000


def test_linear_layer_is_an_nn_linear_with_its_activation():
    """bench/ffn_blocks.linear_layer, the layer graph the layer benchmarks compile: x @ w^T + b with
    w in nn.Linear's [out, in] layout, then the activation, against fp64 on fresh random data."""
    import math

    import numpy as np

    import ge2

    sys.path.insert(0, BENCH)
    try:
        from ffn_blocks import linear_layer
    finally:
        sys.path.remove(BENCH)
    rng = np.random.default_rng()
    m, n, k = 7, 24, 40
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32) / math.sqrt(k)
    b = rng.standard_normal(n).astype(np.float32)
    pre = x.astype(np.float64) @ w.astype(np.float64).T + b
    erf = np.vectorize(math.erf)
    refs = {None: pre, "relu": np.maximum(pre, 0), "gelu": 0.5 * pre * (1 + erf(pre / math.sqrt(2)))}
    ctx = ge2.Context(device="cpu")
    for act, ref in refs.items():
        plan = linear_layer(m, n, k, "f32", act).compile(ctx)
        y = np.full((m, n), np.nan, dtype=np.float32)
        plan.execute({"x": x, "w": w, "b": b, "y": y})
        error = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert error < 1e-5, (act, error)


def test_decode_workspace_query_sets_the_variable_inside_and_restores_it(monkeypatch):
    """bench/ffn_blocks.decode_workspace_query, the decode rule's A/B switch of ffn_blocks.py and
    skinny_layers.py: GE2_LT_DECODE_WORKSPACE=1 inside, as it was after (unset or a caller's value)."""
    sys.path.insert(0, BENCH)
    try:
        from ffn_blocks import decode_workspace_query
    finally:
        sys.path.remove(BENCH)
    name = "GE2_LT_DECODE_WORKSPACE"
    monkeypatch.delenv(name, raising=False)
    with decode_workspace_query():
        assert os.environ[name] == "1"
    assert name not in os.environ
    with decode_workspace_query(on=False):
        assert name not in os.environ
    monkeypatch.setenv(name, "0")
    with pytest.raises(RuntimeError):
        with decode_workspace_query():
            assert os.environ[name] == "1"
            raise RuntimeError("a failed compile")
    assert os.environ[name] == "0"


def test_fp8_checkpoint_runs_on_the_cpu_and_matches_fp32(tmp_path):
    run("fp8_checkpoint.py", "--out", str(tmp_path), "--device", "cpu", "--hidden", "48", "--inter", "80",
        "--tokens", "3", "--blocks", "gelu", "swiglu", "--groups", "1", "--scales", "channel", "block",
        "--block-size", "32", "--allow-fp8")
    data = json.load(open(tmp_path / "fp8_checkpoint.json"))
    assert data["device"] == "cpu" and len(data["rows"]) == 4
    assert sorted(r["scales"] for r in data["rows"]) == ["block 32", "block 32", "channel", "channel"]
    for r in data["rows"]:
        # f32 plans on the dequantized values (allow_fp8 takes f16 and bf16 GEMMs only):
        # every contender computes the same block
        assert "ge2 e4m3 allow_fp8" in r["rel_error_vs_fp32"] and "ge2 e4m3 allow_fp8" in r["us"]
        for name, error in r["rel_error_vs_fp32"].items():
            assert 0 <= error < 1e-5, (r["block"], name, error)
        for plan in ("default", "allow_fp8"):
            kernels = r["kernels"][plan]
            assert kernels and all(k == "cpu_ref" for k in kernels), r["kernels"]
