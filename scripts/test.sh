#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run runs exactly this).
# Formatting, lints with warnings as errors, the libraries' docs, every test of the workspace (cargo closes each test
# binary with "test result: ok. N passed; N failed"), then the Node client's tests (node's
# built-in runner against a real `hookstate serve`), then the seeded-bug drills, which build with
# the bugdrill feature and must see every planted bug caught ("bugs_planted=N bugs_detected=N"),
# then the PostgreSQL pass of the backend matrix (scripts/test-pg.sh: the domain and CLI suites
# again on a throw-away PostgreSQL cluster, the PostgreSQL-only tests, the several-host race),
# then a short fuzz smoke: every cargo-fuzz target for HOOKSTATE_FUZZ_SECS seconds (default 3;
# 0 skips it), installing cargo-fuzz if missing (RELIABILITY.md A8, scripts/fuzz-smoke.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

# The library's documentation (README: `cargo doc -p hookstate-engine`) builds without a broken
# link; its examples run as doc tests in `cargo test` below.
step "cargo doc of the libraries (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked -p hookstate-engine -p hookstate-schema

# The redb pass runs on redb whatever the caller's environment says; the PostgreSQL pass below
# uses HOOKSTATE_TEST_PG_URL when it is set (else a cluster of its own).
pg_url="${HOOKSTATE_TEST_PG_URL:-}"
unset HOOKSTATE_TEST_PG_URL

step "cargo test --workspace"
cargo test --workspace --locked

step "node client tests (node --test; the debug hookstate the tests built)"
HOOKSTATE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/hookstate" node --test clients/node/test/

step "the suites on PostgreSQL (backend matrix)"
HOOKSTATE_TEST_PG_URL="$pg_url" bash scripts/test-pg.sh

step "seeded-bug drills (each planted bug must be caught)"
HOOKSTATE_KILL_SECS="${HOOKSTATE_KILL_SECS:-15}" bash scripts/drills.sh

fuzz_secs="${HOOKSTATE_FUZZ_SECS:-3}"
if [ "$fuzz_secs" -gt 0 ]; then
    step "fuzz smoke (${fuzz_secs} s per target)"
    FUZZ_SECS="$fuzz_secs" bash scripts/fuzz-smoke.sh
fi
