#!/bin/bash
# Temporary device script for run 20 (call b); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build
W=/tmp/w20b; rm -rf $W; mkdir -p $W/w $W/t
B=$BUILD/tests/ge2_gpu_tests
T0=$(date +%s)
export GE2_LIBRARY=$BUILD/src/libge2.so PYTHONUNBUFFERED=1
# Phase 0: the tile-walk sweep, alone on the GPU.
PYTHONPATH=$PWD/bindings/python:$PWD/bench timeout 240 python3 bench/cutlass_tile_walk.py --out $W/w --groups 5 > $W/w/walk.log 2>&1
echo "walk exit $?"; cat $W/w/walk.log
echo "phase 0: $(( $(date +%s) - T0 )) s"
# Phase 1: the cases run 20a's shards did not finish, the new tile-walk case, and it under memcheck.
cases=('gpu: staging copies handle every row misalignment*' 'gpu cutlass: each configuration*'
  'gpu cutlass: the gated epilogue computes*' 'gpu cutlass: untuned, gated units of 2048*'
  'gpu cutlass: tuning times a gated unit*' 'gpu cutlass: every tile walk*' 'gpu cutlass: gated units the epilogue*'
  'gpu cutlass: pointers not 16-byte*')
for i in "${!cases[@]}"; do ( timeout 300 $B -tc="${cases[$i]}" > $W/t/case-$i.log 2>&1; echo "exit $?" >> $W/t/case-$i.log ) & done
( timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 $B -tc='gpu cutlass: every tile walk*' > $W/t/memcheck-walk.log 2>&1; echo "exit $?" >> $W/t/memcheck-walk.log ) &
wait
pkill -f ge2_gpu_tests
for i in "${!cases[@]}"; do echo "${cases[$i]}: $(grep -E '^\[doctest\] (test cases|assertions)|^exit' $W/t/case-$i.log | tr '\n' ' ')"; done
grep -h -E "ERROR:|is NOT correct|CHECK.*\) is NOT|MESSAGE: tile-walk" $W/t/case-*.log | head -20
echo "memcheck: $(grep -E 'ERROR SUMMARY|^exit|assertions' $W/t/memcheck-walk.log | tr '\n' ' ')"
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20b.tgz -C $W .
