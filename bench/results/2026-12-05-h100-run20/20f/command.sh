#!/bin/bash
# Temporary device script for run 20 (call f: the erf rule at 2048 rows); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build GE2_LIBRARY=$PWD/build/src/libge2.so PYTHONUNBUFFERED=1
W=/tmp/w20f; rm -rf $W; mkdir -p $W/f $W/t
B=$BUILD/tests/ge2_gpu_tests
T0=$(date +%s)
( timeout 100 $B -tc='*gated units of 2048 rows*' > $W/t/rule.log 2>&1; echo "exit $?" >> $W/t/rule.log ) &
( timeout 100 $B -tc='*the selector keeps cuBLASLt*' > $W/t/selector.log 2>&1; echo "exit $?" >> $W/t/selector.log ) &
wait
for f in $W/t/*.log; do echo "$f: $(grep -E '^\[doctest\] (test cases|assertions)|^exit' $f | tr '\n' ' ')"; done
PYTHONPATH=$PWD/bindings/python timeout 150 python3 bench/ffn_blocks.py --out $W/f --dtypes f16 bf16 \
  --blocks gelu --residual yes --inter 11008 --tokens 1024 2048 --groups 5 > $W/ffn.log 2>&1
echo "ffn exit $?"; grep tokens $W/ffn.log
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20f.tgz -C $W .
