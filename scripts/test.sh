#!/usr/bin/env bash
# Builds and runs every test that can run on this machine:
#   1. the default build (CUDA backend when the toolkit is found) and its ctest
#      suite; GPU tests report "Skipped" with a SKIPPED line when no device answers
#   2. a CPU-only build (GE2_WITH_CUDA=OFF) and its ctest suite
#   3. the Python binding's pytest suite, pip install of the binding, and the
#      API-docs coverage check
#   4. consumer projects against an installed CPU build: find_package(ge2),
#      pkg-config, and the static archive libge2.a
#   5. an AddressSanitizer + UndefinedBehaviorSanitizer build running the CPU tests
#      and the Python binding's tests
#   6. the libFuzzer targets from their seed corpora: the C API for GE2_FUZZ_SECONDS
#      (default 60), the tuning database's JSON Lines import for
#      GE2_FUZZ_TUNEDB_SECONDS (default 30), the GEMM record file for
#      GE2_FUZZ_RECORD_SECONDS (default 20)
#   7. a ThreadSanitizer build (CPU-only) running the API tests
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Where setup-deps puts PyTorch for the ge2.torch tests when the environment has none.
export GE2_TORCH_DIR=${GE2_TORCH_DIR-$HOME/.cache/ge2/torch-2.15.0}
# And transformers, whose MLP classes test_transformers.py converts.
export GE2_TRANSFORMERS_DIR=${GE2_TRANSFORMERS_DIR-$HOME/.cache/ge2/transformers-4.57.1}
bash scripts/setup-deps.sh
step() { printf '\n==== %s\n' "$*"; }

step "1. default build"
# -U: the CUTLASS kernels are built whenever their headers are found (run-mlp.sh
# may have turned them off in the same folder on a machine without a GPU).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${GE2_CUDA_ARCHS:-90}" \
  -UGE2_WITH_CUTLASS > build-configure.log
grep -E "ge2: CUTLASS" build-configure.log || true
cmake --build build
ctest --test-dir build --output-on-failure

step "2. CPU-only build (GE2_WITH_CUDA=OFF)"
cmake -S . -B build-cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGE2_WITH_CUDA=OFF -DGE2_BUILD_STATIC=ON \
  > build-cpu-configure.log
cmake --build build-cpu
ctest --test-dir build-cpu --output-on-failure

step "3. Python binding and API documentation"
torch_path=""
[ -n "$GE2_TORCH_DIR" ] && [ -d "$GE2_TORCH_DIR/torch" ] && torch_path=":$GE2_TORCH_DIR"
[ -n "$GE2_TRANSFORMERS_DIR" ] && [ -d "$GE2_TRANSFORMERS_DIR/transformers" ] &&
  torch_path="$torch_path:$GE2_TRANSFORMERS_DIR"
GE2_LIBRARY=$ROOT/build-cpu/src/libge2.so PYTHONPATH=$ROOT/bindings/python$torch_path \
  python3 -m pytest -q -rs bindings/python/tests
python3 scripts/check_api_docs.py build-cpu/src/libge2.so docs/api.md
python3 scripts/check_layers.py .  # the include graph follows the documented layer order
# The benchmark figure draws from a committed run (ge2's paths and PyTorch's).
python3 bench/plot.py bench/results/2026-12-02-h200-run5/bench_gemm.csv /tmp/ge2-tflops.png \
  --peers bench/results/2026-12-02-h200-run5/peers.json
if command -v clang-format > /dev/null; then  # the tree is clang-formatted (.clang-format)
  git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.c' '*.h' | xargs clang-format --dry-run --Werror
fi
# The wheel (scikit-build-core over the same CMake, CPU-only here) carries libge2; repaired
# into a manylinux wheel and installed into a fresh virtual environment, it imports and
# computes without GE2_LIBRARY. It builds in build-cpu with that build's options, so the
# library it packs is the one tested above and nothing is compiled twice (a build folder of
# its own cost CI about 3 minutes on 2 cores).
rm -rf /tmp/ge2-wheel /tmp/ge2-wheelhouse /tmp/ge2-venv
python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/ge2-wheel \
  -C cmake.define.GE2_WITH_CUDA=OFF -C cmake.define.GE2_BUILD_STATIC=ON \
  -C cmake.define.GE2_BUILD_TESTS=ON -C cmake.define.GE2_BUILD_SAMPLES=ON -C cmake.define.GE2_BUILD_BENCH=ON \
  -C build-dir="$ROOT/build-cpu" bindings/python
repaired=$(bash scripts/repair-wheel.sh /tmp/ge2-wheel/ge2-*.whl /tmp/ge2-wheelhouse)
echo "manylinux wheel: $repaired"
python3 -m venv --system-site-packages /tmp/ge2-venv
/tmp/ge2-venv/bin/python -m pip install -q --no-deps "$repaired"
(cd /tmp && env -u GE2_LIBRARY -u PYTHONPATH /tmp/ge2-venv/bin/python -c "
import importlib.metadata, numpy as np, ge2
assert ge2.__file__.startswith('/tmp/ge2-venv/'), ge2.__file__
# One version: the wheel's metadata, the package and the library it carries.
assert importlib.metadata.version('ge2') == ge2.__version__, importlib.metadata.version('ge2')
a, b = np.random.rand(8, 16).astype(np.float32), np.random.rand(16, 4).astype(np.float32)
with ge2.Context(device='cpu') as ctx:
    error = float(np.abs(ge2.gemm_bias_act(a, b, context=ctx) - a @ b).max())
assert error < 1e-5, error
print('wheel:', ge2.__file__, ge2.__version__, 'max error', error)")

# "Wheels only": the CUDA build loaded with the toolkit hidden and NVIDIA's runtime wheels
# in a fresh venv (SKIPPED where the machine cannot hide the toolkit or reach PyPI).
bash scripts/check-wheels-only.sh build

step "4. consumers of an installed build: find_package, pkg-config, static"
rm -rf /tmp/ge2-prefix /tmp/ge2-consumer
cmake --install build-cpu --prefix /tmp/ge2-prefix > /dev/null
cmake -S samples/consumer -B /tmp/ge2-consumer -G Ninja -DCMAKE_PREFIX_PATH=/tmp/ge2-prefix > /dev/null
cmake --build /tmp/ge2-consumer
LD_LIBRARY_PATH=/tmp/ge2-prefix/lib /tmp/ge2-consumer/consumer
env -u LD_LIBRARY_PATH /tmp/ge2-prefix/bin/ge_tune --help > /dev/null  # installed tools find libge2 (RPATH)
echo "installed ge_tune runs without LD_LIBRARY_PATH"
# pkg-config users: the installed ge2.pc compiles and links the C sample.
pc_flags=$(PKG_CONFIG_PATH=/tmp/ge2-prefix/lib/pkgconfig pkg-config --cflags --libs ge2)
cc samples/mlp.c $pc_flags -lm -o /tmp/ge2-pc-mlp
echo "pkg-config ge2: $pc_flags (samples/mlp.c built with it)"
# Static consumers (GE2_BUILD_STATIC=ON): the C sample against libge2.a and the libraries
# pkg-config --static lists, the C++ consumer through ge2::ge2_static; neither loads libge2.so.
static_libs=$(PKG_CONFIG_PATH=/tmp/ge2-prefix/lib/pkgconfig pkg-config --static --libs-only-l ge2 | sed 's/-lge2 //')
cc samples/mlp.c -I/tmp/ge2-prefix/include /tmp/ge2-prefix/lib/libge2.a $static_libs -o /tmp/ge2-static-mlp
if ldd /tmp/ge2-static-mlp | grep libge2 > /dev/null; then echo "the static C sample loads libge2.so"; exit 1; fi
static_run=$(GE2_LOG_LEVEL=error /tmp/ge2-static-mlp)
grep "PASS" <<< "$static_run" > /dev/null
rm -rf /tmp/ge2-consumer-static
cmake -S samples/consumer -B /tmp/ge2-consumer-static -G Ninja -DCMAKE_PREFIX_PATH=/tmp/ge2-prefix \
  -DGE2_CONSUMER_STATIC=ON > /dev/null
cmake --build /tmp/ge2-consumer-static
if ldd /tmp/ge2-consumer-static/consumer | grep libge2 > /dev/null; then echo "the static consumer loads libge2.so"; exit 1; fi
/tmp/ge2-consumer-static/consumer
echo "libge2.a: the C sample ($static_libs) and the CMake consumer (ge2::ge2_static) link and pass statically"

step "5. AddressSanitizer + UndefinedBehaviorSanitizer (CPU tests)"
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGE2_WITH_CUDA=OFF \
  -DGE2_SANITIZE=ON -DGE2_FUZZ=ON > build-asan-configure.log
cmake --build build-asan
# The ThreadSanitizer build of step 7 compiles meanwhile: the sanitized tests, the Python
# tests and the fuzzers below are one process each and leave a core idle.
tsan_build() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGE2_WITH_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
    > build-tsan-configure.log && cmake --build build-tsan --target ge2_api_tests
}
tsan_build > build-tsan.log 2>&1 &
tsan_pid=$!
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -L cpu
# The Python binding's tests over the sanitized library: the interpreter is not
# instrumented, so the ASan runtime is preloaded (leak checks off: CPython
# keeps objects alive at exit by design).
LD_PRELOAD=$(clang -print-file-name=libclang_rt.asan-x86_64.so) \
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  GE2_LIBRARY=$ROOT/build-asan/src/libge2.so PYTHONPATH=$ROOT/bindings/python \
  python3 -m pytest -q -rs -p no:cacheprovider bindings/python/tests

step "6. fuzzing the C API for ${GE2_FUZZ_SECONDS:-60} s, tunedb import for ${GE2_FUZZ_TUNEDB_SECONDS:-30} s and the GEMM record file for ${GE2_FUZZ_RECORD_SECONDS:-20} s"
corpus=$(mktemp -d)
cp tests/fuzz/corpus/* "$corpus"/
(cd "$corpus" && "$ROOT/build-asan/tests/ge2_fuzz_api" -max_total_time="${GE2_FUZZ_SECONDS:-60}" \
  -rss_limit_mb=4096 -malloc_limit_mb=2048 "$corpus" > fuzz.log 2>&1) || { tail -40 "$corpus/fuzz.log"; exit 1; }
grep -E '^Done' "$corpus/fuzz.log" && rm -rf "$corpus"
corpus=$(mktemp -d)
cp tests/fuzz/corpus_tunedb/* "$corpus"/
(cd "$corpus" && "$ROOT/build-asan/tests/ge2_fuzz_tunedb_import" -max_total_time="${GE2_FUZZ_TUNEDB_SECONDS:-30}" \
  -rss_limit_mb=4096 "$corpus" > fuzz.log 2>&1) || { tail -40 "$corpus/fuzz.log"; exit 1; }
grep -E '^Done' "$corpus/fuzz.log" && rm -rf "$corpus"
corpus=$(mktemp -d)
cp tests/fuzz/corpus_gemm_record/* "$corpus"/
(cd "$corpus" && "$ROOT/build-asan/tests/ge2_fuzz_gemm_record" -max_total_time="${GE2_FUZZ_RECORD_SECONDS:-20}" \
  -rss_limit_mb=4096 "$corpus" > fuzz.log 2>&1) || { tail -40 "$corpus/fuzz.log"; exit 1; }
grep -E '^Done' "$corpus/fuzz.log" && rm -rf "$corpus"

step "7. ThreadSanitizer (CPU-only build): the API tests"
# Executions of one plan from several threads, shared contexts and one-shot caches,
# the tuning database from several threads, the CPU GEMM's worker threads.
wait "$tsan_pid" || { tail -40 build-tsan.log; exit 1; }
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/ge2_api_tests
echo "ge2 test.sh: all steps passed"
