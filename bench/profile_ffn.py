"""Per-kernel device time of one FFN block, ge2 against PyTorch eager, from the
CUDA profiler (CUPTI through torch.profiler): which kernel each spends its time
in. Same blocks and tensors as bench/ffn_blocks.py.

    python3 bench/profile_ffn.py [--tokens 512 4096] [--inter 11008] [--dtype f16] [--out DIR]
"""
import argparse
import json
import os


def kernel_times(fn, calls):
    """{kernel name: mean microseconds per call} over `calls` calls of fn."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        times[event.name] = times.get(event.name, 0.0) + event.device_time / calls
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 4096])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, default=11008)
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    import ge2
    from ffn_blocks import ge2_block, torch_block  # the same blocks as the benchmark

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    ctx = ge2.Context(device="cuda", tunedb="")
    report = []
    for kind in ("swiglu", "gelu"):
        block, modules = torch_block(kind, args.hidden, args.inter, dtype)
        h, i = args.hidden, args.inter
        for tokens in args.tokens:
            g = ge2_block(kind, modules, tokens, h, args.dtype)
            plan = g.compile(ctx)
            xs = torch.randn(tokens, h, device="cuda", dtype=dtype)
            ys = torch.empty_like(xs)
            with torch.no_grad():
                for name, fn in (("ge2", lambda: plan.execute({"x": xs, "y": ys})), ("torch eager", lambda: block(xs))):
                    times = kernel_times(fn, args.calls)
                    total = sum(times.values())
                    print(f"--- {args.dtype} {kind} tokens {tokens} I={i}: {name}, {total:.1f} us of kernels per call")
                    for kernel, us in times.items():
                        print(f"  {us:9.1f} us  {kernel[:140]}")
                    report.append({"block": kind, "tokens": tokens, "inter": i, "dtype": args.dtype,
                                   "contender": name, "kernel_us": times, "total_us": total})
            del plan
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "profile_ffn.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": report}, f,
                      indent=1)


if __name__ == "__main__":
    main()
