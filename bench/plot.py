"""Plots TFLOP/s by shape per kernel path from bench_gemm.csv.   usage: plot.py CSV PNG"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
paths = ["cuda_f32 (f16 data) bias+relu", "lt_f32 bias+relu", "lt_tf32 bias+relu", "lt_bf16 bias+relu",
         "lt_f16 bias+relu fused", "lt_f16 bias+relu unfused", "lt_f16 bias+gelu_erf", "lt_f16 bias+relu tuned"]
shapes = []
for r in rows:
    key = f"{r['batch']}x{r['m']}x{r['n']}x{r['k']}"
    if key not in shapes:
        shapes.append(key)
fig, ax = plt.subplots(figsize=(14, 6))
width = 0.8 / len(paths)
for i, path in enumerate(paths):
    values = {f"{r['batch']}x{r['m']}x{r['n']}x{r['k']}": float(r["tflops"]) for r in rows if r["path"] == path}
    ax.bar([x + i * width for x in range(len(shapes))], [values.get(s, 0) for s in shapes], width, label=path)
ax.set_xticks([x + 0.4 for x in range(len(shapes))])
ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=8)
ax.set_ylabel("TFLOP/s (median of 25 groups, bias + activation included)")
ax.set_title("ge2 kernel paths on NVIDIA H200 (bench_gemm, 2026-12-02)")
ax.legend(fontsize=8, ncol=2)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
