"""Selector's choice against the measured fastest kernel, from one bench_gemm.json.

    python3 bench/selector_check.py bench/results/<run>/bench_gemm.json

For each shape (f16 data, bias + ReLU) the candidates are the kernel paths the
selector chooses between: cuda_f32, lt_f16 (staged where its cost model staged
it) and, for unaligned shapes, lt_f16 unstaged. The selector's own row is a plan
compiled without forcing anything. Prints a markdown table and the agreement.
"""
import json
import sys

CANDIDATES = {"cuda_f32 (f16 data) bias+relu": "cuda_f32", "lt_f16 bias+relu fused": None,
              "lt_f16 bias+relu unstaged": "lt_f16"}


def kernel_label(row, fixed):
    if fixed:
        return fixed
    return "lt_f16 staged" if "staged" in row["kernel"] else "lt_f16"


def main(path):
    rows = json.load(open(path))["results"]
    shapes = []
    for r in rows:
        key = (r["batch"], r["m"], r["n"], r["k"])
        if key not in shapes:
            shapes.append(key)
    print("| shape BxMxNxK | group | candidates us | measured fastest | selector chose (its time) | agree | cost |")
    print("|---|---|---|---|---|---|---:|")
    agree = 0
    for key in shapes:
        mine = [r for r in rows if (r["batch"], r["m"], r["n"], r["k"]) == key]
        times = {}
        for r in mine:
            if r["path"] in CANDIDATES:
                times[kernel_label(r, CANDIDATES[r["path"]])] = r["median_us"]
        chosen = next(r for r in mine if r["path"] == "selector bias+relu")
        chosen_label = "lt_f16 staged" if "staged" in chosen["kernel"] else chosen["kernel"].split("(")[0]
        fastest = min(times, key=times.get)
        same = chosen_label == fastest
        # The selector's cost: the measured time of the kernel it chose minus the fastest's.
        cost = max(0.0, times.get(chosen_label, chosen["median_us"]) - times[fastest])
        agree += same
        cands = ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: kv[1]))
        print(f"| {'x'.join(map(str, key))} | {mine[0]['group']} | {cands} | {fastest} | "
              f"{chosen_label} ({chosen['median_us']:.1f}) | {'yes' if same else 'no'} | {cost:.1f} us |")
    print(f"\nAgreement: {agree}/{len(shapes)} shapes.")


if __name__ == "__main__":
    main(sys.argv[1])
