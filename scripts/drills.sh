#!/usr/bin/env bash
# Seeded-bug drills (RELIABILITY.md A12): builds with the `bugdrill` feature, plants each bug with
# HOOKSTATE_DRILL and runs the harness that targets it. Each run must FAIL and its figures line
# must show the bug (a lost acked event, a double claim, a non-linearizable claim history, a lost
# commit, a write outside the root, a store that does not open after a crash inside its creation,
# a legacy file write that returned and was lost in a power cut, a write acknowledged on a
# rolled-back store, a verify that passes over a branch page that misroutes lookups).
# A bug may have several detection runs (`also`); it counts as detected only if all of them detect
# it. Prints `bugs_planted=N bugs_detected=N detection_runs=R` and exits non-zero unless every
# planted bug was detected.
#
#   scripts/drills.sh            # HOOKSTATE_KILL_SECS (default 20) bounds the kill-loop drill
set -uo pipefail
cd "$(dirname "$0")/.."

planted=0
detected=0
runs=0
last_detected=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run NAME PATTERN CARGO-TEST-ARGS...: one detection run; it must fail and print a line matching
# PATTERN. Returns 0 when the bug was detected.
run() {
    local name="$1" pattern="$2"
    shift 2
    runs=$((runs + 1))
    HOOKSTATE_DRILL="$name" cargo test --locked "$@" -- --nocapture --exact >"$log" 2>&1
    local status=$?
    local figures
    figures=$(grep -E "$pattern" "$log" | head -1)
    if [ "$status" -ne 0 ] && [ -n "$figures" ]; then
        echo "drill $name: detected: $figures"
        return 0
    fi
    echo "drill $name: NOT detected (exit $status)"
    grep -E "^(killloop|race|powerloss|traversal|linearize|exportcrash|mirror race|integrity)" \
        "$log" || tail -20 "$log"
    return 1
}

# drill NAME PATTERN CARGO-TEST-ARGS...: plants bug NAME; detected when its run detects it.
drill() {
    planted=$((planted + 1))
    if run "$@"; then
        detected=$((detected + 1))
        last_detected=1
    else
        last_detected=0
    fi
}

# also NAME PATTERN CARGO-TEST-ARGS...: another harness that must detect the bug of the drill just
# above; the bug counts as detected only if every one of its runs detects it.
also() {
    if ! run "$@" && [ "$last_detected" -eq 1 ]; then
        detected=$((detected - 1))
        last_detected=0
    fi
}

cargo build --locked --features bugdrill -p hookstate -p hookstate-tests --tests --quiet || exit 1

HOOKSTATE_KILL_SECS="${HOOKSTATE_KILL_SECS:-20}" \
    drill ack-before-commit 'killloop .* lost_acked=[1-9]' \
    -p hookstate --features bugdrill --test cli \
    killloop::kill_loop_loses_no_acked_event_and_never_double_claims
drill cas-separate-read 'race: .* double_claims=[1-9]' \
    -p hookstate --features bugdrill --test cli \
    eight_processes_racing_on_one_queue_never_double_claim
also cas-separate-read 'linearize .* nonlinearizable_keys=[1-9]' \
    -p hookstate --features bugdrill --test cli \
    linearize::per_key_claim_histories_of_killed_processes_are_linearizable

drill mirror-blind-write 'mirror race .* lost=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    mirror_race::loopd_mirror_loses_nothing_to_a_stale_legacy_writer
also mirror-blind-write 'mirror race .* lost=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    mirror_race::observer_mirror_loses_nothing_to_a_stale_legacy_writer
also mirror-blind-write 'mirror race .* lost=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    mirror_race::moonshine_mirror_loses_nothing_to_a_stale_web_writer
also mirror-blind-write 'mirror race .* lost=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    mirror_race::hermit_mirror_loses_nothing_to_a_stale_proposal_ts

drill naive-path-join 'traversal .* escapes=[1-9]' \
    -p hookstate --features bugdrill --test cli \
    perms::hostile_legacy_file_names_never_escape_the_root

drill non-atomic-create 'powerloss_create .* unopenable=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    powerloss::power_loss_during_creation_leaves_no_store_or_an_openable_one

drill durability-none 'powerloss .* lost_acked=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    powerloss::power_loss_at_every_operation_keeps_acked_events_and_an_openable_store

drill header-syncs-skipped 'powerloss .* lost_acked=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    powerloss::power_loss_at_every_operation_keeps_acked_events_and_an_openable_store

HOOKSTATE_KILL_SECS="${HOOKSTATE_KILL_SECS:-20}" \
    drill close-header-stale 'killloop .* (lost_acked=[1-9]|verify=failed)' \
    -p hookstate --features bugdrill --test cli \
    killloop::kill_loop_loses_no_acked_event_and_never_double_claims

drill export-no-dir-fsync 'exportcrash .* lost_writes=[1-9]' \
    -p hookstate-tests --features bugdrill --test integration \
    exportcrash::export_crash_at_every_step_leaves_old_or_new_files_and_keeps_returned_writes

drill anchor-ignored 'integrity_rollback .* accepted=[1-9]' \
    -p hookstate --features bugdrill --test cli \
    integrity::a_rolled_back_store_is_refused_by_every_writer_and_marked_for_readers

drill verify-scans-only 'integrity_branch .* verify_after=0' \
    -p hookstate --features bugdrill --test cli \
    integrity::a_damaged_branch_page_is_caught_by_verify_even_after_a_write_refreshes_its_checksum

echo "bugs_planted=$planted bugs_detected=$detected detection_runs=$runs"
[ "$planted" -eq "$detected" ]
