"""Plots TFLOP/s by shape per kernel path from bench_gemm.csv, with PyTorch beside ge2.

    python3 bench/plot.py CSV PNG [--peers peers.json] [--title TEXT]

Bars per shape: ge2's paths from bench_gemm (C++, CUDA events) and, with --peers, the
PyTorch contenders bench/peers.py measured on the same device and shapes (torch.mm, the
unfused mm + add + relu, cuBLASLt's fused _addmm_activation) next to ge2 through its
Python binding in that same run. Rates count 2*M*N*K flops per GEMM (bias and
activation included in the time, not in the flops). matplotlib: scripts/setup-deps.sh.
"""
import argparse
import csv
import json

GE2_PATHS = ["cuda_f32 (f16 data) bias+relu", "lt_f32 bias+relu", "lt_tf32 bias+relu", "lt_bf16 bias+relu",
             "lt_f16 bias+relu fused", "lt_f16 bias+relu unfused", "lt_f16 bias+gelu_erf",
             "lt_f16 bias+relu tuned"]
# bench/peers.py contender -> legend label: the peers, then ge2 measured in the same process.
PEER_CONTENDERS = {"torch.mm": "PyTorch torch.mm (no epilogue)",
                   "torch unfused relu": "PyTorch mm + add + relu",
                   "torch _addmm_activation relu": "PyTorch _addmm_activation relu (fused)",
                   "ge2 relu": "ge2 bias+relu, Python binding (same run as PyTorch)"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--peers", help="peers.json written by bench/peers.py in the same results folder")
    parser.add_argument("--title", default="ge2 kernel paths and PyTorch, TFLOP/s")
    args = parser.parse_args()
    import matplotlib  # after argparse: --help works without it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(open(args.csv)))
    series = {}  # label -> {shape: TFLOP/s}
    shapes = []
    for r in rows:
        shape = f"{r['batch']}x{r['m']}x{r['n']}x{r['k']}"
        if shape not in shapes:
            shapes.append(shape)
        if r["path"] in GE2_PATHS:
            series.setdefault(r["path"], {})[shape] = float(r["tflops"])
    labels = [p for p in GE2_PATHS if p in series]
    if args.peers:
        peers = json.load(open(args.peers))
        for entry in peers["shapes"]:
            shape = f"1x{entry['m']}x{entry['n']}x{entry['k']}"
            flops = 2.0 * entry["m"] * entry["n"] * entry["k"]
            for name, label in PEER_CONTENDERS.items():
                if name in entry["us"]:
                    series.setdefault(label, {})[shape] = flops / (entry["us"][name] * 1e6)
        labels += [label for label in PEER_CONTENDERS.values() if label in series]
    fig, ax = plt.subplots(figsize=(19, 6))
    width = 0.85 / len(labels)
    for i, label in enumerate(labels):
        peer = label in PEER_CONTENDERS.values()
        ax.bar([x + i * width for x in range(len(shapes))], [series[label].get(s, 0) for s in shapes], width,
               label=label, hatch="//" if peer and label.startswith("PyTorch") else None,
               edgecolor="black" if peer else None, linewidth=0.3)
    ax.set_xticks([x + 0.425 for x in range(len(shapes))])
    ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (median; bias + activation in the time)")
    ax.set_title(args.title)
    save_with_legend(fig, ax, args.png)
    print(f"plot.py: {len(labels)} series over {len(shapes)} shapes -> {args.png}")


def save_with_legend(fig, ax, png):
    """The legend outside the axes on the right, the figure written at the benchmarks' resolution."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
