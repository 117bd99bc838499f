"""The gated unit of Llama-style MLPs, h = act(x @ Wg^T) * (x @ Wu^T), weights in nn.Linear's
[out, in] layout: ge2 with the gated_mul in the CUTLASS GEMM's epilogue against ge2's cuBLASLt
GEMM + gated pass and against PyTorch, in one process on the same tensors.

Contenders per shape, dtype and activation (silu: SwiGLU, gelu: GeGLU with exact erf):
  torch_unfused   act(F.linear(x, wg)) * F.linear(x, wu)      (what the module computes)
  torch_concat    one F.linear against [wg; wu], chunk, act(a) * b
  torch_mm_2i     torch.mm(x, [wg; wu]^T) alone: the GEMM ceiling of the unit
  ge2_default     a plan with constant weights, default context (untuned: the fused CUTLASS step from
                  2048 rows where its epilogue takes the unit, else cuBLASLt + gated pass)
  ge2_lt          forced cuBLASLt: the 2I-wide GEMM, then the gated pass
  ge2_cutlass     forced cutlass_<dtype>_128x128: act(gate) * up in the GEMM's epilogue
  ge2_tuned       a context in tuning mode (tunedb in DIR): what the tuner and selector choose
  ge2_lt_2i, ge2_cutlass_2i   the 2I-wide GEMM alone (no gated unit) on each family: what the
                  epilogue and the pass cost on top of each mainloop
Every contender is one call captured in a CUDA graph and replayed back to back, so the times
compare kernels, not Python; the median over groups rotated ABBA. Errors: relative Frobenius
against an fp64 reference.

    python3 bench/gated_layers.py --out DIR [--dtypes f16 bf16] [--quick | --shapes 8192x4096x11008 ...]
                                  [--acts silu gelu] [--groups 15]
"""
import argparse
import json
import os
import sys

SHAPES = [  # (tokens, hidden, intermediate)
    (8192, 4096, 11008), (4096, 4096, 11008), (2048, 4096, 11008), (1024, 4096, 11008),
    (512, 4096, 11008), (128, 4096, 11008), (16, 4096, 11008), (1, 4096, 11008),
    (4096, 4096, 14336), (2048, 4096, 14336), (3000, 2048, 5632), (777, 5120, 13824),
    (4096, 8192, 28672),
]
QUICK = [(4096, 4096, 11008), (2048, 4096, 14336), (512, 4096, 11008), (16, 4096, 11008)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    parser.add_argument("--acts", nargs="+", default=["silu", "gelu"])
    parser.add_argument("--groups", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", nargs="+", metavar="TOKENSxHIDDENxINTER",
                        help="instead of the built-in list, e.g. 8192x4096x11008")
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch
    import torch.nn.functional as F

    import ge2
    from ffn_blocks import cuda_graphed, time_contenders

    shapes = QUICK if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes]
    torch.manual_seed(0)
    ctx = ge2.Context(device="cuda", tunedb="")
    tuned_ctx = ge2.Context(device="cuda", tune="tune", tunedb=os.path.join(args.out, "gated_tunedb.sqlite"))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for tokens, hidden, inter in shapes:
            x = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
            wg = torch.randn(inter, hidden, device="cuda", dtype=dtype) / hidden**0.5
            wu = torch.randn(inter, hidden, device="cuda", dtype=dtype) / hidden**0.5
            wgu = torch.cat([wg, wu])
            for act in args.acts:
                torch_act = {"silu": F.silu, "gelu": F.gelu}[act]

                def plan(force=None, context=ctx):
                    g = ge2.Graph()
                    vx = g.input("x", (tokens, hidden), dtype_name)
                    gate = g.activation(g.gemm(vx, g.constant("wg", wg.cpu()), trans_b=True), act)
                    g.output(g.mul(gate, g.gemm(vx, g.constant("wu", wu.cpu()), trans_b=True)), "h")
                    p = g.compile(context, force_kernel=force)
                    h = torch.empty(tokens, inter, device="cuda", dtype=dtype)
                    steps = p.describe()["steps"]
                    fused = "computed in the epilogue" in steps[0].get("gated_epilogue", "")
                    return (lambda: p.execute({"x": x, "h": h})), h, steps[0]["selection"]["kernel"], fused

                def gemm_2i(force):
                    g = ge2.Graph()
                    vx = g.input("x", (tokens, hidden), dtype_name)
                    g.output(g.gemm(vx, g.constant("wgu", wgu.cpu()), trans_b=True), "d")
                    p = g.compile(ctx, force_kernel=force)
                    d = torch.empty(tokens, 2 * inter, device="cuda", dtype=dtype)
                    return (lambda: p.execute({"x": x, "d": d})), None, force, False

                ge2_runs = {"ge2_default": plan(), "ge2_lt": plan(f"lt_{dtype_name}"),
                            "ge2_cutlass": plan(f"cutlass_{dtype_name}_128x128"), "ge2_tuned": plan(context=tuned_ctx)}
                gemms_2i = {"ge2_lt_2i": gemm_2i(f"lt_{dtype_name}"),
                            "ge2_cutlass_2i": gemm_2i(f"cutlass_{dtype_name}_128x128")}
                outs = {}

                def torch_concat():
                    a, b = F.linear(x, wgu).chunk(2, -1)
                    outs["concat"] = torch_act(a) * b

                mm_out = torch.empty(tokens, 2 * inter, device="cuda", dtype=dtype)
                contenders = {
                    "torch_unfused": lambda: outs.__setitem__("unfused", torch_act(F.linear(x, wg)) * F.linear(x, wu)),
                    "torch_concat": torch_concat,
                    "torch_mm_2i": lambda: torch.mm(x, wgu.T, out=mm_out),
                }
                for name, (run, _, _, _) in {**ge2_runs, **gemms_2i}.items():
                    contenders[name] = run
                with torch.no_grad():
                    for fn in contenders.values():
                        fn()
                    torch.cuda.synchronize()
                    x64 = x.double()
                    ref = torch_act(x64 @ wg.double().T) * (x64 @ wu.double().T)
                    rel = lambda got: ((got.double() - ref).norm() / ref.norm()).item()  # noqa: E731
                    errors = {"torch_unfused": rel(outs["unfused"]), "torch_concat": rel(outs["concat"])}
                    errors.update({name: rel(r[1]) for name, r in ge2_runs.items()})
                    graphed = {name: cuda_graphed(lambda _x, fn=fn: fn(), x) for name, fn in contenders.items()}
                    flop = 2.0 * tokens * hidden * 2 * inter
                    inner = max(1, min(50, int(2e4 / (flop / 1.4e9 + 5))))
                    times = time_contenders(graphed, args.groups, inner)
                row = {"dtype": dtype_name, "act": act, "tokens": tokens, "hidden": hidden, "inter": inter,
                       "times_us": times, "rel_error": errors,
                       "kernels": {name: r[2] for name, r in ge2_runs.items()},
                       "fused": {name: r[3] for name, r in ge2_runs.items()}}
                rows.append(row)
                t = times
                best_torch = min(t["torch_unfused"], t["torch_concat"])
                print(f"{dtype_name} {act} {tokens}x{hidden}x{inter}: cutlass gated {t['ge2_cutlass']:.1f} us "
                      f"(fused {row['fused']['ge2_cutlass']}) | lt+pass {t['ge2_lt']:.1f} | default {t['ge2_default']:.1f} "
                      f"({row['kernels']['ge2_default']}) | tuned {t['ge2_tuned']:.1f} ({row['kernels']['ge2_tuned']}, "
                      f"fused {row['fused']['ge2_tuned']}) | torch unfused {t['torch_unfused']:.1f} concat "
                      f"{t['torch_concat']:.1f} mm2i {t['torch_mm_2i']:.1f} | 2I GEMM lt {t['ge2_lt_2i']:.1f} cutlass "
                      f"{t['ge2_cutlass_2i']:.1f} | lt/cutlass {t['ge2_lt'] / t['ge2_cutlass']:.3f} "
                      f"torch-best/cutlass {best_torch / t['ge2_cutlass']:.3f} torch-unfused/cutlass "
                      f"{t['torch_unfused'] / t['ge2_cutlass']:.3f} | err cutlass {errors['ge2_cutlass']:.2e} "
                      f"lt {errors['ge2_lt']:.2e} torch {errors['torch_unfused']:.2e}", flush=True)
    with open(os.path.join(args.out, "gated_layers.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ge2": ge2.__version__,
                   "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
