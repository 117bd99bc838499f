#!/usr/bin/env bash
# Packs transformers 4.57.1 and its imports (setup-deps.sh's GE2_TRANSFORMERS_DIR) for a device
# call: 149 MB unpacked is over what a call carries, 8.6 MB as .tar.xz. The device runs Python
# 3.12, so the three packages with compiled modules (regex, pyyaml, charset_normalizer) are
# replaced by their cp312 wheels (run 19: the cp311 regex failed to import there).
#   bash scripts/pack-transformers.sh      then carry build-tf; gpu-check.sh torch unpacks it
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${GE2_TRANSFORMERS_DIR:-$HOME/.cache/ge2/transformers-4.57.1}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/wheels" regex==2026.12.2 pyyaml==6.0.4 charset_normalizer==3.5.3
cp -r "$SRC" "$WORK/transformers-4.57.1"
cd "$WORK/transformers-4.57.1"
rm -rf regex regex-* charset_normalizer charset_normalizer-* yaml _yaml pyyaml-* PyYAML-*
for wheel in "$WORK"/wheels/*.whl; do python3 -m zipfile -e "$wheel" .; done
mkdir -p "$ROOT/build-tf"
tar cJf "$ROOT/build-tf/transformers.tar.xz" --exclude=__pycache__ -C "$WORK" transformers-4.57.1
ls -la "$ROOT/build-tf/transformers.tar.xz"
