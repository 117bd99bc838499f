#!/usr/bin/env bash
# Makes the wheel `pip wheel bindings/python` built a manylinux wheel (auditwheel): the
# libraries libge2 needs beyond the manylinux set (libsqlite3 in a CUDA build) are copied
# into ge2.libs/ under hashed names and found through libge2's RPATH; the CUDA runtime and
# cuBLASLt are left out on purpose, taken from the system toolkit or NVIDIA's wheels at
# import (docs/python.md). Prints the repaired wheel's path.
#   scripts/repair-wheel.sh WHEEL OUT_DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 WHEEL OUT_DIR" >&2; exit 2; }
wheel=$1 out=$2
python3 -c "import auditwheel" 2> /dev/null && command -v patchelf > /dev/null ||
  { echo "repair-wheel: auditwheel and patchelf are missing (bash scripts/setup-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
python3 -m auditwheel repair --exclude libcudart.so.13 --exclude libcublasLt.so.13 -w "$out" "$wheel" \
  > "$out/repair.log" 2>&1 || { cat "$out/repair.log" >&2; exit 1; }
repaired=$(sed -n 's/^Fixed-up wheel written to //p' "$out/repair.log")
case $repaired in
  *manylinux_*) echo "$repaired" ;;
  *) echo "repair-wheel: no manylinux wheel came out:" >&2; cat "$out/repair.log" >&2; exit 1 ;;
esac
