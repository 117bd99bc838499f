"""Transformer FFN blocks as users write them, ge2 against PyTorch in one process
on the same tensors: `nn.Linear` modules (weights [out, in], so every GEMM is
x @ W^T), residual included.

  gelu:   y = x + fc2(gelu(fc1(x)))                  (bias, exact-erf GELU)
  swiglu: y = x + down(silu(gate(x)) * up(x))        (no bias, Llama style)

ge2 runs one plan per block built through the Python binding with the weights
as constants (copied into the plan at compile, gate and up joined into one
GEMM), eagerly and with graph_replay, and with graph_replay in a context that
tunes each GEMM at compile (tune="tune"), and as `ge2.torch.convert(block)` (the module helper
a PyTorch user calls: the same plan behind a custom operator); PyTorch runs eagerly, as a captured CUDA
graph and (with --compile) through torch.compile. Each time is the median over
groups of back-to-back calls timed with CUDA events, the contenders rotated
group by group so clocks and power affect all alike. Outputs are checked
against PyTorch eager.

    python3 bench/ffn_blocks.py --out DIR [--hidden 4096] [--inter 11008 14336]
        [--tokens 1 16 512 4096] [--dtypes f16 bf16] [--blocks gelu swiglu] [--compile]
"""
import argparse
import json
import os
import statistics


def torch_block(kind, hidden, inter, dtype):
    """(block, modules): the block as users write it, an nn.Module of nn.Linear modules on the GPU."""
    import torch
    import torch.nn.functional as F

    lin = lambda i, o: torch.nn.Linear(i, o, bias=kind == "gelu", device="cuda", dtype=dtype)  # noqa: E731

    class Gelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = lin(hidden, inter), lin(inter, hidden)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(x)))

    class SwiGLU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.up, self.down = lin(hidden, inter), lin(hidden, inter), lin(inter, hidden)

        def forward(self, x):
            return x + self.down(F.silu(self.gate(x)) * self.up(x))

    block = (Gelu if kind == "gelu" else SwiGLU)().eval()
    return block, dict(block.named_children())


def ge2_block(kind, modules, tokens, hidden, dtype_name, dynamic=False):
    """The same block as a ge2 graph, the modules' weights as constants ([out, in]: trans_b);
    dynamic: x's rows are the dynamic extent with `tokens` as its bound."""
    import ge2

    g = ge2.Graph()
    x = g.input("x", (tokens, hidden), dtype_name, dynamic=dynamic)
    const = lambda name, t: g.constant(name, t.detach().cpu())  # noqa: E731
    if kind == "gelu":
        fc1, fc2 = modules["fc1"], modules["fc2"]
        h = g.activation(g.bias(g.gemm(x, const("w1", fc1.weight), trans_b=True), const("b1", fc1.bias)), "gelu")
        y = g.add(g.bias(g.gemm(h, const("w2", fc2.weight), trans_b=True), const("b2", fc2.bias)), x)
    else:
        a = g.activation(g.gemm(x, const("wg", modules["gate"].weight), trans_b=True), "silu")
        h = g.mul(a, g.gemm(x, const("wu", modules["up"].weight), trans_b=True))
        y = g.add(g.gemm(h, const("wd", modules["down"].weight), trans_b=True), x)
    g.output(y, "y")
    return g


def cuda_graphed(fn, x):
    """fn(x) captured once as a CUDA graph; calls replay it on x's storage."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    return graph.replay


def time_contenders(contenders, groups, inner):
    """Median microseconds per call of each contender, rotated group by group."""
    import torch

    names = list(contenders)
    times = {name: [] for name in names}
    for fn in contenders.values():  # warm-up
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for group in range(groups):
        shift = group % len(names)
        order = names[shift:] + names[:shift]
        if group % 2:
            order.reverse()
        for name in order:
            start.record()
            for _ in range(inner):
                contenders[name]()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) * 1e3 / inner)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, nargs="+", default=[11008, 14336])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 512, 4096])
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    parser.add_argument("--blocks", nargs="+", default=["swiglu", "gelu"])
    parser.add_argument("--groups", type=int, default=21)
    parser.add_argument("--compile", action="store_true", help="add torch.compile (slow to build)")
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch

    import ge2
    import ge2.torch

    torch.manual_seed(0)
    dev = "cuda"
    ctx = ge2.Context(device="cuda", tunedb="")
    # A second context tunes every GEMM once at compile (GE2_TUNE_TUNE) into a database under --out.
    os.makedirs(args.out, exist_ok=True)
    tuned_ctx = ge2.Context(device="cuda", tune="tune", tunedb=os.path.join(args.out, "ffn_tunedb.sqlite"))
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        for kind in args.blocks:
            for inter in args.inter:
                block, modules = torch_block(kind, args.hidden, inter, dtype)
                converted = ge2.torch.convert(block)  # the module helper: what a PyTorch user calls
                for tokens in args.tokens:
                    g = ge2_block(kind, modules, tokens, args.hidden, dtype_name)
                    plan = g.compile(ctx)
                    replay = g.compile(ctx, graph_replay=True)
                    tuned = g.compile(tuned_ctx, graph_replay=True)
                    xs = torch.randn(tokens, args.hidden, device=dev, dtype=dtype)
                    ys, yr, yt = torch.empty_like(xs), torch.empty_like(xs), torch.empty_like(xs)
                    with torch.no_grad():
                        want = block(xs).float()
                        plan.execute({"x": xs, "y": ys})
                        replay.execute({"x": xs, "y": yr})
                        torch.cuda.synchronize()
                        err = ((ys.float() - want).norm() / want.norm()).item()
                        err_replay = ((yr.float() - want).norm() / want.norm()).item()
                        err_module = ((converted(xs).float() - want).norm() / want.norm()).item()
                        contenders = {
                            "ge2": lambda: plan.execute({"x": xs, "y": ys}),
                            "ge2 graph_replay": lambda: replay.execute({"x": xs, "y": yr}),
                            "ge2 tuned replay": lambda: tuned.execute({"x": xs, "y": yt}),
                            "ge2.torch module": lambda: converted(xs),
                            "torch eager": lambda: block(xs),
                            "torch cuda graph": cuda_graphed(block, xs),
                        }
                        if args.compile:
                            compiled = torch.compile(block, dynamic=False)
                            compiled(xs)
                            contenders["torch.compile"] = lambda: compiled(xs)
                        inner = 20 if tokens <= 512 else 5
                        med = time_contenders(contenders, args.groups, inner)
                    steps = [s["op"] + ("+C" if "c" in s.get("problem", {}) else "")
                             for s in plan.describe()["steps"]]
                    flops = 2 * tokens * args.hidden * inter * (3 if kind == "swiglu" else 2)
                    row = {"block": kind, "tokens": tokens, "hidden": args.hidden, "inter": inter,
                           "dtype": dtype_name, "us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
                           "eager_over_ge2": med["torch eager"] / min(med["ge2"], med["ge2 graph_replay"]),
                           "eager_over_ge2_tuned": med["torch eager"] / med["ge2 tuned replay"],
                           "rel_error_vs_torch": err, "rel_error_replay": err_replay,
                           "rel_error_module": err_module, "ge2_steps": steps}
                    rows.append(row)
                    times = "  ".join(f"{k} {v:8.1f}" for k, v in med.items())
                    print(f"{dtype_name:4s} {kind:6s} I={inter:5d} tokens {tokens:5d}: {times} us  "
                          f"eager/ge2 {row['eager_over_ge2']:.3f}  err {err:.1e}  steps {steps}", flush=True)
                    del plan, replay, tuned
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ffn_blocks.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "ge2": ge2.library_version(), "command": "python3 bench/ffn_blocks.py " +
                   " ".join(f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                            for k, v in vars(args).items() if v is not False),
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
