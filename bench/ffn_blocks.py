"""Transformer FFN blocks as users write them, ge2 against PyTorch in one process
on the same tensors: `nn.Linear` modules (weights [out, in], so every GEMM is
x @ W^T), with or without the residual add.

  gelu:      y = [x +] fc2(gelu(fc1(x)))                 (bias, exact-erf GELU: nn.GELU())
  gelu_tanh: y = [x +] fc2(gelu(fc1(x), 'tanh'))         (bias, GPT-2's GELU)
  relu:      y = [x +] fc2(relu(fc1(x)))                 (bias)
  swiglu:    y = [x +] down(silu(gate(x)) * up(x))       (no bias, Llama style)
  geglu:     y = [x +] down(gelu(gate(x)) * up(x))       (no bias, exact erf, Gemma style)

ge2 runs one plan per block built through the Python binding with the weights
as constants (copied into the plan at compile, gate and up joined into one
GEMM), eagerly and with graph_replay, and with graph_replay in a context that
tunes each GEMM at compile (tune="tune"), and as `ge2.torch.convert(block)` (the module helper
a PyTorch user calls: the same plan behind a custom operator); PyTorch runs eagerly, as a captured CUDA
graph and (with --compile default max-autotune) through torch.compile. Each time is the median over
groups of back-to-back calls timed with CUDA events, the contenders rotated
group by group (ABBA) so clocks and power affect all alike; the SM clock and the board power are
sampled (nvidia-smi, every 100 ms) and each row keeps their medians over its timing. Outputs are
checked against PyTorch eager. ge2's C++ host cost per node is bench/bench_gemm's (it drives
the C API directly); here the Python call's cost is inside each ge2 time. At decode sizes a block
streams its weights: each row gives that rate for ge2's default time and its fraction of what this
device reads a 1 GiB tensor at (a sum) in the same process, measured first.

    python3 bench/ffn_blocks.py --out DIR [--hidden 4096] [--inter 11008 14336]
        [--tokens 1 16 512 4096] [--dtypes f16 bf16] [--blocks gelu swiglu]
        [--residual yes no] [--compile default max-autotune] [--decode-ws-peer]
    python3 bench/plot_ffn.py DIR/ffn_blocks.json DIR/ffn_ratios.png     (the ratios as bars)

--device cpu runs the same blocks on ge2's CPU backend and PyTorch's CPU eager with wall-clock
timing and no graph contenders: a check of this script (bindings/python/tests), not a benchmark.
"""
import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import time

# block: (activation, by its name in ge2's graph; biased layers; gated)
BLOCKS = {
    "gelu": ("gelu", True, False),
    "gelu_tanh": ("gelu_tanh", True, False),
    "relu": ("relu", True, False),
    "swiglu": ("silu", False, True),
    "geglu": ("gelu", False, True),
}


def torch_activation(act):
    """PyTorch's function for ge2's activation `act` ('gelu' is the exact erf form, as nn.GELU())."""
    import torch.nn.functional as F

    return {"relu": F.relu, "silu": F.silu, "gelu": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[act]


def torch_block(kind, hidden, inter, dtype, residual=True, device="cuda"):
    """(block, modules): the block as users write it, an nn.Module of nn.Linear modules."""
    import torch

    act_name, biased, gated = BLOCKS[kind]
    act = torch_activation(act_name)
    lin = lambda i, o: torch.nn.Linear(i, o, bias=biased, device=device, dtype=dtype)  # noqa: E731

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = lin(hidden, inter), lin(inter, hidden)

        def forward(self, x):
            y = self.fc2(act(self.fc1(x)))
            return x + y if residual else y

    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.up, self.down = lin(hidden, inter), lin(hidden, inter), lin(inter, hidden)

        def forward(self, x):
            y = self.down(act(self.gate(x)) * self.up(x))
            return x + y if residual else y

    block = (Gated if gated else Mlp)().eval()
    return block, dict(block.named_children())


def ge2_block(kind, modules, tokens, hidden, dtype_name, dynamic=False, residual=True, output_h=False):
    """The same block as a ge2 graph, the modules' weights as constants ([out, in]: trans_b);
    dynamic: x's rows are the dynamic extent with `tokens` as its bound; output_h: the
    intermediate h (the down projection's input) is an output "h" too."""
    import ge2

    act, _, gated = BLOCKS[kind]
    g = ge2.Graph()
    x = g.input("x", (tokens, hidden), dtype_name, dynamic=dynamic)
    const = lambda name, t: g.constant(name, t.detach().cpu())  # noqa: E731
    if gated:
        a = g.activation(g.gemm(x, const("wg", modules["gate"].weight), trans_b=True), act)
        h = g.mul(a, g.gemm(x, const("wu", modules["up"].weight), trans_b=True))
        y = g.gemm(h, const("wd", modules["down"].weight), trans_b=True)
    else:
        fc1, fc2 = modules["fc1"], modules["fc2"]
        h = g.activation(g.bias(g.gemm(x, const("w1", fc1.weight), trans_b=True), const("b1", fc1.bias)), act)
        y = g.bias(g.gemm(h, const("w2", fc2.weight), trans_b=True), const("b2", fc2.bias))
    g.output(g.add(y, x) if residual else y, "y")
    if output_h:
        g.output(h, "h")
    return g


def linear_layer(m, n, k, dtype_name, act=None):
    """One nn.Linear layer as a ge2 graph: inputs x (m, k), w (n, k) (the module's [out, in] weight,
    so trans_b) and b (n,); output y = act(x @ w^T + b) (act: a ge2 activation name or None)."""
    import ge2

    g = ge2.Graph()
    vx, vw, vb = g.input("x", (m, k), dtype_name), g.input("w", (n, k), dtype_name), g.input("b", (n,), dtype_name)
    g.output(g.gemm_bias_act(vx, vw, vb, act=act, trans_b=True), "y")
    return g


def write_results(args, script, fields, device=None):
    """DIR/<script>.json (DIR: args.out): the device (default: the current CUDA device's name),
    PyTorch's and ge2's versions, the UTC date, the command line and `fields`."""
    import torch

    import ge2

    os.makedirs(args.out, exist_ok=True)
    command = f"python3 bench/{script}.py " + " ".join(
        f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if v not in (False, []))
    with open(os.path.join(args.out, f"{script}.json"), "w") as f:
        json.dump({"device": device or torch.cuda.get_device_name(), "torch": torch.__version__,
                   "ge2": ge2.library_version(),
                   "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   "command": command, **fields}, f, indent=1)


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


def time_contenders(contenders, groups, inner, device="cuda"):
    """Median microseconds per call of each contender, rotated group by group (ABBA): CUDA events
    on the GPU, the wall clock on the CPU."""
    import torch

    names = list(contenders)
    times = {name: [] for name in names}
    for fn in contenders.values():  # warm-up
        for _ in range(3):
            fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for group in range(groups):
        shift = group % len(names)
        order = names[shift:] + names[:shift]
        if group % 2:
            order.reverse()
        for name in order:
            if device == "cuda":
                start.record()
            t0 = time.perf_counter()
            for _ in range(inner):
                contenders[name]()
            if device == "cuda":
                stop.record()
                stop.synchronize()
                times[name].append(start.elapsed_time(stop) * 1e3 / inner)
            else:
                times[name].append((time.perf_counter() - t0) * 1e6 / inner)
    return {name: statistics.median(t) for name, t in times.items()}


def memory_rates(groups):
    """GB/s at which this device reads a 1 GiB tensor (torch.sum) and copies it (bytes read and
    written), median of rotated groups: the reference for a decode block's weight stream."""
    import torch

    x = torch.randn(1 << 29, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    med = time_contenders({"read": lambda: x.sum(), "copy": lambda: y.copy_(x)}, groups, 5)
    return {"read_gbs": x.nbytes / (med["read"] * 1e3), "copy_gbs": 2 * x.nbytes / (med["copy"] * 1e3),
            "tensor_bytes": x.nbytes}


class ClockSampler:
    """nvidia-smi sampling SM clock, power and temperature every 100 ms into DIR/clocks.csv while
    the benchmark runs; window(t0, t1) gives the medians over one row's timing."""

    FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu"

    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, "clocks.csv")
        self.process = None
        if shutil.which("nvidia-smi"):
            self.file = open(self.path, "w")
            self.process = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={self.FIELDS}", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=self.file, stderr=subprocess.DEVNULL)

    def window(self, t0, t1):
        if self.process is None:
            return None
        samples = []
        with open(self.path) as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                try:
                    when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                    values = [float(p) for p in parts[1:4]]
                except (ValueError, IndexError):
                    continue  # "[N/A]" or a partial line
                if t0 <= when <= t1:
                    samples.append(values)
        if not samples:
            return None
        return {name: statistics.median(s[i] for s in samples)
                for i, name in enumerate(["sm_clock_mhz", "power_w", "temperature_c"])} | {"samples": len(samples)}

    def close(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
            self.file.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, nargs="+", default=[11008, 14336])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 512, 4096])
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"], choices=["f16", "bf16", "f32"])
    parser.add_argument("--blocks", nargs="+", default=["swiglu", "gelu"], choices=list(BLOCKS))
    parser.add_argument("--residual", nargs="+", default=["yes"], choices=["yes", "no"])
    parser.add_argument("--groups", type=int, default=21)
    parser.add_argument("--compile", nargs="*", choices=["default", "max-autotune"], default=None,
                        help="add torch.compile in these modes (slow to build; --compile alone: default)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--decode-ws-peer", action="store_true",
                        help="add 'ge2 replay, workspace query': graph_replay compiled with "
                             "GE2_LT_DECODE_WORKSPACE=1 in a context of its own (the decode rule's A/B)")
    args = parser.parse_args()
    args.compile = ["default"] if args.compile == [] else (args.compile or [])
    import torch  # after argparse: --help works without torch

    import ge2
    import ge2.torch

    torch.manual_seed(0)
    dev = args.device
    on_gpu = dev == "cuda"
    os.makedirs(args.out, exist_ok=True)
    ctx = ge2.Context(device=dev, tunedb="")
    # A second context tunes every GEMM once at compile (GE2_TUNE_TUNE) into a database under --out.
    tuned_ctx = ge2.Context(device="cuda", tune="tune", tunedb=os.path.join(args.out, "ffn_tunedb.sqlite")) \
        if on_gpu else None
    # The decode rule's peer: its own context, so no choice of the default context's is reused.
    ws_ctx = ge2.Context(device="cuda", tunedb="") if on_gpu and args.decode_ws_peer else None
    sampler = ClockSampler(args.out) if on_gpu else None
    memory = memory_rates(args.groups) if on_gpu else None
    if memory:
        print(f"memory: read {memory['read_gbs']:.0f} GB/s, copy {memory['copy_gbs']:.0f} GB/s", flush=True)
    rows = []
    try:
        for dtype_name in args.dtypes:
            dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype_name]
            for kind in args.blocks:
                for residual in (r == "yes" for r in args.residual):
                    for inter in args.inter:
                        block, modules = torch_block(kind, args.hidden, inter, dtype, residual, dev)
                        converted = ge2.torch.convert(block)  # the module helper: what a PyTorch user calls
                        compiled = {mode: torch.compile(block, dynamic=False, mode=mode) for mode in args.compile}
                        for tokens in args.tokens:
                            rows.append(run_row(args, ctx, tuned_ctx, sampler, memory, kind, residual, inter,
                                                tokens, dtype_name, dtype, block, modules, converted, compiled,
                                                ws_ctx))
    finally:
        if sampler:
            sampler.close()
    write_results(args, "ffn_blocks", {"memory": memory, "rows": rows}, None if on_gpu else "cpu")


def step_kernels(plan):
    """The kernel of each of the plan's steps ('' for a step that is not a GEMM)."""
    return [s.get("kernel", {}).get("name", "") if isinstance(s.get("kernel"), dict) else ""
            for s in plan.describe()["steps"]]


@contextlib.contextmanager
def decode_workspace_query(on=True):
    """Compiles inside take cuBLASLt's choice under the workspace at decode sizes too, as before the decode
    rule (GE2_LT_DECODE_WORKSPACE=1, read at each compile); the variable as it was after. on=False: no change."""
    before = os.environ.get("GE2_LT_DECODE_WORKSPACE")
    if on:
        os.environ["GE2_LT_DECODE_WORKSPACE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GE2_LT_DECODE_WORKSPACE", None)
        else:
            os.environ["GE2_LT_DECODE_WORKSPACE"] = before


def run_row(args, ctx, tuned_ctx, sampler, memory, kind, residual, inter, tokens, dtype_name, dtype, block,
            modules, converted, compiled, ws_ctx=None):
    import torch

    on_gpu = args.device == "cuda"
    g = ge2_block(kind, modules, tokens, args.hidden, dtype_name, residual=residual)
    plan = g.compile(ctx)
    xs = torch.randn(tokens, args.hidden, device=args.device, dtype=dtype)
    ys = torch.empty_like(xs)
    contenders = {"ge2": lambda: plan.execute({"x": xs, "y": ys})}
    errors = {}
    with torch.no_grad():
        want = block(xs).float()
        rel = lambda got: ((got.float() - want).norm() / want.norm()).item()  # noqa: E731
        plan.execute({"x": xs, "y": ys})
        errors["ge2"] = rel(ys)
        if on_gpu:
            replay = g.compile(ctx, graph_replay=True)
            tuned = g.compile(tuned_ctx, graph_replay=True)
            yr, yt = torch.empty_like(xs), torch.empty_like(xs)
            replay.execute({"x": xs, "y": yr})
            tuned.execute({"x": xs, "y": yt})
            torch.cuda.synchronize()
            errors["ge2 graph_replay"], errors["ge2 tuned replay"] = rel(yr), rel(yt)
            contenders["ge2 graph_replay"] = lambda: replay.execute({"x": xs, "y": yr})
            contenders["ge2 tuned replay"] = lambda: tuned.execute({"x": xs, "y": yt})
        if ws_ctx is not None:
            with decode_workspace_query():
                replay_ws = g.compile(ws_ctx, graph_replay=True)
            yw = torch.empty_like(xs)
            replay_ws.execute({"x": xs, "y": yw})
            torch.cuda.synchronize()
            errors["ge2 replay, workspace query"] = rel(yw)
            contenders["ge2 replay, workspace query"] = lambda: replay_ws.execute({"x": xs, "y": yw})
        errors["ge2.torch module"] = rel(converted(xs))
        contenders["ge2.torch module"] = lambda: converted(xs)
        contenders["torch eager"] = lambda: block(xs)
        if on_gpu:
            contenders["torch cuda graph"] = cuda_graphed(block, xs)
        for mode, fn in compiled.items():
            fn(xs)
            contenders[f"torch.compile {mode}"] = lambda fn=fn: fn(xs)
        inner = 20 if tokens <= 512 else 5
        t0 = time.time()
        med = time_contenders(contenders, args.groups, inner, args.device)
        clocks = sampler.window(t0, time.time()) if sampler else None
    steps = [s["op"] + ("+C" if "c" in s.get("problem", {}) else "") for s in plan.describe()["steps"]]
    kernels = {"ge2": step_kernels(plan)}
    if on_gpu:
        kernels["ge2 tuned replay"] = step_kernels(tuned)
    gated = BLOCKS[kind][2]
    flops = 2 * tokens * args.hidden * inter * (3 if gated else 2)
    # ge2 with default settings: the faster of its eager call and graph_replay (both untuned).
    ge2_default = min(med[k] for k in ("ge2", "ge2 graph_replay") if k in med)
    row = {"block": kind, "residual": residual, "tokens": tokens, "hidden": args.hidden, "inter": inter,
           "dtype": dtype_name, "us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
           # peer time / ge2 time, so above 1 is ge2 faster; ge2 with default settings (untuned)
           "ratios": {k: v / ge2_default for k, v in med.items() if k.startswith("torch")},
           "eager_over_ge2": med["torch eager"] / ge2_default,
           "rel_errors_vs_torch": errors, "clocks": clocks, "ge2_steps": steps, "ge2_kernels": kernels}
    if "ge2 tuned replay" in med:
        row["eager_over_ge2_tuned"] = med["torch eager"] / med["ge2 tuned replay"]
    weight_bytes = sum(p.numel() * p.element_size() for p in block.parameters())
    row["weight_bytes"] = weight_bytes
    row["weight_gbs"] = weight_bytes / (ge2_default * 1e3)  # the default time's rate for the weights
    stream_text = ""
    if memory:
        row["weight_fraction_of_read"] = row["weight_gbs"] / memory["read_gbs"]
        stream_text = f"  weights {row['weight_gbs']:.0f} GB/s ({row['weight_fraction_of_read']:.0%} of read)"
    times = "  ".join(f"{k} {v:8.1f}" for k, v in med.items())
    clock_text = f"  {clocks['sm_clock_mhz']:.0f} MHz {clocks['power_w']:.0f} W" if clocks else ""
    print(f"{dtype_name:4s} {kind:9s} {'res' if residual else '   '} I={inter:5d} tokens {tokens:5d}: {times} us  "
          f"eager/ge2 {row['eager_over_ge2']:.3f} (ge2's faster default mode)  err {errors['ge2']:.1e}{stream_text}"
          f"{clock_text}  steps {steps}  "
          f"kernels {kernels}", flush=True)
    return row


if __name__ == "__main__":
    main()
