"""Which device kernels PyTorch and ge2 run for one nn.Linear layer (+ exact GELU), and how long
each takes, from the PyTorch profiler: where a ge2 layer is slower than PyTorch's, this says
whether the GEMM (cuBLASLt's algorithm), the bias/activation epilogue or the separate pass differs.
Contenders, on the same tensors: F.linear, F.gelu(F.linear), torch.mm on the weight's transpose,
and ge2 plans for bias alone and bias + erf GELU (default settings, untuned), each warmed up, then
profiled over --calls calls.

    python3 bench/layer_kernels.py --out DIR [--shapes 512x11008x4096 ...] [--dtype f16] [--calls 30]
"""
import argparse
import json
import os


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", default=["512x11008x4096", "1024x11008x4096", "4096x11008x4096"],
                        help="MxNxK: x [M, K], weight [N, K] (nn.Linear)")
    parser.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import ge2
    from ffn_blocks import linear_layer

    torch.manual_seed(0)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    ctx = ge2.Context(device="cuda", tunedb="")
    rows = []
    for shape in args.shapes:
        m, n, k = map(int, shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
        b = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        plans = {}
        for act in (None, "gelu"):
            plans[act] = linear_layer(m, n, k, args.dtype, act).compile(ctx)
        runs = {"torch_linear": lambda: F.linear(x, w, b),
                "torch_linear_gelu": lambda: F.gelu(F.linear(x, w, b)),
                "torch_mm": lambda: torch.mm(x, w.T),
                "ge2_bias": lambda: plans[None].execute({"x": x, "w": w, "b": b, "y": y}),
                "ge2_bias_gelu": lambda: plans["gelu"].execute({"x": x, "w": w, "b": b, "y": y})}
        row = {"m": m, "n": n, "k": k, "dtype": args.dtype, "contenders": {}}
        for name, fn in runs.items():
            with torch.no_grad():
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.calls):
                        fn()
                    torch.cuda.synchronize()
            kernels = [{"kernel": e.key, "us": e.device_time_total / e.count, "count": e.count}
                       for e in prof.key_averages() if e.device_time_total > 0]
            row["contenders"][name] = kernels
            print(f"{m}x{n}x{k} {name}: " + " | ".join(f"{q['kernel'][:100]} {q['us']:.1f} us x{q['count']}"
                                                      for q in kernels), flush=True)
        row["ge2_plans"] = {str(act): plan.describe()["steps"] for act, plan in plans.items()}
        rows.append(row)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "layer_kernels.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
