#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run runs exactly this).
# Formatting, lints with warnings as errors, then every test of the workspace, whose closing
# lines are cargo's "test result: ok. N passed; N failed" per test binary.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test --workspace"
cargo test --workspace --locked
