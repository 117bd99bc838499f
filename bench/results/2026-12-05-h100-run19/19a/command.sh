#!/bin/bash
# Temporary device script for run 19 (call a); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build
W=/tmp/w19; rm -rf $W; mkdir -p $W/a $W/t $W/g $W/f
B=$BUILD/tests/ge2_gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > $W/device.txt
cat $W/device.txt
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
# Phase 1, correctness, host-bound: side by side.
( timeout 190 $B -tc='*gated units of 2048*' > $W/rule.log 2>&1; echo "rule exit $?" >> $W/rule.log ) &
( OUT=$W/a timeout 190 bash scripts/gpu-check.sh activations > $W/act.log 2>&1; echo "activations exit $?" >> $W/act.log ) &
( tf=$(mktemp -d) && tar xJf build-tf/transformers.tar.xz -C $tf &&
  GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$PWD/bindings/python:$tf/transformers-4.57.1 timeout 190 \
  python3 -m pytest -q -rs -n 4 bindings/python/tests/test_transformers.py bindings/python/tests/test_torch.py > $W/torch.log 2>&1;
  echo "torch exit $?" >> $W/torch.log ) &
wait
pkill -f ge2_gpu_tests; pkill -f pytest
echo "phase 1: $(( $(date +%s) - T0 )) s"
for f in $W/a/gpu_activations-*.log; do echo "$f: $(grep -E '^\[doctest\] (test cases|assertions)' $f | tr '\n' ' ')"; done
tail -3 $W/rule.log; tail -12 $W/act.log; tail -4 $W/torch.log
# Phase 2: benchmarks, one at a time on the GPU.
export GE2_LIBRARY=$BUILD/src/libge2.so PYTHONUNBUFFERED=1
GE2_TUNEDB=$W/g/tunedb.sqlite PYTHONPATH=$PWD/bindings/python:$PWD/bench timeout $(left 290) \
  python3 bench/gated_layers.py --out $W/g --dtypes bf16 --acts silu --groups 7 \
  --shapes 2048x4096x11008 2047x4096x11008 3000x2048x5632 > $W/g/gated_layers.log 2>&1
echo "gated exit $?"; cat $W/g/gated_layers.log
PYTHONPATH=$PWD/bindings/python timeout 40 python3 bench/torch_ops.py --out $W/t --groups 11 > $W/t/torch_ops.log 2>&1
echo "torch_ops exit $?"; tail -12 $W/t/torch_ops.log
PYTHONPATH=$PWD/bindings/python timeout $(left 340) python3 bench/ffn_blocks.py --out $W/f --dtypes f16 \
  --blocks gelu_tanh relu swiglu --residual no --inter 11008 --tokens 512 4096 --groups 7 > $W/ffn.log 2>&1
echo "ffn exit $?"; grep tokens $W/ffn.log
python3 bench/plot_ffn.py $W/f/ffn_blocks.json $W/f/ffn_ratios.png
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run19a.tgz -C $W .
