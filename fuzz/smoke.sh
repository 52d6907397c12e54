#!/usr/bin/env bash
# Run every fuzz target for a fixed time, two at a time, from a freshly generated seed
# corpus; exit non-zero on any finding (crash, unexpected exception, oracle mismatch,
# timeout, out-of-memory). Prints each target's executions and coverage.
#
# Usage: fuzz/smoke.sh [SECONDS_PER_TARGET=60] [WORK_DIR=a new temp dir] [extra libFuzzer flags...]
set -uo pipefail
secs="${1:-60}"
work="${2:-$(mktemp -d)}"
shift $(( $# > 2 ? 2 : $# ))
here="$(cd "$(dirname "$0")" && pwd)"
targets=(fuzz_jpeg_info fuzz_decode_jpeg fuzz_decode_roi fuzz_transforms)

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

status=0
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  pids=()
  for t in "${targets[@]:i:2}"; do
    run_target "$t" "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
done

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
done
[ "$status" -eq 0 ] && echo "fuzz smoke: no findings" || echo "fuzz smoke: FINDINGS (logs and artifacts in $work)"
exit "$status"
