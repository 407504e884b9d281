//! Operating the log (issue 18): `log` prints every written value, its filters refuse names
//! that match nothing, `log --follow` sees a live writer's events once and in order, dump →
//! restore reproduces the head hash, an edited, reordered or truncated dump is refused naming
//! its line, and a backup of a live store verifies.
//!
//! Does not call the engine: every step is a process, as an operator runs it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Store;

/// How long a follower may take to print what a writer committed: far above its poll.
const FOLLOW_DEADLINE: Duration = Duration::from_secs(30);

fn lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A store with one event of each core kind that carries a value.
fn written() -> Store {
    let store = Store::new();
    store.run(&["kv", "put", "k", r#"{"a":[1,2],"s":"x"}"#]).expect(0);
    store.run(&["queue", "push", "q", "i1", r#"{"job":"build"}"#]).expect(0);
    store.run(&["list", "append", "l", "--cap", "5", r#"{"row":1}"#]).expect(0);
    store.run(&["set", "add", "s", "member-one"]).expect(0);
    store
}

#[test]
fn log_shows_every_written_value_whole() {
    let store = written();
    let events = lines(&store.run(&["log"]).expect(0).stdout);
    assert_eq!(events.len(), 4);
    assert_eq!(events[0]["data"], json!({"key": "k", "value": {"a": [1, 2], "s": "x"}, "rev": 1}));
    assert_eq!(events[1]["data"]["payload"], json!({"job": "build"}));
    assert_eq!(events[1]["data"]["item"], "i1");
    assert_eq!(events[2]["data"]["row"], json!({"row": 1}));
    assert_eq!(events[3]["data"], json!({"set": "s", "member": "member-one"}));
}

#[test]
fn log_cuts_long_fields_with_an_explicit_marker() {
    let store = written();
    let run = store.run(&["log", "--kind", "set_added", "--field-bytes-max", "16"]).expect(0);
    assert_eq!(lines(&run.stdout)[0]["data"]["member"], "member-one", "short strings stay whole");
    let long = "y".repeat(40);
    store.run(&["set", "add", "s", &long]).expect(0);
    let run = store.run(&["log", "--from-seq", "5", "--field-bytes-max", "16"]).expect(0);
    let cut = &lines(&run.stdout)[0]["data"]["member"]["$truncated"];
    assert_eq!(cut["bytes"], 40);
    assert_eq!(cut["kept"], "y".repeat(16));
    store.run(&["log", "--field-bytes-max", "3"]).expect(3);
}

#[test]
fn log_filters_refuse_a_domain_or_kind_that_does_not_exist() {
    let store = written();
    let run = store.run(&["log", "--domain", "cor"]).expect(3);
    assert!(run.stderr.contains("is no domain") && run.stderr.contains("core"), "{run:?}");
    let run = store.run(&["log", "--kind", "record_putt"]).expect(3);
    assert!(run.stderr.contains("is no event kind") && run.stderr.contains("record_put"));
    store.run(&["log", "--domain", "core", "--kind", "turn_signaled"]).expect(3);
    // A session filter is an id, checked as `--session` is.
    let run = store.run(&["log", "--of-session", "a/b"]).expect(3);
    assert!(run.stderr.contains("--of-session"), "{run:?}");
    // A real name that matches nothing here is an empty answer, not an error.
    assert_eq!(store.run(&["log", "--kind", "turn_signaled"]).expect(0).stdout, "");
    assert_eq!(lines(&store.run(&["log", "--kind", "record_put"]).expect(0).stdout).len(), 1);
}

fn dump_of(store: &Store) -> String {
    store.run(&["dump"]).expect(0).stdout
}

#[test]
fn dump_then_restore_reproduces_the_head_hash_and_the_views() {
    let store = written();
    store.run(&["--session", "s1", "queue", "claim", "q"]).expect(0);
    store.run(&["--idem-key", "once", "counter", "add", "c", "3"]).expect(0);
    let dump = dump_of(&store);
    let header = &lines(&dump)[0];
    assert_eq!(header["hookstate_dump"], 1);
    assert_eq!(header["head"]["seq"], 6);
    let file = store.dir.path().join("dump.jsonl");
    std::fs::write(&file, &dump).unwrap();
    let target = store.dir.path().join("restored/state.redb");
    let restored =
        super::run_in(&target, &["restore", "--from", file.to_str().unwrap()]).expect(0).json();
    let stats = store.run(&["stats"]).expect(0).json();
    assert_eq!(restored["head"], stats["head"], "same head seq and hash");
    let at = |args: &[&str]| super::run_in(&target, args).expect(0).json();
    assert_eq!(at(&["verify"])["ok"], true);
    assert_eq!(at(&["kv", "get", "k"])["value"], json!({"a": [1, 2], "s": "x"}));
    assert_eq!(at(&["counter", "get", "c"])["value"], 3);
    // The idempotency key came along: a repeat replays instead of adding again.
    assert_eq!(at(&["--idem-key", "once", "counter", "add", "c", "3"])["value"], 3);
    let again = super::run_in(&target, &["dump"]).expect(0).stdout;
    assert_eq!(again.lines().take(7).collect::<Vec<_>>(), dump.lines().collect::<Vec<_>>());
    // A restore in place is refused: over the store, and over the anchor a removed store left,
    // which says so (it used to say the target exists).
    let from = ["restore", "--from", file.to_str().unwrap()];
    let run = super::run_in(&target, &from).expect(3);
    assert!(run.stderr.contains("exists: name a new store"), "{run:?}");
    std::fs::remove_file(&target).unwrap();
    let run = super::run_in(&target, &from).expect(3);
    assert!(run.stderr.contains("holds no store, but the head anchor"), "{run:?}");
    assert!(!target.exists(), "a refused restore left {}", target.display());
    let mut anchor = target.clone().into_os_string();
    anchor.push(".head");
    std::fs::remove_file(&anchor).unwrap();
    assert_eq!(super::run_in(&target, &from).expect(0).json()["head"], stats["head"]);
}

/// A read of a path whose store was removed, its anchor left, answers as an empty store but is
/// marked as not vouched for (it was answered unmarked, as if no store had ever been there).
#[test]
fn a_read_where_only_a_removed_stores_anchor_is_left_is_marked() {
    let store = Store::new();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    std::fs::remove_file(store.db()).unwrap();
    let run = store.run(&["kv", "get", "k"]);
    assert_eq!(run.code, 0, "{run:?}");
    let read = run.json();
    assert_eq!(read["found"], false, "{read}");
    let why = read["anchor_mismatch"].as_str().unwrap_or_default();
    assert!(why.contains("no store is at") && why.contains("seq 1"), "{read}");
    assert!(run.stderr.contains("not vouched for"), "{run:?}");
}

/// A write (or `init`) at a path where only a removed store's anchor is left is refused with
/// nothing created: it made an empty store of another id there, which refused every write after,
/// so the path stayed unusable until both were removed. Removing the anchor frees the path.
#[test]
fn a_write_beside_a_removed_stores_anchor_creates_nothing() {
    let store = Store::new();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    std::fs::remove_file(store.db()).unwrap();
    for verb in [&["kv", "put", "k", "2"][..], &["init"][..]] {
        let run = store.run(verb).expect(5);
        assert!(run.stderr.contains("remove the anchor"), "{run:?}");
        assert!(!store.db().exists(), "{verb:?} created a store");
    }
    let mut anchor = store.db().into_os_string();
    anchor.push(".head");
    std::fs::remove_file(&anchor).unwrap();
    store.run(&["kv", "put", "k", "3"]).expect(0);
}

/// A restore cut after it named its store and before it anchored it (the anchor absent) leaves
/// a store that reads unmarked and takes writes, the first of which anchors it (so does
/// `verify`); once the store moved past the head it was built at, a missing anchor is refused.
#[test]
fn a_restored_store_whose_anchor_was_cut_takes_writes_until_it_moves_on() {
    let store = Store::new();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    let dump = store.dir.path().join("dump.jsonl");
    std::fs::write(&dump, dump_of(&store)).unwrap();
    let target = store.dir.path().join("restored/state.redb");
    let anchor = store.dir.path().join("restored/state.redb.head");
    let restore_cut = || {
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_file(&anchor);
        super::run_in(&target, &["restore", "--from", dump.to_str().unwrap()]).expect(0);
        std::fs::remove_file(&anchor).unwrap();
    };
    restore_cut();
    let read = super::run_in(&target, &["kv", "get", "k"]).expect(0).json();
    assert_eq!((read["value"].as_i64(), read.get("anchor_mismatch")), (Some(1), None), "{read}");
    super::run_in(&target, &["verify"]).expect(0);
    assert!(anchor.exists(), "verify anchored the built store");
    restore_cut();
    super::run_in(&target, &["kv", "put", "k", "2"]).expect(0);
    assert!(anchor.exists(), "the first write anchored the built store");
    std::fs::remove_file(&anchor).unwrap();
    let run = super::run_in(&target, &["kv", "put", "k", "3"]).expect(5);
    assert!(run.stderr.contains("head anchor missing"), "{run:?}");
}

/// A restore with a second anchor directory moves that anchor to the restored head, so the
/// restored store takes writes at once (it used to refuse every write, exit 5, until `verify
/// --accept-missing-anchor`); an older dump than the anchor has seen is refused and makes
/// nothing.
#[test]
fn restore_with_a_second_anchor_takes_writes_and_refuses_an_older_dump() {
    let store = written();
    let old = store.dir.path().join("old.jsonl");
    std::fs::write(&old, dump_of(&store)).unwrap();
    store.run(&["kv", "put", "k", "2"]).expect(0);
    let new = store.dir.path().join("new.jsonl");
    std::fs::write(&new, dump_of(&store)).unwrap();

    let anchors = tempfile::tempdir().unwrap();
    let dir = anchors.path().to_str().unwrap();
    let with_dir = |target: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--anchor-dir", dir];
        all.extend_from_slice(args);
        super::run_in(target, &all)
    };
    let target = store.dir.path().join("restored/state.redb");
    with_dir(&target, &["restore", "--from", new.to_str().unwrap()]).expect(0);
    let files: Vec<_> = std::fs::read_dir(anchors.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "the restore wrote the store's second anchor");
    let put = with_dir(&target, &["kv", "put", "k", "3"]);
    assert_eq!(put.code, 0, "the restored store takes writes: {put:?}");
    let verify = with_dir(&target, &["verify"]).expect(0).json();
    assert_eq!(verify["second_anchor_seq"], 6, "{verify}");

    // The second anchor has seen seq 6; a dump that ends at seq 4 would be a rollback.
    let older = store.dir.path().join("older/state.redb");
    let refused = with_dir(&older, &["restore", "--from", old.to_str().unwrap()]);
    assert_eq!(refused.code, 5, "{refused:?}");
    assert!(refused.stderr.contains("further along than the dump"), "{refused:?}");
    assert!(!older.exists(), "a refused restore left {}", older.display());

    // A fork of seq 4 written without the anchor directory, ending at the anchored seq 6 and
    // past it: its dump is refused, as `verify` refuses the fork itself. The restore checked
    // only the seq and moved the anchor onto the fork, so the genuine store read as rolled back.
    let fork = store.dir.path().join("fork/state.redb");
    // Elsewhere: no second anchor (the PostgreSQL pass sets one for every call).
    let elsewhere = |args: &[&str]| {
        let out =
            super::support::hookstate(&fork).env_remove("HOOKSTATE_ANCHOR_DIR").args(args).output();
        let out = out.unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    elsewhere(&["restore", "--from", old.to_str().unwrap()]);
    elsewhere(&["kv", "put", "k", "\"fork 5\""]);
    for end in [6, 7] {
        let put = elsewhere(&["kv", "put", "k", &format!("\"fork {end}\"")]);
        assert_eq!(put["seq"], end);
        let dumped = store.dir.path().join(format!("fork-{end}.jsonl"));
        elsewhere(&["dump", "--to", dumped.to_str().unwrap()]);
        let forked = store.dir.path().join(format!("forked-{end}/state.redb"));
        let refused = with_dir(&forked, &["restore", "--from", dumped.to_str().unwrap()]);
        assert_eq!(refused.code, 5, "{refused:?}");
        assert!(refused.stderr.contains("rewrites history"), "{refused:?}");
        assert!(!forked.exists(), "a refused restore left {}", forked.display());
    }
    let verify = with_dir(&target, &["verify"]).expect(0).json();
    assert_eq!(verify["second_anchor_seq"], 6, "the anchor stayed on the genuine store: {verify}");
}

/// `restore` and `backup` build store files: a PostgreSQL address as their target is refused,
/// without its password. It was taken as a file name in the working directory: a redb file
/// named after the address, password and all, printed on stdout, and the database untouched.
#[test]
fn restore_and_backup_refuse_a_postgres_address_and_never_show_its_password() {
    let store = written();
    let dump = store.dir.path().join("d.jsonl");
    std::fs::write(&dump, dump_of(&store)).unwrap();
    let work = tempfile::tempdir().unwrap();
    let url = "postgres://u:hunter2secret@127.0.0.1:1/db";
    let source = store.db().display().to_string();
    let calls: [Vec<&str>; 2] = [
        vec!["--db", url, "restore", "--from", dump.to_str().unwrap()],
        vec!["--db", &source, "backup", "--to", url],
    ];
    for args in &calls {
        let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .args(args)
            .current_dir(work.path())
            .env("HOME", work.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stdout} {stderr}");
        assert!(stderr.contains("is a PostgreSQL address"), "{stderr}");
        assert!(!format!("{stdout}{stderr}").contains("hunter2secret"), "{stdout} {stderr}");
        let made: Vec<_> = std::fs::read_dir(work.path()).unwrap().collect();
        assert!(made.is_empty(), "{args:?} made {made:?}");
    }
}

/// Restores `text` into the store `name` and returns the run; a refusal leaves no new store.
fn restore_text(store: &Store, name: &str, text: &str) -> super::Run {
    let file = store.dir.path().join(format!("{name}.jsonl"));
    std::fs::write(&file, text).unwrap();
    let target = store.dir.path().join(format!("{name}.redb"));
    let existed = target.exists();
    let run = super::run_in(&target, &["restore", "--from", file.to_str().unwrap()]);
    if run.code != 0 && !existed {
        assert!(!target.exists(), "a refused restore left {}", target.display());
    }
    run
}

#[test]
fn restore_refuses_an_edited_reordered_or_truncated_dump_naming_the_line() {
    let store = written();
    let dump = dump_of(&store);
    let all: Vec<&str> = dump.lines().collect();
    let join = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    // An edited value in the readable event.
    let edited = dump.replacen("member-one", "member-two", 1);
    let run = restore_text(&store, "edited", &edited).expect(3);
    assert!(run.stderr.contains("line 5:") && run.stderr.contains("edited"), "{run:?}");
    // An edited record byte (a hex digit of the content): its hash fails.
    let line: Value = serde_json::from_str(all[2]).unwrap();
    let record = line["record"].as_str().unwrap();
    let flipped = format!(
        "{}{}",
        &record[..record.len() - 2],
        if record.ends_with("00") { "01" } else { "00" }
    );
    let bad = all[2].replace(record, &flipped);
    let run =
        restore_text(&store, "record", &join(&[all[0], all[1], &bad, all[3], all[4]])).expect(3);
    assert!(run.stderr.contains("line 3:") && run.stderr.contains("bad record"), "{run:?}");
    // Two events swapped.
    let run =
        restore_text(&store, "swapped", &join(&[all[0], all[2], all[1], all[3], all[4]])).expect(3);
    assert!(run.stderr.contains("line 2:") && run.stderr.contains("reordered"), "{run:?}");
    // The last event missing, and a last line cut in the middle.
    let run = restore_text(&store, "short", &join(&all[..4])).expect(3);
    assert!(run.stderr.contains("line 5:") && run.stderr.contains("truncated"), "{run:?}");
    let cut = &dump[..dump.len() - 10];
    let run = restore_text(&store, "cut", cut).expect(3);
    assert!(run.stderr.contains("line 5:"), "{run:?}");
    // The header's head hash edited: the same seq, another hash, said as such.
    let header: Value = serde_json::from_str(all[0]).unwrap();
    let hash = header["head"]["hash"].as_str().unwrap();
    let other = format!("{}{}", if hash.starts_with('0') { "1" } else { "0" }, &hash[1..]);
    let edited_head = dump.replacen(hash, &other, 1);
    let run = restore_text(&store, "head-hash", &edited_head).expect(3);
    assert!(run.stderr.contains("the header was edited?"), "{run:?}");
    // The whole dump is fine, and a second restore onto it is refused.
    restore_text(&store, "whole", &dump).expect(0);
    let run = restore_text(&store, "whole", &dump).expect(3);
    assert!(run.stderr.contains("exists"), "{run:?}");
}

#[test]
fn dump_to_a_file_refuses_an_existing_file() {
    let store = written();
    let file = store.dir.path().join("d.jsonl");
    let out = store.run(&["dump", "--to", file.to_str().unwrap()]).expect(0).json();
    assert_eq!(out["events"], 4);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), dump_of(&store));
    store.run(&["dump", "--to", file.to_str().unwrap()]).expect(6);
}

#[test]
fn a_backup_of_a_live_store_verifies_and_has_its_head() {
    let store = written();
    let exe = env!("CARGO_BIN_EXE_hookstate");
    let db = store.db();
    let writer = std::thread::spawn(move || {
        for _ in 0..20 {
            let status = Command::new(exe)
                .arg("--db")
                .arg(&db)
                .args(["counter", "add", "c", "1"])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }
    });
    let target = store.dir.path().join("backup/state.redb");
    let backup = store.run(&["backup", "--to", target.to_str().unwrap()]).expect(0).json();
    writer.join().unwrap();
    let seq = backup["head"]["seq"].as_u64().unwrap();
    assert!((4..=24).contains(&seq), "{backup}");
    let verify = super::run_in(&target, &["verify"]).expect(0).json();
    assert_eq!(verify["hash"], backup["head"]["hash"]);
    // The backup is the live store's prefix: the same hash at that seq.
    let live = lines(
        &store.run(&["log", "--from-seq", &seq.to_string(), "--limit", "1"]).expect(0).stdout,
    );
    assert_eq!(live[0]["hash"], backup["head"]["hash"]);
    store.run(&["backup", "--to", target.to_str().unwrap()]).expect(3);
    // A directory or a device as the new store is taken too: exit 3, as a file is, where it
    // read as a damaged store (exit 5, "stop; run verify").
    let from = store.db().display().to_string();
    for taken in [store.dir.path().join("backup"), std::path::PathBuf::from("/dev/null")] {
        let to = taken.to_str().unwrap();
        let run = store.run(&["backup", "--to", to]).expect(3);
        assert!(run.stderr.contains("exists: name a new store"), "{run:?}");
        store.run(&["copy", "--from", &from, "--to", to]).expect(3);
    }
}

/// `log --follow` on `store` with `filters`, its stdout and stderr piped.
fn follow(store: &Store, filters: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(store.db())
        .args(["log", "--follow"])
        .args(filters)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn log_follow_sees_a_live_writers_events_once_in_order_and_exits_0_on_sigint() {
    let store = written();
    let mut follower = follow(&store, &["--from-seq", "2", "--domain", "core"]);
    let writes = 25u64;
    let exe = env!("CARGO_BIN_EXE_hookstate");
    let db = store.db();
    let writer = std::thread::spawn(move || {
        for _ in 0..writes {
            let status = Command::new(exe)
                .arg("--db")
                .arg(&db)
                .args(["counter", "add", "c", "1"])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }
    });
    let mut out = BufReader::new(follower.stdout.take().unwrap());
    let mut seqs = Vec::new();
    let start = Instant::now();
    while seqs.len() < 3 + usize::try_from(writes).unwrap() && start.elapsed() < FOLLOW_DEADLINE {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seqs.push(serde_json::from_str::<Value>(&line).unwrap()["seq"].as_u64().unwrap());
    }
    writer.join().unwrap();
    assert_eq!(seqs, (2..=4 + writes).collect::<Vec<_>>(), "every event once, in order");
    let status = Command::new("kill").args(["-INT", &follower.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = follower.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "SIGINT ends a follow with exit 0");
}

/// A compaction between two reads of a follower dropped events it had not printed: it went on
/// from the first kept event without a word. Now a warning line names them.
#[test]
fn log_follow_names_the_events_a_compaction_dropped_before_it_printed_them() {
    let store = Store::new();
    let add = || store.run(&["counter", "add", "c"]).expect(0);
    add();
    add();
    let mut follower = follow(&store, &[]);
    let mut out = BufReader::new(follower.stdout.take().unwrap());
    let mut seq = || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()["seq"].as_u64().unwrap()
    };
    assert_eq!((seq(), seq()), (1, 2));
    let signal = |name: &str| {
        let id = follower.id().to_string();
        assert!(Command::new("kill").args([name, &id]).status().unwrap().success());
    };
    // Stopped, it cannot read between the writes and the compaction.
    signal("-STOP");
    add();
    add();
    add();
    store.run(&["checkpoint"]).expect(0);
    assert_eq!(store.run(&["compact", "--keep", "0"]).expect(0).json()["log_starts_after"], 5);
    add();
    signal("-CONT");
    assert_eq!((seq(), seq()), (6, 7), "the checkpoint's event and the write after it");
    signal("-INT");
    let done = follower.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&done.stderr);
    let warning =
        "hookstate: warning: events 3 to 5 were dropped by a compaction before they were \
                   printed\n";
    assert_eq!(stderr, warning);
}

#[test]
fn log_follow_exits_0_when_its_reader_closes_the_pipe() {
    let store = written();
    let mut follower = follow(&store, &[]);
    let mut out = BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"seq\":1"), "{first}");
    drop(out);
    let start = Instant::now();
    let exit = loop {
        if let Some(exit) = follower.try_wait().unwrap() {
            break exit;
        }
        assert!(start.elapsed() < FOLLOW_DEADLINE, "the follower did not see its reader go");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(0));
}

#[test]
fn doctor_is_clean_on_a_healthy_store_and_flags_a_deleted_anchor() {
    // No store yet is not a damaged store: exit 6 with one line, as `verify` answers.
    let fresh = Store::new();
    let run = fresh.run(&["doctor"]).expect(6);
    assert!(run.stderr.contains("no store at"), "{run:?}");
    let store = written();
    let report = store.run(&["doctor"]).expect(0).json();
    assert_eq!(report["problems"], 0, "{report}");
    let checks: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    for check in ["permissions", "integrity", "anchor", "temporaries", "open_by", "size"] {
        assert!(checks.contains(&check), "{check} missing from {checks:?}");
    }
    std::fs::remove_file(store.dir.path().join("state.redb.head")).unwrap();
    let run = store.run(&["doctor"]).expect(5);
    let report = run.json();
    let anchor =
        report["findings"].as_array().unwrap().iter().find(|f| f["check"] == "anchor").unwrap();
    assert_eq!(anchor["level"], "problem");
    assert!(anchor["hint"].as_str().unwrap().contains("--accept-missing-anchor"), "{anchor}");
}

#[test]
fn doctor_flags_a_world_writable_directory_without_opening_the_store() {
    use std::os::unix::fs::PermissionsExt;
    let store = written();
    let dir = store.dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let report = store.run(&["doctor"]).expect(5).json();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let first = &report["findings"][0];
    assert_eq!(
        (first["check"].as_str(), first["level"].as_str()),
        (Some("permissions"), Some("problem"))
    );
    assert!(first["what"].as_str().unwrap().contains("writable by others"), "{first}");
    assert!(first["hint"].as_str().unwrap().contains("chmod 700"), "{first}");
    assert!(report["findings"].as_array().unwrap().iter().all(|f| f["check"] != "integrity"));
}

#[test]
fn doctor_warns_of_stale_temporaries_and_checks_the_mirror_directory() {
    let store = written();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    // One of ours, and two names that only look like ours: doctor listed them too, with the hint
    // that rebuild removes them, which it never did.
    for name in [".state.redb.create-0011223344556677", ".state.redb.create-123", ".state.redb.x"] {
        let file = store.dir.path().join(name);
        std::fs::write(&file, b"").unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(old).unwrap();
    }
    let missing = store.dir.path().join("no-such-mirror");
    let report = store.run(&["--mirror", missing.to_str().unwrap(), "doctor"]).expect(5).json();
    let find = |check: &str| {
        report["findings"].as_array().unwrap().iter().find(|f| f["check"] == check).unwrap().clone()
    };
    assert_eq!(find("temporaries")["level"], "warn");
    assert!(find("temporaries")["hint"].as_str().unwrap().contains("rebuild"));
    let listed = find("temporaries")["what"].as_str().unwrap().to_owned();
    assert!(listed.starts_with("1 stale temporary files"), "{listed}");
    assert_eq!(find("mirror")["level"], "problem");
    store.run(&["rebuild"]).expect(0);
    let report = store.run(&["doctor"]).expect(0).json();
    let temporaries = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "temporaries")
        .unwrap()
        .clone();
    assert_eq!(temporaries["level"], "ok", "rebuild removed the stale file");
}

#[test]
fn metrics_count_events_per_domain_and_queue_depths_in_json_and_prometheus() {
    let store = written();
    store.run(&["queue", "push", "q", "i2"]).expect(0);
    store.run(&["--session", "s", "queue", "claim", "q"]).expect(0);
    let m = store.run(&["--now-ms", "99999999999999", "metrics"]).expect(0).json();
    assert_eq!(m["events_per_domain"]["core"], 6);
    let q = &m["queues"][0];
    assert_eq!(
        (q["ready"].as_u64(), q["claimed"].as_u64(), q["parked"].as_u64()),
        (Some(1), Some(1), Some(0))
    );
    assert!(q["oldest_ready_age_ms"].as_u64().unwrap() > 0);
    assert!(m["file_bytes"].as_u64().unwrap() > 0);
    let text = store.run(&["metrics", "--prometheus"]).expect(0).stdout;
    assert!(text.contains("hookstate_events_total{domain=\"core\"} 6\n"), "{text}");
    assert!(text.contains("hookstate_queue_ready{scope=\"default\",queue=\"q\"} 1\n"), "{text}");
    assert!(text.contains("# TYPE hookstate_queue_parked gauge\n"), "{text}");
    // The counts are the log's: verify checks them against a replay, rebuild restates them.
    store.run(&["verify"]).expect(0);
    store.run(&["rebuild"]).expect(0);
    assert_eq!(store.run(&["metrics"]).expect(0).json()["events_per_domain"]["core"], 6);
}

#[test]
fn as_of_reads_answer_as_the_store_was_and_writes_refuse_them() {
    let store = Store::new();
    for (n, at) in
        [(1, "2026-01-01T00:00:00Z"), (2, "2026-01-02T00:00:00Z"), (3, "2026-01-03T00:00:00Z")]
    {
        let ms = chrono_ms(at).to_string();
        store.run(&["--now-ms", &ms, "kv", "put", "k", &format!("{{\"v\":{n}}}")]).expect(0);
        store.run(&["--now-ms", &ms, "queue", "push", "q", &format!("i{n}")]).expect(0);
    }
    let get = store.run(&["--at-seq", "3", "kv", "get", "k"]).expect(0).json();
    assert_eq!((get["rev"].as_u64(), get["value"]["v"].as_u64()), (Some(2), Some(2)));
    let live = store.run(&["kv", "get", "k"]).expect(0).json();
    assert_eq!(live["rev"], 3);
    let listed = store.run(&["--at-seq", "4", "queue", "list", "q"]).expect(0).json();
    assert_eq!(listed["ready"], 2, "{listed}");
    let day = store.run(&["--as-of", "2026-01-02T12:00:00Z", "kv", "get", "k"]).expect(0).json();
    assert_eq!(day["value"]["v"], 2);
    let before = store.run(&["--as-of", "2025-12-31T00:00:00Z", "kv", "get", "k"]).expect(0).json();
    assert_eq!(before["found"], false);
    let stats = store.run(&["--at-seq", "2", "stats"]).expect(0).json();
    assert_eq!(stats["head"]["seq"], 2);
    assert!(stats.get("anchor_mismatch").is_none(), "an as-of read is vouched for: {stats}");
    let run = store.run(&["--at-seq", "2", "kv", "put", "k", "1"]).expect(64);
    assert!(run.stderr.contains("for reads"), "{run:?}");
    store.run(&["--at-seq", "7", "kv", "get", "k"]).expect(3);
    store.run(&["--as-of", "yesterday", "kv", "get", "k"]).expect(3);
}

fn chrono_ms(at: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(at).unwrap().timestamp_millis()
}

#[test]
fn verify_refuses_events_per_domain_that_are_not_the_logs() {
    use redb::ReadableDatabase;
    let store = written();
    let table: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new(hookstate_schema::format::META_TABLE);
    {
        let database = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .open(store.db())
            .unwrap();
        let read = database.begin_read().unwrap();
        let stored =
            read.open_table(table).unwrap().get("domain_events").unwrap().unwrap().value().to_vec();
        assert_eq!(stored[..8], 4u64.to_be_bytes(), "four core events counted");
        drop(read);
        let txn = database.begin_write().unwrap();
        let mut forged = stored.clone();
        forged[7] = 9;
        txn.open_table(table).unwrap().insert("domain_events", forged.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let run = store.run(&["verify"]).expect(5);
    assert!(run.stderr.contains("events per domain"), "{run:?}");
    store.run(&["rebuild"]).expect(0);
    store.run(&["verify"]).expect(0);
}

/// A store with `n` record puts of a value of about 400 bytes.
fn puts(n: usize) -> Store {
    let store = Store::new();
    let pad = "x".repeat(400);
    for i in 0..n {
        store
            .run(&[
                "kv",
                "put",
                &format!("k{}", i % 4),
                &format!("{{\"i\":{i},\"pad\":\"{pad}\"}}"),
            ])
            .expect(0);
    }
    store
}

#[test]
fn compact_after_a_checkpoint_shrinks_the_file_and_verify_proves_the_chain_from_it() {
    let store = puts(120);
    store.run(&["compact"]).expect(1);
    let checkpoint = store.run(&["checkpoint"]).expect(0).json();
    assert_eq!(
        (checkpoint["at"]["seq"].as_u64(), checkpoint["seq"].as_u64()),
        (Some(120), Some(121))
    );
    store.run(&["kv", "put", "after", "1"]).expect(0);
    let before = store.run(&["kv", "get", "k1"]).expect(0).json();
    let run = store.run(&["compact", "--keep", "3"]).expect(1);
    assert!(run.stderr.contains("fewer than --keep 3"), "{run:?}");
    let compacted = store.run(&["compact", "--keep", "2"]).expect(0).json();
    assert_eq!(compacted["dropped"], 120);
    let (from, to) = (
        compacted["file_bytes_before"].as_u64().unwrap(),
        compacted["file_bytes_after"].as_u64().unwrap(),
    );
    assert!(to < from, "the file shrank: {compacted}");
    let verify = store.run(&["verify"]).expect(0).json();
    assert_eq!(
        (verify["from_checkpoint"].as_u64(), verify["events"].as_u64()),
        (Some(120), Some(2))
    );
    assert_eq!(store.run(&["kv", "get", "k1"]).expect(0).json(), before, "reads are unchanged");
    // `stats` counts the events the log holds, as verify does (it counted the head's seq, 122).
    let stats = store.run(&["stats"]).expect(0).json();
    let counted = (&stats["events"], &stats["log_starts_after"], &stats["head"]["seq"]);
    assert_eq!(counted, (&json!(2), &json!(120), &json!(122)), "{stats}");
    assert_eq!(
        store.run(&["--at-seq", "121", "kv", "get", "after"]).expect(0).json()["found"],
        false
    );
    assert_eq!(
        store.run(&["--at-seq", "122", "kv", "get", "after"]).expect(0).json()["found"],
        true
    );
    store.run(&["--at-seq", "100", "kv", "get", "k1"]).expect(1);
    // The checkpoint compacted to is still a state the store was in: its base answers it.
    let at_base = store.run(&["--at-seq", "120", "kv", "get", "k1"]).expect(0).json();
    assert_eq!(at_base, before, "at the base");
    store.run(&["--at-seq", "119", "kv", "get", "k1"]).expect(1);
    store.run(&["rebuild"]).expect(0);
    store.run(&["verify"]).expect(0);
    let run = store.run(&["dump"]).expect(1);
    assert!(run.stderr.contains("compacted"), "{run:?}");
    let target = store.dir.path().join("backup/state.redb");
    store.run(&["backup", "--to", target.to_str().unwrap()]).expect(0);
    let copy = super::run_in(&target, &["verify"]).expect(0).json();
    assert_eq!(
        (copy["from_checkpoint"].as_u64(), copy["hash"].clone()),
        (Some(120), verify["hash"].clone())
    );
    assert_eq!(
        super::run_in(&target, &["metrics"]).expect(0).json()["events_per_domain"]["core"],
        122
    );
    // Writes go on after a compaction, and a second round compacts again.
    store.run(&["kv", "put", "later", "2"]).expect(0);
    store.run(&["checkpoint"]).expect(0);
    assert_eq!(store.run(&["compact"]).expect(0).json()["dropped"], 3);
    assert_eq!(store.run(&["verify"]).expect(0).json()["from_checkpoint"], 123);
}

#[test]
fn verify_refuses_a_checkpoint_whose_rows_were_edited() {
    let store = puts(6);
    store.run(&["checkpoint"]).expect(0);
    store.run(&["compact"]).expect(0);
    // The checkpoint's rows live in their own table (format 5).
    let table: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new(hookstate_schema::format::BLOBS_TABLE);
    {
        use redb::ReadableDatabase;
        let database = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .open(store.db())
            .unwrap();
        let read = database.begin_read().unwrap();
        let mut rows = read
            .open_table(table)
            .unwrap()
            .get("log_base_views")
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        drop(read);
        let last = rows.len() - 1;
        rows[last] ^= 1;
        let txn = database.begin_write().unwrap();
        txn.open_table(table).unwrap().insert("log_base_views", rows.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let run = store.run(&["verify"]).expect(5);
    assert!(run.stderr.contains("do not match the digest"), "{run:?}");
}

#[test]
fn compact_keeps_the_events_a_live_idempotency_key_is_bound_to() {
    let store = Store::new();
    let now = 1_800_000_000_000u64;
    let at = |ms: u64| ms.to_string();
    store.run(&["--now-ms", &at(now), "--idem-key", "once", "counter", "add", "c", "1"]).expect(0);
    store.run(&["--now-ms", &at(now), "checkpoint"]).expect(0);
    let run = store.run(&["--now-ms", &at(now + 1000), "compact"]).expect(1);
    assert!(run.stderr.contains("idempotency key \"once\""), "{run:?}");
    let day = 24 * 60 * 60 * 1000;
    assert_eq!(store.run(&["--now-ms", &at(now + day), "compact"]).expect(0).json()["dropped"], 1);
    store.run(&["verify"]).expect(0);
}

/// The key a call forwarded to a server carries (`fwd-…`, made up by the CLI for its one retry)
/// holds compaction back for `FORWARD_KEY_COMPACT_MS` (10 minutes), not the 24 hours of a
/// caller's own key; it still replays while its event is kept.
#[test]
fn compact_keeps_a_forwarded_calls_event_only_until_its_retry_is_over() {
    let store = Store::new();
    let now = 1_800_000_000_000u64;
    let at = |ms: u64| ms.to_string();
    let key = "fwd-0123456789abcdef01234567";
    let add = ["--now-ms", &at(now), "--idem-key", key, "counter", "add", "c", "1"];
    store.run(&add).expect(0);
    store.run(&["--now-ms", &at(now), "checkpoint"]).expect(0);
    let minute = 60 * 1000;
    let run = store.run(&["--now-ms", &at(now + 9 * minute), "compact"]).expect(1);
    let bound = format!("idempotency key \"{key}\" is bound to for 10 minutes");
    assert!(run.stderr.contains(&bound), "{run:?}");
    let replayed = store.run(&add).expect(0).json();
    assert_eq!(replayed["replayed"], true, "{replayed}");
    let run = store.run(&["--now-ms", &at(now + 10 * minute), "compact"]).expect(0);
    assert_eq!(run.json()["dropped"], 1, "{run:?}");
    store.run(&["verify"]).expect(0);
}

/// A dump written before `micro_queued` changed shape (issue 18, deliverable 6): three events at
/// shape 1, an ask with an empty `on_resolve` among them.
const SHAPE_1_DUMP: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/upcast/micro-queued-v1.dump");

/// Runs the binary on `db` with `stdin`, without a second anchor directory: the dumped store's
/// id has no second anchor on this host, and `restore` does not seed one.
fn old_store_run(db: &std::path::Path, args: &[&str], stdin: &[u8]) -> super::Run {
    use std::io::Write as _;
    let mut child = super::support::hookstate(db)
        .env_remove("HOOKSTATE_ANCHOR_DIR")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    super::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn a_store_of_shape_1_events_restores_verifies_and_reads_them_at_shape_2() {
    let store = Store::new();
    let target = store.dir.path().join("old/state.redb");
    let first = std::fs::read_to_string(SHAPE_1_DUMP).unwrap();
    let header: Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    let at = |args: &[&str]| old_store_run(&target, args, b"").expect(0);
    // Every stored hash is re-verified over the stored bytes: the chain holds as it was written.
    let restored = at(&["restore", "--from", SHAPE_1_DUMP]).json();
    assert_eq!(restored["head"], header["head"], "{restored}");
    assert_eq!(at(&["verify"]).json()["ok"], true);
    at(&["rebuild"]);
    assert_eq!(at(&["verify"]).json()["ok"], true, "views rebuilt from upcast events match");
    let logged = at(&["log", "--kind", "micro_queued"]).stdout;
    let data: Vec<Value> = lines(&logged).iter().map(|e| e["data"].clone()).collect();
    assert_eq!(data.len(), 3);
    assert_eq!(data[0]["v"], 2, "{}", data[0]);
    assert_eq!(data[0]["on_resolve"], "", "the ask with an empty on_resolve stays an ask");
    assert!(data[0].get("ask").is_none(), "shape 2 has no ask flag: {}", data[0]);
    assert_eq!(data[1]["on_resolve"], "/hermit:pin-node {answer}");
    assert_eq!(data[2]["on_resolve"], Value::Null);
    let scope = "hermit:/srv/hermit/state";
    let ledger = at(&["--scope", scope, "proposals", "ledger"]).json();
    let kinds: Vec<&Value> =
        ledger["ledger"].as_array().unwrap().iter().map(|l| &l["kind"]).collect();
    assert_eq!(kinds, [&json!("ask"), &json!("ask"), &Value::Null], "{ledger}");
    let queue = at(&["--scope", scope, "proposals", "queue"]).json();
    let skills: Vec<&Value> =
        queue["pending"].as_array().unwrap().iter().map(|e| &e["on_resolve"]).collect();
    assert_eq!(skills, [&Value::Null, &json!("/hermit:pin-node {answer}"), &Value::Null]);
    // A new write of the kind is stored at shape 2 (record version 5); the old ones keep theirs.
    let dir = store.dir.path().join("hermit");
    std::fs::create_dir_all(&dir).unwrap();
    let new_scope = format!("hermit:{}", dir.display());
    let payload = br#"{"question":"New?","on_resolve":""}"#;
    old_store_run(&target, &["--scope", &new_scope, "proposals", "queue-micro"], payload).expect(0);
    let records: Vec<String> = lines(&at(&["dump"]).stdout)[1..]
        .iter()
        .map(|l| l["record"].as_str().unwrap()[..8].to_owned())
        .collect();
    // The restored records keep their named envelope (a map of 5, `v` = 2); the new one is
    // written positionally: an array of 5 holding record version 5 (a later shape, 8 bytes of its
    // hash), seq 4, then the prev hash.
    assert_eq!(records, ["85a17602", "85a17602", "85a17602", "950504c4"]);
    assert_eq!(at(&["verify"]).json()["ok"], true);
}

/// `copy` of a compacted store starts from its base: it walked the log from seq 1 and failed with
/// "chain broken" (exit 5) for the events the compaction had dropped.
#[test]
fn compact_then_copy_starts_the_copy_from_the_base_and_the_copy_compacts_again() {
    let store = written();
    store.run(&["checkpoint"]).expect(0);
    store.run(&["compact", "--keep", "0"]).expect(0);
    store.run(&["counter", "add", "c"]).expect(0);
    let head = store.run(&["verify"]).expect(0).json();
    let to = store.dir.path().join("copy.redb");
    let from = store.db().display().to_string();
    let copied = store.run(&["copy", "--from", &from, "--to", to.to_str().unwrap()]).expect(0);
    assert_eq!(copied.json()["events"], 2, "the checkpoint's record and the add: {copied:?}");
    let verified = super::run_in(&to, &["verify"]).expect(0).json();
    assert_eq!((&verified["seq"], &verified["hash"]), (&head["seq"], &head["hash"]));
    assert_eq!(verified["from_checkpoint"], head["from_checkpoint"], "{verified}");
    for read in [&["kv", "get", "k"][..], &["counter", "get", "c"][..], &["stats"][..]] {
        let (a, b) = (store.run(read).expect(0).json(), super::run_in(&to, read).expect(0).json());
        assert_eq!(a["value"], b["value"], "{read:?}: {a} {b}");
    }
    // The checkpoint came along: the copy takes the next one and compacts again.
    super::run_in(&to, &["checkpoint"]).expect(0);
    super::run_in(&to, &["compact", "--keep", "0"]).expect(0);
    super::run_in(&to, &["verify"]).expect(0);
}

/// A checkpoint of an empty log covers no event: `compact` after it drops nothing and records no
/// base, so `dump` still holds the log (a base at seq 0 once made it refuse the store as
/// compacted). `backup` and `doctor` take no `--at-seq`: a backup of an older seq under the
/// store's id would be a rollback waiting to be put back.
#[test]
fn compact_of_an_empty_checkpoint_keeps_the_log_dumpable_and_backup_takes_no_at_seq() {
    let store = Store::new();
    store.run(&["init"]).expect(0);
    store.run(&["checkpoint"]).expect(0);
    let compacted = store.run(&["compact"]).expect(0).json();
    assert_eq!(
        (compacted["dropped"].as_u64(), compacted["log_starts_after"].as_u64()),
        (Some(0), Some(0))
    );
    let dump = store.run(&["dump"]).expect(0);
    assert_eq!(dump.stdout.lines().count(), 2, "the header and the checkpoint's event: {dump:?}");
    let to = store.dir.path().join("old.redb");
    let run = store.run(&["--at-seq", "0", "backup", "--to", to.to_str().unwrap()]).expect(64);
    assert!(run.stderr.contains("backup copies the store as it is"), "{run:?}");
    assert!(!to.exists());
    store.run(&["--at-seq", "0", "doctor"]).expect(64);
    // Nor does restore: it restored the whole dump under --at-seq and --as-of (exit 0).
    let file = store.dir.path().join("d.jsonl");
    std::fs::write(&file, &dump.stdout).unwrap();
    let from = file.to_str().unwrap();
    for at in [["--at-seq", "0"], ["--as-of", "2026-01-01T00:00:00Z"]] {
        let run = super::run_in(&to, &[at[0], at[1], "restore", "--from", from]).expect(64);
        assert!(run.stderr.contains("restore makes the whole dump's store"), "{run:?}");
        assert!(!to.exists());
    }
}

/// An export never writes into the store's own directory or its anchor directory, where a file
/// name of the layout (`--name`) can be the store's, its anchor's or the anchors' file: `export
/// --layout loopd --to <store's dir> --name state.redb` wrote the layout's JSON over the store
/// (exit 0, every event gone). Refused (exit 3), every file left as it was.
#[test]
fn an_export_into_the_stores_own_or_anchor_directory_is_refused() {
    let store = Store::new();
    let anchors = tempfile::tempdir().unwrap();
    let anchor_dir = anchors.path().to_str().unwrap();
    store.run(&["--anchor-dir", anchor_dir, "kv", "put", "k", "1"]).expect(0);
    let before = store.snapshot();
    let anchored = super::support::tree(anchors.path());
    let own = store.dir.path().to_str().unwrap();
    let dot = format!("{own}/.");
    for (to, name) in [(own, "state.redb"), (own, "state.redb.head"), (dot.as_str(), "x.json")] {
        let run = store.run(&["export", "--layout", "loopd", "--to", to, "--name", name]);
        let run = run.expect(3);
        assert!(run.stderr.contains("the store's own directory"), "{run:?}");
    }
    let name = std::fs::read_dir(anchors.path()).unwrap().next().unwrap().unwrap().file_name();
    let name = name.to_str().unwrap();
    let args = ["--anchor-dir", anchor_dir, "export", "--layout", "observer", "--to", anchor_dir];
    let run = store.run(&[&args[..], &["--name", name]].concat()).expect(3);
    assert!(run.stderr.contains("anchor directory"), "{run:?}");
    assert_eq!(store.snapshot(), before, "the store's files are as they were");
    assert_eq!(super::support::tree(anchors.path()), anchored, "the anchors are as they were");
    store.run(&["--anchor-dir", anchor_dir, "verify"]).expect(0);
    let elsewhere = store.dir.path().join("out");
    let to = elsewhere.to_str().unwrap();
    store.run(&["export", "--layout", "loopd", "--to", to, "--name", "state.redb"]).expect(0);
}
