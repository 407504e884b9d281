#!/usr/bin/env bash
# Fuzz smoke (RELIABILITY.md A8): runs every cargo-fuzz target in fuzz/ for a short time on stable
# (`--sanitizer=none`), each from a scratch corpus under fuzz/target/ plus the committed seeds,
# and prints one line per target:
#   fuzz <target> runs=N crashes=0 ooms=0 timeouts=0 secs=15
# Installs cargo-fuzz (`cargo install cargo-fuzz --locked`) when it is missing. Exits non-zero if
# any target crashed, ran out of memory or timed out; libFuzzer leaves the input in
# fuzz/artifacts/<target>/ (see fuzz/README.md for minimizing it into a regression). Closes
# with `fuzz: N passed, N failed` (one per target).
# scripts/test.sh runs it with FUZZ_SECS=3 (HOOKSTATE_FUZZ_SECS); a fresh cargo-fuzz install
# took 38 s here and a fresh build of the targets about 3.5 min on 2 cores.
#
#   scripts/fuzz-smoke.sh                  # every target, 15 s each
#   FUZZ_SECS=60 scripts/fuzz-smoke.sh stdin_json event_decode
#   FUZZ_RUNS=10000000 FUZZ_SECS=3600 scripts/fuzz-smoke.sh   # 10M runs each, at most an hour
#                                                             # (scripts/soak.sh --fuzz-runs)
#   FUZZ_NO_DEBUG_ASSERTIONS=1 scripts/fuzz-smoke.sh db_file_bytes
#       # built as the shipped binary is (cargo fuzz -O, in fuzz/target/no-debug-assertions):
#       # no debug assertions in hookstate or its dependencies (docs/testing.md)
set -uo pipefail
cd "$(dirname "$0")/../fuzz"

secs="${FUZZ_SECS:-15}"
runs_arg=()
if [ -n "${FUZZ_RUNS:-}" ]; then
    runs_arg=(-runs="$FUZZ_RUNS")
fi
rss_mb=512
timeout_secs=5
build_flags=(--sanitizer=none)
if [ -n "${FUZZ_NO_DEBUG_ASSERTIONS:-}" ]; then
    build_flags+=(-O --target-dir target/no-debug-assertions)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo install cargo-fuzz --locked || exit 1
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# Build every target first, so build time does not count against the fuzzing time.
cargo fuzz build "${build_flags[@]}" >/dev/null 2>&1 || { cargo fuzz build "${build_flags[@]}"; exit 1; }

failed=0
passed_targets=0
failed_targets=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
    mkdir -p "target/corpus/$t"
    cargo fuzz run "$t" "target/corpus/$t" "corpus/$t" "${build_flags[@]}" -- \
        -max_total_time="$secs" "${runs_arg[@]}" -rss_limit_mb="$rss_mb" \
        -timeout="$timeout_secs" >"$log" 2>&1
    status=$?
    runs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | tail -1)
    ooms=$(grep -c 'out-of-memory' "$log")
    timeouts=$(grep -c 'ERROR: libFuzzer: timeout' "$log")
    crashes=0
    if [ "$status" -ne 0 ] && [ "$ooms" -eq 0 ] && [ "$timeouts" -eq 0 ]; then
        crashes=1
    fi
    elapsed=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE 'in [0-9]+' |
        grep -oE '[0-9]+' | tail -1)
    echo "fuzz $t runs=${runs:-0} crashes=$crashes ooms=$ooms timeouts=$timeouts" \
        "secs=${elapsed:-$secs}"
    if [ "$status" -ne 0 ]; then
        failed=1
        failed_targets=$((failed_targets + 1))
        grep -E 'SUMMARY|ERROR|panicked|artifact' "$log" | head -5
    else
        passed_targets=$((passed_targets + 1))
    fi
done
echo "fuzz: $passed_targets passed, $failed_targets failed"
exit "$failed"
