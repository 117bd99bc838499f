"""PyTorch peers side by side with ge2 in one process, on the same tensors.

For each shape (fp16, bias + activation): torch.mm alone (the GEMM ceiling),
PyTorch unfused (mm + add + act), PyTorch fused (torch._addmm_activation), and
torch.compile(mode="max-autotune") on a few shapes; ge2 through its Python
binding (heuristic and tuned), with the output checked against an fp64
reference. Each time is the median of 30 CUDA-event-timed runs after warm-up,
rotating input sets that exceed twice the L2 cache. Also: the 4-layer MLP
(hidden 4096) end to end, eager and CUDA-graphed, ge2 against PyTorch.

    python3 bench/peers.py --out DIR [--quick]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

import ge2

SHAPES = [  # (batch, m, n, k)
    (1, 4096, 4096, 4096), (1, 8192, 8192, 8192), (1, 16384, 4096, 1024), (1, 16384, 1024, 4096),
    (1, 1, 4096, 4096), (1, 16, 4096, 4096), (1, 128, 4096, 4096),
    (1, 1000, 1000, 1000), (1, 4095, 4097, 4093), (1, 3001, 2999, 4097),
]
COMPILE_SHAPES = {(1, 4096, 4096, 4096), (1, 16384, 1024, 4096)}
REPS = 30


def median_time_us(fn, sets, reps=REPS, inner=None):
    """Median over `reps` of the mean time of `inner` back-to-back calls, timed
    with CUDA events. Calling back to back keeps the GPU busy, so host cost only
    shows where it exceeds the GPU time, for every library alike."""
    for i in range(3):
        fn(i % sets)
    torch.cuda.synchronize()
    if inner is None:  # about 2 ms of work per timed group
        start = time.perf_counter()
        fn(0)
        torch.cuda.synchronize()
        inner = max(1, min(50, int(2e-3 / max(time.perf_counter() - start, 1e-6))))
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(reps):
        start.record()
        for i in range(inner):
            fn((r * inner + i) % sets)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / inner)
    return statistics.median(times)


def rel_err(got, want):
    got = got.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - want).norm() / want.norm()).item()


def gemm_graph(ctx, m, n, k, act, tuned_ctx=None, force=None):
    g = ge2.Graph()
    a = g.input("a", (m, k), "f16")
    b = g.input("b", (k, n), "f16")
    bias = g.input("bias", (n,), "f16")
    g.output(g.gemm_bias_act(a, b, bias, act), "d")
    return g.compile(tuned_ctx or ctx, force_kernel=force)


def bench_shapes(ctx, tuned_ctx, quick):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for (batch, m, n, k) in SHAPES:
        if quick and m * n * k > 2**33:
            continue
        set_bytes = 2 * (m * k + k * n)
        sets = max(1, min(2 * l2 // set_bytes + 1, (3 << 30) // set_bytes))
        A = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(sets)]
        B = [torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5 for _ in range(sets)]
        bias = torch.randn(n, device="cuda", dtype=torch.float16)
        D = torch.empty(m, n, device="cuda", dtype=torch.float16)
        flops = 2.0 * m * n * k
        ref = A[0].double() @ B[0].double() + bias.double()
        row = {"shape": f"{m}x{n}x{k}", "m": m, "n": n, "k": k}
        t = row.setdefault("us", {})
        t["torch.mm"] = median_time_us(lambda i: torch.mm(A[i], B[i], out=D), sets)
        t["torch unfused relu"] = median_time_us(lambda i: torch.relu(torch.mm(A[i], B[i]) + bias), sets)
        t["torch unfused gelu"] = median_time_us(lambda i: F.gelu(torch.mm(A[i], B[i]) + bias), sets)
        t["torch _addmm_activation relu"] = median_time_us(lambda i: torch._addmm_activation(bias, A[i], B[i]), sets)
        t["torch _addmm_activation gelu"] = median_time_us(
            lambda i: torch._addmm_activation(bias, A[i], B[i], use_gelu=True), sets)
        if (batch, m, n, k) in COMPILE_SHAPES and not quick:
            try:
                layer = torch.compile(lambda a, b, c: torch.relu(a @ b + c), mode="max-autotune")
                layer(A[0], B[0], bias)
                t["torch.compile max-autotune relu"] = median_time_us(lambda i: layer(A[i], B[i], bias), sets)
            except Exception as error:  # report, do not hide
                row["compile_error"] = str(error)[:200]
        errors = row.setdefault("err", {})
        for label, act, context in (("ge2 relu", "relu", None), ("ge2 gelu_tanh", "gelu_tanh", None),
                                    ("ge2 gelu_erf", "gelu", None), ("ge2 relu tuned", "relu", tuned_ctx)):
            plan = gemm_graph(ctx, m, n, k, act, tuned_ctx=context)
            step = plan.describe()["steps"][0]
            row.setdefault("ge2_kernel", {})[label] = step["kernel"]["name"] + (
                " staged" if step["kernel"].get("staged") else "") + f" [{step['kernel'].get('algo_source', '')[:24]}]"
            D.fill_(float("nan"))
            plan.execute({"a": A[0], "b": B[0], "bias": bias, "d": D})
            torch.cuda.synchronize()
            want = {"relu": torch.relu(ref), "gelu_tanh": F.gelu(ref, approximate="tanh"), "gelu": F.gelu(ref)}[act]
            errors[label] = rel_err(D, want)
            t[label] = median_time_us(lambda i: plan.execute({"a": A[i], "b": B[i], "bias": bias, "d": D}), sets)
        row["tflops"] = {name: flops / (us * 1e6) for name, us in t.items()}
        print(json.dumps(row), flush=True)
        rows.append(row)
        del A, B
        torch.cuda.empty_cache()
    return rows


def bench_mlp(ctx):
    """4 layers, hidden 4096, fp16, bias + ReLU; eager and CUDA-graphed."""
    hidden, layers, results = 4096, 4, []
    W = [torch.randn(hidden, hidden, device="cuda", dtype=torch.float16) / hidden**0.5 for _ in range(layers)]
    bs = [torch.randn(hidden, device="cuda", dtype=torch.float16) for _ in range(layers)]
    for batch in (1, 16, 128):
        x = torch.randn(batch, hidden, device="cuda", dtype=torch.float16)
        g = ge2.Graph()
        h = g.input("x", (batch, hidden), "f16")
        for i in range(layers):
            h = g.gemm_bias_act(h, g.input(f"w{i}", (hidden, hidden), "f16"), g.input(f"b{i}", (hidden,), "f16"),
                                "relu" if i + 1 < layers else None)
        g.output(h, "y")
        plan = g.compile(ctx)
        replayed = g.compile(ctx, graph_replay=True)  # ge2 records and replays a CUDA graph itself
        y = torch.empty(batch, hidden, device="cuda", dtype=torch.float16)
        arrays = {"x": x, "y": y, **{f"w{i}": W[i] for i in range(layers)}, **{f"b{i}": bs[i] for i in range(layers)}}

        def torch_mlp():
            h = x
            for i in range(layers):
                h = torch._addmm_activation(bs[i], h, W[i]) if i + 1 < layers else torch.addmm(bs[i], h, W[i])
            return h

        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(5):
                plan.execute(arrays)
                torch_mlp()
        torch.cuda.synchronize()
        ge2_graph, torch_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(ge2_graph, stream=stream):
            plan.execute(arrays)
        with torch.cuda.graph(torch_graph, stream=stream):
            static_out = torch_mlp()
        ref = torch_mlp().double()
        y.fill_(float("nan"))
        replayed.execute(arrays)
        torch.cuda.synchronize()
        replay_err = rel_err(y, ref)
        ge2_graph.replay()
        torch.cuda.synchronize()
        row = {"batch": batch, "hidden": hidden, "layers": layers, "ge2_vs_torch_err": rel_err(y, ref),
               "ge2_graph_replay_vs_torch_err": replay_err,
               "us": {"ge2 eager": median_time_us(lambda i: plan.execute(arrays), 1, 100),
                      "ge2 eager, graph_replay option": median_time_us(lambda i: replayed.execute(arrays), 1, 100),
                      "torch eager": median_time_us(lambda i: torch_mlp(), 1, 100),
                      "ge2 CUDA graph": median_time_us(lambda i: ge2_graph.replay(), 1, 100),
                      "torch CUDA graph": median_time_us(lambda i: torch_graph.replay(), 1, 100)}}
        # Host cost per call, timed on the host over 200 calls (queue not saturated at batch 1).
        for label, fn in (("ge2 host us/call", lambda: plan.execute(arrays)),
                          ("ge2 graph_replay host us/call", lambda: replayed.execute(arrays)),
                          ("torch host us/call", torch_mlp)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            row["us"][label] = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--mlp-only", action="store_true", help="only the 4-layer MLP rows")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ctx = ge2.Context(device="cuda", tune="off", tunedb="")
    tuned = ge2.Context(device="cuda", tune="tune", tunedb=os.path.join(args.out, "peers_tunedb.sqlite"))
    shapes = [] if args.mlp_only else bench_shapes(ctx, tuned, args.quick)
    mlp = bench_mlp(ctx)
    info = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "ge2": ge2.library_version(),
            "cublaslt": ctx.describe()["cublaslt_version"], "reps": REPS, "date": time.strftime("%Y-%m-%d")}
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"info": info, "shapes": shapes, "mlp": mlp}, f, indent=1)
    print(f"peers: {len(shapes)} shapes, {len(mlp)} MLP batches on {info['device']}; torch {info['torch']}")


if __name__ == "__main__":
    main()
