"""Run by check-wheels-only.sh with the CUDA toolkit hidden: `refusal` expects the import to
fail naming NVIDIA's wheels; `import` expects it to succeed with libcudart and libcublasLt
mapped from those wheels, and a GEMM to match NumPy (`import cuda`: on a CUDA context)."""
import sys
import warnings

expect = sys.argv[1]
try:
    import ge2
except ImportError as error:
    if expect == "refusal" and "nvidia-cuda-runtime nvidia-cublas" in str(error):
        print("wheels-only check: without the wheels the import is refused:", str(error).splitlines()[-1])
        sys.exit(0)
    raise
if expect == "refusal":
    sys.exit("wheels-only check: the import succeeded although the toolkit is hidden and no wheel is installed")

import numpy as np  # noqa: E402

from ge2 import _capi  # noqa: E402

with open("/proc/self/maps") as maps:
    mapped = {line.split()[-1] for line in maps if ".so" in line}
for soname in _capi.CUDA_SONAMES:
    paths = [path for path in mapped if path.endswith(soname)]
    assert paths and all("/nvidia/cu13/lib/" in path for path in paths), (soname, paths)
a, b = np.random.rand(8, 16).astype(np.float32), np.random.rand(16, 4).astype(np.float32)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the AUTO -> CPU fallback warning on a machine without a GPU
    with ge2.Context(device=sys.argv[2] if len(sys.argv) > 2 else "auto") as ctx:
        error = float(np.abs(ge2.gemm_bias_act(a, b, context=ctx) - a @ b).max())
        kind = ctx.describe()["kind"]
assert error < 1e-5, error
print(f"wheels-only check: ge2 {ge2.__version__} loaded with {', '.join(_capi.WHEEL_LIBRARIES)}; "
      f"context kind {kind}, max error {error:.2e}")
