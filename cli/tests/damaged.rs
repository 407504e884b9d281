//! Damaged stores through the binary (RELIABILITY.md A11): a directory, a FIFO, an empty file,
//! garbage and truncations at the store path. Every verb must end within a bound with exit 5
//! (corrupt) and one stderr line, never a panic, a hang or another code, and must leave the
//! damaged file byte-identical.
//!
//! Does not flip bits: `exit_5_flipped_file_bytes_without_a_panic` in `cli.rs` and the store
//! tests do that.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a call on a damaged store may take before it counts as a hang.
const CALL_MS_MAX: u64 = 10_000;
/// Poll interval while waiting for a call.
const POLL_MS: u64 = 5;
/// Bytes of seeded garbage.
const GARBAGE_BYTES: usize = 20_000;

/// A verb and whether it may succeed on a file truncated by one byte: read verbs open read-only
/// and read only the pages they need, so they do not see a missing tail; `verify` and writes check
/// the whole layout.
const VERBS: [(&[&str], bool); 5] = [
    (&["verify"], false),
    (&["kv", "put", "k", "2"], false),
    (&["queue", "claim", "q"], false),
    (&["kv", "get", "k"], true),
    (&["stats"], true),
];

/// Runs one call with a deadline; `None` if it hung and was killed.
fn run_bounded(db: &Path, args: &[&str]) -> Option<(i32, String)> {
    run_limited(db, args, None)
}

/// [`run_bounded`], the call's address space limited to `address_space_kib` when given (through
/// `sh`'s `ulimit -v`).
fn run_limited(db: &Path, args: &[&str], address_space_kib: Option<u64>) -> Option<(i32, String)> {
    let mut command = match address_space_kib {
        Some(kib) => {
            let mut sh = Command::new("sh");
            sh.arg("-c").arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""));
            sh.arg(env!("CARGO_BIN_EXE_hookstate"));
            sh
        }
        None => Command::new(env!("CARGO_BIN_EXE_hookstate")),
    };
    let mut child = command
        .arg("--db")
        .arg(db)
        .args(["--wait-ms", "1000"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(CALL_MS_MAX);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    let out = child.wait_with_output().unwrap();
    Some((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// A store with a few events and a large enough file to truncate in several places.
fn good_store(dir: &Path) -> Vec<u8> {
    let db = dir.join("good.redb");
    for n in 0..8 {
        let value = format!("\"{}\"", "x".repeat(2_000 + n));
        let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .arg("--db")
            .arg(&db)
            .args(["kv", "put", &format!("k{n}"), &value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    std::fs::read(&db).unwrap()
}

fn garbage(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x6761_7262_6167_6521;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// Snapshot of what sits at the path: the bytes of a regular file, or its kind.
fn snapshot(path: &Path) -> Vec<u8> {
    let kind = std::fs::symlink_metadata(path).unwrap().file_type();
    if kind.is_file() {
        std::fs::read(path).unwrap()
    } else if kind.is_fifo() {
        b"fifo".to_vec()
    } else {
        b"dir".to_vec()
    }
}

#[test]
fn damaged_stores_exit_5_without_a_panic_and_stay_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_store(dir.path());
    let half = good.len() / 2;
    let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("directory", None),
        ("fifo", None),
        ("empty", Some(Vec::new())),
        ("garbage", Some(garbage(GARBAGE_BYTES))),
        ("truncated_100", Some(good[..100].to_vec())),
        ("truncated_4k", Some(good[..4096].to_vec())),
        ("truncated_half", Some(good[..half].to_vec())),
        ("truncated_minus_1", Some(good[..good.len() - 1].to_vec())),
    ];
    let (mut runs, mut exit5, mut exit0, mut problems) = (0, 0, 0, Vec::new());
    for (name, bytes) in &cases {
        let path = dir.path().join(format!("{name}.redb"));
        match (name, bytes) {
            (&"directory", _) => std::fs::create_dir(&path).unwrap(),
            (&"fifo", _) => {
                let status = Command::new("mkfifo").arg(&path).status().unwrap();
                assert!(status.success(), "mkfifo failed");
            }
            (_, Some(bytes)) => std::fs::write(&path, bytes).unwrap(),
            (_, None) => unreachable!("every file case has bytes"),
        }
        let before = snapshot(&path);
        for (args, may_succeed_when_short_by_one) in VERBS {
            runs += 1;
            let Some((code, stderr)) = run_bounded(&path, args) else {
                problems.push(format!("{name} {args:?}: hung"));
                continue;
            };
            let may_succeed = may_succeed_when_short_by_one && *name == "truncated_minus_1";
            let ok_code = code == 5 || (code == 0 && may_succeed);
            let one_line = code == 0 || stderr.lines().count() == 1;
            if !ok_code || !one_line || stderr.contains("internal error") {
                problems.push(format!("{name} {args:?}: exit {code}: {stderr}"));
            }
            exit5 += i32::from(code == 5);
            exit0 += i32::from(code == 0);
            if snapshot(&path) != before {
                problems.push(format!("{name} {args:?}: the damaged file changed"));
            }
        }
    }
    println!(
        "damaged cases={} runs={runs} exit5={exit5} exit0={exit0} problems={}",
        cases.len(),
        problems.len()
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A store file the `db_file_bytes` fuzz target found (2026-12-01): a header whose region holds
/// 1,792 pages (every store is created with 2^20), so the commit slot's root page lies past the
/// end of its region. redb 4.6.0 met it in a `debug_assert!` (a debug binary's panic) or, in a
/// release binary, as a short read, and a writer's open first ran redb's crash recovery, which
/// rewrote a header flag, and then reached an `unreachable!()` inside redb's B-tree code. The
/// store's backend now refuses the header before redb reads anything it describes
/// (`store::bounded::check_header_roots`): every verb ends with exit 5 and one stderr line naming
/// the damage, and no verb changes the file.
const REDB_REGION_ASSERT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/damaged/redb-region-assert.redb");

#[test]
fn a_store_file_that_trips_a_redb_assertion_is_exit_5_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("assert.redb");
    for (args, _) in VERBS {
        std::fs::copy(REDB_REGION_ASSERT, &path).unwrap();
        let before = std::fs::read(&path).unwrap();
        let (code, stderr) = run_bounded(&path, args).expect("the call ended within its bound");
        assert_eq!(code, 5, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("damaged store file"), "{args:?}: {stderr}");
        assert!(stderr.contains("region geometry"), "{args:?}: {stderr}");
        assert!(!stderr.contains("I/O error"), "a damaged file is not a disk's error: {stderr}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "{args:?} changed the file");
    }
}

/// A store file the `db_file_bytes` fuzz target found (2026-12-01): a commit slot whose root page
/// number has order 20, a 4 GiB page in a 343-byte file. redb 4.6.0 allocates and zero-fills a
/// buffer of the page's size before it reads the page, so each call took 4 GiB for seconds, or
/// aborted (exit 134) where it could not; the store's backend now refuses the header before redb
/// reads the page (`store::bounded::check_header_roots`).
const REDB_PAGE_4GIB: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/damaged/redb-page-4gib.redb");
/// The address space each call gets (KiB), far below the 4 GiB buffer and far above what a call
/// on a small store needs.
const CALL_ADDRESS_SPACE_KIB: u64 = 1024 * 1024;

#[test]
fn a_store_file_naming_a_page_larger_than_itself_is_exit_5_without_the_page_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge-root.redb");
    let before = std::fs::read(REDB_PAGE_4GIB).unwrap();
    for (args, _) in VERBS {
        std::fs::write(&path, &before).unwrap();
        let (code, stderr) = run_limited(&path, args, Some(CALL_ADDRESS_SPACE_KIB))
            .expect("the call ended within its bound");
        assert_eq!(code, 5, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("damaged store file"), "{args:?}: {stderr}");
        assert!(stderr.contains("names a root page"), "{args:?}: {stderr}");
        assert!(!stderr.contains("I/O error"), "a damaged file is not a disk's error: {stderr}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "{args:?} changed the file");
    }
}
