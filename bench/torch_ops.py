"""Per-call cost of ge2 from PyTorch on small work, where the host dominates: the one-shot call
through ctypes (`ge2.gemm_bias_act`), through the custom operator (`ge2.torch.linear`), a
converted single-layer module (`ge2.torch.convert`), against `torch.mm` and `F.linear` on the
same tensors in the same process. Each time is the wall-clock median over groups of back-to-back
calls ending in a synchronisation, the contenders rotated group by group (ABBA).

    python3 bench/torch_ops.py --out DIR [--shapes 1x4096x4096 ...] [--groups 21]
"""
import argparse
import statistics
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", default=["1x4096x4096", "16x4096x4096", "1x1024x1024"],
                        help="MxNxK: x [M, K], weight [N, K] (nn.Linear), fp16")
    parser.add_argument("--groups", type=int, default=21)
    parser.add_argument("--inner", type=int, default=200)
    args = parser.parse_args()
    import torch  # after argparse: --help works without torch
    import torch.nn.functional as F

    import ge2
    import ge2.torch
    from ffn_blocks import write_results

    torch.manual_seed(0)
    ctx = ge2.torch.context_for("cuda")
    rows = []
    for shape in args.shapes:
        m, n, k = map(int, shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        layer = torch.nn.Linear(k, n, device="cuda", dtype=torch.float16).eval()
        w, b = layer.weight.detach(), layer.bias.detach()
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        converted = ge2.torch.convert(torch.nn.Sequential(layer))
        with torch.no_grad():
            contenders = {
                "torch.mm": lambda: torch.mm(x, w.t(), out=out),
                "F.linear": lambda: F.linear(x, w, b),
                "ge2.gemm_bias_act (ctypes)": lambda: ge2.gemm_bias_act(x, w, b, trans_b=True, out=out, context=ctx),
                "ge2.torch.linear (custom op)": lambda: ge2.torch.linear(x, w, b),
                "ge2.torch.convert module": lambda: converted(x),
            }
            want = F.linear(x.double(), w.double(), b.double())
            errors = {name: ((contenders[name]().double() - want).norm() / want.norm()).item()
                      for name in ("F.linear", "ge2.torch.linear (custom op)", "ge2.torch.convert module")}
            names = list(contenders)
            for fn in contenders.values():
                for _ in range(20):
                    fn()
            torch.cuda.synchronize()
            times = {name: [] for name in names}
            for group in range(args.groups):
                order = names[group % len(names):] + names[:group % len(names)]
                if group % 2:
                    order.reverse()
                for name in order:
                    fn = contenders[name]
                    start = time.perf_counter()
                    for _ in range(args.inner):
                        fn()
                    torch.cuda.synchronize()
                    times[name].append((time.perf_counter() - start) * 1e6 / args.inner)
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append({"shape": shape, "us": med, "rel_error_vs_fp64": errors})
        print(f"{shape:>14s}: " + "  ".join(f"{k} {v:7.2f}" for k, v in med.items()) + " us", flush=True)
        print(f"{'':>14s}  errors vs fp64: " + "  ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)
    write_results(args, "torch_ops", {"rows": rows})


if __name__ == "__main__":
    main()
