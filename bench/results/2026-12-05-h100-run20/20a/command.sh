#!/bin/bash
# Temporary device script for run 20 (call a); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build
W=/tmp/w20; rm -rf $W; mkdir -p $W/r $W/g0 $W/g250 $W/f $W/t
B=$BUILD/tests/ge2_gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/device.txt
cat $W/device.txt
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
export GE2_LIBRARY=$BUILD/src/libge2.so PYTHONUNBUFFERED=1
# Phase 0: how a long GEMM's time drifts from idle into sustained load (alone on the GPU).
PYTHONPATH=$PWD/bindings/python timeout 60 python3 bench/power_ramp.py --out $W/r --ge2-kernels lt_bf16 cutlass_bf16_128x128 > $W/r/ramp.log 2>&1
echo "ramp exit $?"; cat $W/r/ramp.log
# Phase 1, correctness, host-bound: the whole GPU suite in 8 shards beside pytest on CUDA.
cases=$($B --count 2>/dev/null | sed -n 's/.*passing the current filters: \([0-9]*\).*/\1/p'); per=$(( (cases + 7) / 8 ))
for i in $(seq 0 7); do ( timeout 240 $B --first=$((i * per + 1)) --last=$(((i + 1) * per)) > $W/t/shard-$i.log 2>&1; echo "shard $i exit $?" >> $W/t/shard-$i.log ) & done
( tf=$(mktemp -d) && tar xJf build-tf/transformers.tar.xz -C $tf &&
  PYTHONPATH=$PWD/bindings/python:$tf/transformers-4.57.1 timeout 240 \
  python3 -m pytest -q -rs -n 6 bindings/python/tests > $W/t/pytest.log 2>&1; echo "pytest exit $?" >> $W/t/pytest.log ) &
( ctest --test-dir $BUILD -E 'exported_symbols|gpu_tests' > $W/t/ctest.log 2>&1; GE2_TUNEDB= $BUILD/samples/ge2_mlp > $W/t/mlp.log 2>&1 ) &
wait
pkill -f ge2_gpu_tests; pkill -f pytest
echo "phase 1: $(( $(date +%s) - T0 )) s ($cases cases)"
for i in $(seq 0 7); do echo "shard $i: $(grep -E '^\[doctest\] (test cases|assertions)|exit' $W/t/shard-$i.log | tr '\n' ' ')"; done
grep -E "^\[doctest\].*(FAILED|ERROR)|ERROR:|CHECK.*is NOT" $W/t/shard-*.log | head -20
tail -3 $W/t/pytest.log; tail -3 $W/t/ctest.log; tail -1 $W/t/mlp.log
# Phase 2: benchmarks, one at a time on the GPU.
for s in 0 250; do
  GE2_TUNE_SUSTAIN_MS=$s PYTHONPATH=$PWD/bindings/python:$PWD/bench timeout $(left 420) \
    python3 bench/gated_layers.py --out $W/g$s --dtypes bf16 --acts silu --groups 7 \
    --shapes 2048x4096x11008 8192x4096x11008 > $W/g$s/gated_layers.log 2>&1
  echo "gated sustain=$s exit $?"; grep -v "^ *$" $W/g$s/gated_layers.log | tail -4
done
PYTHONPATH=$PWD/bindings/python timeout $(left 575) python3 bench/ffn_blocks.py --out $W/f --dtypes f16 bf16 \
  --blocks gelu --residual yes --inter 11008 --tokens 16 512 4096 --groups 7 > $W/ffn.log 2>&1
echo "ffn exit $?"; grep tokens $W/ffn.log
python3 bench/plot_ffn.py $W/f/ffn_blocks.json $W/f/ffn_ratios.png
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20a.tgz -C $W .
