#!/usr/bin/env bash
# Long runs (RELIABILITY.md A4, A6, A8; not in the default test run), on release builds:
#
#   scripts/soak.sh --seconds 600 [--seed N]      # the kill -9 loop (cli/tests/killloop.rs) for
#                                                 # N seconds; prints its `killloop ...` line
#   scripts/soak.sh --powerloss-images 100000     # the power-loss simulator over seed after seed
#                                                 # until that many disk images were checked;
#                                                 # prints each seed's line and a total
#   scripts/soak.sh --fuzz-runs 10000000 [TARGET...]  # every fuzz target (or those named) for
#                                                 # that many runs (FUZZ_SECS bounds each, default
#                                                 # a day); prints `fuzz <target> runs=...`
#
# Exits non-zero on any lost acknowledged event, double claim, unexpected exit, failed verify,
# power-loss violation or fuzz finding.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: scripts/soak.sh --seconds N [--seed N] | --powerloss-images N [--seed N] |" \
        "--fuzz-runs N [TARGET...]" >&2
    exit 64
}

seconds=""
images=""
fuzz_runs=""
# 32 bits, so that `seed + 1` stays a u64 the tests parse.
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --powerloss-images) images="$2"; shift 2 ;;
        --fuzz-runs) fuzz_runs="$2"; shift 2; break ;;
        --seed) seed="$2"; shift 2 ;;
        *) usage ;;
    esac
done

if [ -n "$fuzz_runs" ]; then
    FUZZ_RUNS="$fuzz_runs" FUZZ_SECS="${FUZZ_SECS:-86400}" exec bash scripts/fuzz-smoke.sh "$@"
fi

if [ -n "$images" ]; then
    total=0
    runs=0
    skipped=0
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    while [ "$total" -lt "$images" ]; do
        HOOKSTATE_POWERLOSS_SEED="$seed" cargo test --release --locked -p hookstate-tests \
            --test integration -- --nocapture --exact \
            powerloss::power_loss_at_every_operation_keeps_acked_events_and_an_openable_store \
            >"$log" 2>&1 || true
        line=$(grep -E '^powerloss ' "$log" || true)
        # A seed whose workload is mostly refusals checks too little; the test refuses it.
        if [ -z "$line" ] && grep -q 'the workload barely appended' "$log"; then
            skipped=$((skipped + 1))
            seed=$((seed + 1))
            continue
        fi
        echo "$line"
        case "$line" in
            *" violations=0 "*) ;;
            *) echo "soak powerloss: seed $seed failed" >&2; tail -20 "$log" >&2; exit 1 ;;
        esac
        n=$(echo "$line" | grep -oE ' images=[0-9]+' | grep -oE '[0-9]+')
        total=$((total + n))
        runs=$((runs + 1))
        seed=$((seed + 1))
    done
    echo "soak powerloss seeds=$runs skipped_seeds=$skipped images=$total violations=0"
    exit 0
fi

[ -n "$seconds" ] || usage
HOOKSTATE_KILL_SECS="$seconds" HOOKSTATE_KILL_SEED="$seed" \
    cargo test --release --locked -p hookstate --test cli -- --nocapture --exact \
    killloop::kill_loop_loses_no_acked_event_and_never_double_claims
