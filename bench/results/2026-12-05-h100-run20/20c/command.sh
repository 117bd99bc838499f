#!/bin/bash
# Temporary device script for run 20 (call c); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build
W=/tmp/w20c; rm -rf $W; mkdir -p $W/g $W/f $W/c $W/t
B=$BUILD/tests/ge2_gpu_tests
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
export GE2_LIBRARY=$BUILD/src/libge2.so PYTHONUNBUFFERED=1
# The CUTLASS cases and the tile-walk rule's case beside the first benchmark would
# disturb it: they run first, side by side (host-bound fp64 references).
cases=('gpu cutlass: every tile walk*' 'gpu cutlass: untuned, gated units of 2048*' 'gpu cutlass: batches*'
  'gpu cutlass: tuning times CUTLASS*' 'gpu cutlass: untuned, the selector*' 'gpu cutlass: each configuration*'
  'gpu cutlass: the gated epilogue computes*' 'gpu: FFN blocks in nn.Linear*')
for i in "${!cases[@]}"; do ( timeout 170 $B -tc="${cases[$i]}" > $W/t/case-$i.log 2>&1; echo "exit $?" >> $W/t/case-$i.log ) & done
wait
for i in "${!cases[@]}"; do echo "${cases[$i]}: $(grep -E '^\[doctest\] (test cases|assertions)|^exit' $W/t/case-$i.log | tr '\n' ' ')"; done
echo "tests: $(( $(date +%s) - T0 )) s"
PYTHONPATH=$PWD/bindings/python:$PWD/bench timeout $(left 330) python3 bench/gated_layers.py --out $W/g --dtypes bf16 \
  --acts silu --groups 7 --shapes 2048x4096x11008 8192x4096x11008 3000x2048x5632 > $W/g/gated_layers.log 2>&1
echo "gated exit $?"; grep -v "^ *$" $W/g/gated_layers.log | tail -3
PYTHONPATH=$PWD/bindings/python timeout $(left 575) python3 bench/ffn_blocks.py --out $W/f --dtypes f16 bf16 \
  --blocks gelu swiglu --residual yes --inter 11008 --tokens 512 4096 8192 --groups 5 > $W/ffn.log 2>&1
echo "ffn exit $?"; grep tokens $W/ffn.log
python3 bench/plot_ffn.py $W/f/ffn_blocks.json $W/f/ffn_ratios.png
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20c.tgz -C $W .
