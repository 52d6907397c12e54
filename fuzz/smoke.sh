#!/usr/bin/env bash
# Run every fuzz target for a fixed time, two at a time, from a freshly generated seed
# corpus: first coverage-guided (libFuzzer), then coverage-blind (fuzz/_blind.py: every
# seed mutated in turn with a fixed-seed RNG). Exit non-zero on any finding (crash,
# unexpected exception, oracle mismatch, timeout, out-of-memory). Prints each target's
# executions and coverage.
#
# Usage: fuzz/smoke.sh [SECONDS_PER_TARGET=30] [WORK_DIR=a new temp dir] [extra libFuzzer flags...]
# Environment: FUZZ_BLIND_SECONDS (per target, default 10; 0 skips the blind pass),
#              FUZZ_BLIND_SEED (mutation RNG seed, default 0).
set -uo pipefail
secs="${1:-30}"
work="${2:-$(mktemp -d)}"
shift $(( $# > 2 ? 2 : $# ))
blind_secs="${FUZZ_BLIND_SECONDS:-10}"
blind_seed="${FUZZ_BLIND_SEED:-0}"
here="$(cd "$(dirname "$0")" && pwd)"
targets=(fuzz_jpeg_info fuzz_decode_jpeg fuzz_decode_roi fuzz_transforms fuzz_transcode fuzz_restart_roi fuzz_plan_batch
         fuzz_pack_recipes fuzz_index_damage fuzz_native_pipelines fuzz_pil_pipelines)

require=()
[ -n "${CI:-}" ] && require=(--require-cjpeg)
python "$here/make_corpus.py" "$work/seeds" "${require[@]}" || exit 1

run_target() {
  local t="$1"; shift
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  # -timeout: one input running longer is a finding (a hang or a decode bomb);
  # -rss_limit_mb: so is memory past 3 GB.
  python "$here/$t.py" "$work/$t/corpus" "$work/seeds" -max_total_time="$secs" -timeout=25 \
    -rss_limit_mb=3072 -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" "$@" \
    >"$work/$t.log" 2>&1
}

run_blind() {
  local t="$1"
  mkdir -p "$work/$t/blind-artifacts"
  python "$here/$t.py" --blind "$blind_secs" "$work/seeds" --seed "$blind_seed" --timeout 25 \
    --rss-limit-mb 3072 --artifact-prefix "$work/$t/blind-artifacts/" >"$work/$t.blind.log" 2>&1
}

# Runs "$1" (a function) for every target, two at a time; 1 if any run failed.
two_at_a_time() {
  local fn="$1" failed=0; shift
  for ((i = 0; i < ${#targets[@]}; i += 2)); do
    local pids=()
    for t in "${targets[@]:i:2}"; do
      "$fn" "$t" "$@" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
  done
  return "$failed"
}

status=0
two_at_a_time run_target "$@" || status=1
if [ "$blind_secs" != 0 ]; then
  two_at_a_time run_blind || status=1
fi

for t in "${targets[@]}"; do
  log="$work/$t.log"
  execs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')"
  cov="$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)"
  found="$(ls "$work/$t/artifacts" 2>/dev/null)"
  echo "fuzz smoke: $t: ${execs:-?} executions in ${secs}s, ${cov:-no coverage line}${found:+, ARTIFACTS: $found}"
  if [ -n "$found" ] || ! grep -q 'Done [0-9]* runs\|stat::number_of_executed_units' "$log"; then
    status=1
    echo "---- $log (last 60 lines) ----"
    tail -60 "$log"
  fi
  [ "$blind_secs" = 0 ] && continue
  blog="$work/$t.blind.log"
  summary="$(grep -E '^blind: [0-9]+ executions over' "$blog" || true)"
  found="$(ls "$work/$t/blind-artifacts" 2>/dev/null)"
  echo "fuzz smoke: $t (blind): ${summary#blind: }${found:+, ARTIFACTS: $found}"
  if [ -n "$found" ] || ! grep -q ', 0 findings' "$blog"; then
    status=1
    echo "---- $blog (last 60 lines) ----"
    tail -60 "$blog"
  fi
done
[ "$status" -eq 0 ] && echo "fuzz smoke: no findings" || echo "fuzz smoke: FINDINGS (logs and artifacts in $work)"
exit "$status"
