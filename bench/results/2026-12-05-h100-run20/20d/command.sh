#!/bin/bash
# Temporary device script for run 20 (call d: the tile-walk sweep again); deleted after the run.
set -u
rm -rf build && mv build-slim build
export BUILD=$PWD/build GE2_LIBRARY=$PWD/build/src/libge2.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/bench
W=/tmp/w20d; rm -rf $W; mkdir -p $W
T0=$(date +%s)
timeout 100 python3 bench/cutlass_tile_walk.py --out $W/check --check --shapes 1 > $W/check.log 2>&1
echo "check exit $?"; cat $W/check.log
timeout 380 python3 bench/cutlass_tile_walk.py --out $W --groups 5 > $W/walk.log 2>&1
echo "walk exit $?"; cat $W/walk.log
echo "total: $(( $(date +%s) - T0 )) s"
tar czf $OUT/run20d.tgz -C $W .
