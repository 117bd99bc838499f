#!/usr/bin/env bash
# "Wheels only": the Python package loading a CUDA build of libge2 on a machine whose CUDA
# toolkit the loader cannot see, the CUDA runtime and cuBLASLt coming from NVIDIA's wheels
# (nvidia-cuda-runtime, nvidia-cublas) in a fresh virtual environment. The toolkit's library
# folder is hidden under an empty tmpfs in a private mount namespace (unshare -m; root), so
# the machine itself is left as it was. Checked: without the wheels the import fails with a
# message naming them; with them it succeeds, the process maps libcudart and libcublasLt from
# the wheels, and a computation runs (on the CPU backend when no GPU is visible).
#   scripts/check-wheels-only.sh BUILD_DIR      (BUILD_DIR/src/libge2.so: a CUDA build)
# Prints a SKIPPED line, exit 0, where it cannot run (no CUDA build, no unshare, no PyPI).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
lib=$(readlink -f "$1/src/libge2.so")
skip() {
  echo "SKIPPED: wheels-only check: $*"
  exit 0
}
[ -f "$lib" ] && readelf -d "$lib" | grep -q 'libcudart\.so' || skip "$lib is not a CUDA build"
# The folders the loader takes the toolkit's libraries from now.
mapfile -t toolkit < <(ldd "$lib" | awk '/libcudart|libcublasLt/ && $3 ~ /^\// {print $3}' |
  xargs -r -n1 dirname | xargs -r -n1 readlink -f | sort -u)
[ ${#toolkit[@]} -gt 0 ] || skip "the loader finds no CUDA toolkit libraries to hide"
probe_dir=$(mktemp -d)
unshare --mount sh -c "mount -t tmpfs none $probe_dir" 2> /dev/null ||
  skip "a private mount namespace (unshare --mount, mount -t tmpfs) is not permitted here"
rmdir "$probe_dir"

venv=/tmp/ge2-wheels-only-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q numpy || skip "cannot install numpy from PyPI"
probe() {  # $1: expect "import" or "refusal"
  unshare --mount bash -c '
    for dir in "$@"; do mount -t tmpfs none "$dir"; done
    ! ldd "'"$lib"'" | grep -q "libcudart.so.13 => /" || { echo "toolkit still visible"; exit 1; }
    cd /tmp && env -u PYTHONPATH GE2_LIBRARY="'"$lib"'" PYTHONPATH="'"$ROOT"'/bindings/python" \
      "'"$venv"'/bin/python" "'"$ROOT"'/scripts/wheels_only_probe.py" "'"$1"'"' _ "${toolkit[@]}"
}
probe refusal
"$venv/bin/python" -m pip install -q --no-deps "nvidia-cuda-runtime>=13,<14" "nvidia-cublas>=13,<14" ||
  skip "cannot install nvidia-cuda-runtime / nvidia-cublas from PyPI"
probe import
rm -rf "$venv"
