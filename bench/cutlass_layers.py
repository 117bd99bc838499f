"""One FFN layer, y = act(x @ W^T + b), with W in nn.Linear's [out, in] layout:
ge2's CUTLASS kernels (bias and activation in the epilogue) against ge2 on
cuBLASLt and against PyTorch, in one process on the same tensors.

Contenders per shape and dtype:
  torch_mm        torch.mm(x, W^T): the GEMM ceiling
  torch_erf       F.gelu(F.linear(x, W, b))              (exact erf GELU)
  torch_silu      F.silu(F.linear(x, W, b))
  ge2_erf         ge2's default choice for bias + erf GELU (CUTLASS on Hopper)
  ge2_erf_lt      forced cuBLASLt: GEMM + bias, then the separate erf pass
  ge2_tanh        ge2's default choice for bias + tanh GELU (cuBLASLt's fused epilogue)
  ge2_silu        ge2's default choice for bias + SiLU
  ge2_none_lt     bias only, cuBLASLt; ge2_none_cutlass_* forced CUTLASS, per configuration
  ge2_erf_cutlass_* erf GELU forced onto each CUTLASS configuration
  ge2_silu_cutlass_128x128  SiLU forced onto the 128x128 configuration
  ge2_{none,erf,silu}_tuned  a context in tuning mode (fresh database): every
                  feasible kernel timed at compile, the fastest kept
Every contender is one call captured in a CUDA graph and replayed back to back,
so the times compare kernels, not Python; the median over groups rotated ABBA.
Errors: max |y - ref| against an fp64 reference, ge2's beside PyTorch's.

    python3 bench/cutlass_layers.py --out DIR [--dtypes f16 bf16] [--quick]
    python3 bench/cutlass_layers.py --table DIR/cutlass_layers.json   (the Markdown table again)
"""
import argparse
import json
import os

SHAPES = [  # (M, N, K): tokens, out features, in features
    (4096, 11008, 4096), (4096, 4096, 11008), (4096, 4096, 4096), (16384, 4096, 1024),
    (4096, 14336, 4096), (2048, 4096, 1024), (300, 11008, 4096), (512, 1024, 512),
    (128, 4096, 4096), (16, 4096, 4096), (1, 4096, 4096),
]
QUICK = [(4096, 11008, 4096), (16384, 4096, 1024), (512, 1024, 512), (16, 4096, 4096)]
CONFIGS = ["128x256", "64x128", "128x128"]


def markdown_table(rows):
    """The rows as the Markdown table of bench/results/*/README.md (times in us; a CUTLASS erf
    time marked with a cross where its output was wrong: max error above 1)."""
    cfgs = [c for c in CONFIGS if f"ge2_none_cutlass_{c}" in rows[0]["times_us"]]
    lines = ["| dtype | M×N×K | torch.mm | cuBLASLt bias | CUTLASS bias " + " / ".join(cfgs) +
             " | torch gelu(linear) | cuBLASLt + erf pass | CUTLASS erf " + " / ".join(cfgs) +
             " | cuBLASLt tanh-fused |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, e = r["times_us"], r["max_abs_error"]
        erf = " / ".join(f"{t[f'ge2_erf_cutlass_{c}']:.1f}" + (" ✗" if e[f"ge2_erf_cutlass_{c}"] > 1.0 else "")
                         for c in cfgs)
        tanh = f"{t['ge2_tanh']:.1f}" + ("" if r["kernels"]["ge2_tanh"].startswith("lt_")
                                         else f" ({r['kernels']['ge2_tanh']})")
        lines.append(f"| {r['dtype']} | {r['m']}×{r['n']}×{r['k']} | {t['torch_mm']:.1f} | {t['ge2_none_lt']:.1f} | "
                     + " / ".join(f"{t[f'ge2_none_cutlass_{c}']:.1f}" for c in cfgs)
                     + f" | {t['torch_erf']:.1f} | {t['ge2_erf_lt']:.1f} | {erf} | {tanh} |")
    text = "\n".join(lines) + "\n"
    if "ge2_erf_tuned" in rows[0]["times_us"]:  # runs since 2026-12-03 (run 10)
        text += ("\n| dtype | M×N×K | tuned bias (kernel) | tuned erf (kernel) | torch gelu(linear) | erf: torch / tuned |"
                 " torch silu(linear) | CUTLASS silu 128x128 | tuned silu (kernel) | silu: torch / tuned |\n"
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            t, kn = r["times_us"], r["kernels"]
            text += (f"| {r['dtype']} | {r['m']}×{r['n']}×{r['k']} | {t['ge2_none_tuned']:.1f} ({kn['ge2_none_tuned']}) | "
                     f"{t['ge2_erf_tuned']:.1f} ({kn['ge2_erf_tuned']}) | {t['torch_erf']:.1f} | "
                     f"{t['torch_erf'] / t['ge2_erf_tuned']:.2f} | {t['torch_silu']:.1f} | "
                     f"{t['ge2_silu_cutlass_128x128']:.1f} | {t['ge2_silu_tuned']:.1f} ({kn['ge2_silu_tuned']}) | "
                     f"{t['torch_silu'] / t['ge2_silu_tuned']:.2f} |\n")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--table", help="print the Markdown table of an earlier run's JSON and stop")
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    parser.add_argument("--groups", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.table:
        with open(args.table) as f:
            print(markdown_table(json.load(f)["rows"]), end="")
        return
    if not args.out:
        parser.error("--out is required")
    import torch  # after argparse: --help and --table work without torch
    import torch.nn.functional as F

    import ge2
    from ffn_blocks import cuda_graphed, linear_layer, time_contenders

    torch.manual_seed(0)
    ctx = ge2.Context(device="cuda", tunedb="")
    tunedb = os.path.join(args.out, "cutlass_layers_tunedb.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(tunedb + suffix):
            os.remove(tunedb + suffix)
    os.makedirs(args.out, exist_ok=True)
    ctx_tune = ge2.Context(device="cuda", tune="tune", tunedb=tunedb)
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for m, n, k in QUICK if args.quick else SHAPES:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            ref_pre = (x.double() @ w.double().T + b.double())

            def plan(act, force=None, context=ctx):
                p = linear_layer(m, n, k, dtype_name, act).compile(context, force_kernel=force)
                y = torch.empty(m, n, device="cuda", dtype=dtype)
                run = lambda: p.execute({"x": x, "w": w, "b": b, "y": y})  # noqa: E731
                kernel = [s["selection"]["kernel"] for s in p.describe()["steps"] if "selection" in s][0]
                return run, y, kernel

            lt = f"lt_{dtype_name}"
            ge2_runs = {
                "ge2_erf": plan("gelu"), "ge2_erf_lt": plan("gelu", lt), "ge2_tanh": plan("gelu_tanh"),
                "ge2_silu": plan("silu"), "ge2_none_lt": plan(None, lt),
            }
            for cfg in CONFIGS:
                ge2_runs[f"ge2_none_cutlass_{cfg}"] = plan(None, f"cutlass_{dtype_name}_{cfg}")
                ge2_runs[f"ge2_erf_cutlass_{cfg}"] = plan("gelu", f"cutlass_{dtype_name}_{cfg}")
            ge2_runs["ge2_silu_cutlass_128x128"] = plan("silu", f"cutlass_{dtype_name}_128x128")
            for act, name in ((None, "none"), ("gelu", "erf"), ("silu", "silu")):
                ge2_runs[f"ge2_{name}_tuned"] = plan(act, context=ctx_tune)
            outs = {}
            contenders = {
                "torch_mm": lambda: torch.mm(x, w.T, out=outs.setdefault("mm", torch.empty(m, n, device="cuda", dtype=dtype))),
                "torch_erf": lambda: outs.__setitem__("erf", F.gelu(F.linear(x, w, b))),
                "torch_silu": lambda: outs.__setitem__("silu", F.silu(F.linear(x, w, b))),
            }
            for name, (run, _, _) in ge2_runs.items():
                contenders[name] = run
            with torch.no_grad():
                for fn in contenders.values():
                    fn()
                torch.cuda.synchronize()
                ref_erf = F.gelu(ref_pre)
                ref_silu = F.silu(ref_pre)
                err = lambda got, ref: (got.double() - ref).abs().max().item()  # noqa: E731
                errors = {
                    "torch_erf": err(outs["erf"], ref_erf), "ge2_erf": err(ge2_runs["ge2_erf"][1], ref_erf),
                    "ge2_erf_lt": err(ge2_runs["ge2_erf_lt"][1], ref_erf),
                    "torch_silu": err(outs["silu"], ref_silu), "ge2_silu": err(ge2_runs["ge2_silu"][1], ref_silu),
                    "ge2_erf_tuned": err(ge2_runs["ge2_erf_tuned"][1], ref_erf),
                    "ge2_silu_tuned": err(ge2_runs["ge2_silu_tuned"][1], ref_silu),
                    "ge2_silu_cutlass_128x128": err(ge2_runs["ge2_silu_cutlass_128x128"][1], ref_silu),
                }
                for cfg in CONFIGS:
                    errors[f"ge2_erf_cutlass_{cfg}"] = err(ge2_runs[f"ge2_erf_cutlass_{cfg}"][1], ref_erf)
                graphed = {name: cuda_graphed(lambda _x, fn=fn: fn(), x) for name, fn in contenders.items()}
                inner = max(1, min(50, int(2e4 / (m * n * k / 2e9 + 5))))
                times = time_contenders(graphed, args.groups, inner)
            row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "times_us": times, "max_abs_error": errors,
                   "kernels": {name: r[2] for name, r in ge2_runs.items()}}
            rows.append(row)
            t = times
            print(f"{dtype_name} {m}x{n}x{k}: ge2_erf {t['ge2_erf']:.1f} us ({row['kernels']['ge2_erf']}) | "
                  f"tanh-fused/erf {t['ge2_tanh'] / t['ge2_erf']:.3f} | torch_erf/ge2_erf {t['torch_erf'] / t['ge2_erf']:.3f} | "
                  f"torch_silu/ge2_silu {t['torch_silu'] / t['ge2_silu']:.3f} ({row['kernels']['ge2_silu']}) | "
                  f"mm/cutlass-none best {t['torch_mm'] / min(t[f'ge2_none_cutlass_{c}'] for c in CONFIGS):.3f} | "
                  f"erf cutlass " + " ".join(f"{c} {t[f'ge2_erf_cutlass_{c}']:.1f}" for c in CONFIGS) +
                  f" lt+pass {t['ge2_erf_lt']:.1f} | err ge2 {errors['ge2_erf']:.2e} torch {errors['torch_erf']:.2e} | "
                  f"tuned: erf {t['ge2_erf_tuned']:.1f} ({row['kernels']['ge2_erf_tuned']}) "
                  f"silu {t['ge2_silu_tuned']:.1f} ({row['kernels']['ge2_silu_tuned']}) "
                  f"none {t['ge2_none_tuned']:.1f} ({row['kernels']['ge2_none_tuned']})",
                  flush=True)
    with open(os.path.join(args.out, "cutlass_layers.md"), "w") as f:
        f.write(markdown_table(rows))
    with open(os.path.join(args.out, "cutlass_layers.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "ge2": ge2.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
