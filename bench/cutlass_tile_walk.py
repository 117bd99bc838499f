#!/usr/bin/env python3
"""The order in which ge2's CUTLASS kernels walk their output tiles, measured.

For each case one ge2 plan per tile walk (GE2_CUTLASS_TILE_WALK = "<swizzle>,<m|n>",
src/backends/cuda/cutlass_tile_walk.hpp), the kernel forced; beside them the plan's
default walk, ge2 on cuBLASLt and PyTorch. Every contender is one call captured in a
CUDA graph, replayed back to back, groups rotated ABBA; medians in microseconds.

    python3 bench/cutlass_tile_walk.py --out DIR [--groups 7] [--cases plain gated erf down wide]
"""
import argparse
import json
import os

WALKS = ["1,m", "2,m", "4,m", "8,m", "1,n", "2,n", "4,n", "8,n"]
# name: (dtype, act, gated, bias, kernel config, [(M, N, K)]) -- N is the GEMM's width (2I for gated units)
CASES = {
    "plain": ("bf16", "none", False, False, "128x128",
              [(512, 22016, 4096), (2048, 22016, 4096), (3000, 22016, 4096), (8192, 22016, 4096)]),
    "gated": ("bf16", "silu", True, False, "128x128", [(2048, 22016, 4096), (8192, 22016, 4096)]),
    "erf": ("f16", "gelu", False, True, "128x128", [(512, 11008, 4096), (4096, 11008, 4096)]),
    "down": ("f16", "none", False, True, "128x128", [(4096, 4096, 11008), (16384, 4096, 1024)]),
    "wide": ("f16", "none", False, False, "128x256", [(8192, 22016, 4096), (4096, 11008, 4096)]),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--groups", type=int, default=7)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--walks", nargs="+", default=WALKS)
    parser.add_argument("--shapes", type=int, default=None, help="only the first N shapes of each case")
    parser.add_argument("--check", action="store_true",
                        help="run each plan once, synchronised, against PyTorch; no timing")
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F

    import ge2
    from ffn_blocks import cuda_graphed, time_contenders

    os.makedirs(args.out, exist_ok=True)
    ctx = ge2.Context(device="cuda", tunedb="")
    torch.manual_seed(0)
    rows = []
    for case in args.cases:
        dtype_name, act, gated, bias, config, shapes = CASES[case]
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for m, n, k in shapes[:args.shapes]:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
            b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
            width = n // 2 if gated else n
            out = torch.empty(m, width, device="cuda", dtype=dtype)

            def plan(force, walk):
                if walk is None:
                    os.environ.pop("GE2_CUTLASS_TILE_WALK", None)
                else:
                    os.environ["GE2_CUTLASS_TILE_WALK"] = walk
                g = ge2.Graph()
                vx = g.input("x", (m, k), dtype_name)
                if gated:
                    half = n // 2
                    gate = g.gemm(vx, g.constant("wg", w[:half].cpu()), trans_b=True)
                    up = g.gemm(vx, g.constant("wu", w[half:].cpu()), trans_b=True)
                    y = g.mul(g.activation(gate, act), up)
                else:
                    y = g.gemm(vx, g.constant("w", w.cpu()), trans_b=True)
                    if bias:
                        y = g.add(y, g.constant("b", b.cpu()))
                    if act != "none":
                        y = g.activation(y, act)
                g.output(y, "y")
                p = g.compile(ctx, force_kernel=force)
                os.environ.pop("GE2_CUTLASS_TILE_WALK", None)
                step = p.describe()["steps"][0]
                if args.check:
                    out.fill_(float("nan"))
                    p.execute({"x": x, "y": out})
                    torch.cuda.synchronize()
                    error = ((out.float() - want).norm() / want.norm()).item()
                    print(f"  check {case} {m}x{n}x{k} {force} walk {walk}: {step.get('kernel', {}).get('tile_walk', '')}"
                          f" relative error {error:.2e}", flush=True)
                    return None, step["selection"]["kernel"], ""
                # The captured graph reads the plan's constants: the plan must outlive it.
                plans_alive.append(p)
                run = cuda_graphed(lambda v: p.execute({"x": v, "y": out}), x)
                return run, step["selection"]["kernel"], step.get("kernel", {}).get("tile_walk", "")

            if gated:
                half = n // 2
                torch_fn = lambda v: F.silu(F.linear(v, w[:half])) * F.linear(v, w[half:])
            else:
                torch_fn = {"none": lambda v: F.linear(v, w, b),
                            "gelu": lambda v: F.gelu(F.linear(v, w, b))}[act]
            want = torch_fn(x).float()
            kernel = f"cutlass_{dtype_name}_{config}"
            runs, walks_seen, plans_alive = {}, {}, []
            for walk in args.walks:
                runs[walk], _, walks_seen[walk] = plan(kernel, walk)
            runs["default walk"], _, walks_seen["default walk"] = plan(kernel, None)
            runs["lt"], lt_kernel, _ = plan(f"lt_{dtype_name}", None)
            runs["ge2 default"], default_kernel, walks_seen["ge2 default"] = plan(None, None)
            if args.check:
                continue
            runs["torch"] = cuda_graphed(torch_fn, x)
            times = time_contenders(runs, args.groups, inner=10 if m * n * k < 1e11 else 3)
            best = min(args.walks, key=lambda wk: times[wk])
            row = {"case": case, "dtype": dtype_name, "act": act, "gated": gated, "m": m, "n": n, "k": k,
                   "kernel": kernel, "default_kernel": default_kernel, "times_us": times, "walks": walks_seen,
                   "best_walk": best}
            rows.append(row)
            print(f"{case:6s} {dtype_name} {m}x{n}x{k} {kernel}: " +
                  " ".join(f"[{wk}] {times[wk]:.1f}" for wk in args.walks) +
                  f" | default walk {times['default walk']:.1f} | lt {times['lt']:.1f} | ge2 default "
                  f"{times['ge2 default']:.1f} ({default_kernel}) | torch {times['torch']:.1f} | best {best} "
                  f"{times['default walk'] / times[best]:.3f}x over default walk", flush=True)
            with open(os.path.join(args.out, "cutlass_tile_walk.json"), "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
