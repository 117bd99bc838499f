"""The CPU reference backend's GEMM against NumPy's matmul (OpenBLAS), one process, same arrays.

Layers as nn.Linear poses them, y = x @ W^T with W stored [out, in], plus square GEMMs.
Contenders per shape and dtype, rotated group by group (each group runs every contender once
in a rotated order), median over the groups:
  ge2      ge2.gemm_bias_act(x, W, trans_b=True) on a CPU context (the one-shot call; its plan
           is cached after the first call, so this is the GEMM and the call's host cost)
  numpy    x @ W.T in float32 (NumPy has no float16 GEMM kernel of its own: for f16 inputs
           the conversion to float32 is included, as a user would have to do it)
The relative error of ge2 against a float64 product is checked for every row.

    GE2_CPU_THREADS=N python3 bench/cpu_gemm.py --out DIR [--groups 7] [--dtypes f32 f16]
"""
import argparse
import json
import os
import platform
import time

SHAPES = [(1, 4096, 4096), (64, 4096, 4096), (256, 1024, 4096), (512, 512, 512), (1024, 1024, 1024)]


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--groups", type=int, default=7)
    parser.add_argument("--dtypes", nargs="+", default=["f32", "f16"])
    args = parser.parse_args()
    import numpy as np

    import ge2

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    ctx = ge2.Context(device="cpu", tunedb="")
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f32": np.float32, "f16": np.float16}[dtype_name]
        for m, n, k in SHAPES:
            x = rng.standard_normal((m, k)).astype(dtype)
            w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(dtype)
            y = ge2.gemm_bias_act(x, w, trans_b=True, context=ctx)  # compiles and caches the plan
            exact = x.astype(np.float64) @ w.astype(np.float64).T
            error = float(np.linalg.norm(y.astype(np.float64) - exact) / np.linalg.norm(exact))
            contenders = {
                "ge2": lambda: ge2.gemm_bias_act(x, w, trans_b=True, context=ctx),
                "numpy": lambda: x.astype(np.float32) @ w.astype(np.float32).T,
            }
            names = list(contenders)
            times = {name: [] for name in names}
            for group in range(args.groups):
                order = names[group % len(names):] + names[:group % len(names)]
                for name in order:
                    start = time.perf_counter()
                    contenders[name]()
                    times[name].append((time.perf_counter() - start) * 1e3)
            row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "rel_error": error,
                   "ms": {name: median(times[name]) for name in names}}
            row["gflops_ge2"] = 2.0 * m * n * k / row["ms"]["ge2"] / 1e6
            rows.append(row)
            print(f"{dtype_name} {m}x{n}x{k}: ge2 {row['ms']['ge2']:.2f} ms ({row['gflops_ge2']:.1f} GFLOP/s, "
                  f"rel. error {error:.1e}) | numpy {row['ms']['numpy']:.2f} ms", flush=True)
    described = ctx.describe()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or
            platform.machine(), "cpus": os.cpu_count(), "ge2": ge2.__version__,
            "library": os.environ.get("GE2_LIBRARY", "(package)"),
            "gemm_threads": described.get("gemm_threads"), "numpy": np.__version__, "groups": args.groups}
    with open(os.path.join(args.out, "cpu_gemm.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
