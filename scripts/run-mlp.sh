#!/usr/bin/env bash
# The main job: build ge2 (with CUDA when the toolkit is there) and run the
# sample MLP graph end to end. It prints the context, the compiled plan with
# the chosen kernels, and the check against an fp64 reference; the run is on
# the GPU when one is present, otherwise on the CPU reference backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
# The CUTLASS kernels (about 2 minutes to compile on 2 cores) only run on a
# Hopper GPU: without a visible GPU the sample's build skips them.
cutlass=-UGE2_WITH_CUTLASS
if ! nvidia-smi -L > /dev/null 2>&1; then
  cutlass=-DGE2_WITH_CUTLASS=OFF
  echo "run-mlp: no GPU visible, building without the CUTLASS kernels"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${GE2_CUDA_ARCHS:-90}" \
  "$cutlass" > build-configure.log
cmake --build build --target ge2_mlp
exec ./build/samples/ge2_mlp
