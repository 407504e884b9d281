//! The bad-input suite (RELIABILITY.md A9): about sixty enumerated bad inputs (ids, JSON on
//! stdin, numbers, flags, refusals, a held lock), each run under
//! `prlimit --as=512 MiB --cpu=5 --nofile=64`, must exit with its documented code and one stderr
//! line, within a second, without a panic, and leave the whole scratch tree (store, anchor, hermit
//! state directory) byte-identical, with nothing created. Refusals (exit 1) and the held lock
//! (exit 4) open the store for writing, and redb rewrites its header when a writer opens and
//! closes, so for them "identical" is logical, as RELIABILITY.md A9 says: the same file names,
//! the same anchor and hermit files, the same log, and `verify` (views equal a rebuild) giving the
//! same head.
//!
//! Each run's peak RSS is measured with GNU time (`max_rss_mb` in the figures line).
//!
//! The disk-full case runs the CLI on a tiny tmpfs mounted inside an unprivileged user and mount
//! namespace (`unshare`), filled up first: a real ENOSPC in the middle of a commit must exit 6
//! with one stderr line, print no acknowledgement, and leave a store whose log is unchanged and
//! that verifies; the same put then succeeds once space is back. `prlimit --fsize` is not used
//! for it: the kernel's SIGXFSZ kills the process before it can report (exit 153), unless the
//! caller ignores SIGXFSZ, in which case the write fails with EFBIG and the CLI exits 6.
//!
//! Does not cover the other environment cases (symlinked or shared store paths, a read-only
//! store, damaged files): `perms.rs` and `damaged.rs` do. Skips with a printed reason when
//! `prlimit` (or, for the disk-full case, `unshare` or GNU time) is absent.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use crate::support::{tree, Tree};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hookstate_engine::limits::{JSON_DEPTH_MAX, STDIN_BYTES_MAX};

/// Address-space cap of each run: 512 MiB.
const AS_BYTES: u64 = 512 * 1024 * 1024;
/// CPU-seconds cap of each run.
const CPU_SECS: u64 = 5;
/// Open-files cap of each run.
const NOFILE: u64 = 64;
/// Every case must finish within this.
const CASE_MS_MAX: u128 = 1_000;
/// The lock wait of the held-lock case.
const LOCK_WAIT_MS: &str = "200";
/// The parser's nesting limit (serde_json's default recursion limit), to go one past.
const SERDE_DEPTH_LIMIT: usize = 128;

const USAGE: i32 = 64;
const CONFLICT: i32 = 1;
const INVALID: i32 = 3;
const BUSY: i32 = 4;

/// One bad input: its name, the arguments after `--db DB`, stdin, and the exit code it must get.
struct Case {
    name: String,
    args: Vec<OsString>,
    stdin: Option<Vec<u8>>,
    want: i32,
}

fn case(name: &str, args: &[&str], stdin: Option<&[u8]>, want: i32) -> Case {
    Case {
        name: name.to_owned(),
        args: args.iter().map(OsString::from).collect(),
        stdin: stdin.map(<[u8]>::to_vec),
        want,
    }
}

/// The logical state: every name and every file except the store's bytes, the whole log, and
/// what `verify` reports (head, event and view counts). `verify` opens the store for writing,
/// so redb may rewrite its header.
fn logical(root: &Path, db: &Path) -> (Tree, Vec<u8>, Vec<u8>) {
    let mut files = tree(root);
    if let Some(entry) = files.get_mut(db) {
        entry.1.clear();
    }
    let exe = env!("CARGO_BIN_EXE_hookstate");
    let out = |verb: &str| Command::new(exe).arg("--db").arg(db).arg(verb).output().unwrap().stdout;
    (files, out("log"), out("verify"))
}

fn cases(hermit: &Path) -> Vec<Case> {
    let mut all = Vec::new();
    for id in hookstate_testkit::bad_ids() {
        all.push(case(&format!("kv id {:.12?}", id), &["kv", "put", &id, "1"], None, INVALID));
    }
    all.push(case("queue id ../x", &["queue", "claim", "../x"], None, INVALID));
    all.push(case("id -x after --", &["kv", "put", "--", "-x", "1"], None, INVALID));
    all.push(case("id --force after --", &["kv", "put", "--", "--force", "1"], None, INVALID));
    all.push(Case {
        name: "id non-UTF-8".into(),
        args: vec!["kv".into(), "put".into(), OsString::from_vec(b"f\xffo".to_vec()), "1".into()],
        stdin: None,
        want: USAGE,
    });

    let over_cap = [b"\"".as_slice(), &vec![b'a'; STDIN_BYTES_MAX - 1], b"\""].concat();
    let deep_serde =
        format!("{}{}", "[".repeat(SERDE_DEPTH_LIMIT + 1), "]".repeat(SERDE_DEPTH_LIMIT + 1));
    let deep_ours = format!(
        "{}{}",
        "{\"a\":".repeat(JSON_DEPTH_MAX + 1),
        "1".to_owned() + &"}".repeat(JSON_DEPTH_MAX + 1)
    );
    let stdin_cases: [(&str, &[u8]); 16] = [
        ("empty", b""),
        ("1 byte over the cap", &over_cap),
        ("nesting over 128", deep_serde.as_bytes()),
        ("nesting over our depth limit", deep_ours.as_bytes()),
        ("number above f64", b"1e400"),
        ("NaN", b"NaN"),
        ("Infinity", b"Infinity"),
        ("invalid UTF-8", b"\"\xff\xfe\""),
        ("BOM", b"\xef\xbb\xbf{}"),
        ("trailing garbage", b"{} x"),
        ("two objects", b"{\"a\":1}{\"b\":2}"),
        ("two objects spaced", b"{} {}"),
        ("trailing comma", b"[1,]"),
        ("unclosed", b"{"),
        ("raw NUL in a string", b"\"a\0b\""),
        ("raw control char", b"\"a\x01b\""),
    ];
    for (name, bytes) in stdin_cases {
        all.push(case(
            &format!("stdin {name}"),
            &["kv", "put", "k", "--stdin"],
            Some(bytes),
            INVALID,
        ));
    }
    let dir = hermit.to_str().unwrap();
    let micro = ["proposals", "--dir", dir, "queue-micro"];
    for (name, bytes) in [
        ("duplicate key", b"{\"tier\":1,\"question\":\"n1\",\"question\":\"n2\"}".as_slice()),
        ("wrong type", b"{\"tier\":\"t1\",\"question\":\"n3\"}"),
        ("missing field", b"{\"tier\":1}"),
        ("tier above u64", b"{\"tier\":18446744073709551616,\"question\":\"n4\"}"),
    ] {
        all.push(case(&format!("micro {name}"), &micro, Some(bytes), INVALID));
    }

    let above_u64 = "18446744073709551616";
    all.push(case("counter delta above u64", &["counter", "add", "c", above_u64], None, USAGE));
    all.push(case(
        "token above u64",
        &["queue", "ack", "q", "a", "--token", above_u64],
        None,
        USAGE,
    ));
    all.push(case(
        "max-deliveries above u64",
        &["queue", "push", "q", "b", "--max-deliveries", above_u64],
        None,
        USAGE,
    ));
    all.push(case(
        "max-deliveries 0",
        &["queue", "push", "q", "b", "--max-deliveries", "0"],
        None,
        INVALID,
    ));
    all.push(case("lease 0", &["queue", "claim", "q", "--lease-ms", "0"], None, INVALID));
    all.push(case("list cap 0", &["list", "append", "l", "1", "--cap", "0"], None, INVALID));
    all.push(case(
        "wait over the limit",
        &["--wait-ms", "99999999", "kv", "get", "k"],
        None,
        INVALID,
    ));
    all.push(case("empty scope", &["--scope", "", "kv", "get", "k"], None, INVALID));

    all.push(case("unknown command", &["frobnicate"], None, USAGE));
    all.push(case("unknown flag", &["kv", "get", "k", "--bogus"], None, USAGE));
    all.push(case("missing argument", &["kv", "put", "k"], None, USAGE));
    all.push(case("missing verb", &["queue"], None, USAGE));
    all.push(case(
        "repeated flag",
        &["kv", "put", "k", "2", "--expect-rev", "1", "--expect-rev", "2"],
        None,
        USAGE,
    ));
    all.push(case(
        "repeated --db",
        &["--db", "/nonexistent/x.redb", "kv", "get", "k"],
        None,
        USAGE,
    ));
    all.push(case(
        "conflicting flags",
        &["kv", "put", "k", "2", "--create", "--expect-rev", "1"],
        None,
        USAGE,
    ));
    all.push(case("bad format", &["--format", "xml", "stats"], None, USAGE));

    all.push(case(
        "claim held by another",
        &["queue", "claim", "q", "--item", "a", "--holder", "h2"],
        None,
        CONFLICT,
    ));
    all.push(case(
        "release by a stale token",
        &["queue", "release", "q", "a", "--token", "99"],
        None,
        CONFLICT,
    ));
    all.push(case("compact before any checkpoint", &["compact"], None, CONFLICT));
    all.push(case(
        "create over an existing key",
        &["kv", "put", "k", "2", "--create"],
        None,
        CONFLICT,
    ));
    all.push(case(
        "micro already pending",
        &micro,
        Some(b"{\"tier\":1,\"question\":\"q\"}"),
        CONFLICT,
    ));
    all.extend(alerts_cases(dir));
    all.extend(caller_cases(dir));
    all
}

/// The ids every event carries (--session, --agent, --idem-key) are refused by every verb
/// family before anything is read or written, and an export's --name before the store is
/// opened (an export once opened it as a writer, whose close rewrote the file).
fn caller_cases(dir: &str) -> Vec<Case> {
    let out = format!("{dir}/exported");
    let micro = Some(b"{\"tier\":1,\"question\":\"other\"}".as_slice());
    vec![
        case(
            "session with a space, alerts",
            &["--session", "a b", "alerts", "--dir", dir, "count-tick"],
            None,
            INVALID,
        ),
        case(
            "agent with a space, observer",
            &["--agent", "bad agent", "--scope", "observer:s", "observer", "turn"],
            None,
            INVALID,
        ),
        case(
            "idempotency key with a space, proposals",
            &["--idem-key", "bad key", "proposals", "--dir", dir, "queue-micro"],
            micro,
            INVALID,
        ),
        case(
            "idempotency key with a space, a read",
            &["--idem-key", "a b", "kv", "get", "k"],
            None,
            INVALID,
        ),
        case(
            "session with a control character, checkpoint",
            &["--session", "a\u{1}b", "checkpoint"],
            None,
            INVALID,
        ),
        case(
            "export --name ..",
            &[
                "--scope",
                "observer:s",
                "export",
                "--layout",
                "observer",
                "--to",
                &out,
                "--name",
                "..",
            ],
            None,
            INVALID,
        ),
    ]
}

/// The heartbeat half of `alerts`: bad flags and stdin exit 3 before the store is opened;
/// refusals exit 1 and append nothing.
fn alerts_cases(dir: &str) -> Vec<Case> {
    let alerts = |name: &str, args: &[&str], stdin: Option<&[u8]>, want: i32| {
        let full: Vec<&str> =
            ["alerts", "--dir", dir].into_iter().chain(args.iter().copied()).collect();
        case(name, &full, stdin, want)
    };
    let record = ["budget", "record", "--period", "weekly", "--cap", "5"];
    let with = |extra: [&'static str; 2]| -> Vec<&'static str> {
        record.iter().copied().chain(extra).collect()
    };
    vec![
        alerts("alerts budget level", &with(["--level=loud", "--spend=1"]), None, INVALID),
        alerts("alerts budget spend NaN", &with(["--level=warn", "--spend=NaN"]), None, INVALID),
        alerts(
            "alerts budget spend negative",
            &with(["--level=warn", "--spend=-1"]),
            None,
            INVALID,
        ),
        alerts("alerts injection hash", &["injection", "check", "XYZ"], None, INVALID),
        alerts("alerts next-task empty", &["next-task", "queue"], Some(b""), INVALID),
        alerts("alerts runtime field", &["runtime", "set", "a\nb=1"], None, INVALID),
        alerts(
            "alerts liveness wait",
            &["monitor", "start-commit", "t", "--plugin-root", "/p", "--liveness-wait-ms", "10001"],
            None,
            INVALID,
        ),
        alerts(
            "alerts monitor interval",
            &["monitor", "start-check", "--plugin-root", "/p", "--interval", "604801"],
            None,
            INVALID,
        ),
        alerts(
            "alerts monitor boot id",
            &["monitor", "start-check", "--plugin-root", "/p", "--boot-id", "a\tb"],
            None,
            INVALID,
        ),
        alerts("alerts mark unknown key", &["budget", "mark-notified", "budget-x"], None, CONFLICT),
        alerts("alerts ack disabled", &["next-task", "ack", "0123"], None, CONFLICT),
    ]
}

/// Measures each run's peak resident set (GNU time's `%M`, in KiB) when present.
const GNU_TIME: &str = "/usr/bin/time";

/// What one run gave: exit code, stderr, wall time, peak RSS in KiB (when measured).
struct Ran {
    code: i32,
    stderr: String,
    took: Duration,
    max_rss_kib: Option<u64>,
}

/// The last line of GNU time's output file, `%M` (earlier lines may report the exit status).
fn read_max_rss(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().last()?.trim().parse().ok()
}

fn run(db: &Path, case: &Case, rss_file: Option<&Path>) -> Ran {
    let start = Instant::now();
    let mut command = match rss_file {
        Some(file) => {
            let _ = std::fs::remove_file(file);
            let mut time = Command::new(GNU_TIME);
            time.args(["-f", "%M", "-o"]).arg(file).arg("prlimit");
            time
        }
        None => Command::new("prlimit"),
    };
    let mut child = command
        .arg(format!("--as={AS_BYTES}"))
        .arg(format!("--cpu={CPU_SECS}"))
        .arg(format!("--nofile={NOFILE}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(db)
        .args(&case.args)
        .env_remove("HOOKSTATE_SESSION")
        .env_remove("HOOKSTATE_SCOPE")
        .env_remove("HOOKSTATE_DB")
        .stdin(if case.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = &case.stdin {
        let mut pipe = child.stdin.take().unwrap();
        let _ = pipe.write_all(bytes);
    }
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
        max_rss_kib: rss_file.and_then(read_max_rss),
    }
}

fn setup(db: &Path, hermit: &Path) {
    let exe = env!("CARGO_BIN_EXE_hookstate");
    for args in [
        vec!["kv", "put", "k", "1"],
        vec!["queue", "push", "q", "a"],
        vec!["queue", "claim", "q", "--holder", "h1"],
    ] {
        let out = Command::new(exe).arg("--db").arg(db).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let mut child = Command::new(exe)
        .arg("--db")
        .arg(db)
        .args(["proposals", "--dir", hermit.to_str().unwrap(), "queue-micro"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"{\"tier\":1,\"question\":\"q\"}").unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_inputs_get_their_exit_code_and_leave_the_store_byte_identical() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        println!("badinput skipped: prlimit (util-linux) is not installed");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let store_dir = scratch.path().join("store");
    let hermit = scratch.path().join("hermit");
    for dir in [&store_dir, &hermit] {
        std::fs::DirBuilder::new().mode(0o700).create(dir).unwrap();
    }
    let db = store_dir.join("state.redb");
    setup(&db, &hermit);
    let mut all = cases(&hermit);
    all.push(case(
        "held lock",
        &["--wait-ms", LOCK_WAIT_MS, "queue", "push", "q", "c"],
        None,
        BUSY,
    ));
    // GNU time writes its figure outside the scratch tree, which must stay unchanged.
    let rss_dir = tempfile::tempdir().unwrap();
    let rss_path = rss_dir.path().join("max_rss");
    let rss_file = Path::new(GNU_TIME).exists().then_some(rss_path.as_path());
    let mut max_rss_kib: Option<u64> = None;
    let logical_before = logical(scratch.path(), &db);
    let mut before = tree(scratch.path());
    let (mut wrong_exit, mut db_changed, mut panics, mut max_ms) = (0, 0, 0, 0);
    let mut compared_logically = 0;
    let mut problems = Vec::new();
    for case in &all {
        let held = (case.want == BUSY).then(|| {
            let database = redb::Database::builder()
                .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
                .open(&db)
                .unwrap();
            let txn = database.begin_write().unwrap();
            (database, txn)
        });
        let Ran { code, stderr, took, max_rss_kib: rss } = run(&db, case, rss_file);
        if rss_file.is_some() && rss.is_none() {
            problems.push(format!("{}: {GNU_TIME} reported no max RSS", case.name));
        }
        max_rss_kib = max_rss_kib.max(rss);
        if let Some((database, txn)) = held {
            txn.abort().unwrap();
            drop(database);
        }
        max_ms = max_ms.max(took.as_millis());
        let name = &case.name;
        if code == 101 || stderr.contains("internal error") {
            panics += 1;
            problems.push(format!("{name}: panicked: {stderr}"));
        }
        if code != case.want {
            wrong_exit += 1;
            problems.push(format!("{name}: exit {code}, want {}: {stderr}", case.want));
        }
        if stderr.lines().count() != 1 || !stderr.starts_with("hookstate: ") {
            problems.push(format!("{name}: stderr is not one line: {stderr:?}"));
        }
        if took.as_millis() > CASE_MS_MAX {
            problems.push(format!("{name}: took {took:?}"));
        }
        let opens_for_writing = case.want == CONFLICT || case.want == BUSY;
        compared_logically += u32::from(opens_for_writing);
        let changed = if opens_for_writing {
            let changed = logical(scratch.path(), &db) != logical_before;
            // `verify` opens the store for writing too: the bytes to compare against move on.
            before = tree(scratch.path());
            changed
        } else {
            tree(scratch.path()) != before
        };
        if changed {
            db_changed += 1;
            problems.push(format!("{name}: the store or the state directory changed"));
            break;
        }
    }
    println!(
        "badinput cases={} wrong_exit={wrong_exit} db_changed={db_changed} panics={panics} \
         max_ms={max_ms} max_rss_mb={} compared_logically={compared_logically} \
         limits=as:{}MiB,cpu:{CPU_SECS}s,nofile:{NOFILE}",
        all.len(),
        max_rss_kib.map_or_else(
            || format!("unmeasured(no {GNU_TIME})"),
            |k| format!("{:.1}", k as f64 / 1024.0)
        ),
        AS_BYTES >> 20
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The disk-full case, run inside a user and mount namespace (`unshare`, no privilege needed) on
/// a private tmpfs: the store is copied in, a filler file takes every free page, and a put of a
/// value near the cap must fail with a real ENOSPC. `$OUT/codes` gets one exit code per line:
/// the put on a full disk, then `log`, `verify` and the same put again once the filler is gone.
const DISK_FULL_SCRIPT: &str = r#"
set -e
mount -t tmpfs -o "size=$SIZE,mode=0700" tmpfs "$MNT"
cp -a "$SRC/." "$MNT/"
dd if=/dev/zero of="$MNT/filler" bs=4096 2>/dev/null || true
set +e
"$TIME" -f %M -o "$OUT/max_rss" prlimit --as="$AS" --cpu="$CPU" --nofile="$NOFILE" -- \
    "$EXE" --db "$MNT/state.redb" kv put big --stdin <"$BIG" >"$OUT/stdout" 2>"$OUT/stderr"
echo $? >"$OUT/codes"
rm -f "$MNT/filler"
"$EXE" --db "$MNT/state.redb" log >"$OUT/log" 2>&1
echo $? >>"$OUT/codes"
"$EXE" --db "$MNT/state.redb" verify >"$OUT/verify" 2>&1
echo $? >>"$OUT/codes"
"$EXE" --db "$MNT/state.redb" kv put big --stdin <"$BIG" >"$OUT/again" 2>&1
echo $? >>"$OUT/codes"
"#;
/// The tmpfs size: far above the small store, so only the filler makes the disk full.
const DISK_FULL_TMPFS: &str = "8m";
/// The value put on the full disk: one that needs new pages.
const DISK_FULL_VALUE_BYTES: usize = 60_000;
/// The documented exit code for disk, permission and space errors.
const IO: i32 = 6;

#[test]
fn a_full_disk_exits_6_with_one_line_and_the_store_still_verifies() {
    let probe =
        Command::new("unshare").args(["--user", "--map-root-user", "--mount", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) || !Path::new(GNU_TIME).exists() {
        println!("enospc skipped: no unprivileged user+mount namespace (unshare) or {GNU_TIME}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let (store, mnt, out) =
        (scratch.path().join("store"), scratch.path().join("mnt"), scratch.path().join("out"));
    for dir in [&store, &mnt, &out] {
        std::fs::DirBuilder::new().mode(0o700).create(dir).unwrap();
    }
    let exe = env!("CARGO_BIN_EXE_hookstate");
    let db = store.join("state.redb");
    let put = Command::new(exe).arg("--db").arg(&db).args(["kv", "put", "k", "1"]).output();
    assert!(put.unwrap().status.success());
    let log_before = Command::new(exe).arg("--db").arg(&db).arg("log").output().unwrap().stdout;
    let big = scratch.path().join("big.json");
    std::fs::write(&big, format!("\"{}\"", "x".repeat(DISK_FULL_VALUE_BYTES))).unwrap();
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", DISK_FULL_SCRIPT])
        .env("SIZE", DISK_FULL_TMPFS)
        .env("MNT", &mnt)
        .env("SRC", &store)
        .env("OUT", &out)
        .env("EXE", exe)
        .env("BIG", &big)
        .env("TIME", GNU_TIME)
        .env("AS", AS_BYTES.to_string())
        .env("CPU", CPU_SECS.to_string())
        .env("NOFILE", NOFILE.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the disk-full script failed: {status}");
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let codes: Vec<i32> = read("codes").lines().map(|l| l.trim().parse().unwrap()).collect();
    let stderr = read("stderr");
    let log_after = std::fs::read(out.join("log")).unwrap();
    let max_rss_kib = read_max_rss(&out.join("max_rss"));
    println!(
        "enospc exit={} stderr_lines={} stdout_bytes={} log_unchanged={} verify_exit={} \
         same_put_with_space_exit={} max_rss_kib={max_rss_kib:?} stderr={:?}",
        codes[0],
        stderr.lines().count(),
        read("stdout").len(),
        log_after == log_before,
        codes[2],
        codes[3],
        stderr.trim_end()
    );
    assert_eq!(codes.len(), 4, "{codes:?}");
    assert_eq!(codes[0], IO, "a full disk must exit {IO}: {stderr}");
    assert!(
        stderr.lines().count() == 1 && stderr.starts_with("hookstate: "),
        "stderr is not one line: {stderr:?}"
    );
    assert!(stderr.contains("No space left on device"), "not an ENOSPC: {stderr:?}");
    assert!(read("stdout").is_empty(), "a failed put printed an acknowledgement");
    assert_eq!(codes[1], 0, "log after the full disk: {}", read("log"));
    assert_eq!(log_after, log_before, "the failed put changed the log");
    assert_eq!(codes[2], 0, "verify after the full disk: {}", read("verify"));
    // The control: with space back, the very same put succeeds, so the failure was the disk.
    assert_eq!(codes[3], 0, "the same put with space failed: {}", read("again"));
}

/// An export reads the store and never writes it: the store's files are byte-identical after
/// exports of every layout that reads from the store's own file (it had opened the store as a
/// writer, whose close rewrote and shrank the file).
#[test]
fn an_export_leaves_the_store_byte_identical() {
    let store = crate::Store::new();
    let hermit = tempfile::tempdir().unwrap();
    let dir = hermit.path().to_str().unwrap();
    store.run(&["kv", "put", "k", "1"]).expect(0);
    store.run(&["--scope", "observer:s", "observer", "turn"]).expect(0);
    let micro = b"{\"tier\":1,\"question\":\"q\"}".as_slice();
    store.run_with_stdin(&["proposals", "--dir", dir, "queue-micro"], Some(micro)).expect(0);
    let before = store.snapshot();
    let out = tempfile::tempdir().unwrap();
    let to = |name: &str| out.path().join(name).to_str().unwrap().to_owned();
    let scope = format!("hermit:{dir}");
    for args in [
        vec!["--scope", "observer:s", "export", "--layout", "observer", "--to", &to("observer")],
        vec!["export", "--layout", "loopd", "--to", &to("loopd")],
        vec!["--scope", &scope, "export", "--layout", "hermit-proposals", "--to", &to("hermit")],
    ] {
        let run = store.run(&args).expect(0);
        assert_eq!(run.json()["ok"], true, "{args:?}: {run:?}");
        assert!(store.snapshot() == before, "{args:?} changed the store's files");
    }
    assert!(out.path().join("observer/claude-management.json").is_file());
    assert!(out.path().join("loopd/loopd.json").is_file());
}
