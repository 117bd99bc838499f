#!/usr/bin/env python3
"""How a GEMM's time drifts from an idle board into sustained load.

The tuner times its candidates after GE2_TUNE_SUSTAIN_MS of gap-free warm-up
(src/backends/cuda/timing_rig.cpp); this script measures what that warm-up has to
cover: each kernel starts from an idle board (a pause of --idle seconds), then
runs back to back for --seconds with a CUDA event after every --chunk calls, all
enqueued before one wait, so the device never idles. The per-call time of each
chunk is reported by when it ran (ms after the start), with the SM clock, the
power and the throttle reasons nvidia-smi sampled every 50 ms.

  python3 bench/power_ramp.py --out DIR [--shape 2048x22016x4096] [--dtype bf16]

Kernels: torch.mm (cuBLAS), and ge2's plain GEMM with each kernel named in
--ge2-kernels (forced, constant [N, K] weight as nn.Linear stores it).
"""
import argparse
import json
import os
import subprocess
import sys
import time

WINDOWS_MS = [(0, 10), (10, 50), (50, 100), (100, 250), (250, 500), (500, 1000), (1000, 2000), (2000, 1e9)]


def window_medians(series):
    """series: [(ms since start, us per call)] -> {"a-b ms": median us}"""
    out = {}
    for lo, hi in WINDOWS_MS:
        values = sorted(us for ms, us in series if lo <= ms < hi)
        if values:
            out[f"{lo:g}-{hi:g} ms" if hi < 1e9 else f">{lo:g} ms"] = values[len(values) // 2]
    return out


def ramp(torch, run, seconds, chunk, estimate_us):
    """Runs `run` back to back for about `seconds`; [(ms since start, us per call)]."""
    calls = max(chunk, int(seconds * 1e6 / max(estimate_us, 1.0)))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls // chunk + 1)]
    events[0].record()
    for i in range(1, len(events)):
        for _ in range(chunk):
            run()
        events[i].record()
    torch.cuda.synchronize()
    series = []
    for i in range(1, len(events)):
        series.append((events[0].elapsed_time(events[i - 1]), events[i - 1].elapsed_time(events[i]) * 1e3 / chunk))
    return series


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="2048x22016x4096", help="MxNxK")
    parser.add_argument("--dtype", choices=["f16", "bf16"], default="bf16")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--idle", type=float, default=2.0, help="pause before each kernel's ramp")
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--ge2-kernels", nargs="*", default=[])
    args = parser.parse_args()
    import torch

    m, n, k = (int(v) for v in args.shape.split("x"))
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    runs = {"torch.mm": lambda: torch.mm(x, w.t(), out=out)}
    if args.ge2_kernels:
        import ge2
        ctx = ge2.Context(device="cuda", tunedb="")
        for kernel in args.ge2_kernels:
            g = ge2.Graph()
            g.output(g.gemm(g.input("x", (m, k), args.dtype), g.constant("w", w.cpu()), trans_b=True), "d")
            plan = g.compile(ctx, force_kernel=kernel)
            runs[f"ge2 {kernel}"] = (lambda p: lambda: p.execute({"x": x, "d": out}))(plan)
    os.makedirs(args.out, exist_ok=True)
    clocks_path = os.path.join(args.out, "ramp_clocks.csv")
    sampler = None
    try:
        sampler = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
             "--format=csv,noheader", "-lms", "50", "-f", clocks_path])
    except OSError as error:
        print(f"no clock samples: {error}", file=sys.stderr)
    result = {"shape": args.shape, "dtype": args.dtype, "chunk": args.chunk, "kernels": {}}
    try:
        for name, run in runs.items():
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            torch.cuda.synchronize()
            estimate = start.elapsed_time(stop) * 1e3
            time.sleep(args.idle)
            began = time.time()
            series = ramp(torch, run, args.seconds, args.chunk, estimate)
            windows = window_medians(series)
            result["kernels"][name] = {"began_unix": began, "windows_us": windows, "series": series}
            print(f"{name:28s} " + "  ".join(f"{w}: {us:.1f}" for w, us in windows.items()), flush=True)
    finally:
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
    with open(os.path.join(args.out, "power_ramp.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
