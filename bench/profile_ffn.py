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
    import torch.nn.functional as F

    import ge2

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    ctx = ge2.Context(device="cuda", tunedb="")
    report = []
    for kind in ("swiglu", "gelu"):
        bias = kind == "gelu"
        lin = lambda i, o: torch.nn.Linear(i, o, bias=bias, device="cuda", dtype=dtype)  # noqa: E731
        h, i = args.hidden, args.inter
        if kind == "gelu":
            fc1, fc2 = lin(h, i), lin(i, h)
            block = lambda x: x + fc2(F.gelu(fc1(x)))  # noqa: E731
        else:
            gate, up, down = lin(h, i), lin(h, i), lin(i, h)
            block = lambda x: x + down(F.silu(gate(x)) * up(x))  # noqa: E731
        for tokens in args.tokens:
            g = ge2.Graph()
            x = g.input("x", (tokens, h), args.dtype)
            const = lambda name, t: g.constant(name, t.detach().cpu())  # noqa: E731
            if kind == "gelu":
                hid = g.activation(g.bias(g.gemm(x, const("w1", fc1.weight), trans_b=True), const("b1", fc1.bias)),
                                   "gelu")
                y = g.add(g.bias(g.gemm(hid, const("w2", fc2.weight), trans_b=True), const("b2", fc2.bias)), x)
            else:
                a = g.activation(g.gemm(x, const("wg", gate.weight), trans_b=True), "silu")
                y = g.add(g.gemm(g.mul(a, g.gemm(x, const("wu", up.weight), trans_b=True)),
                                 const("wd", down.weight), trans_b=True), x)
            g.output(y, "y")
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
