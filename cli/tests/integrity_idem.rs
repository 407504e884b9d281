//! Issue 13, item 3, through the binary: an idempotency key is bound, in its scope, to the
//! request it first carried (verb, arguments, stdin). The same key with another request is
//! refused with exit 3 and one line naming the first verb; a true repeat, even with other flags
//! that do not change what it does, replays what the first call printed; a key is free again
//! after its bound.
//!
//! Does not test the kernel's replay in-process; the engine's tests do.

use super::Store;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// `--idem-key k1 kv put a 1` then `--idem-key k1 counter add c 5` answered the put's result
/// with exit 0 and the add never happened. Now the add is refused (exit 3, one line naming
/// `kv put`) and nothing is appended.
#[test]
fn a_key_reused_for_another_verb_is_refused_and_names_the_first() {
    let store = Store::new();
    store.run(&["--idem-key", "k1", "kv", "put", "a", "1"]).expect(0);
    let add = store.run(&["--idem-key", "k1", "counter", "add", "c", "5"]).expect(3);
    assert!(add.stderr.contains("`kv put`"), "{add:?}");
    assert_eq!(add.stdout, "", "nothing is printed for a refused request");
    assert_eq!(store.run(&["counter", "get", "c"]).expect(0).json()["value"], 0);
    let other_value = store.run(&["--idem-key", "k1", "kv", "put", "a", "2"]).expect(3);
    assert!(other_value.stderr.contains("`kv put`"), "{other_value:?}");
    let other_scope = store.run(&["--idem-key", "k1", "--scope", "s2", "kv", "put", "a", "1"]);
    assert_eq!(other_scope.expect(0).json()["rev"], 1, "keys are per scope");
    assert_eq!(store.run(&["stats"]).expect(0).json()["events"], 2, "only the two puts");
}

/// A retried `queue ack` with a new token replayed the old ack (exit 0) and left the item
/// claimed. Now the new token is another request: exit 3, and the item's state is what it was.
#[test]
fn a_retried_ack_with_another_token_is_refused_not_replayed() {
    let store = Store::new();
    store.run(&["queue", "push", "q", "i", "{}"]).expect(0);
    let first = store.run(&["queue", "claim", "q"]).expect(0).json();
    let token = first["token"].to_string();
    store.run(&["--idem-key", "ack-i", "queue", "ack", "q", "i", "--token", &token]).expect(0);
    store.run(&["queue", "push", "q", "i", "{}"]).expect(0);
    let second = store.run(&["queue", "claim", "q"]).expect(0).json();
    let token = second["token"].to_string();
    let retry = store.run(&["--idem-key", "ack-i", "queue", "ack", "q", "i", "--token", &token]);
    let retry = retry.expect(3);
    assert!(retry.stderr.contains("`queue ack`"), "{retry:?}");
    let list = store.run(&["queue", "list", "q"]).expect(0).json();
    assert_eq!(list["items"][0]["state"], "claimed", "{list}");
}

/// A true repeat replays, whatever the flags that do not change what a verb does (`--db` spelled
/// another way, `--wait-ms`, `--format`), and defaults spelled out are the same request.
#[test]
fn a_repeat_with_other_volatile_flags_replays_the_first_result() {
    let store = Store::new();
    let first = store.run(&["--idem-key", "k", "kv", "put", "a", "1"]).expect(0).json();
    let spelled = format!("{}/./state.redb", store.dir.path().display());
    let again = super::run_in(
        std::path::Path::new(&spelled),
        &["--idem-key", "k", "--wait-ms", "500", "--format", "json", "kv", "put", "a", "1"],
    )
    .expect(0)
    .json();
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!((&again["seq"], &again["rev"]), (&first["seq"], &first["rev"]));
    store.run(&["queue", "push", "q", "x", "{}"]).expect(0);
    let claim = store.run(&["--idem-key", "c", "queue", "claim", "q"]).expect(0).json();
    let spelled_out =
        store.run(&["--idem-key", "c", "queue", "claim", "q", "--lease-ms", "300000"]);
    let spelled_out = spelled_out.expect(0).json();
    assert_eq!(spelled_out["replayed"], true, "the default lease spelled out: {spelled_out}");
    assert_eq!(spelled_out["token"], claim["token"]);
}

/// Replays of hook verbs print what the first call printed: `hook claim` printed nothing on a
/// replay before (the block with its task was lost on a retried Stop hook).
#[test]
fn a_replayed_hook_prints_what_the_first_call_printed() {
    let store = Store::new();
    store.run(&["queue", "push", "todo", "t1", r#"{"task":"x"}"#]).expect(0);
    let payload = br#"{"session_id":"s1","hook_event_name":"Stop"}"#;
    let args = ["--idem-key", "stop-1", "hook", "claim", "todo"];
    let first = store.run_with_stdin(&args, Some(payload)).expect(0);
    assert!(first.stdout.contains("\"decision\":\"block\""), "{first:?}");
    let again = store.run_with_stdin(&args, Some(payload)).expect(0);
    assert_eq!(again.stdout, first.stdout, "the replay prints the same block");
    let once = ["--idem-key", "start-1", "hook", "once", "seen", "--say", "hello"];
    let start = br#"{"session_id":"s1","hook_event_name":"SessionStart"}"#;
    let said = store.run_with_stdin(&once, Some(start)).expect(0);
    assert_eq!(store.run_with_stdin(&once, Some(start)).expect(0).stdout, said.stdout);
}

/// Stdin is part of the request: the same key with another payload is refused.
#[test]
fn the_same_key_with_other_stdin_is_refused() {
    let store = Store::new();
    let args = ["--idem-key", "rows-1", "--scope", "observer:s", "observer", "append"];
    let rows = |text: &str| format!(r#"[{{"kind":"user","text":"{text}"}}]"#);
    store.run_with_stdin(&args, Some(rows("one").as_bytes())).expect(0);
    store.run_with_stdin(&args, Some(rows("one").as_bytes())).expect(0);
    let other = store.run_with_stdin(&args, Some(rows("two").as_bytes())).expect(3);
    assert!(other.stderr.contains("`observer append`"), "{other:?}");
    let put = ["--idem-key", "v", "kv", "put", "a", "--stdin"];
    store.run_with_stdin(&put, Some(b"1")).expect(0);
    store.run_with_stdin(&put, Some(b"2")).expect(3);
}

/// A key is bound for a day: the same key after that is a new request (documented in the README
/// and `--help`), within it a repeat.
#[test]
fn a_key_is_free_again_after_its_bound() {
    let store = Store::new();
    let at = |ms: u64| ms.to_string();
    let start = 1_800_000_000_000u64;
    let first = ["--idem-key", "k", "--now-ms", &at(start), "kv", "put", "a", "1"];
    store.run(&first).expect(0);
    let within = ["--idem-key", "k", "--now-ms", &at(start + DAY_MS - 1), "kv", "put", "a", "2"];
    store.run(&within).expect(3);
    let after = ["--idem-key", "k", "--now-ms", &at(start + DAY_MS), "kv", "put", "a", "2"];
    assert_eq!(store.run(&after).expect(0).json()["rev"], 2, "a new request after a day");
    let repeat = ["--idem-key", "k", "--now-ms", &at(start + DAY_MS + 5), "kv", "put", "a", "2"];
    assert_eq!(store.run(&repeat).expect(0).json()["replayed"], true);
    store.run(&["verify"]).expect(0);
}
