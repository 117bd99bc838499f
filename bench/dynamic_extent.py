"""One ge2 plan for every token count (dynamic extent) against plans compiled for each exact
count and against PyTorch, one process, same tensors (issue 19's targets).

Per block (GELU MLP with biases, SwiGLU; residual; nn.Linear weights) and token count M:
  ge2_dynamic     one plan, x's rows dynamic up to --bound, run with ge2_plan_execute_dynamic
  ge2_fixed       a plan compiled for exactly M, run with ge2_plan_execute
  ge2_fixed_again a second plan compiled for exactly M: the same kernels on their own buffers and
                  weight copies, so the spread between the two fixed plans is the measurement's
                  floor for "within 3% of the fixed plan"
  torch_eager     the nn.Module itself
both ge2 plans called through the C function directly (the same ctypes call for both, so
Python's cost is alike), in a context that does not tune (cached, empty database) and in one
that tunes at compile (tune: the dynamic plan tunes each bucket once, each fixed plan its M).
Two timings: "eager" back-to-back calls (host cost included) and "graph" one call captured in
a CUDA graph and replayed (device time). Medians over groups rotated ABBA. Also: compile
times, device memory before and after a second pass over all M (must not change), and the
host cost per call of both plans on a block small enough to be host-bound.

    python3 bench/dynamic_extent.py --out DIR [--hidden 4096] [--inter 11008] [--bound 4096]
        [--tokens 1 2 3 8 17 64 100 256 1000 4096] [--blocks gelu swiglu] [--groups 9]
"""
import argparse
import json
import os
import time

TOKENS = [1, 2, 3, 8, 17, 64, 100, 256, 1000, 4096]


def compile_block(kind, modules, rows, hidden, ctx, dynamic):
    from ffn_blocks import ge2_block

    graph = ge2_block(kind, modules, rows, hidden, "f16", dynamic=dynamic)
    start = time.perf_counter()
    plan = graph.compile(ctx)
    return plan, time.perf_counter() - start


def caller(plan, x, y, extent=None):
    """A call of the plan on x and y through the C function, bindings built once."""
    import torch

    import ge2

    bindings = (ge2._capi.Binding * 2)((b"x", x.data_ptr()), (b"y", y.data_ptr()))
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    if extent is None:
        return lambda: ge2._check(ge2._lib.ge2_plan_execute(plan._handle, bindings, 2, stream()))
    return lambda: ge2._check(ge2._lib.ge2_plan_execute_dynamic(plan._handle, extent, bindings, 2, stream()))


def graphed(fn):
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, default=11008)
    parser.add_argument("--bound", type=int, default=4096)
    parser.add_argument("--tokens", type=int, nargs="+", default=TOKENS)
    parser.add_argument("--blocks", nargs="+", default=["gelu", "swiglu"])
    parser.add_argument("--modes", nargs="+", default=["cached", "tune"])
    parser.add_argument("--groups", type=int, default=9)
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch

    import ge2
    from ffn_blocks import time_contenders, torch_block

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    rows, notes = [], {}
    for mode in args.modes:
        db = os.path.join(args.out, f"tunedb-{mode}.sqlite") if mode == "tune" else ""
        ctx = ge2.Context(device="cuda", tune=mode, tunedb=db)
        for kind in args.blocks:
            block, modules = torch_block(kind, args.hidden, args.inter, torch.float16)
            dyn, dyn_seconds = compile_block(kind, modules, args.bound, args.hidden, ctx, True)
            notes[f"{mode} {kind} dynamic compile s"] = round(dyn_seconds, 3)
            notes[f"{mode} {kind} buckets"] = [
                (b["first"], b["last"], [g["kernel"] for g in b["gemms"]]) for b in dyn.describe()["dynamic"]["buckets"]]
            fixed_seconds = 0.0
            for m in args.tokens:
                x = torch.randn(m, args.hidden, device="cuda", dtype=torch.float16)
                fixed, seconds = compile_block(kind, modules, m, args.hidden, ctx, False)
                fixed_again, _ = compile_block(kind, modules, m, args.hidden, ctx, False)
                fixed_seconds += seconds
                ys = {name: torch.empty_like(x) for name in ("dyn", "fixed", "fixed_again")}
                calls = {"ge2_dynamic": caller(dyn, x, ys["dyn"], m), "ge2_fixed": caller(fixed, x, ys["fixed"]),
                         "ge2_fixed_again": caller(fixed_again, x, ys["fixed_again"])}
                with torch.no_grad():
                    want = block(x).float()
                    for name, fn in calls.items():
                        fn()
                    torch.cuda.synchronize()
                    errors = {name: float((ys[key].float() - want).norm() / want.norm())
                              for name, key in (("ge2_dynamic", "dyn"), ("ge2_fixed", "fixed"),
                                                ("ge2_fixed_again", "fixed_again"))}
                    eager = dict(calls, torch_eager=lambda: block(x))
                    inner = max(3, min(200, 20000 // max(m, 1)))
                    t_eager = time_contenders(eager, args.groups, inner)
                    t_graph = time_contenders({k: graphed(f) for k, f in eager.items()}, args.groups, inner)
                row = {"mode": mode, "block": kind, "tokens": m, "errors": errors,
                       "eager_us": t_eager, "graph_us": t_graph,
                       "fixed_kernels": [s["kernel"]["name"] for s in fixed.describe()["steps"]],
                       "fixed_algos": [s["kernel"].get("algo") for s in fixed.describe()["steps"]]}
                rows.append(row)
                print(json.dumps(row), flush=True)
                del fixed, fixed_again
            notes[f"{mode} {kind} fixed compiles s (all M)"] = round(fixed_seconds, 3)
            # A second pass over every M allocates nothing (intermediates sized once for the bound).
            free_before = torch.cuda.mem_get_info()[0]
            for m in args.tokens:
                x = torch.randn(m, args.hidden, device="cuda", dtype=torch.float16)
                y = torch.empty_like(x)
                caller(dyn, x, y, m)()
                del x, y
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            notes[f"{mode} {kind} device bytes allocated in second pass"] = free_before - torch.cuda.mem_get_info()[0]
            del dyn

    # Host cost: a block small enough that the host is the bottleneck.
    ctx = ge2.Context(device="cuda", tunedb="")
    block, modules = torch_block("gelu", 256, 512, torch.float16)
    dyn, _ = compile_block("gelu", modules, 256, 256, ctx, True)
    steps = len(dyn.describe()["steps"])
    host = {}
    for m in (1, 8, 100):
        fixed, _ = compile_block("gelu", modules, m, 256, ctx, False)
        x = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        y1, y2 = torch.empty_like(x), torch.empty_like(x)
        calls = {"ge2_dynamic": caller(dyn, x, y1, m), "ge2_fixed": caller(fixed, x, y2)}
        per_call = {}
        for name in list(calls) * 2 + list(reversed(list(calls))) * 2:  # ABBA, median below
            fn = calls[name]
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(2000):
                fn()
            per_call.setdefault(name, []).append((time.perf_counter() - start) / 2000 * 1e6)
            torch.cuda.synchronize()
        host[m] = {name: sorted(v)[len(v) // 2] for name, v in per_call.items()}
    notes["host-bound block"] = {"hidden": 256, "inter": 512, "steps": steps,
                                 "host_us_per_call": host}
    with open(os.path.join(args.out, "dynamic_extent.json"), "w") as f:
        json.dump({"rows": rows, "notes": notes,
                   "device": torch.cuda.get_device_name(), "torch": torch.__version__}, f, indent=1)
    print(json.dumps(notes, indent=1))


if __name__ == "__main__":
    main()
