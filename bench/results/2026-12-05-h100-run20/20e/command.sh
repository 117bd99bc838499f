#!/bin/bash
# Temporary device script for run 20 (call e: the erf rule); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build GE2_LIBRARY=$PWD/build/src/libge2.so PYTHONUNBUFFERED=1
W=/tmp/w20e; rm -rf $W; mkdir -p $W/f $W/t
B=$BUILD/tests/ge2_gpu_tests
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
cases=('*gated units of 2048 rows*' '*the selector keeps cuBLASLt*' 'gpu: FFN blocks in nn.Linear*'
  '*tuning times CUTLASS beside*' 'gpu: every dtype x bias x activation*')
for i in "${!cases[@]}"; do ( timeout 110 $B -tc="${cases[$i]}" > $W/t/case-$i.log 2>&1; echo "exit $?" >> $W/t/case-$i.log ) & done
wait
for i in "${!cases[@]}"; do echo "${cases[$i]}: $(grep -E '^\[doctest\] (test cases|assertions)|^exit' $W/t/case-$i.log | tr '\n' ' ')"; done
grep -h -B3 "ERROR" $W/t/case-*.log | head -30
PYTHONPATH=$PWD/bindings/python timeout $(left 330) python3 bench/ffn_blocks.py --out $W/f --dtypes f16 bf16 \
  --blocks gelu --residual yes --inter 11008 --tokens 2048 4096 8192 --groups 5 > $W/ffn.log 2>&1
echo "ffn exit $?"; grep tokens $W/ffn.log
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20e.tgz -C $W .
