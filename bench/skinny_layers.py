"""Decode-sized layers, y = act(x @ W^T + b) with W in nn.Linear's [out, in] layout and a few
rows of x: ge2's cuda_skinny kernel against ge2 on cuBLASLt and against PyTorch, one process,
same tensors.

Contenders per shape and dtype (none: bias only; erf: bias + exact GELU):
  torch_{none,erf}       F.linear(x, W, b) / F.gelu(F.linear(x, W, b))
  ge2_{none,erf}         ge2's default choice (the plan's kernel is recorded)
  ge2_{none,erf}_skinny  forced cuda_skinny (CUDA cores at one row and for f32; from two rows 16-bit
                         data runs on its tensor-core form)
  ge2_{none,erf}_lt      forced cuBLASLt (erf: GEMM + bias, then the separate pass)
  ge2_{none,erf}_lt_ws   the same with GE2_LT_DECODE_WORKSPACE=1: cuBLASLt's first choice under the
                         context's workspace (often split-K) instead of without workspace (<= 16 rows, >= 4096 columns)
                         (a context of its own: a context keeps the first algorithm chosen per problem)
Two timings of each: "device", one call captured in a CUDA graph and replayed back to back
(kernels only), and "eager", the Python call itself back to back (host cost included, as a
user calls it). Medians over groups rotated ABBA. GB/s counts W, x and y once.

    python3 bench/skinny_layers.py --out DIR [--dtypes f16 bf16] [--rows 1 2 4 8 16] [--groups 9]
        [--shapes 3072x768 768x3072 ...]   (N x K: out features x in features; default: SHAPES)
"""
import argparse

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (8192, 8192),
          (2048, 1024)]  # (N, K): out features, in features


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--groups", type=int, default=9)
    parser.add_argument("--shapes", nargs="+", default=[f"{n}x{k}" for n, k in SHAPES])
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in text.split("x")) for text in args.shapes]
    import torch  # after argparse: --help works without torch
    import torch.nn.functional as F

    import ge2
    from ffn_blocks import cuda_graphed, decode_workspace_query, linear_layer, time_contenders, write_results

    torch.manual_seed(0)
    ctx = ge2.Context(device="cuda", tunedb="")
    ctx_ws = ge2.Context(device="cuda", tunedb="")
    rows = []
    for dtype_name in args.dtypes:
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype_name]
        for n, k in shapes:
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            for m in args.rows:
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                ref = x.double() @ w.double().T + b.double()
                refs = {"none": ref, "erf": F.gelu(ref)}
                runs, outs, kernels, configurations = {}, {}, {}, {}
                for act, name in ((None, "none"), ("gelu", "erf")):
                    for suffix, force in (("", None), ("_skinny", "cuda_skinny"), ("_lt", f"lt_{dtype_name}"),
                                          ("_lt_ws", f"lt_{dtype_name}")):
                        g = linear_layer(m, n, k, dtype_name, act)
                        try:
                            with decode_workspace_query(on=suffix == "_lt_ws"):
                                plan = g.compile(ctx_ws if suffix == "_lt_ws" else ctx, force_kernel=force)
                        except ge2.Ge2Error as e:  # cuda_skinny refused (rows, columns): say why
                            kernels[f"ge2_{name}{suffix}"] = f"refused: {e}"
                            continue
                        y = torch.empty(m, n, device="cuda", dtype=dtype)
                        key = f"ge2_{name}{suffix}"
                        runs[key] = lambda p=plan, y=y: p.execute({"x": x, "w": w, "b": b, "y": y})
                        outs[key] = y
                        step = [s for s in plan.describe()["steps"] if "selection" in s][0]
                        kernels[key] = step["selection"]["kernel"]
                        configurations[key] = step.get("kernel", {}).get("configuration", "") or \
                            step.get("kernel", {}).get("algo_source", "")
                runs["torch_none"] = lambda: outs.__setitem__("torch_none", F.linear(x, w, b))
                runs["torch_erf"] = lambda: outs.__setitem__("torch_erf", F.gelu(F.linear(x, w, b)))
                with torch.no_grad():
                    for fn in runs.values():
                        fn()
                    torch.cuda.synchronize()
                    errors = {key: ((outs[key].double() - refs[key.split("_")[1]]).norm() /
                                    refs[key.split("_")[1]].norm()).item() for key in outs}
                    device = time_contenders({key: cuda_graphed(lambda _x, fn=fn: fn(), x)
                                              for key, fn in runs.items()}, args.groups, 20)
                    eager = time_contenders(runs, args.groups, 20)
                gbytes = (n * k + m * k + m * n) * x.element_size() / 1e9
                row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "device_us": device, "eager_us": eager,
                       "device_gbs": {key: gbytes / (t * 1e-6) for key, t in device.items()},
                       "rel_error": errors, "kernels": kernels, "configurations": configurations}
                rows.append(row)
                best = lambda d, key: d.get(key, float("nan"))  # noqa: E731
                print(f"{dtype_name} {m:2d}x{n}x{k}: device none skinny {best(device, 'ge2_none_skinny'):6.1f} "
                      f"lt {best(device, 'ge2_none_lt'):6.1f} lt_ws {best(device, 'ge2_none_lt_ws'):6.1f} torch {device['torch_none']:6.1f} | erf default "
                      f"{device['ge2_erf']:6.1f} ({kernels['ge2_erf']}) skinny {best(device, 'ge2_erf_skinny'):6.1f} "
                      f"lt+pass {best(device, 'ge2_erf_lt'):6.1f} lt_ws+pass {best(device, 'ge2_erf_lt_ws'):6.1f} torch {device['torch_erf']:6.1f} | eager erf "
                      f"default {eager['ge2_erf']:6.1f} torch {eager['torch_erf']:6.1f} | skinny "
                      f"{row['device_gbs'].get('ge2_none_skinny', 0):6.0f} GB/s | max err "
                      f"{max(errors.values()):.1e}{' | K split' if 'K split' in configurations.get('ge2_none_skinny', '') else ''}",
                      flush=True)
    write_results(args, "skinny_layers", {"rows": rows})


if __name__ == "__main__":
    main()
