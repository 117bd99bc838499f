"""Is a tuned plan at least as fast as the default one? One layer y = act(x @ W^T + b), W in
nn.Linear's [out, in] layout, compiled in four contexts of one process, on the same tensors:

  default   tunedb="" (the heuristic and the untuned rules)
  tune      tune="tune" on a fresh database: every feasible kernel timed at compile
  cached    tune="cached" on that database, opened after tuning (what a later process gets
            after `ge_tune`): the stored rows, no timing
  off       tune="off" (the heuristic, the database not read)

each unforced and with cuBLASLt forced (`*_lt`), beside torch.mm / F.linear. Every contender is
one call captured in a CUDA graph and replayed back to back, median over ABBA-rotated groups.
Per plan it records the kernel, the cuBLASLt algorithm (attributes and descriptor), where it came
from and its workspace, so two plans that run the same algorithm can be told apart from two that
do not.

    python3 bench/tuned_vs_default.py --out DIR [--shapes 4096x4096x11008 ...] [--dtypes f16 bf16]
                                      [--acts none gelu] [--groups 15]
"""
import argparse
import json
import os
import time

SHAPES = ["4096x4096x11008", "4096x11008x4096", "2048x4096x1024", "300x11008x4096"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    parser.add_argument("--acts", nargs="+", default=["none", "gelu"])
    parser.add_argument("--groups", type=int, default=15)
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F

    import ge2
    from ffn_blocks import cuda_graphed, linear_layer, time_contenders

    os.makedirs(args.out, exist_ok=True)
    tunedb = os.path.join(args.out, "tuned_vs_default.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(tunedb + suffix):
            os.remove(tunedb + suffix)
    torch.manual_seed(0)
    contexts = {"default": ge2.Context(device="cuda", tunedb=""),
                "tune": ge2.Context(device="cuda", tune="tune", tunedb=tunedb)}
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for shape in args.shapes:
            m, n, k = (int(v) for v in shape.split("x"))
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
            b = torch.randn(n, device="cuda", dtype=dtype)

            def plan(context, act, force=None):
                g = linear_layer(m, n, k, dtype_name, None if act == "none" else act)
                t0 = time.perf_counter()
                p = g.compile(context, force_kernel=force)
                compile_ms = (time.perf_counter() - t0) * 1e3
                y = torch.empty(m, n, device="cuda", dtype=dtype)
                step = [s for s in p.describe()["steps"] if "selection" in s][0]
                kernel = step.get("kernel", {})
                info = {"kernel": step["selection"]["kernel"], "algo": kernel.get("algo"),
                        "algo_source": kernel.get("algo_source"),
                        "workspace_bytes": kernel.get("workspace_bytes"), "compile_ms": compile_ms}
                return (lambda: p.execute({"x": x, "w": w, "b": b, "y": y})), y, info

            plans = {}
            for act in args.acts:  # tuning first: the cached context reads what it stored
                for name in ("default", "tune"):
                    plans[f"{act}_{name}"] = plan(contexts[name], act)
                    plans[f"{act}_{name}_lt"] = plan(contexts[name], act, f"lt_{dtype_name}")
            cached = ge2.Context(device="cuda", tune="cached", tunedb=tunedb)
            off = ge2.Context(device="cuda", tune="off", tunedb=tunedb)
            for act in args.acts:
                for name, context in (("cached", cached), ("off", off)):
                    plans[f"{act}_{name}"] = plan(context, act)
                    plans[f"{act}_{name}_lt"] = plan(context, act, f"lt_{dtype_name}")
            out = torch.empty(m, n, device="cuda", dtype=dtype)
            contenders = {"torch_mm": lambda: torch.mm(x, w.T, out=out),
                          "torch_linear": lambda: F.linear(x, w, b)}
            for name, (run, _, _) in plans.items():
                contenders[name] = run
            with torch.no_grad():
                for fn in contenders.values():
                    fn()
                torch.cuda.synchronize()
                ref = x.double() @ w.double().T + b.double()
                refs = {"none": ref, "gelu": F.gelu(ref)}
                errors = {name: ((y.double() - refs[name.split("_")[0]]).norm() /
                                 refs[name.split("_")[0]].norm()).item() for name, (_, y, _) in plans.items()}
                graphed = {name: cuda_graphed(lambda _x, fn=fn: fn(), x) for name, fn in contenders.items()}
                inner = max(1, min(50, int(2e4 / (m * n * k / 2e9 + 5))))
                times = time_contenders(graphed, args.groups, inner)
            row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "times_us": times, "rel_error": errors,
                   "plans": {name: info for name, (_, _, info) in plans.items()}}
            rows.append(row)
            for act in args.acts:
                base = times[f"{act}_default"]
                parts = []
                for name in ("default", "default_lt", "tune", "tune_lt", "cached", "cached_lt", "off", "off_lt"):
                    info = row["plans"][f"{act}_{name}"]
                    algo = info["algo"] or {}
                    parts.append(f"{name} {times[f'{act}_{name}']:.1f} ({info['kernel']} {info['compile_ms']:.1f} ms"
                                 f" {algo.get('descriptor', '-')[:24]} {info['algo_source'] or ''})")
                print(f"{dtype_name} {shape} {act}: torch_linear {times['torch_linear']:.1f} | "
                      + " | ".join(parts) + f" | tune/default {times[f'{act}_tune'] / base:.3f}"
                      f" cached/default {times[f'{act}_cached'] / base:.3f}", flush=True)
            bad = {name: e for name, e in errors.items() if not e < 2e-2}
            if bad:
                print(f"WRONG RESULTS: {bad}", flush=True)
    with open(os.path.join(args.out, "tuned_vs_default.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "ge2": ge2.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
