#!/usr/bin/env bash
# Runs on the H200 through the device tool (see docs/gpu-validation.md):
#   scripts/gpu-check.sh [tests|activations|cutlass|epilogue|reliability|wheels|sanitize|tune|notebook|profile|dynamic|fp8|fp8-block|gated|ffn|torch|skinny|elementwise|bench|all]...
# Uses the build folder made on the development machine (build-gpu, carried;
# the device lacks sqlite3.h), runs the gpu-labelled tests, the sample, the
# sanitizers and the benchmarks, and prints a short table last. Logs go to $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
OUT=${OUT:-/tmp/ge2-gpu-check}
mkdir -p "$OUT"
modes=${*:-tests}
summary=()
note() { summary+=("$1"); }
# gpu_cases NAME CASES MEMCHECK_CASES: the GPU test cases matching CASES, then those
# matching MEMCHECK_CASES under compute-sanitizer memcheck (gpu_NAME.log, sanitizer-NAME.log).
gpu_cases() {
  "$BUILD/tests/ge2_gpu_tests" -tc="$2" > "$OUT/gpu_$1.log" 2>&1
  note "gpu $1 cases: exit $? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/gpu_$1.log" | tr '\n' ' ')"
  compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/tests/ge2_gpu_tests" -tc="$3" \
    > "$OUT/sanitizer-$1.log" 2>&1
  note "compute-sanitizer memcheck ($1 cases): exit $? ($(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-$1.log" | tail -1))"
}
# transformers_tests LOG LABEL SECONDS PYTEST_ARGS...: test_transformers.py on CUDA (SECONDS: its
# time limit, 0 for none). The package is 149 MB, over what a device call carries, so it travels
# packed (8.6 MB; scripts/pack-transformers.sh, then carry build-tf), unpacked once per run.
tf_dir=
transformers_tests() {
  local log=$1 label=$2 seconds=$3 tar=${GE2_TRANSFORMERS_TAR:-$ROOT/build-tf/transformers.tar.xz}
  shift 3
  if [ ! -f "$tar" ]; then
    note "$label: SKIPPED ($tar not carried)"
    return
  fi
  [ -n "$tf_dir" ] || { tf_dir=$(mktemp -d) && tar xJf "$tar" -C "$tf_dir"; }
  GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python:$tf_dir/transformers-4.57.1 \
    timeout "$seconds" python3 -m pytest -q -rs "$@" "$ROOT/bindings/python/tests/test_transformers.py" \
    > "$OUT/$log" 2>&1
  note "$label: $(tail -1 "$OUT/$log")"
}

# CTest files hold the absolute paths of the machine that configured them.
configured=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
if [ "$configured" != "$ROOT" ] && [ ! -e "$configured" ]; then
  mkdir -p "$(dirname "$configured")" && ln -s "$ROOT" "$configured"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/device.txt"
export GE2_TUNEDB=$OUT/tunedb.sqlite

for mode in $modes; do
  case $mode in
  tests | all)
    # gpu_tests runs once, directly below (its fp64 references take minutes).
    ctest --test-dir "$BUILD" --output-on-failure -E 'exported_symbols|gpu_tests' 2>&1 | tee "$OUT/ctest.log" | tail -25
    note "ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
    # The fp64 references are host work: shards of the test cases run side by
    # side (doctest --first/--last), each in its own process on the one GPU.
    cases=$("$BUILD/tests/ge2_gpu_tests" --count 2>/dev/null | sed -n 's/.*passing the current filters: \([0-9]*\).*/\1/p')
    shards=${GPU_TEST_SHARDS:-6}
    per=$(( (${cases:-0} + shards - 1) / shards ))
    : > "$OUT/gpu_tests.log"
    if [ "${cases:-0}" -gt 0 ]; then
      for i in $(seq 0 $((shards - 1))); do
        "$BUILD/tests/ge2_gpu_tests" --first=$((i * per + 1)) --last=$(((i + 1) * per)) \
          > "$OUT/gpu_tests-$i.log" 2>&1 &
      done
      wait
      # One file: the device tool returns few files per call.
      for i in $(seq 0 $((shards - 1))); do
        echo "===== shard $i" >> "$OUT/gpu_tests.log"
        cat "$OUT/gpu_tests-$i.log" >> "$OUT/gpu_tests.log" && rm "$OUT/gpu_tests-$i.log"
      done
    else
      "$BUILD/tests/ge2_gpu_tests" > "$OUT/gpu_tests.log" 2>&1
    fi
    tail -4 "$OUT/gpu_tests.log"
    note "gpu tests ($cases cases): $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/gpu_tests.log" | tr '\n' ' ')"
    GE2_TUNEDB= "$BUILD/samples/ge2_mlp" > "$OUT/mlp.log" 2>&1
    note "sample mlp: $(tail -1 "$OUT/mlp.log")"
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python python3 -m pytest -q -rs ${PYTEST_ARGS:-} \
      "$ROOT/bindings/python/tests" > "$OUT/pytest.log" 2>&1
    note "python binding (pytest): $(tail -1 "$OUT/pytest.log")"
    ;;&
  cutlass | all)
    # The CUTLASS family: its GPU cases, the same under memcheck, and the layer
    # benchmark against cuBLASLt and PyTorch (CUTLASS_ARGS, e.g. --quick).
    gpu_cases cutlass 'gpu cutlass*' 'gpu cutlass*'
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python:$ROOT/bench \
      python3 "$ROOT/bench/cutlass_layers.py" --out "$OUT" ${CUTLASS_ARGS:-} > "$OUT/cutlass_layers.log" 2>&1
    note "cutlass layers: exit $? (cutlass_layers.log)"
    ;;&
  epilogue)
    # What an activation costs in the CUTLASS epilogue (bench/cutlass_epilogue_probe.cpp;
    # built on request: cmake --build build --target cutlass_epilogue_probe).
    "$BUILD/bench/cutlass_epilogue_probe" --json "$OUT/epilogue_probe.json" ${EPILOGUE_ARGS:-} \
      > "$OUT/epilogue_probe.log" 2>&1
    note "epilogue probe: exit $? (epilogue_probe.log)"
    ;;&
  activations | all)
    # Every case that loops over the activation table (a new row runs through each kernel
    # family's epilogue here), each in its own process side by side: their fp64 references
    # are host work, and one after another they take over 190 s (run 18).
    act_cases=('gpu: every dtype x bias x activation*' 'gpu: unfused bias and activation*'
      'gpu cutlass: each configuration*' 'gpu cutlass: gated units the*' 'gpu skinny: each dtype*'
      'gpu fp8: lt_fp8*' 'gpu fp8: dynamic extents*')
    for i in "${!act_cases[@]}"; do
      "$BUILD/tests/ge2_gpu_tests" -tc="${act_cases[$i]}" > "$OUT/gpu_activations-$i.log" 2>&1 &
    done
    wait
    for i in "${!act_cases[@]}"; do
      note "gpu '${act_cases[$i]}': $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/gpu_activations-$i.log" | tr '\n' ' ')"
    done
    ;;&
  reliability | all)
    # The reliability cases of the GPU tests under memcheck, and the one-shot
    # plan cache's hit and miss cost on the device.
    compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/tests/ge2_gpu_tests" \
      -tc='*tuning database*,*device memory is refused*,*captured into the caller*,*captured one after the other*' > "$OUT/sanitizer-reliability.log" 2>&1
    note "compute-sanitizer memcheck (reliability cases): exit $? ($(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-reliability.log" | tail -1))"
    "$BUILD/bench/bench_one_shot_cache" --json "$OUT/one_shot_cache.json" 2>&1 | tee "$OUT/one_shot_cache.log"
    note "one-shot cache: $(tr '\n' ';' < "$OUT/one_shot_cache.log" | cut -c1-400)"
    ;;&
  wheels | all)
    # "Wheels only" on the GPU: the toolkit's library folders hidden in a private mount
    # namespace (as scripts/check-wheels-only.sh does on the CPU), libcudart and libcublasLt
    # taken from the NVIDIA wheels PyTorch installed there (the device cannot reach PyPI).
    lib=$(readlink -f "$BUILD/src/libge2.so")
    hidden=$(ldd "$lib" | awk '/libcudart|libcublasLt/ && $3 ~ /^\// {print $3}' | xargs -r -n1 dirname |
      xargs -r -n1 readlink -f | sort -u | tr '\n' ' ')
    unshare --mount bash -c 'for dir in $1; do mount -t tmpfs none "$dir"; done
      cd /tmp && GE2_LIBRARY="$2" PYTHONPATH="$3/bindings/python" python3 "$3/scripts/wheels_only_probe.py" import cuda' \
      _ "$hidden" "$lib" "$ROOT" > "$OUT/wheels_only.log" 2>&1
    note "wheels only (hidden: $hidden): exit $? ($(tail -1 "$OUT/wheels_only.log"))"
    ;;&
  sanitize | all)
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool --error-exitcode 3 "$BUILD/tests/ge2_gpu_tests" \
        -tc='*forced*,*batched*,*fused cuBLASLt*,*odd offsets*,*two streams*,*misalignment*,*unfused bias*' \
        > "$OUT/sanitizer-$tool.log" 2>&1
      note "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1))"
    done
    ;;&
  tune | all)
    # ge_tune builds a database; a second process (ge_tune check, cached mode)
    # must then get the tuned algorithms at compile time without tuning.
    T=$BUILD/tunedb/ge_tune
    DB=$OUT/ge_tune.sqlite
    rm -f "$DB"*
    shapes="--shape 4096x4096x4096 --preset ffn:4096 --shape 4095x4097x4093 --shape 128x4096x4096 --shape 16x4096x4096"
    {
      echo "--- ge_tune tune (first process)"; $T tune --db "$DB" $shapes
      echo "--- ge_tune check (second process, cached mode)"; $T check --db "$DB" $shapes
      echo "--- ge_tune list"; $T list --db "$DB"
      echo "--- export / import / info"; $T export --db "$DB" --out "$OUT/tunedb.jsonl"
      $T import --db "$OUT/imported.sqlite" --in "$OUT/tunedb.jsonl"; $T info --db "$OUT/imported.sqlite"
      echo "--- bad arguments"; $T tune --db "$DB" --shape 12x34; echo "exit $?"
      # Record mode: the sample's GEMMs recorded at compile, tuned from the record
      # on the device, then served from that database to a cached check.
      rm -f "$OUT/record.jsonl" "$OUT/record.sqlite"*
      echo "--- record: ge2_mlp with GE2_TUNE_RECORD"
      GE2_TUNEDB= GE2_TUNE_RECORD="$OUT/record.jsonl" "$BUILD/samples/ge2_mlp" | tail -1
      wc -l < "$OUT/record.jsonl"
      echo "--- ge_tune tune --from-recorded"; $T tune --db "$OUT/record.sqlite" --from-recorded "$OUT/record.jsonl"
      echo "--- ge_tune check --from-recorded"; $T check --db "$OUT/record.sqlite" --from-recorded "$OUT/record.jsonl"
    } > "$OUT/ge_tune.log" 2>&1
    cat "$OUT/ge_tune.log" | tail -30
    note "ge_tune: $(grep -c 'tuned now' "$OUT/ge_tune.log") shapes tuned, $(grep -c '\[tunedb\]' "$OUT/ge_tune.log") served from the db in a second process"
    ;;&
  notebook | all)
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python \
      python3 "$ROOT/scripts/execute_notebook.py" "$ROOT/samples/01_gemm_fp16.ipynb" \
      --out "$OUT/01_gemm_fp16.ipynb" > "$OUT/notebook.log" 2>&1
    note "notebook: exit $? ($(python3 -c "import json,sys; nb=json.load(open(sys.argv[1])); print(sum(1 for c in nb['cells'] if c['cell_type']=='code' and c['outputs']), 'code cells with outputs')" "$OUT/01_gemm_fp16.ipynb" 2>&1))"
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python python3 "$ROOT/samples/gemm_fp16.py" \
      > "$OUT/sample-python.log" 2>&1
    note "samples/gemm_fp16.py: exit $? ($(tr '\n' ';' < "$OUT/sample-python.log" | cut -c1-200))"
    ;;&
  profile | all)
    # Nsight Compute at the clocks the benchmarks see (no clock locking).
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python \
      timeout 150 ncu --profile-from-start off --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y \
      python3 "$ROOT/bench/profile_kernels.py" > "$OUT/ncu.log" 2>&1
    note "ncu: exit $? ($(grep -c '"gpu__time_duration.sum"' "$OUT/ncu.log") kernels)"
    ;;&
  torch | all)
    # ge2.torch on the GPU: its tests (custom operators, converted modules, torch.compile with
    # inductor, CUDA-graph capture) and the per-call cost of the one-shot paths against torch.mm.
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python python3 -m pytest -q -rs \
      "$ROOT/bindings/python/tests/test_torch.py" > "$OUT/pytest_torch.log" 2>&1
    note "ge2.torch tests: $(tail -1 "$OUT/pytest_torch.log")"
    # The transformers MLP classes (test_transformers.py) on CUDA.
    transformers_tests pytest_transformers.log "transformers MLPs" 0 ${PYTEST_ARGS:-}
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python \
      python3 "$ROOT/bench/torch_ops.py" --out "$OUT" > "$OUT/torch_ops.log" 2>&1
    note "torch_ops bench: exit $? (torch_ops.log)"
    ;;&
  skinny | all)
    # cuda_skinny: its GPU cases (also under memcheck) and decode-sized layers against cuBLASLt and PyTorch.
    gpu_cases skinny 'gpu skinny*' 'gpu skinny: each*,gpu skinny: the tensor-core*'
    [ -x "$BUILD/bench/skinny_probe" ] && timeout 200 "$BUILD/bench/skinny_probe" --json "$OUT/skinny_probe.json" \
      > "$OUT/skinny_probe.log" 2>&1
    note "skinny probe: exit $? (skinny_probe.log; build it with --target skinny_probe)"
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python:$ROOT/bench \
      timeout "${SKINNY_TIMEOUT:-300}" python3 "$ROOT/bench/skinny_layers.py" --out "$OUT" ${SKINNY_ARGS:-} > "$OUT/skinny_layers.log" 2>&1
    note "skinny layers: exit $? (skinny_layers.log)"
    ;;&
  elementwise)
    # The flat elementwise pass's geometries against each other (bench/elementwise_probe.cu;
    # built on request: cmake --build build --target elementwise_probe) and the layer's kernels.
    timeout 200 "$BUILD/bench/elementwise_probe" --json "$OUT/elementwise_probe.json" \
      > "$OUT/elementwise_probe.log" 2>&1
    note "elementwise probe: exit $? (elementwise_probe.log)"
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python \
      python3 "$ROOT/bench/layer_kernels.py" --out "$OUT" > "$OUT/layer_kernels.log" 2>&1
    note "layer kernels: exit $? (layer_kernels.log)"
    ;;&
  dynamic | all)
    # The dynamic extent: its GPU cases (the first also under memcheck: buffers sized for exactly
    # each extent's rows) and the one-plan-for-every-M benchmark (DYNAMIC_ARGS).
    gpu_cases dynamic 'gpu dynamic*' 'gpu dynamic: one*'
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python:$ROOT/bench PYTHONUNBUFFERED=1 \
      timeout "${DYNAMIC_TIMEOUT:-400}" python3 "$ROOT/bench/dynamic_extent.py" --out "$OUT" ${DYNAMIC_ARGS:-} \
      > "$OUT/dynamic_extent.log" 2>&1
    note "dynamic extent bench: exit $? ($(grep -c '"tokens"' "$OUT/dynamic_extent.log") rows)"
    ;;&
  fp8 | all)
    # The FP8 precision policy: its GPU cases, the same under memcheck, the quantizer's
    # geometries (bench/quantize_probe.cu; built on request: --target quantize_probe), and the
    # FP8 block benchmark against ge2 fp16, the same plan without the deferred activation
    # ("ge2 fp8 h out") and torch._scaled_mm (FP8_ARGS), then at decode sizes, where
    # cuda_skinny_fp8w runs (fp8_decode/).
    gpu_cases fp8 'gpu fp8*' 'gpu fp8: dynamic*,gpu fp8: a two-layer*,gpu fp8: cuda_skinny_fp8w*'
    [ -x "$BUILD/bench/quantize_probe" ] && timeout 120 "$BUILD/bench/quantize_probe" \
      > "$OUT/quantize_probe.log" 2>&1
    note "quantize probe: exit $? (quantize_probe.log)"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
      --format=csv -lms 1000 > "$OUT/clocks-fp8.log" 2>&1 &
    clocks_pid=$!
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python PYTHONUNBUFFERED=1 \
      timeout "${FP8_TIMEOUT:-400}" python3 "$ROOT/bench/fp8_blocks.py" --out "$OUT" ${FP8_ARGS:-} > "$OUT/fp8_blocks.log" 2>&1
    note "fp8 blocks: exit $? ($(grep -c 'tokens\|GEMM' "$OUT/fp8_blocks.log") rows)"
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python PYTHONUNBUFFERED=1 \
      timeout 200 python3 "$ROOT/bench/fp8_blocks.py" --out "$OUT/fp8_decode" --tokens 1 4 8 16 \
      --gemm 16 4096 11008 > "$OUT/fp8_decode.log" 2>&1
    note "fp8 decode blocks: exit $? ($(grep -c 'tokens\|GEMM' "$OUT/fp8_decode.log") rows)"
    kill $clocks_pid 2>/dev/null
    ;;&
  fp8-block | all)
    # lt_fp8_e4m3's block-scale mode on weights given in 128 x 128 blocks: which scale layouts
    # and epilogues cuBLASLt takes and its speed (bench/lt_block_scale_probe; built on request:
    # --target lt_block_scale_probe), the GPU cases (also under memcheck), the prefill test against
    # transformers' own FP8Linear (build-tf carried), and the checkpoint blocks under allow_fp8.
    [ -x "$BUILD/bench/lt_block_scale_probe" ] && timeout 200 "$BUILD/bench/lt_block_scale_probe" \
      layouts epilogues timing > "$OUT/lt_block_scale_probe.log" 2>&1
    note "block-scale probe: exit $? (lt_block_scale_probe.log)"
    gpu_cases fp8_block 'gpu fp8: weights given*,gpu fp8: cuda_skinny_fp8w*' 'gpu fp8: weights given*'
    transformers_tests pytest_fp8linear.log "transformers FP8Linear" 300 -k hf_fp8linear
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python PYTHONUNBUFFERED=1 \
      timeout "${FP8_BLOCK_TIMEOUT:-300}" python3 "$ROOT/bench/fp8_checkpoint.py" --out "$OUT" --scales block \
      --allow-fp8 ${FP8_BLOCK_ARGS:---inter 11008 12288 --tokens 16 512 2048 4096} > "$OUT/fp8_checkpoint.log" 2>&1
    note "fp8 checkpoint blocks: exit $? (fp8_checkpoint.log)"
    ;;&
  gated | all)
    # The gated epilogue: its GPU cases, the same under memcheck, and the
    # gated-unit benchmark (GATED_ARGS, e.g. --quick).
    gpu_cases gated 'gpu cutlass: the gated*' 'gpu cutlass: the gated*'
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python:$ROOT/bench PYTHONUNBUFFERED=1 \
      timeout "${GATED_TIMEOUT:-400}" python3 "$ROOT/bench/gated_layers.py" --out "$OUT" ${GATED_ARGS:-} \
      > "$OUT/gated_layers.log" 2>&1
    note "gated layers: exit $? ($(grep -c ' us ' "$OUT/gated_layers.log") rows)"
    ;;&
  ffn | all)
    # FFN blocks against PyTorch eager, CUDA graph (and torch.compile with FFN_ARGS="--compile
    # default max-autotune"); the ratios drawn as bars (bench/plot_ffn.py).
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python PYTHONUNBUFFERED=1 \
      timeout "${FFN_TIMEOUT:-400}" python3 "$ROOT/bench/ffn_blocks.py" --out "$OUT" ${FFN_ARGS:-} 2>&1 | tee "$OUT/ffn_blocks.log" | tail -40
    note "ffn blocks: $(grep -c tokens "$OUT/ffn_blocks.log") rows"
    # The kernels behind one layer, PyTorch's and ge2's (where a layer is slower, which part is).
    GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python timeout 120 \
      python3 "$ROOT/bench/layer_kernels.py" --out "$OUT" > "$OUT/layer_kernels.log" 2>&1
    note "layer kernels: exit $? (layer_kernels.log)"
    python3 "$ROOT/bench/plot_ffn.py" "$OUT/ffn_blocks.json" "$OUT/ffn_ratios.png" > /dev/null 2>&1 ||
      note "ffn ratios plot: not drawn"
    ;;&
  bench | all)
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
      --format=csv -lms 1000 > "$OUT/clocks.log" 2>&1 &
    clocks_pid=$!
    if [ -x "$BUILD/bench/bench_gemm" ]; then
      timeout "${BENCH_TIMEOUT:-400}" "$BUILD/bench/bench_gemm" --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60
      note "bench_gemm: $(tail -1 "$OUT/bench.log")"
    fi
    if [ -f "$ROOT/bench/peers.py" ]; then
      GE2_LIBRARY=$BUILD/src/libge2.so PYTHONPATH=$ROOT/bindings/python PYTHONUNBUFFERED=1 \
        timeout "${PEERS_TIMEOUT:-300}" python3 "$ROOT/bench/peers.py" --out "$OUT" 2>&1 | tee "$OUT/peers.log" | tail -40
      note "peers: $(tail -1 "$OUT/peers.log")"
    fi
    kill $clocks_pid 2>/dev/null
    ;;
  esac
done

# The device tool returns at most 8 files: bundle the logs into one.
for f in "$OUT"/*.log; do echo "===== $(basename "$f")"; cat "$f"; done > "$OUT/all-logs.txt" 2>/dev/null
echo
echo "== ge2 gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ))"
head -2 "$OUT/device.txt" | tail -1
for line in "${summary[@]}"; do echo "  $line"; done
