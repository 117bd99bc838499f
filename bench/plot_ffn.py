"""Plots bench/ffn_blocks.py's ratios: for each block row, one bar per PyTorch peer, the peer's
time over ge2's (default settings: the faster of eager and graph_replay, untuned), so a bar
above the line at 1.0 is a row ge2 wins; ge2 tuned (graph_replay) as a hatched bar of its own.

    python3 bench/plot_ffn.py ffn_blocks.json PNG [--title TEXT]
"""
import argparse
import json

from plot import save_with_legend

# ratio key of ffn_blocks.json -> legend label, in the order drawn
PEERS = {"torch eager": "PyTorch eager / ge2",
         "torch cuda graph": "PyTorch CUDA graph / ge2",
         "torch.compile default": "torch.compile / ge2",
         "torch.compile max-autotune": "torch.compile max-autotune / ge2"}
TUNED = "PyTorch eager / ge2 tuned (graph_replay)"


def row_label(row):
    return (f"{row['dtype']} {row['block']}{' +x' if row.get('residual', True) else ''} "
            f"{row['hidden']}/{row['inter']} t{row['tokens']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json")
    parser.add_argument("png")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    import matplotlib  # after argparse: --help works without it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.load(open(args.json))
    rows = data["rows"]
    if not rows:
        raise SystemExit(f"plot_ffn.py: {args.json} has no rows")
    series = {label: [row["ratios"].get(key) for row in rows] for key, label in PEERS.items()
              if any(key in row["ratios"] for row in rows)}
    if any("eager_over_ge2_tuned" in row for row in rows):
        series[TUNED] = [row.get("eager_over_ge2_tuned") for row in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.55 * len(rows) * max(1, len(series)) / 2 + 3), 6))
    width = 0.85 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(rows))], [v or 0 for v in values], width, label=label,
               hatch="//" if label == TUNED else None, edgecolor="black", linewidth=0.3)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + 0.425 - width / 2 for x in range(len(rows))])
    ax.set_xticklabels([row_label(r) for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("peer time / ge2 time (above 1: ge2 faster)")
    ax.set_title(args.title or f"FFN blocks, {data.get('device', '?')}, {data.get('date', '')}")
    save_with_legend(fig, ax, args.png)
    print(f"plot_ffn.py: {len(series)} series over {len(rows)} rows -> {args.png}")


if __name__ == "__main__":
    main()
