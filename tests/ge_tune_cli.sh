#!/usr/bin/env bash
# ge_tune's database commands as a user runs them (no GPU needed): --db before
# or after the subcommand, one path resolver with the library, all-or-nothing
# import with file:line:field messages, export that never reports a partial
# file as success, and prune that matches the kept device exactly.
set -u
GE_TUNE=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
expect() {  # expect CODE PATTERN -- command...: exit code and a pattern in stdout+stderr
  local want=$1 pattern=$2
  shift 3
  local output code
  output=$("$@" 2>&1)
  code=$?
  if [ "$code" != "$want" ] || ! grep -qE -- "$pattern" <<< "$output"; then
    echo "FAIL: $* -> exit $code (want $want), output:"
    echo "$output" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
row() {  # row DEVICE M: one JSON Lines record
  printf '{"device":"%s","cublaslt_version":130100,"kernel":"lt_f16","signature":"f16 op=NN bias=1 act=relu c=0 align=16","m":%s,"n":64,"k":64,"batch":1,"algo":{"algo_id":1},"workspace_bytes":0,"time_us":12.5}\n' "$1" "$2"
}
for m in 1 2 3; do row "NVIDIA H200|sm90|132" $m; done > good.jsonl
row "NVIDIA H100|sm90|132" 4 >> good.jsonl

expect 0 "^ge_tune \(ge2 [0-9]+\.[0-9]+\.[0-9]+, C API 2\)$" -- "$GE_TUNE" --version
expect 0 "imported 4 entries" -- "$GE_TUNE" --db db.sqlite import --in good.jsonl
expect 0 "entries: 4" -- "$GE_TUNE" info --db db.sqlite
expect 0 "entries: 4" -- "$GE_TUNE" --db db.sqlite info
expect 0 '^\{"database":"[^"]*db.sqlite","entries":4,"schema_version":2\}$' -- "$GE_TUNE" info --db db.sqlite --json
# list --json writes JSON Lines that import reads back: the same 4 rows.
"$GE_TUNE" list --db db.sqlite --json > listed.jsonl
expect 0 "imported 4 entries" -- "$GE_TUNE" import --db relisted.sqlite --in listed.jsonl
# One resolver: $GE2_TUNEDB, else $XDG_CACHE_HOME/ge2/tunedb.sqlite.
mkdir -p xdg/ge2 && cp db.sqlite xdg/ge2/tunedb.sqlite
expect 0 "xdg/ge2/tunedb.sqlite" -- env -u GE2_TUNEDB XDG_CACHE_HOME="$work/xdg" "$GE_TUNE" info
expect 0 "database: $work/db.sqlite" -- env GE2_TUNEDB="$work/db.sqlite" "$GE_TUNE" info

# Import: a bad line 5 stores nothing and names file, line and field.
cp good.jsonl bad.jsonl
row "NVIDIA H200|sm90|132" 51.9 >> bad.jsonl
expect 1 "bad.jsonl:5: field 'm' = 51.9 is not an integer" -- "$GE_TUNE" --db fresh.sqlite import --in bad.jsonl
expect 0 "entries: 0" -- "$GE_TUNE" --db fresh.sqlite info

# Export: complete or an error; a device that fills up is an error, not a count.
expect 0 "exported 4 entries" -- "$GE_TUNE" --db db.sqlite export --out out.jsonl
[ "$(wc -l < out.jsonl)" = 4 ] || { echo "FAIL: export wrote $(wc -l < out.jsonl) lines"; failures=$((failures + 1)); }
if [ -e /dev/full ]; then
  expect 1 "cannot write '/dev/full'" -- "$GE_TUNE" --db db.sqlite export --out /dev/full
fi

# Prune: exact device, a typo deletes nothing, --dry-run deletes nothing.
expect 2 "no entry has device 'NVIDIA H20'" -- "$GE_TUNE" --db db.sqlite prune --keep-device "NVIDIA H20" --keep-cublaslt 130100
expect 0 "entries: 4" -- "$GE_TUNE" --db db.sqlite info
expect 0 "would delete 1 entries of NVIDIA H100" -- "$GE_TUNE" --db db.sqlite prune --keep-device "NVIDIA H200|sm90|132" --keep-cublaslt 130100 --dry-run
expect 0 "entries: 4" -- "$GE_TUNE" --db db.sqlite info
expect 0 "removed 1 entries, kept 3" -- "$GE_TUNE" --db db.sqlite prune --keep-device "NVIDIA H200|sm90|132" --keep-cublaslt 130100
expect 0 "entries: 3" -- "$GE_TUNE" --db db.sqlite info

# A foreign SQLite file is refused and left as it was.
printf 'SQLite format 3\0' > foreign.sqlite && head -c 4080 /dev/zero >> foreign.sqlite
before=$(sha256sum < foreign.sqlite)
expect 1 "not a ge2 tuning database" -- "$GE_TUNE" --db foreign.sqlite import --in good.jsonl
[ "$(sha256sum < foreign.sqlite)" = "$before" ] || { echo "FAIL: foreign file changed"; failures=$((failures + 1)); }

# Argument errors: exit 2 with the option named, no C call text, no 'stoll'.
expect 2 "--shape: '99999999999999999999x1x1'" -- "$GE_TUNE" --db db.sqlite check --shape 99999999999999999999x1x1
expect 2 "--preset: 'ffn:0'" -- "$GE_TUNE" --db db.sqlite check --preset ffn:0

# Record mode: the GEMM problems a workload compiled ($GE2_TUNE_RECORD), rebuilt by
# --from-recorded (on the CPU backend here) into graphs that pose the same problems:
# recording those compiles gives the same records back. Padded rows, a batch over a
# shared weight, C with beta, a transposed A and a gated unit.
cat > recorded.jsonl << 'RECORDS'
{"ge2_gemm_record":1,"dtype":"bf16","m":5,"n":24,"k":40,"batch":3,"trans_a":false,"trans_b":true,"alpha":2.0,"beta":0.5,"a":{"shape":[3,5,40],"strides":[240,48,1]},"b":{"shape":[24,40],"strides":[40,1]},"c":{"shape":[3,5,24],"strides":[120,24,1]},"d":{"shape":[3,5,24],"strides":[120,24,1]},"bias":true,"act":"gelu_tanh"}
{"ge2_gemm_record":1,"dtype":"f16","m":7,"n":32,"k":16,"batch":1,"trans_a":false,"trans_b":true,"alpha":1.0,"beta":0.0,"a":{"shape":[7,16],"strides":[16,1]},"b":{"shape":[32,16],"strides":[16,1]},"d":{"shape":[7,16],"strides":[16,1]},"bias":false,"act":"none","gated":"silu"}
{"ge2_gemm_record":1,"dtype":"f32","m":9,"n":6,"k":8,"batch":1,"trans_a":true,"trans_b":false,"alpha":1.0,"beta":0.0,"a":{"shape":[8,9],"strides":[9,1]},"b":{"shape":[8,6],"strides":[6,1]},"d":{"shape":[9,6],"strides":[6,1]},"bias":false,"act":"relu"}
RECORDS
expect 0 "recorded 3x5x24x40 bf16 act gelu_tanh bias C: cpu_ref" -- env GE2_TUNE_RECORD="$work/again.jsonl" "$GE_TUNE" --db db.sqlite check --device cpu --from-recorded recorded.jsonl
if ! diff <(sort recorded.jsonl) <(sort again.jsonl) > /dev/null; then
  echo "FAIL: the rebuilt graphs posed other problems:"
  diff <(sort recorded.jsonl) <(sort again.jsonl) | sed 's/^/    /'
  failures=$((failures + 1))
fi
expect 0 '^\{"compile_s":[0-9.e-]+,"kernel":"cpu_ref","problem":\{.*"gated":"silu"' -- "$GE_TUNE" check --db db.sqlite --device cpu --from-recorded recorded.jsonl --json
sed '2s/"m":7/"m":0/' recorded.jsonl > bad-recorded.jsonl
expect 1 "bad-recorded.jsonl:2: field 'm' = 0 is not an integer" -- "$GE_TUNE" --db db.sqlite check --device cpu --from-recorded bad-recorded.jsonl
expect 2 "--device-ordinal" -- "$GE_TUNE" --db db.sqlite check --device-ordinal -1 --shape 8x8x8

if [ "$failures" -ne 0 ]; then
  echo "ge_tune CLI: $failures check(s) failed"
  exit 1
fi
echo "ge_tune CLI: all checks passed"
