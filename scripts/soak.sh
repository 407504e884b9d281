#!/usr/bin/env bash
# The long kill -9 crash loop (RELIABILITY.md A6, tier B): the same test as the default run's
# short version (cli/tests/killloop.rs), with a longer budget, on the release binary.
#
#   scripts/soak.sh --seconds 600 [--seed N]
#
# Prints the test's `killloop ...` figures line; exits non-zero on any lost acknowledged event,
# double claim, unexpected exit or failed verify.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        *) echo "usage: scripts/soak.sh --seconds N [--seed N]" >&2; exit 64 ;;
    esac
done

HOOKSTATE_KILL_SECS="$seconds" HOOKSTATE_KILL_SEED="$seed" \
    cargo test --release --locked -p hookstate --test cli -- --nocapture --exact \
    killloop::kill_loop_loses_no_acked_event_and_never_double_claims
