#!/bin/bash
# Temporary device script for run 19 (call b); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build
W=/tmp/w19b; rm -rf $W; mkdir -p $W
B=$BUILD/tests/ge2_gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv > $W/device.txt; cat $W/device.txt
T0=$(date +%s)
( timeout 270 $B -tc='*gated units of 2048*' > $W/rule.log 2>&1; echo "rule exit $?" >> $W/rule.log ) &
( timeout 270 $B -tc='gpu cutlass: each configuration*' > $W/cutlass_each.log 2>&1; echo "cutlass each exit $?" >> $W/cutlass_each.log ) &
( tf=$(mktemp -d) && tar xJf build-tf/transformers.tar.xz -C $tf &&
  GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$PWD/bindings/python:$tf/transformers-4.57.1 timeout 270 \
  python3 -m pytest -q -rs -n 4 bindings/python/tests/test_transformers.py > $W/transformers.log 2>&1;
  echo "transformers exit $?" >> $W/transformers.log ) &
wait
echo "wall: $(( $(date +%s) - T0 )) s"
for f in rule cutlass_each; do grep -E '^\[doctest\] (test cases|assertions)|exit|MESSAGE|ERROR' $W/$f.log | head -20; done
tail -6 $W/transformers.log
tar czf $OUT/run19b.tgz -C $W .
