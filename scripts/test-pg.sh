#!/usr/bin/env bash
# The PostgreSQL run of the backend matrix (docs/postgres.md): the domain suites and the CLI
# suite again, every store a schema of a throw-away cluster instead of a redb file, then the
# PostgreSQL-only tests (TLS, schema versions, copy, the several-host claim race).
#
# With HOOKSTATE_TEST_PG_URL already set, that database is used and no server is started.
# Otherwise a cluster is made under a temporary directory (scripts/pg-cluster.sh, which installs
# Debian's postgresql-15 when no server is found), and stopped by its pid on every exit path.
# The default pass is lean (the model tests at 16 cases each, the race at 72 items per phase);
# HOOKSTATE_PG_LONG=1 runs the models at their own case counts and the long several-host race.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tests that are about the redb file itself (its bytes, its lock, its directory, temporary
# files beside it, the anchor beside it, another spelling of its path): they run on redb only.
FILE_ONLY=(
    damaged::
    integrity::
    integrity_paths::
    perms::
    exit_4_busy_when_the_write_lock_is_held_past_wait_ms
    exit_5_flipped_file_bytes_without_a_panic
    exit_5_verify_names_the_first_bad_seq_of_a_rewritten_event
    rebuild_removes_stale_temporary_files_of_killed_writers_only
    integrity_idem::a_repeat_with_other_volatile_flags_replays_the_first_result
    # The operator tests below check a store file (its size shrinking, its bytes edited, the
    # doctor's file checks) and `serve` (a Unix socket beside a store file): redb only. On
    # PostgreSQL, cli/tests/postgres.rs runs metrics, checkpoint, compact and backup, and checks
    # that doctor and serve refuse a database store.
    ops::a_backup_of_a_live_store_verifies_and_has_its_head
    ops::an_export_into_the_stores_own_or_anchor_directory_is_refused
    ops::compact_
    ops::doctor_
    ops::metrics_count_events_per_domain_and_queue_depths_in_json_and_prometheus
    ops::verify_refuses_a_checkpoint_whose_rows_were_edited
    ops::a_restored_store_whose_anchor_was_cut_takes_writes_until_it_moves_on
    ops::a_read_where_only_a_removed_stores_anchor_is_left_is_marked
    ops::a_write_beside_a_removed_stores_anchor_creates_nothing
    ops::verify_refuses_events_per_domain_that_are_not_the_logs
    served::
)
# The domain suites of tests/ that open their stores through the matrix.
DOMAIN=(alerts:: feedback_mirror:: feedback_model:: heartbeat:: mirror_race:: model:: observer::
    proposals:: session:: session_store:: signals::)

cluster=""
# A remote store keeps its per-host anchor under HOME unless told: the runs keep theirs here.
anchors="$(mktemp -d "${TMPDIR:-/tmp}/hookstate-anchors.XXXXXX")"
export HOOKSTATE_ANCHOR_DIR="$anchors"
cleanup() {
    rm -rf "$anchors"
    if [ -n "$cluster" ]; then
        bash scripts/pg-cluster.sh stop "$cluster" || true
        rm -rf "$cluster"
    fi
}
trap cleanup EXIT INT TERM

if [ -z "${HOOKSTATE_TEST_PG_URL:-}" ]; then
    bash scripts/pg-cluster.sh install
    cluster="$(mktemp -d "${TMPDIR:-/tmp}/hookstate-pg.XXXXXX")"
    HOOKSTATE_TEST_PG_URL="$(bash scripts/pg-cluster.sh start "$cluster")"
    # The self-signed CA of the server's certificate, for the TLS test.
    export HOOKSTATE_TEST_PG_CA="$cluster/ca.crt"
    export HOOKSTATE_TEST_PG_URL
fi
# The PostgreSQL-only tests fail, rather than skip, without a database.
export HOOKSTATE_TEST_PG_REQUIRED=1

skips=()
for name in "${FILE_ONLY[@]}"; do
    skips+=(--skip "$name")
done

if [ -z "${HOOKSTATE_PG_LONG:-}" ]; then
    export PROPTEST_CASES="${PROPTEST_CASES:-16}"
fi

echo "-- domain suites on PostgreSQL"
cargo test -p hookstate-tests --test integration --locked -- "${DOMAIN[@]}"
echo "-- CLI suite on PostgreSQL (file-only tests skipped: ${FILE_ONLY[*]})"
cargo test -p hookstate --test cli --locked -- "${skips[@]}"
echo "-- PostgreSQL-only tests"
cargo test -p hookstate --test postgres --locked -- --nocapture
