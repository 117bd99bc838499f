"""Kernels to profile with Nsight Compute, one execution each between
cudaProfilerStart/Stop (run under `ncu --profile-from-start off`):

    ncu --profile-from-start off --clock-control none --csv --metrics ... \
        python3 bench/profile_kernels.py

In launch order: torch.mm 4096^3; torch._addmm_activation (bias+ReLU) 4096^3;
ge2 bias+ReLU fused 4096^3; ge2 GEMM only 4096^3; ge2 bias+erf-GELU
16384x4096x1024 (GEMM + elementwise pass); ge2 staged bias+ReLU 4095x4097x4093
(copies in, GEMM, copy back). Prints the label of each block before it runs.
"""
import torch

import ge2


def layer(ctx, m, n, k, act, bias=True):
    g = ge2.Graph()
    a, b = g.input("a", (m, k)), g.input("b", (k, n))
    out = g.gemm(a, b)
    if bias:
        out = g.bias(out, g.input("bias", (n,)))
    if act:
        out = g.activation(out, act)
    g.output(out, "d")
    return g.compile(ctx)


def tensors(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    return a, b, bias, d


def main():
    ctx = ge2.Context(device="cuda", tune="off", tunedb="")
    a, b, bias, d = tensors(4096, 4096, 4096)
    fused, gemm_only = layer(ctx, 4096, 4096, 4096, "relu"), layer(ctx, 4096, 4096, 4096, None, bias=False)
    ea, eb, ebias, ed = tensors(16384, 4096, 1024)
    erf = layer(ctx, 16384, 4096, 1024, "gelu")
    ua, ub, ubias, ud = tensors(4095, 4097, 4093)
    staged = layer(ctx, 4095, 4097, 4093, "relu")
    blocks = [
        ("torch.mm 4096^3", lambda: torch.mm(a, b, out=d)),
        ("torch._addmm_activation relu 4096^3", lambda: torch._addmm_activation(bias, a, b)),
        ("ge2 bias+relu fused 4096^3", lambda: fused.execute({"a": a, "b": b, "bias": bias, "d": d})),
        ("ge2 gemm only 4096^3", lambda: gemm_only.execute({"a": a, "b": b, "d": d})),
        ("ge2 bias+gelu_erf 16384x4096x1024", lambda: erf.execute({"a": ea, "b": eb, "bias": ebias, "d": ed})),
        ("ge2 staged bias+relu 4095x4097x4093", lambda: staged.execute({"a": ua, "b": ub, "bias": ubias, "d": ud})),
    ]
    for _, run in blocks:  # warm-up outside the profiled range
        run()
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    for label, run in blocks:
        print(f"profile block: {label}", flush=True)
        run()
        torch.cuda.synchronize()
    cudart.cudaProfilerStop()


if __name__ == "__main__":
    main()
