//! End-to-end tests of the `hookstate` binary: one test per exit code, bad input leaving the
//! store byte-identical, the help's exit table, and eight real processes racing on one queue.
//!
//! Does not call the engine in-process except to tamper with or lock a store, as an outside
//! process would.
#![allow(clippy::unwrap_used, reason = "integration tests fail loudly on any unexpected error")]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod alerts;
mod badinput;
mod damaged;
mod dropin;
mod feedback;
mod feedback_mirror;
mod firstuse;
mod heartbeat;
mod integrity;
mod integrity_idem;
mod integrity_paths;
mod killloop;
mod linearize;
mod ops;
mod perms;
mod plugin;
mod proposals;
mod served;
mod session;
mod support;
mod usage;

/// One run of the binary: its exit code, stdout and stderr.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    /// Asserts the exit code and that stderr is exactly one line (or empty on success).
    fn expect(self, code: i32) -> Run {
        assert_eq!(self.code, code, "{self:?}");
        if code == 0 {
            assert!(self.stderr.is_empty(), "{self:?}");
        } else {
            assert_eq!(self.stderr.lines().count(), 1, "one stderr line: {self:?}");
            assert!(self.stderr.starts_with("hookstate: "), "{self:?}");
        }
        self
    }
}

/// A scratch directory holding one store.
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        Store { dir: tempfile::tempdir().unwrap() }
    }

    /// The store: the file `state.redb` in the scratch directory, or on the PostgreSQL run of
    /// the backend matrix a schema of the test database named after it.
    fn db(&self) -> PathBuf {
        hookstate_testkit::store(&self.dir.path().join("state.redb"))
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    fn run_with_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .arg("--db")
            .arg(self.db())
            .args(args)
            .env_remove("HOOKSTATE_SESSION")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            let _ = pipe.write_all(bytes);
        }
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Every file in the store's directory with its bytes: "byte-identical" means equal snapshots.
    fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
            })
            .collect()
    }
}

#[test]
fn exit_0_done_with_an_ack_line_carrying_seq_and_hash() {
    let store = Store::new();
    let out = store.run(&["queue", "push", "q", "a", "{\"n\":1}"]).expect(0).json();
    assert_eq!(out["ok"], true);
    assert_eq!(out["seq"], 1);
    assert_eq!(out["hash"].as_str().unwrap().len(), 64);
    let claim = store.run(&["--session", "s1", "queue", "claim", "q"]).expect(0).json();
    assert_eq!((claim["item"].as_str(), claim["token"].as_u64()), (Some("a"), Some(1)));
    assert_eq!(claim["payload"]["n"], 1);
    assert_eq!(claim["holder"], "s1");
}

#[test]
fn exit_1_refused_for_a_stale_token_and_a_held_item() {
    let store = Store::new();
    store.run(&["queue", "push", "q", "a"]).expect(0);
    store.run(&["queue", "claim", "q", "--holder", "h1"]).expect(0);
    let held = store.run(&["queue", "claim", "q", "--item", "a", "--holder", "h2"]).expect(1);
    assert_eq!(held.json()["refused"], "held");
    assert!(held.stderr.contains("held by h1"), "{held:?}");
    let stale = store.run(&["queue", "ack", "q", "a", "--token", "7"]).expect(1);
    assert_eq!(stale.json()["refused"], "stale_token");
    store.run(&["queue", "ack", "q", "a", "--token", "1"]).expect(0);
    store.run(&["kv", "put", "k", "1", "--create"]).expect(0);
    assert_eq!(
        store.run(&["kv", "put", "k", "2", "--create"]).expect(1).json()["refused"],
        "exists"
    );
    let mismatch = store.run(&["kv", "put", "k", "2", "--expect-rev", "5"]).expect(1).json();
    assert_eq!(
        (mismatch["refused"].as_str(), mismatch["rev"].as_u64()),
        (Some("rev_mismatch"), Some(1))
    );
}

#[test]
fn exit_64_usage_errors_are_one_line() {
    let store = Store::new();
    store.run(&["frobnicate"]).expect(64);
    store.run(&["queue", "claim"]).expect(64);
    store.run(&["kv", "put", "k"]).expect(64);
    store.run(&["kv", "put", "k", "1", "--create", "--expect-rev", "1"]).expect(64);
    store.run(&["--format", "xml", "stats"]).expect(64);
    assert!(!store.db().exists(), "a usage error created the store");
}

/// A variable that stands for a flag, set to an empty string (`HOOKSTATE_DB=$UNSET` in a hook's
/// command), failed every call with clap's line for a flag the caller never gave, even beside
/// that flag. Beside its flag it is dropped now; alone it is refused naming the variable.
#[test]
fn exit_64_an_empty_variable_is_named_and_ignored_beside_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let anchors = dir.path().join("anchors");
    std::fs::create_dir(&anchors).unwrap();
    let run = |env: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .env(env, "")
            .env("HOME", dir.path())
            .env_remove("HOOKSTATE_SESSION")
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let db_text = db.to_str().unwrap();
    assert_eq!(
        run("HOOKSTATE_DB", &["--db", db_text, "counter", "add", "c"]),
        (Some(0), "".into())
    );
    let other = dir.path().join("other.redb");
    let (other, anchors) = (other.to_str().unwrap(), anchors.to_str().unwrap());
    let with_flag = ["--db", other, "--anchor-dir", anchors, "counter", "add", "c"];
    assert_eq!(run("HOOKSTATE_ANCHOR_DIR", &with_flag), (Some(0), "".into()));
    let line =
        "hookstate: usage: HOOKSTATE_WAIT_MS is set but empty: give it a value, or unset it\n";
    assert_eq!(
        run("HOOKSTATE_WAIT_MS", &["--db", db_text, "counter", "add", "c"]),
        (Some(64), line.into())
    );
    let (code, stderr) = run("HOOKSTATE_DB", &["counter", "add", "c"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("HOOKSTATE_DB is set but empty"), "{stderr}");
}

#[test]
fn exit_3_invalid_ids_and_stdin_leave_the_store_byte_identical() {
    let store = Store::new();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    let before = store.snapshot();
    for id in &hookstate_testkit::bad_ids() {
        let run = store.run(&["kv", "put", id, "1"]);
        assert_eq!(run.code, 3, "id {id:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "id {id:?}: {run:?}");
        assert!(!run.stderr.contains('\u{1b}'), "escape echoed raw: {run:?}");
        let claim = store.run(&["queue", "claim", id]);
        assert_eq!(claim.code, 3, "queue {id:?}: {claim:?}");
    }
    for leading_dash in ["-x", "--force"] {
        let run = store.run(&["kv", "put", "--", leading_dash, "1"]);
        assert_eq!(run.code, 3, "{leading_dash}: {run:?}");
    }
    let over_cap = vec![b' '; 1024 * 1024 + 1];
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let bad_stdin: Vec<&[u8]> = vec![
        b"",
        b"{",
        b"{} {}",
        b"NaN",
        b"\xff\xfe",
        b"\xef\xbb\xbf{}",
        &over_cap,
        deep.as_bytes(),
        b"[1,]",
    ];
    for input in bad_stdin {
        let run = store.run_with_stdin(&["kv", "put", "k", "--stdin"], Some(input));
        assert_eq!(
            run.code,
            3,
            "stdin {:?}: {run:?}",
            String::from_utf8_lossy(&input[..input.len().min(20)])
        );
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    }
    // A directory as stdin cannot be read: bad stdin too, for a value and for a hook payload.
    for args in [&["kv", "put", "k", "--stdin"][..], &["hook", "stop"][..]] {
        let dir = std::fs::File::open(store.dir.path()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .args(["--db", store.db().to_str().unwrap()])
            .args(args)
            .env("HOME", store.dir.path())
            .env_remove("HOOKSTATE_SESSION")
            .stdin(Stdio::from(dir))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("hookstate: stdin cannot be read: "), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    store.run(&["queue", "push", "q", "a", "--max-deliveries", "0"]).expect(3);
    store.run(&["queue", "claim", "q", "--lease-ms", "0"]).expect(3);
    store.run(&["list", "append", "l", "1", "--cap", "0"]).expect(3);
    store.run(&["--scope", "", "kv", "get", "k"]).expect(3);
    assert_eq!(store.snapshot(), before, "bad input changed the store");
}

#[test]
fn exit_3_stdin_flood_stops_at_the_cap() {
    let store = Store::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", store.db().to_str().unwrap(), "kv", "put", "k", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let chunk = vec![b'7'; 1 << 20];
    let start = Instant::now();
    let mut sent = 0usize;
    while sent < 100 << 20 && pipe.write_all(&chunk).is_ok() {
        sent += chunk.len();
    }
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(sent < 100 << 20, "the whole 100 MiB was read ({sent} bytes)");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn exit_4_busy_when_the_write_lock_is_held_past_wait_ms() {
    let store = Store::new();
    store.run(&["queue", "push", "q", "a"]).expect(0);
    let db = redb::Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(store.db())
        .unwrap();
    let held = db.begin_write().unwrap();
    let start = Instant::now();
    let run = store.run(&["--wait-ms", "300", "queue", "claim", "q"]).expect(4);
    let waited = start.elapsed();
    assert!(run.stderr.contains("busy"), "{run:?}");
    assert!(waited >= Duration::from_millis(300), "gave up after {waited:?}");
    assert!(waited < Duration::from_secs(5), "hung for {waited:?}");
    drop(held);
    drop(db);
    store.run(&["queue", "claim", "q"]).expect(0);
}

/// Rewrites event `seq` of a closed store through redb, keeping the file consistent.
fn rewrite_event(db: &Path, seq: u64) {
    use hookstate_schema::format;
    use redb::ReadableTable;
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(format::LOG_TABLE);
    let database = redb::Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(db)
        .unwrap();
    let txn = database.begin_write().unwrap();
    {
        let mut log = txn.open_table(table).unwrap();
        let mut event = format::decode_event(log.get(seq).unwrap().unwrap().value()).unwrap();
        event.content.scope = "forged".into();
        let (record, _) = format::encode_event(seq, &event.prev, &event.content);
        log.insert(seq, record.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn exit_5_verify_names_the_first_bad_seq_of_a_rewritten_event() {
    let store = Store::new();
    for n in 0..6 {
        store.run(&["counter", "add", "c", &n.to_string()]).expect(0);
    }
    store.run(&["verify"]).expect(0);
    rewrite_event(&store.db(), 3);
    let run = store.run(&["verify"]).expect(5);
    assert!(run.stderr.contains("chain broken at seq 4"), "{run:?}");
    assert_eq!(run.json()["first_bad_seq"], 4);
    // A copy that stops at the break leaves nothing at its target: it made an empty store there
    // first, under the source's id, which verified clean and refused the next copy.
    let to = store.dir.path().join("copy.redb");
    let from = store.db().display().to_string();
    let copy = store.run(&["copy", "--from", &from, "--to", to.to_str().unwrap()]).expect(5);
    assert!(copy.stderr.contains("chain broken at seq 4"), "{copy:?}");
    let left: Vec<_> = std::fs::read_dir(store.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("copy"))
        .collect();
    assert!(left.is_empty(), "a failed copy left {left:?}");
}

#[test]
fn exit_5_flipped_file_bytes_without_a_panic() {
    let store = Store::new();
    for n in 0..20 {
        store.run(&["kv", "put", &format!("k{n}"), &n.to_string()]).expect(0);
    }
    let clean = std::fs::read(store.db()).unwrap();
    let mut seen_corrupt = 0;
    for (case, at) in (0..clean.len()).step_by(clean.len() / 24).enumerate() {
        let mut bytes = clean.clone();
        for offset in 0..64.min(bytes.len() - at) {
            bytes[at + offset] ^= 0xa5;
        }
        std::fs::write(store.db(), &bytes).unwrap();
        let run = store.run(&["verify"]);
        assert!(run.code == 0 || run.code == 5, "case {case} at {at}: {run:?}");
        assert!(!run.stderr.contains("internal error"), "case {case} panicked: {run:?}");
        seen_corrupt += i32::from(run.code == 5);
    }
    assert!(seen_corrupt > 0, "no damaged file was reported corrupt");
}

#[test]
fn exit_5_a_panic_is_one_line() {
    let store = Store::new();
    let run = store.run(&["__panic"]).expect(5);
    assert!(run.stderr.contains("internal error"), "{run:?}");
}

#[test]
fn exit_6_io_for_no_store_and_an_unusable_path() {
    let store = Store::new();
    let run = store.run(&["verify"]).expect(6);
    assert!(run.stderr.contains("no store"), "{run:?}");
    std::fs::write(store.dir.path().join("file"), b"x").unwrap();
    let under_file = store.dir.path().join("file/state.redb");
    let run = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", under_file.to_str().unwrap(), "kv", "put", "k", "1"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(6), "{run:?}");
    let link = store.dir.path().join("link.redb");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", link.to_str().unwrap(), "kv", "put", "k", "1"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(6), "{run:?}");
    assert!(String::from_utf8_lossy(&run.stderr).contains("symlink"));
}

#[test]
fn help_and_readme_carry_the_same_exit_table() {
    let store = Store::new();
    let help = store.run(&["--help"]).expect(0).stdout;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    for (code, name) in [
        (0, "OK"),
        (1, "CONFLICT"),
        (3, "INVALID"),
        (4, "BUSY"),
        (5, "CORRUPT"),
        (6, "IO"),
        (64, "USAGE"),
    ] {
        assert!(help.contains(&format!("  {code:<4} {name}")), "help lacks {code} {name}");
        assert!(readme.contains(&format!("| {code} | {name} |")), "README lacks {code} {name}");
    }
}

#[test]
fn eight_processes_racing_on_one_queue_never_double_claim() {
    const ITEMS: usize = 120;
    const WORKERS: usize = 8;
    let store = Store::new();
    for n in 0..ITEMS {
        store.run(&["queue", "push", "q", &format!("i{n}")]).expect(0);
    }
    let db = store.db();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut claims = Vec::new();
                loop {
                    let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
                        .args(["--db", db.to_str().unwrap(), "--session", &format!("w{w}")])
                        .args(["queue", "claim", "q", "--lease-ms", "600000"])
                        .output()
                        .unwrap();
                    assert_eq!(out.status.code(), Some(0), "{out:?}");
                    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
                    if json["claimed"] != true {
                        return claims;
                    }
                    claims.push((
                        json["item"].as_str().unwrap().to_owned(),
                        json["token"].as_u64().unwrap(),
                        w,
                    ));
                }
            })
        })
        .collect();
    let claims: Vec<(String, u64, usize)> =
        workers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let items: BTreeSet<&str> = claims.iter().map(|c| c.0.as_str()).collect();
    let tokens: BTreeSet<u64> = claims.iter().map(|c| c.1).collect();
    println!(
        "race: workers={WORKERS} items={ITEMS} claims={} distinct_items={} double_claims={}",
        claims.len(),
        items.len(),
        claims.len() - items.len()
    );
    assert_eq!(claims.len(), ITEMS, "every item claimed exactly once");
    assert_eq!(items.len(), ITEMS, "no item claimed twice");
    assert_eq!(tokens.len(), ITEMS, "no token handed out twice");
    let verify = store.run(&["verify"]).expect(0).json();
    assert_eq!(verify["events"], ITEMS as u64 * 2);
    let listed = store.run(&["queue", "list", "q"]).expect(0).json();
    assert_eq!(listed["claimed"], ITEMS as u64);
}

#[test]
fn concurrent_first_use_creates_one_store() {
    let store = Store::new();
    let db = store.dir.path().join("fresh/state.redb");
    let children: Vec<_> = (0..8)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_hookstate"))
                .args(["--db", db.to_str().unwrap(), "set", "add", "s", &format!("m{n}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let verify = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", db.to_str().unwrap(), "verify"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(report["events"], 8, "every writer's event is in the one store: {report}");
    let leftovers: Vec<_> = std::fs::read_dir(store.dir.path().join("fresh"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "only the store and its anchor remain: {leftovers:?}");
}

/// `queue list` judges a lease by the test clock a call pins, as the claims do: it judged by the
/// wall clock, so a lease of a pinned past read as expired at once.
#[test]
fn queue_list_judges_leases_by_the_pinned_clock() {
    let store = Store::new();
    let at = |ms: u64, args: &[&str]| {
        let ms = ms.to_string();
        let mut all = vec!["--now-ms", ms.as_str()];
        all.extend_from_slice(args);
        store.run(&all).expect(0).json()
    };
    at(1_000_000, &["queue", "push", "q", "i"]);
    at(1_000_000, &["queue", "claim", "q", "--lease-ms", "1000"]);
    let expired = |ms| at(ms, &["queue", "list", "q"])["items"][0]["expired"].clone();
    assert_eq!(expired(1_000_500), false);
    assert_eq!(expired(1_002_000), true);
}

#[test]
fn set_counter_list_and_log_verbs_work_from_a_shell() {
    let store = Store::new();
    assert_eq!(store.run(&["set", "add", "alerts", "disk-full"]).expect(0).json()["added"], true);
    assert_eq!(store.run(&["set", "add", "alerts", "disk-full"]).expect(0).json()["added"], false);
    assert_eq!(store.run(&["set", "has", "alerts", "disk-full"]).expect(0).json()["present"], true);
    assert_eq!(store.run(&["counter", "add", "turns", "-3"]).expect(0).json()["value"], -3);
    assert_eq!(store.run(&["counter", "get", "turns"]).expect(0).json()["value"], -3);
    for n in 0..5 {
        store.run(&["list", "append", "rows", &n.to_string(), "--cap", "3"]).expect(0);
    }
    assert_eq!(
        store.run(&["list", "get", "rows"]).expect(0).json()["rows"],
        serde_json::json!([2, 3, 4])
    );
    let log = store.run(&["log", "--kind", "list_appended", "--tail", "2"]).expect(0);
    let seqs: Vec<u64> = log
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [6, 7]);
    let stats = store.run(&["stats"]).expect(0).json();
    assert_eq!(stats["events"], 7);
    let text = store.run(&["--format", "text", "counter", "get", "turns"]).expect(0);
    assert_eq!(text.stdout, "name:  turns\nvalue: -3\nok:    true\n", "{text:?}");
}

#[test]
fn read_verbs_never_write_a_byte() {
    let store = Store::new();
    store.run(&["queue", "push", "q", "a", "{\"n\":1}"]).expect(0);
    store.run(&["kv", "put", "k", "[1,2]"]).expect(0);
    let before = store.snapshot();
    for args in [
        &["kv", "get", "k"][..],
        &["queue", "list", "q"],
        &["counter", "get", "c"],
        &["set", "has", "s", "m"],
        &["list", "get", "l"],
        &["log"],
        &["stats"],
    ] {
        store.run(args).expect(0);
    }
    assert_eq!(store.snapshot(), before, "a read verb changed the store");
    assert_eq!(store.run(&["kv", "get", "k"]).expect(0).json()["value"], serde_json::json!([1, 2]));
}

/// Runs `hookstate --db DB` with `args`, no stdin, and the caller's session and scope variables
/// cleared.
fn run_in(db: &Path, args: &[&str]) -> Run {
    let out = support::hookstate(db).args(args).stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `hookstate` with `args` and `stdin`, returning its exit code and stdout.
fn run_with(db: &Path, args: &[&str], stdin: &str) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        // Shown with the test's output when it fails: which call, and what it said.
        eprintln!(
            "{args:?} exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn concurrent_turn_complete_and_session_start_lose_nothing_and_the_newest_pm_wins() {
    const SESSIONS: usize = 5;
    const TURNS: usize = 4;
    const PMS: usize = 4;
    let store = Store::new();
    let root = store.dir.path();
    for d in ["bundle", "repo/.git/worktrees/task", "wt/task"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("bundle/instance.config.json"), "{}").unwrap();
    std::fs::write(root.join("wt/task/.git"), "gitdir: ../../repo/.git/worktrees/task\n").unwrap();
    std::fs::write(root.join("repo/.git/worktrees/task/commondir"), "../..\n").unwrap();
    let bundle = root.join("bundle").to_str().unwrap().to_owned();
    std::fs::write(root.join("repo/.git/loopd-bundle"), &bundle).unwrap();
    let cwd = root.join("wt/task").to_str().unwrap().to_owned();
    let db = store.db();
    let mut threads = Vec::new();
    for s in 0..SESSIONS {
        let (db, cwd) = (db.clone(), cwd.clone());
        threads.push(std::thread::spawn(move || {
            for _ in 0..TURNS {
                let payload =
                    format!("{{\"session_id\":\"role-{s}\",\"cwd\":\"{cwd}\",\"duration_ms\":5}}");
                assert_eq!(run_with(&db, &["hook", "turn-complete"], &payload).0, 0);
            }
        }));
    }
    let (pm_db, pm_bundle) = (db.clone(), bundle.clone());
    threads.push(std::thread::spawn(move || {
        for p in 0..PMS {
            let payload = format!("{{\"session_id\":\"pm-{p}\",\"cwd\":\"{pm_bundle}\"}}");
            assert_eq!(run_with(&pm_db, &["hook", "session-start"], &payload).0, 0);
        }
    }));
    for thread in threads {
        thread.join().unwrap();
    }
    let list = store.run(&["signals", "list", "--bundle", &bundle]).expect(0).json();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), SESSIONS);
    for s in sessions {
        assert_eq!(s["record"]["turns"], TURNS as u64, "{s}");
    }
    let log = store.run(&["log", "--kind", "turn_signaled"]).expect(0);
    assert_eq!(log.stdout.lines().count(), SESSIONS * TURNS, "every turn kept as history");
    let registrations = store.run(&["log", "--kind", "pm_registered"]).expect(0);
    let last: Value = serde_json::from_str(registrations.stdout.lines().last().unwrap()).unwrap();
    let pm = store.run(&["signals", "pm", "--bundle", &bundle]).expect(0).json();
    assert_eq!(pm["pm"]["current"]["session"], last["body"]["pm"], "the newest registration wins");
    assert_eq!(pm["pm"]["history"].as_array().unwrap().len(), PMS - 1);
    store.run(&["verify"]).expect(0);
}

#[test]
fn turn_complete_prints_the_pm_line_only_when_there_is_someone_to_tell() {
    let store = Store::new();
    let root = store.dir.path();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::write(root.join("b/instance.config.json"), "{}").unwrap();
    std::fs::create_dir_all(root.join("wt")).unwrap();
    std::fs::create_dir_all(root.join("g")).unwrap();
    std::fs::write(root.join("wt/.git"), format!("gitdir: {}\n", root.join("g").display()))
        .unwrap();
    std::fs::write(root.join("g/loopd-bundle"), root.join("b").to_str().unwrap()).unwrap();
    let db = store.db();
    let cwd = root.join("wt").to_str().unwrap().to_owned();
    let turn = format!(
        "{{\"session_id\":\"r\",\"cwd\":\"{cwd}\",\"duration_ms\":7,\"reason\":\"answer\"}}"
    );
    assert_eq!(run_with(&db, &["hook", "turn-complete"], &turn), (0, String::new()), "no PM yet");
    let start = format!("{{\"session_id\":\"pm\",\"cwd\":\"{}\"}}", root.join("b").display());
    assert_eq!(run_with(&db, &["hook", "session-start"], &start), (0, String::new()));
    let (code, line) = run_with(&db, &["--format", "text", "hook", "turn-complete"], &turn);
    assert_eq!(code, 0);
    assert_eq!(
        line.trim_end(),
        format!(
            "loopd-signal: role session r finished a turn in {cwd} (reason answer, 7 ms) — settle \
             it first at step 4 of a /loopd:dispatch tick; this line orders the sweep and decides \
             nothing"
        )
    );
    let sub = format!("{{\"session_id\":\"r\",\"cwd\":\"{cwd}\",\"agent_id\":\"x\"}}");
    assert_eq!(run_with(&db, &["hook", "turn-complete"], &sub), (0, String::new()), "subagent");
    let none = format!("{{\"cwd\":\"{cwd}\"}}");
    assert_eq!(run_with(&db, &["hook", "turn-complete"], &none), (0, String::new()), "no session");
    assert_eq!(run_with(&db, &["hook", "turn-complete"], "{").0, 3, "a broken payload");
}

#[test]
fn concurrent_observer_appends_keep_every_row() {
    const WRITERS: usize = 6;
    const ROWS: usize = 5;
    let store = Store::new();
    let db = store.db();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for r in 0..ROWS {
                    let row = format!("{{\"kind\":\"user\",\"text\":\"w{w}-r{r}\"}}");
                    assert_eq!(
                        run_with(&db, &["--scope", "observer:s", "observer", "append"], &row).0,
                        0
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let state = store.run(&["--scope", "observer:s", "observer", "state"]).expect(0).json();
    let rows: BTreeSet<&str> = state["state"]["buffer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), WRITERS * ROWS, "no row lost to a concurrent append");
}

/// A bundle root `b` and a worktree `wt` pointing at it, under `root`.
fn loopd_layout(root: &Path) -> (String, String) {
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::write(root.join("b/instance.config.json"), "{}").unwrap();
    std::fs::create_dir_all(root.join("wt")).unwrap();
    std::fs::create_dir_all(root.join("g")).unwrap();
    std::fs::write(root.join("wt/.git"), format!("gitdir: {}\n", root.join("g").display()))
        .unwrap();
    std::fs::write(root.join("g/loopd-bundle"), root.join("b").to_str().unwrap()).unwrap();
    (root.join("b").to_str().unwrap().to_owned(), root.join("wt").to_str().unwrap().to_owned())
}

#[test]
fn loopd_mirror_writes_through_adopts_outside_changes_and_reports_a_conflict_once() {
    let store = Store::new();
    let (bundle, cwd) = loopd_layout(store.dir.path());
    let mirror = store.dir.path().join("mirror");
    let m = mirror.to_str().unwrap();
    let db = store.db();
    let turn = |s: &str| format!("{{\"session_id\":\"{s}\",\"cwd\":\"{cwd}\",\"duration_ms\":1}}");
    assert_eq!(run_with(&db, &["--mirror", m, "hook", "turn-complete"], &turn("r1")).0, 0);
    let exported = store.dir.path().join("exported");
    store.run(&["export", "--layout", "loopd", "--to", exported.to_str().unwrap()]).expect(0);
    let mirrored = std::fs::read(mirror.join("loopd.json")).unwrap();
    assert_eq!(mirrored, std::fs::read(exported.join("loopd.json")).unwrap(), "write-through");

    let mut file: serde_json::Map<String, Value> = serde_json::from_slice(&mirrored).unwrap();
    file.insert(
        format!("loopd.pm.{bundle}"),
        serde_json::json!({ "sessionId": "pm-x", "at": "2026-01-01T00:00:00.000Z" }),
    );
    std::fs::write(mirror.join("loopd.json"), serde_json::to_vec(&file).unwrap()).unwrap();
    let (code, out) = run_with(&db, &["--mirror", m, "hook", "turn-complete"], &turn("r1"));
    assert_eq!(code, 0);
    assert!(out.contains("\"to\":\"pm-x\""), "the outside PM was adopted first: {out}");

    // The store changes r1 without the mirror; the file changes r1 too: a conflict.
    assert_eq!(run_with(&db, &["hook", "turn-complete"], &turn("r1")).0, 0);
    let mut file: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(mirror.join("loopd.json")).unwrap()).unwrap();
    file.insert("loopd.signal.r1".into(), serde_json::json!({ "bundle": bundle, "cwd": cwd, "at": "x", "turns": 99, "durationMs": 0, "reason": "r", "isAborted": false, "delivered": null }));
    std::fs::write(mirror.join("loopd.json"), serde_json::to_vec(&file).unwrap()).unwrap();
    let delivered = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .args(["--db", db.to_str().unwrap()])
            .args(args)
            .args(["signals", "delivered", "r1", "--bundle", &bundle, "--turn-seq", "1"])
            .output()
            .unwrap()
    };
    let out = delivered(&["--mirror", m]);
    assert_eq!(out.status.code(), Some(0), "a conflict never fails the call: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopd.signal.r1"), "the conflict is reported: {stderr}");
    let file: Value =
        serde_json::from_slice(&std::fs::read(mirror.join("loopd.json")).unwrap()).unwrap();
    assert_ne!(file["loopd.signal.r1"]["turns"], 99, "the store's record is kept and written back");
    let again = delivered(&["--mirror", m]);
    assert_eq!(again.status.code(), Some(0));
    assert!(again.stderr.is_empty(), "reported once: {again:?}");
    store.run(&["verify"]).expect(0);
}

/// Issue 11's loopd loss: a legacy writer that read `loopd.json` before a newer PM registered,
/// then wrote its stale copy back with a key of its own, was adopted as a new registration of the
/// old PM (the acknowledged one reverted). The PM's registration stamp orders them: the stale
/// copy's older PM is a reported conflict, its own key is adopted.
#[test]
fn regression_11_a_stale_loopd_rewrite_never_reverts_an_acknowledged_pm() {
    let store = Store::new();
    let (bundle, cwd) = loopd_layout(store.dir.path());
    let mirror = store.dir.path().join("mirror");
    let m = mirror.to_str().unwrap();
    let db = store.db();
    let start = |s: &str, now: &str| {
        let payload = format!("{{\"session_id\":\"{s}\",\"cwd\":\"{bundle}\"}}");
        run_with(&db, &["--now-ms", now, "--mirror", m, "hook", "session-start"], &payload).0
    };
    assert_eq!(start("pm-old", "1789377123000"), 0);
    let stale: Value =
        serde_json::from_slice(&std::fs::read(mirror.join("loopd.json")).unwrap()).unwrap();
    assert_eq!(start("pm-new", "1789377124000"), 0);
    let mut rewrite = stale.as_object().unwrap().clone();
    rewrite.insert("legacy.own".into(), serde_json::json!(7));
    std::fs::write(mirror.join("loopd.json"), serde_json::to_vec(&rewrite).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", db.to_str().unwrap(), "--mirror", m, "signals", "pm", "--bundle", &bundle])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A read does not adopt; the next mirrored write (a role session's turn) does.
    let turn = format!("{{\"session_id\":\"role-1\",\"cwd\":\"{cwd}\",\"duration_ms\":1}}");
    let args = ["--now-ms", "1789377125000", "--mirror", m, "hook", "turn-complete"];
    assert_eq!(run_with(&db, &args, &turn).0, 0);
    let pm = store.run(&["signals", "pm", "--bundle", &bundle]).expect(0).json();
    assert_eq!(pm["pm"]["current"]["session"], "pm-new", "the acknowledged PM stays: {pm}");
    let file: Value =
        serde_json::from_slice(&std::fs::read(mirror.join("loopd.json")).unwrap()).unwrap();
    assert_eq!(file["legacy.own"], 7, "the outside key is adopted and written back");
    assert_eq!(file[format!("loopd.pm.{bundle}")]["sessionId"], "pm-new");
    store.run(&["verify"]).expect(0);
}

/// The observer scope `observer:s` of `store`, mirrored into `<dir>/mirror`.
struct ObserverMirror<'a> {
    store: &'a Store,
    dir: PathBuf,
}

impl ObserverMirror<'_> {
    /// The mirror, after one mirrored row (`hi`), and the state file it wrote.
    fn new(store: &Store) -> (ObserverMirror<'_>, PathBuf, Value) {
        let mirror = ObserverMirror { store, dir: store.dir.path().join("mirror") };
        assert_eq!(mirror.append("user", "hi"), 0);
        let path = mirror.dir.join("claude-management.json");
        let state = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        (mirror, path, state)
    }

    /// A mirrored `observer append` of one row; its exit code.
    fn append(&self, kind: &str, text: &str) -> i32 {
        let m = self.dir.to_str().unwrap();
        let append = ["--scope", "observer:s", "--mirror", m, "observer", "append"];
        let row = serde_json::json!({ "kind": kind, "text": text }).to_string();
        run_with(&self.store.db(), &append, &row).0
    }

    /// `observer state` of the scope.
    fn state(&self) -> Value {
        self.store.run(&["--scope", "observer:s", "observer", "state"]).expect(0).json()
    }
}

#[test]
fn observer_mirror_adopts_a_state_written_outside() {
    let store = Store::new();
    let (mirror, path, mut state) = ObserverMirror::new(&store);
    assert_eq!(state["buffer"][0]["text"], "hi");
    state["pending"] = Value::String("written by an old hook".into());
    std::fs::write(&path, serde_json::to_string_pretty(&state).unwrap() + "\n").unwrap();
    assert_eq!(mirror.append("assistant", "yo"), 0);
    let now = mirror.state();
    assert_eq!(now["state"]["pending"], "written by an old hook");
    assert_eq!(now["state"]["buffer"].as_array().unwrap().len(), 2);
    let file: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(file, now["state"], "the mirror shows the adopted state and the new row");
}

/// An observer state file that is not one object holding every key is never taken as a state:
/// an import refuses an array (a derived struct read `[]` as a state of defaults, and an array by
/// position), and a mirrored call reports `{}` or a file missing keys as a conflict and keeps the
/// store's state, where it cleared `pending` (findings not yet delivered) and rewound
/// `inboxOffset`.
#[test]
fn observer_files_that_are_no_whole_state_are_not_taken_as_one() {
    let store = Store::new();
    let (mirror, path, mut state) = ObserverMirror::new(&store);
    state["pending"] = Value::String("findings".into());
    state["inboxOffset"] = Value::from(1184);
    std::fs::write(&path, serde_json::to_string_pretty(&state).unwrap() + "\n").unwrap();
    assert_eq!(mirror.append("user", "a"), 0);
    assert_eq!(mirror.state()["state"]["pending"], "findings", "the outside write was adopted");
    let mut partial = state.as_object().unwrap().clone();
    partial.remove("pending");
    for text in ["{}\n".to_owned(), serde_json::to_string(&partial).unwrap()] {
        std::fs::write(&path, &text).unwrap();
        assert_eq!(mirror.append("user", "b"), 0, "{text}");
        let now = mirror.state();
        assert_eq!(now["state"]["pending"], "findings", "{text}: {now}");
        assert_eq!(now["state"]["inboxOffset"], 1184, "{text}: {now}");
    }
    let m = mirror.dir.to_str().unwrap();
    for text in ["[]\n", "[[],7,1,0,[\"k\"],5,\"pend\"]\n"] {
        std::fs::write(mirror.dir.join("array.json"), text).unwrap();
        let import = ["--scope", "observer:t", "import", "--layout", "observer", "--from", m];
        let run = store.run(&[&import[..], &["--name", "array.json"]].concat()).expect(3);
        assert!(run.stderr.contains("not one JSON object"), "{run:?}");
    }
}

/// Adds `key: value` to the JSON object in `path`, as a writer that does not take the lock does.
fn write_outside(path: &Path, key: &str, value: Value) {
    let mut file: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file.insert(key.into(), value);
    std::fs::write(path, serde_json::to_vec(&file).unwrap()).unwrap();
}

/// An --idem-key names the verb's own write, never the loopd mirror's adoption of an outside
/// write: a keyed `signals delivered` right after an outside write to the mirrored file still
/// records the delivery and adopts the write, and its retry replays the delivery (adopting what
/// changed outside in between).
#[test]
fn an_idem_keyed_loopd_verb_through_a_mirror_that_adopts_an_outside_write_still_runs() {
    let store = Store::new();
    let (bundle, cwd) = loopd_layout(store.dir.path());
    let mirror = store.dir.path().join("mirror");
    let m = mirror.to_str().unwrap();
    let db = store.db();
    let turn = format!("{{\"session_id\":\"r1\",\"cwd\":\"{cwd}\",\"duration_ms\":1}}");
    assert_eq!(run_with(&db, &["--mirror", m, "hook", "turn-complete"], &turn).0, 0);
    let path = mirror.join("loopd.json");
    // An unmigrated hook registers a PM for the bundle: an event in the verb's own scope.
    let pm = format!("loopd.pm.{bundle}");
    let at = "2026-01-01T00:00:00.000Z";
    write_outside(&path, &pm, serde_json::json!({ "sessionId": "pm-x", "at": at }));
    let delivered = || {
        store.run(&[
            "--mirror",
            m,
            "--idem-key",
            "deliver-1",
            "signals",
            "delivered",
            "r1",
            "--bundle",
            &bundle,
            "--turn-seq",
            "1",
        ])
    };
    let first = delivered().expect(0).json();
    assert_ne!(first["replayed"], true, "{first}");
    let show = || store.run(&["signals", "show", "r1", "--bundle", &bundle]).expect(0).json();
    assert_eq!(show()["latest"]["delivered"], true, "the delivery landed: {first}");
    let exported = store.dir.path().join("exported");
    let export = || {
        store.run(&["export", "--layout", "loopd", "--to", exported.to_str().unwrap()]).expect(0);
        let text = std::fs::read(exported.join("loopd.json")).unwrap();
        serde_json::from_slice::<serde_json::Map<String, Value>>(&text).unwrap()
    };
    assert_eq!(export()[&pm]["sessionId"], "pm-x", "the outside write adopted");
    write_outside(&path, "other.plugin.k2", serde_json::json!({ "v": 2 }));
    let events = store.run(&["stats"]).expect(0).json()["events"].as_u64().unwrap();
    let retry = delivered().expect(0).json();
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(retry["result"], first["result"], "the retry replays the delivery: {retry}");
    assert_eq!(export()["other.plugin.k2"]["v"], 2, "the retry still adopts");
    let after = store.run(&["stats"]).expect(0).json()["events"].as_u64().unwrap();
    assert_eq!(after, events + 1, "the retry appends the adoption alone");
    store.run(&["verify"]).expect(0);
}

/// An --idem-key names the verb's own write, never the observer mirror's adoption of an outside
/// write: a keyed append right after an old hook wrote the mirrored state still appends its row
/// and adopts the state, and its retry replays the append.
#[test]
fn an_idem_keyed_observer_append_through_a_mirror_that_adopts_an_outside_write_still_appends() {
    let store = Store::new();
    let mirror = store.dir.path().join("mirror");
    let m = mirror.to_str().unwrap();
    let append = |key: Option<&str>, text: &str| {
        let mut args = vec!["--scope", "observer:s", "--mirror", m];
        if let Some(key) = key {
            args.extend(["--idem-key", key]);
        }
        args.extend(["observer", "append"]);
        let row = format!("{{\"kind\":\"user\",\"text\":\"{text}\"}}");
        store.run_with_stdin(&args, Some(row.as_bytes()))
    };
    append(None, "hi").expect(0);
    let path = mirror.join("claude-management.json");
    let outside = |pending: &str| {
        let mut state: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        state["pending"] = Value::String(pending.into());
        std::fs::write(&path, serde_json::to_string_pretty(&state).unwrap() + "\n").unwrap();
    };
    outside("written by an old hook");
    let first = append(Some("append-1"), "yo").expect(0).json();
    assert_ne!(first["replayed"], true, "{first}");
    let state = || store.run(&["--scope", "observer:s", "observer", "state"]).expect(0).json();
    let now = state();
    assert_eq!(now["state"]["pending"], "written by an old hook", "the outside write adopted");
    let texts = |v: &Value| -> Vec<String> {
        let rows = v["state"]["buffer"].as_array().unwrap();
        rows.iter().map(|r| r["text"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(texts(&now), ["hi", "yo"], "the append landed: {first}");
    outside("written again");
    let retry = append(Some("append-1"), "yo").expect(0).json();
    assert_eq!(retry["replayed"], true, "{retry}");
    let now = state();
    assert_eq!(texts(&now), ["hi", "yo"], "the retry appends nothing again");
    assert_eq!(now["state"]["pending"], "written again", "the retry still adopts");
    store.run(&["verify"]).expect(0);
}

#[test]
fn rebuild_removes_stale_temporary_files_of_killed_writers_only() {
    let store = Store::new();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    let stale = store.dir.path().join(".state.redb.head-0123456789abcdef");
    let fresh = store.dir.path().join(".state.redb.create-fedcba9876543210");
    let unrelated = store.dir.path().join(".state.redb.notes-0123456789abcdef");
    for path in [&stale, &fresh, &unrelated] {
        std::fs::write(path, b"x").unwrap();
    }
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for path in [&stale, &unrelated] {
        std::fs::File::options().write(true).open(path).unwrap().set_modified(old).unwrap();
    }
    let report = store.run(&["rebuild"]).expect(0).json();
    assert_eq!(report["stale_temps_removed"], 1);
    // The views were the log's already: nothing to write, nothing to remove.
    assert_eq!(
        (report["rows_written"].as_u64(), report["rows_removed"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(!stale.exists(), "an hour-old temporary file is a leftover");
    assert!(fresh.exists(), "a fresh one may belong to a live writer");
    assert!(unrelated.exists(), "a name that is not ours is never touched");
    store.run(&["verify"]).expect(0);
}

/// On Linux with glibc, `cli/build.rs` links gcc's unwinder statically when the C compiler has
/// `libgcc_eh.a`, so the binary names no `libgcc_s.so.1` to load (whose constructor costs every
/// call its `cpuid` instructions). Where the compiler has no such archive the binary links the
/// shared library as before, and this test says so and checks nothing.
#[test]
fn the_binary_loads_no_libgcc_s_where_the_compiler_has_a_static_unwinder() {
    const NEEDED: &[u8] = b"libgcc_s.so.1";
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        println!("unwinder: not linux-gnu, nothing to check");
        return;
    }
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let probe = Command::new(compiler).arg("-print-file-name=libgcc_eh.a").output();
    let archive = probe.map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if !archive.as_ref().is_ok_and(|path| path.is_absolute() && path.is_file()) {
        println!("unwinder: the C compiler has no libgcc_eh.a, nothing to check");
        return;
    }
    let binary = std::fs::read(env!("CARGO_BIN_EXE_hookstate")).unwrap();
    let named = binary.windows(NEEDED.len()).any(|window| window == NEEDED);
    println!("unwinder: archive={:?} binary_names_libgcc_s={named}", archive.unwrap());
    assert!(!named, "the binary still asks the loader for libgcc_s.so.1");
}
