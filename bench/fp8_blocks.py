"""FP8 (e4m3) FFN blocks: ge2 with allow_fp8 against ge2's own 16-bit plan and the
same block built from torch._scaled_mm with the same scaling (row-wise: one scale
per output channel of a weight, quantized once, and per token of an activation,
every call), PyTorch in the same process on the same tensors. Where this PyTorch's
_scaled_mm refuses row-wise scales for the output dtype, its contenders use
per-tensor scales and their names say so.

  block: y = x + fc2(gelu(fc1(x)))   (nn.Linear modules, bias, exact-erf GELU)

"ge2 fp8 h out" is the same FP8 plan with h (fc2's input) also an output: a second
reader of h, so fc1 keeps its erf-GELU pass instead of deferring it into fc2's
e4m3 quantization (docs/fp8.md) — the A/B of that deferral in one process.

Also one GEMM at --gemm M N K (default 8192^3): ge2 with allow_fp8 (its time
includes quantizing A every call), torch._scaled_mm on operands quantized
beforehand (the GEMM alone) and with A quantized in the call, and fp16 torch.mm.
Each time is the median over groups of back-to-back calls timed with CUDA events,
the contenders rotated group by group (bench/ffn_blocks.py's time_contenders).
Errors: relative Frobenius distance to the block computed in fp32 from the same
fp16 weights.

    python3 bench/fp8_blocks.py --out DIR [--hidden 4096] [--inter 11008 14336]
        [--tokens 2048 4096 8192] [--gemm 8192 8192 8192]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ffn_blocks import cuda_graphed, ge2_block, time_contenders, torch_block, write_results  # noqa: E402

E4M3_MAX = 448.0


def quantize(t, rowwise):
    """(e4m3 copy, dequantization scales) as ge2 documents it, x * 448 / amax: per row
    ([rows, 1] scales) or per tensor."""
    import torch

    amax = (t.abs().amax(dim=-1, keepdim=True) if rowwise else t.abs().amax()).float()
    multiplier = torch.where(amax > 0, E4M3_MAX / amax, torch.ones_like(amax))
    q = (t.float() * multiplier).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, 1.0 / multiplier


def weight_scales(scales, rowwise):
    """_scaled_mm's scale_b for a weight quantized per row ([N, 1] -> [1, N])."""
    return scales.t().contiguous() if rowwise else scales


def scaled_mm_takes_rowwise(dtype):
    """Whether this PyTorch's torch._scaled_mm takes row-wise scales with `dtype` output."""
    import torch

    a = torch.randn(32, 32, device="cuda", dtype=dtype)
    q, s = quantize(a, True)
    try:
        torch._scaled_mm(q, q.t(), scale_a=s, scale_b=weight_scales(s, True), out_dtype=dtype)
        return True
    except RuntimeError as e:
        print(f"torch._scaled_mm refuses row-wise scales with {dtype} output ({e}); "
              "its contenders use per-tensor scales", flush=True)
        return False


def scaled_mm_block(modules, dtype, rowwise):
    """The block from torch._scaled_mm calls: weights quantized once, activations per call."""
    import torch
    import torch.nn.functional as F

    fc1, fc2 = modules["fc1"], modules["fc2"]
    w1, s1 = quantize(fc1.weight.detach(), rowwise)
    w2, s2 = quantize(fc2.weight.detach(), rowwise)
    s1, s2 = weight_scales(s1, rowwise), weight_scales(s2, rowwise)
    b1, b2 = fc1.bias.detach(), fc2.bias.detach()

    def linear(x, w, s, b):
        xq, sx = quantize(x, rowwise)
        return torch._scaled_mm(xq, w.t(), scale_a=sx, scale_b=s, bias=b, out_dtype=dtype)

    def block(x):
        return x + linear(F.gelu(linear(x, w1, s1, b1)), w2, s2, b2)

    return block


def rel(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def gemm_rows(args, ctx, dtype, rowwise):
    import torch

    import ge2

    m, n, k = args.gemm
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    g = ge2.Graph()
    x = g.input("a", (m, k), "f16")
    g.output(g.gemm(x, g.constant("w", w.cpu()), trans_b=True), "d")
    fp8_plan = g.compile(ctx, allow_fp8=True)
    fp16_plan = g.compile(ctx)
    d8, d16 = torch.empty(m, n, device="cuda", dtype=dtype), torch.empty(m, n, device="cuda", dtype=dtype)
    aq, sa = quantize(a, rowwise)
    wq, sw = quantize(w, rowwise)
    sw = weight_scales(sw, rowwise)
    peer = "torch._scaled_mm" + ("" if rowwise else " per-tensor")

    def scaled_mm_quantizing_a():
        q, scales = quantize(a, rowwise)
        return torch._scaled_mm(q, wq.t(), scale_a=scales, scale_b=sw, out_dtype=dtype)
    want = (a.float() @ w.float().t())
    fp8_plan.execute({"a": a, "d": d8})
    fp16_plan.execute({"a": a, "d": d16})
    torch.cuda.synchronize()
    contenders = {
        "ge2 fp8 (quantizes A)": lambda: fp8_plan.execute({"a": a, "d": d8}),
        "ge2 fp16": lambda: fp16_plan.execute({"a": a, "d": d16}),
        "torch.mm fp16": lambda: torch.mm(a, w.t()),
    }
    try:  # torch._scaled_mm may refuse a shape (M not a multiple of 16)
        scaled_mm_quantizing_a()
        contenders[peer + " (pre-quantized)"] = lambda: torch._scaled_mm(aq, wq.t(), scale_a=sa, scale_b=sw,
                                                                         out_dtype=dtype)
        contenders[peer + " (quantizes A)"] = scaled_mm_quantizing_a
    except RuntimeError as e:
        print(f"torch._scaled_mm refuses {m}x{n}x{k} ({str(e).splitlines()[0]})", flush=True)
    med = time_contenders(contenders, args.groups, 5)
    flops = 2 * m * n * k
    row = {"gemm": [m, n, k], "us": med, "tflops": {name: flops / t / 1e6 for name, t in med.items()},
           "rel_error_fp8": rel(d8, want), "rel_error_fp16": rel(d16, want),
           "kernel": fp8_plan.describe()["steps"][0]["kernel"]["name"]}
    print(f"GEMM {m}x{n}x{k}: " + "  ".join(f"{name} {t:8.1f} us ({row['tflops'][name]:6.0f} TFLOP/s)"
                                          for name, t in med.items()) +
          f"  err fp8 {row['rel_error_fp8']:.2e} fp16 {row['rel_error_fp16']:.2e}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, nargs="+", default=[11008, 14336])
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--gemm", type=int, nargs=3, default=[8192, 8192, 8192])
    parser.add_argument("--groups", type=int, default=15)
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch

    import ge2

    torch.manual_seed(0)
    dtype = torch.float16
    ctx = ge2.Context(device="cuda", tunedb="")
    rowwise = scaled_mm_takes_rowwise(dtype)
    rows = [gemm_rows(args, ctx, dtype, rowwise)]
    for inter in args.inter:
        block, modules = torch_block("gelu", args.hidden, inter, dtype)
        reference = torch_block("gelu", args.hidden, inter, torch.float32)[0]
        reference.load_state_dict({k: v.float() for k, v in block.state_dict().items()})
        fp8_torch = scaled_mm_block(modules, dtype, rowwise)
        for tokens in args.tokens:
            g = ge2_block("gelu", modules, tokens, args.hidden, "f16")
            fp16_plan = g.compile(ctx)
            fp8_plan = g.compile(ctx, allow_fp8=True)
            fp8_replay = g.compile(ctx, allow_fp8=True, graph_replay=True)
            fp8_h_out = ge2_block("gelu", modules, tokens, args.hidden, "f16", output_h=True).compile(
                ctx, allow_fp8=True)
            gate = fp8_plan.describe()["fp8"]["layers"]
            kernels = [s["kernel"]["name"] for s in fp8_plan.describe()["steps"] if "selection" in s]
            xs = torch.randn(tokens, args.hidden, device="cuda", dtype=dtype)
            y16, y8, y8r, y8h = (torch.empty_like(xs) for _ in range(4))
            h8 = torch.empty(tokens, inter, device="cuda", dtype=dtype)
            with torch.no_grad():
                want = reference(xs.float())
                fp16_plan.execute({"x": xs, "y": y16})
                fp8_plan.execute({"x": xs, "y": y8})
                fp8_replay.execute({"x": xs, "y": y8r})
                fp8_h_out.execute({"x": xs, "y": y8h, "h": h8})
                torch.cuda.synchronize()
                errors = {"ge2 fp16": rel(y16, want), "ge2 fp8": rel(y8, want), "ge2 fp8 replay": rel(y8r, want),
                          "ge2 fp8 h out": rel(y8h, want), "torch fp16 eager": rel(block(xs), want)}
                try:  # torch._scaled_mm may refuse a shape (a token count not a multiple of 16)
                    errors["torch _scaled_mm"] = rel(fp8_torch(xs), want)
                except RuntimeError as e:
                    print(f"torch._scaled_mm refuses {tokens} tokens ({str(e).splitlines()[0]})", flush=True)
                contenders = {
                    "ge2 fp16": lambda: fp16_plan.execute({"x": xs, "y": y16}),
                    "ge2 fp8": lambda: fp8_plan.execute({"x": xs, "y": y8}),
                    "ge2 fp8 replay": lambda: fp8_replay.execute({"x": xs, "y": y8r}),
                    "ge2 fp8 h out": lambda: fp8_h_out.execute({"x": xs, "y": y8h, "h": h8}),
                    "torch fp16 eager": lambda: block(xs),
                }
                if "torch _scaled_mm" in errors:
                    contenders["torch _scaled_mm"] = lambda: fp8_torch(xs)
                    contenders["torch _scaled_mm cuda graph"] = cuda_graphed(fp8_torch, xs)
                med = time_contenders(contenders, args.groups, 5)
            flops = 2 * tokens * args.hidden * inter * 2
            row = {"block": "gelu", "tokens": tokens, "hidden": args.hidden, "inter": inter, "dtype": "f16",
                   "us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
                   "fp8_over_ge2_fp16": med["ge2 fp16"] / med["ge2 fp8"],
                   "deferred_over_not": med["ge2 fp8 h out"] / med["ge2 fp8"],
                   "deferred_equals_not": bool(torch.equal(y8, y8h)),
                   "fp8_over_scaled_mm": med.get("torch _scaled_mm", float("nan")) / med["ge2 fp8"],
                   "fp8_replay_over_scaled_mm_graph":
                       med.get("torch _scaled_mm cuda graph", float("nan")) / med["ge2 fp8 replay"],
                   "rel_error_vs_fp32": errors, "gate": gate, "kernels": kernels}
            rows.append(row)
            print(f"gelu I={inter:5d} tokens {tokens:5d}: " + "  ".join(f"{k} {v:8.1f}" for k, v in med.items()) +
                  f" us  fp16/fp8 {row['fp8_over_ge2_fp16']:.3f}  scaled_mm/fp8 {row['fp8_over_scaled_mm']:.3f}"
                  f"  h-out/fp8 {row['deferred_over_not']:.3f} same bits {row['deferred_equals_not']}"
                  f"  errors " + " ".join(f"{k} {v:.2e}" for k, v in errors.items()) + f"  kernels {kernels}",
                  flush=True)
            del fp16_plan, fp8_plan, fp8_replay, fp8_h_out
    write_results(args, "fp8_blocks",
                  {"scaled_mm_scales": "row-wise" if rowwise else "per-tensor", "rows": rows})


if __name__ == "__main__":
    main()
