"""FFN blocks of an FP8 checkpoint (weights stored as e4m3 with a scale per output channel, or
per 128 x 128 block as DeepSeek-V3 and Qwen3 FP8 releases ship them), ge2 against PyTorch in
one process on the same tensors:

  ge2 e4m3 weights   the graph takes the codes and scales as given
                     (Graph.quantized_constant): default options, no allow_fp8; at 1-16
                     tokens cuda_skinny_fp8w reads one byte per weight
  ge2 fp16 weights   the same block with the weights dequantized to fp16 by the caller
                     (Graph.constant): what a user without quantized constants runs
  ge2 e4m3 allow_fp8 (--allow-fp8) the e4m3 weights under the FP8 precision policy: from 17
                     tokens lt_fp8_e4m3 quantizes x (per row, or per row and 128 k beside
                     128 x 128 block scales: cuBLASLt's block-scale mode) where the model
                     and the accuracy gate keep it
  torch eager / torch cuda graph   nn.Linear modules holding the dequantized fp16 weights

  blocks: gelu   y = x + fc2(gelu(fc1(x)))           (bias, exact-erf GELU)
          swiglu y = x + down(silu(gate(x)) * up(x))  (no bias, Llama style)

Each time is the median over groups of back-to-back calls timed with CUDA events, the
contenders rotated group by group (bench/ffn_blocks.py's time_contenders). Errors: relative
Frobenius distance to the block in fp32 on the dequantized weights.

    python3 bench/fp8_checkpoint.py --out DIR [--hidden 4096] [--inter 11008]
        [--tokens 1 4 8 16 64] [--blocks gelu swiglu] [--scales channel block] [--block-size 128]
        [--allow-fp8]

--device cpu runs the same blocks on ge2's CPU backend and PyTorch's CPU eager in f32 with
wall-clock timing and no graph contenders: a check of this script (bindings/python/tests), not
a benchmark.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ffn_blocks import BLOCKS, cuda_graphed, time_contenders, torch_block, write_results  # noqa: E402

E4M3_MAX = 448.0


def quantize_per_channel(weight):
    """(e4m3 codes, float32 scale per output channel) of an nn.Linear weight [out, in]."""
    import torch

    amax = weight.float().abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    codes = (weight.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, scale.reshape(-1)


def quantize_per_block(weight, size):
    """(e4m3 codes, float32 scales [ceil(out / size), ceil(in / size)]) of an nn.Linear weight,
    one scale per size x size block (amax / 448), the checkpoints' weight_scale_inv."""
    import torch

    out, inp = weight.shape
    rows, cols = -(-out // size), -(-inp // size)
    padded = torch.zeros(rows * size, cols * size, device=weight.device, dtype=torch.float32)
    padded[:out, :inp] = weight.float()
    amax = padded.reshape(rows, size, cols, size).abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    per_element = scale.repeat_interleave(size, 0).repeat_interleave(size, 1)[:out, :inp]
    codes = (weight.float() / per_element).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, scale, per_element


def ge2_graph(kind, modules, given, tokens, hidden, dtype_name, block=None):
    """The block as a ge2 graph in `dtype_name`; weights as quantized constants where `given`
    has them, else as the modules' (dequantized) weights."""
    import ge2

    act, biased, gated = BLOCKS[kind]
    g = ge2.Graph()
    x = g.input("x", (tokens, hidden), dtype_name)

    def weight(name):
        if given is not None:
            codes, scales = given[name]
            if block:
                return g.quantized_constant(name, codes.cpu(), scales.cpu().numpy(), dtype=dtype_name,
                                            block=(block, block))
            return g.quantized_constant(name, codes.cpu(), scales.cpu().numpy(), scale_axis=0, dtype=dtype_name)
        return g.constant(name, modules[name].weight.detach().cpu())

    def linear(v, name):
        y = g.gemm(v, weight(name), trans_b=True)
        return g.bias(y, g.constant(name + ".bias", modules[name].bias.detach().cpu())) if biased else y

    if gated:
        y = linear(g.mul(g.activation(linear(x, "gate"), act), linear(x, "up")), "down")
    else:
        y = linear(g.activation(linear(x, "fc1"), act), "fc2")
    g.output(g.add(y, x), "y")
    return g


def rel(got, want):
    return float((got.float() - want).norm() / want.norm())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--inter", type=int, nargs="+", default=[11008])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 8, 16, 64])
    parser.add_argument("--blocks", nargs="+", default=["gelu", "swiglu"])
    parser.add_argument("--groups", type=int, default=25)
    parser.add_argument("--scales", nargs="+", choices=["channel", "block"], default=["channel"])
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--allow-fp8", action="store_true",
                        help="also the e4m3 weights compiled with allow_fp8 (W8A8 at prefill sizes)")
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch

    import ge2

    torch.manual_seed(0)
    on_gpu = args.device == "cuda"
    ctx = ge2.Context(device=args.device, tunedb="")
    dtype, dtype_name = (torch.float16, "f16") if on_gpu else (torch.float32, "f32")
    rows = []
    for kind, inter, scaling in ((b, i, s) for b in args.blocks for i in args.inter for s in args.scales):
        block_size = args.block_size if scaling == "block" else None
        block, modules = torch_block(kind, args.hidden, inter, dtype, device=args.device)
        given = {}
        with torch.no_grad():
            for name, module in modules.items():
                if block_size:
                    codes, scales, per_element = quantize_per_block(module.weight, block_size)
                else:
                    codes, scales = quantize_per_channel(module.weight)
                    per_element = scales[:, None]
                given[name] = (codes.view(torch.uint8), scales)
                module.weight.copy_((codes.float() * per_element).to(dtype))  # what every peer reads
        reference = torch_block(kind, args.hidden, inter, torch.float32, device=args.device)[0]
        reference.load_state_dict({k: v.float() for k, v in block.state_dict().items()})
        for tokens in args.tokens:
            e4m3_plan = ge2_graph(kind, modules, given, tokens, args.hidden, dtype_name, block_size).compile(ctx)
            e4m3_replay = ge2_graph(kind, modules, given, tokens, args.hidden, dtype_name, block_size).compile(
                ctx, graph_replay=True)
            fp16_plan = ge2_graph(kind, modules, None, tokens, args.hidden, dtype_name).compile(ctx)
            kernels = [s["kernel"]["name"] for s in e4m3_plan.describe()["steps"] if "selection" in s]
            fp8_plan = None
            if args.allow_fp8:
                fp8_plan = ge2_graph(kind, modules, given, tokens, args.hidden, dtype_name, block_size).compile(
                    ctx, allow_fp8=True)
                kernels = {"default": kernels,
                           "allow_fp8": [s["kernel"]["name"] for s in fp8_plan.describe()["steps"]
                                         if "selection" in s]}
            xs = torch.randn(tokens, args.hidden, device=args.device, dtype=dtype)
            ya, yb, yc, yd = (torch.empty_like(xs) for _ in range(4))
            with torch.no_grad():
                want = reference(xs.float())
                e4m3_plan.execute({"x": xs, "y": ya})
                e4m3_replay.execute({"x": xs, "y": yb})
                fp16_plan.execute({"x": xs, "y": yc})
                if fp8_plan is not None:
                    fp8_plan.execute({"x": xs, "y": yd})
                if on_gpu:
                    torch.cuda.synchronize()
                errors = {"ge2 e4m3 weights": rel(ya, want), "ge2 e4m3 weights replay": rel(yb, want),
                          "ge2 fp16 weights": rel(yc, want), "torch eager": rel(block(xs), want)}
                contenders = {
                    "ge2 e4m3 weights": lambda: e4m3_plan.execute({"x": xs, "y": ya}),
                    "ge2 e4m3 weights replay": lambda: e4m3_replay.execute({"x": xs, "y": yb}),
                    "ge2 fp16 weights": lambda: fp16_plan.execute({"x": xs, "y": yc}),
                    "torch eager": lambda: block(xs),
                }
                if fp8_plan is not None:
                    errors["ge2 e4m3 allow_fp8"] = rel(yd, want)
                    contenders["ge2 e4m3 allow_fp8"] = lambda: fp8_plan.execute({"x": xs, "y": yd})
                if on_gpu:
                    contenders["torch cuda graph"] = cuda_graphed(block, xs)
                med = time_contenders(contenders, args.groups, 10 if on_gpu else 1, args.device)
            best = min(med["ge2 e4m3 weights"], med["ge2 e4m3 weights replay"])
            row = {"block": kind, "scales": scaling if not block_size else f"block {block_size}", "tokens": tokens, "hidden": args.hidden, "inter": inter, "us": med,
                   "e4m3_best_over": {k: v / best for k, v in med.items()},
                   "rel_error_vs_fp32": errors, "kernels": kernels}
            rows.append(row)
            print(f"{kind} {row['scales']} I={inter} tokens {tokens:4d}: " + "  ".join(f"{k} {v:7.1f}" for k, v in med.items())
                  + " us  " + "  ".join(f"{k}/e4m3 {v:.2f}" for k, v in row["e4m3_best_over"].items()
                                       if not k.startswith("ge2 e4m3"))
                  + "  errors " + " ".join(f"{k} {v:.2e}" for k, v in errors.items()) + f"  {kernels}",
                  flush=True)
            del e4m3_plan, e4m3_replay, fp16_plan, fp8_plan
    write_results(args, "fp8_checkpoint", {"rows": rows}, None if on_gpu else "cpu")


if __name__ == "__main__":
    main()
