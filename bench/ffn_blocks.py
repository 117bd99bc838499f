"""Transformer FFN blocks as users write them, ge2 against PyTorch in one process
on the same tensors: `nn.Linear` modules (weights [out, in], so every GEMM is
x @ W^T), residual included.

  gelu:   y = x + fc2(gelu(fc1(x)))                  (bias, exact-erf GELU)
  swiglu: y = x + down(silu(gate(x)) * up(x))        (no bias, Llama style)

ge2 runs one plan per block built through the Python binding with the weights
as constants (copied into the plan at compile); PyTorch runs eagerly. Each time
is the median over groups of back-to-back calls timed with CUDA events, the two
contenders interleaved group by group (ABBA) so clocks and power affect both
alike. Outputs are checked against PyTorch in fp32.

    python3 bench/ffn_blocks.py --out DIR [--hidden 4096] [--inter 11008] [--tokens 16 512 4096]
"""
import argparse
import json
import os
import statistics

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, default=11008)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 512, 4096])
    parser.add_argument("--groups", type=int, default=20)
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch
    import torch.nn.functional as F

    import ge2

    torch.manual_seed(0)
    dev, dtype = "cuda", torch.float16
    ctx = ge2.Context(device="cuda", tunedb="")
    rows = []
    for kind in ("gelu", "swiglu"):
        bias = kind == "gelu"
        lin = lambda i, o: torch.nn.Linear(i, o, bias=bias, device=dev, dtype=dtype)  # noqa: E731
        if kind == "gelu":
            fc1, fc2 = lin(args.hidden, args.inter), lin(args.inter, args.hidden)
            torch_block = lambda x: x + fc2(F.gelu(fc1(x)))  # noqa: E731
        else:
            gate, up, down = lin(args.hidden, args.inter), lin(args.hidden, args.inter), lin(args.inter, args.hidden)
            torch_block = lambda x: x + down(F.silu(gate(x)) * up(x))  # noqa: E731
        for tokens in args.tokens:
            g = ge2.Graph()
            x = g.input("x", (tokens, args.hidden), "f16")
            const = lambda name, t: g.constant(name, t.detach().cpu().numpy())  # noqa: E731
            if kind == "gelu":
                h = g.activation(g.bias(g.gemm(x, const("w1", fc1.weight), trans_b=True), const("b1", fc1.bias)), "gelu")
                y = g.add(g.bias(g.gemm(h, const("w2", fc2.weight), trans_b=True), const("b2", fc2.bias)), x)
            else:
                a = g.activation(g.gemm(x, const("wg", gate.weight), trans_b=True), "silu")
                h = g.mul(a, g.gemm(x, const("wu", up.weight), trans_b=True))
                y = g.add(g.gemm(h, const("wd", down.weight), trans_b=True), x)
            g.output(y, "y")
            plan = g.compile(ctx)
            xs = torch.randn(tokens, args.hidden, device=dev, dtype=dtype)
            ys = torch.empty_like(xs)
            with torch.no_grad():
                want = torch_block(xs.float().to(dtype)).float()
                plan.execute({"x": xs, "y": ys})
                torch.cuda.synchronize()
                err = ((ys.float() - want).norm() / want.norm()).item()
                contenders = {"ge2": lambda: plan.execute({"x": xs, "y": ys}), "torch eager": lambda: torch_block(xs)}
                times = {name: [] for name in contenders}
                for fn in contenders.values():  # warm-up
                    for _ in range(3):
                        fn()
                torch.cuda.synchronize()
                inner = 20 if tokens <= 512 else 5
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for group in range(args.groups):
                    order = list(contenders) if group % 4 in (0, 3) else list(reversed(contenders))  # ABBA
                    for name in order:
                        start.record()
                        for _ in range(inner):
                            contenders[name]()
                        stop.record()
                        stop.synchronize()
                        times[name].append(start.elapsed_time(stop) * 1e3 / inner)
            med = {name: statistics.median(t) for name, t in times.items()}
            steps = [s["op"] + ("+C" if "c" in s.get("problem", {}) else "") for s in plan.describe()["steps"]]
            row = {"block": kind, "tokens": tokens, "hidden": args.hidden, "inter": args.inter, "dtype": "f16",
                   "ge2_us": med["ge2"], "torch_eager_us": med["torch eager"],
                   "ratio_torch_over_ge2": med["torch eager"] / med["ge2"], "rel_error_vs_torch": err,
                   "ge2_steps": steps}
            rows.append(row)
            print(f"{kind:7s} tokens {tokens:5d}: ge2 {med['ge2']:9.1f} us  torch eager {med['torch eager']:9.1f} us"
                  f"  ratio {row['ratio_torch_over_ge2']:.3f}  err {err:.2e}  steps {steps}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ffn_blocks.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "ge2": ge2.library_version(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
