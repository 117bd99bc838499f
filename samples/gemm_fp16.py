"""Python sample: one fused GEMM + bias + GELU with NumPy (CPU backend), and with
PyTorch / CuPy device arrays in place when a GPU and those libraries are there.

    GE2_LIBRARY=build/src/libge2.so PYTHONPATH=bindings/python python3 samples/gemm_fp16.py
"""
import numpy as np

import ge2

rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (256, 512)).astype(np.float16)
b = (rng.uniform(-1, 1, (512, 128)) / 16).astype(np.float16)
bias = rng.uniform(-1, 1, 128).astype(np.float16)

with ge2.Context(device="cpu") as cpu:
    y = ge2.gemm_bias_act(a, b, bias, act="gelu", context=cpu)
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias
    ref = 0.5 * ref * (1 + np.vectorize(__import__("math").erf)(ref / np.sqrt(2)))
    print(f"NumPy on the CPU backend: relative error {np.linalg.norm(y - ref) / np.linalg.norm(ref):.2e}")

try:
    gpu = ge2.Context(device="cuda")
except ge2.NoDeviceError as error:
    print(f"no CUDA device, GPU part skipped: {error}")
else:
    try:
        import torch
        ta, tb, tbias = (torch.from_numpy(x).cuda() for x in (a, b, bias))
        ty = ge2.gemm_bias_act(ta, tb, tbias, act="gelu", context=gpu)  # in place, on torch's stream
        print(f"PyTorch tensors on {gpu.describe()['device']}: relative error "
              f"{float(np.linalg.norm(ty.cpu().numpy() - ref) / np.linalg.norm(ref)):.2e}")
    except ImportError:
        print("PyTorch not installed")
    try:
        import cupy
        cy = ge2.gemm_bias_act(cupy.asarray(a), cupy.asarray(b), cupy.asarray(bias), act="gelu", context=gpu)
        print(f"CuPy arrays: relative error {float(np.linalg.norm(cupy.asnumpy(cy) - ref) / np.linalg.norm(ref)):.2e}")
    except ImportError:
        print("CuPy not installed")
    gpu.close()
