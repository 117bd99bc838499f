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
if ! python3 -c "import numpy, pytest, scikit_build_core" > /dev/null 2>&1; then
  echo "setup-deps: installing numpy, pytest and scikit-build-core (the wheel's build backend) from PyPI"
  python3 -m pip install -q numpy pytest scikit-build-core 2> /dev/null ||
    python3 -m pip install -q --break-system-packages numpy pytest scikit-build-core
fi
# CUTLASS headers for the sm90a kernels, where a CUDA toolkit is present; --no-deps:
# the wheel's Python dependencies (cuda-python, scipy, ...) are not needed for its headers.
if command -v nvcc > /dev/null 2>&1 && ! python3 -c "import cutlass_library" > /dev/null 2>&1; then
  echo "setup-deps: installing the CUTLASS headers (nvidia-cutlass, without its Python dependencies)"
  python3 -m pip install -q --no-deps nvidia-cutlass 2> /dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages nvidia-cutlass
fi
# python3 -m venv (the wheel is installed into a fresh environment in the tests).
if ! python3 -c "import ensurepip" > /dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq python3-venv > /dev/null
fi
