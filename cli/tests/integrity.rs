//! Integrity under attack (issue 13), items 1 to 3, through the binary: a rolled-back or
//! swapped store and every kind of anchor edit are refused by writers, marked for readers and
//! never laundered; a missing anchor fails `verify` until accepted; a failed anchor write is one
//! line and a count; a second anchor catches a rollback of the store and its anchor together; a
//! damaged view row is never served and never written over; a damaged branch page is caught by
//! `verify` even after a write refreshed its checksum; `verify`'s page check beside its replay
//! fails a page no replay reads and answers a page redb panics on; an idempotency key is bound
//! to its request.
//!
//! The `anchor-ignored` drill must fail `a_rolled_back_store_...` and the `verify-scans-only`
//! drill must fail `a_damaged_branch_page_...` (scripts/drills.sh). Does not test paths, locks or
//! leftovers (`integrity_paths.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hookstate_schema::anchor_file::ANCHOR_FILE_BYTES;
use serde_json::Value;

use super::{Run, Store};

/// uid and gid of `nobody` on Debian-like systems.
const NOBODY: u32 = 65_534;

fn anchor_of(store: &Store) -> PathBuf {
    store.dir.path().join("state.redb.head")
}

/// The anchor line the anchor file of `store` says: its newest intact slot's.
fn anchor_line(store: &Store) -> String {
    let bytes = std::fs::read(anchor_of(store)).unwrap();
    match hookstate_schema::anchor_file::read_slots(&bytes) {
        hookstate_schema::anchor_file::Slotted::Newest { line, .. } => line,
        unusable => panic!("{unusable:?}"),
    }
}

/// A store with `a` put `n` times (seqs 1..=n).
fn store_with(n: u64) -> Store {
    let store = Store::new();
    for value in 1..=n {
        store.run(&["kv", "put", "a", &value.to_string()]).expect(0);
    }
    store
}

/// Asserts a call was refused with exit 5 and one line naming the anchor.
fn refused_for_the_anchor(run: &Run, what: &str) {
    assert_eq!(run.code, 5, "{what}: {run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {run:?}");
    assert!(run.stderr.contains("anchor"), "{what}: {run:?}");
}

/// Asserts a read was answered (exit 0) and marked: an `anchor_mismatch` field and one warning.
fn marked_read(run: &Run, what: &str) {
    assert_eq!(run.code, 0, "{what}: {run:?}");
    assert!(run.json()["anchor_mismatch"].is_string(), "{what}: {run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {run:?}");
}

/// Issue 13, item 1: an older `state.redb` copied over the store (its anchor kept) was served by
/// reads as if nothing happened, and every write was acknowledged on a forked seq until the log
/// passed the anchor and the anchor was overwritten: five acknowledged writes gone, `verify`
/// passing. Now reads are answered but marked, every write is refused (exit 5) and the anchor
/// stays, so `verify` keeps failing. Another store's file under this anchor is refused the same
/// way. The `anchor-ignored` drill must fail here.
#[test]
fn a_rolled_back_store_is_refused_by_every_writer_and_marked_for_readers() {
    let store = store_with(1);
    let old = std::fs::read(store.db()).unwrap();
    for value in 2..=4 {
        store.run(&["kv", "put", "a", &value.to_string()]).expect(0);
    }
    let anchor_before = std::fs::read(anchor_of(&store)).unwrap();
    std::fs::write(store.db(), &old).unwrap();

    let get = store.run(&["kv", "get", "a"]);
    marked_read(&get, "kv get");
    assert_eq!(get.json()["value"], 1, "the old value is what the file holds: {get:?}");
    // An as-of read answers from the same log: it was answered unmarked, vouched for by an
    // anchor of the memory store's own.
    marked_read(&store.run(&["--at-seq", "1", "kv", "get", "a"]), "kv get --at-seq");
    let mut accepted = 0;
    for value in 10..16 {
        let run = store.run(&["kv", "put", "a", &value.to_string()]);
        if run.code == 0 {
            accepted += 1;
        } else {
            refused_for_the_anchor(&run, "kv put on a rolled-back store");
        }
    }
    let laundered = std::fs::read(anchor_of(&store)).unwrap() != anchor_before;
    let verify = store.run(&["verify"]);
    println!(
        "integrity_rollback writes=6 accepted={accepted} laundered={} verify_code={}",
        u8::from(laundered),
        verify.code
    );
    assert_eq!(accepted, 0, "a write on a rolled-back store was acknowledged");
    assert!(!laundered, "the anchor was moved over the evidence");
    refused_for_the_anchor(&verify, "verify");

    let other = store_with(3);
    let swapped = store_with(3);
    std::fs::copy(other.db(), swapped.db()).unwrap();
    refused_for_the_anchor(&swapped.run(&["kv", "put", "a", "9"]), "another store's file");
    refused_for_the_anchor(&swapped.run(&["verify"]), "verify of another store's file");
}

/// `compact` and `rebuild` change the file without appending, and are refused as every write is
/// on a rolled-back store and on one whose anchor is gone (they once ran there, exit 0: compact
/// dropped the events a checkpoint covered, rebuild rewrote the views), with the file left as it
/// was. `copy` of such a store is marked as a read is, and `log` and `dump` warn.
#[test]
fn compact_and_rebuild_are_refused_on_a_rolled_back_or_unanchored_store() {
    let store = store_with(3);
    store.run(&["checkpoint"]).expect(0);
    let old = std::fs::read(store.db()).unwrap();
    store.run(&["kv", "put", "a", "4"]).expect(0);
    std::fs::write(store.db(), &old).unwrap();
    for verb in ["compact", "rebuild"] {
        refused_for_the_anchor(&store.run(&[verb]), verb);
        assert!(std::fs::read(store.db()).unwrap() == old, "{verb} changed the file");
    }
    let copy = store.dir.path().join("copy.redb");
    let from = store.db();
    let run =
        store.run(&["copy", "--from", from.to_str().unwrap(), "--to", copy.to_str().unwrap()]);
    marked_read(&run, "copy of a rolled-back store");
    // The lines of `log` and `dump` keep their shape; the warning is the one stderr line.
    for verb in ["log", "dump"] {
        let run = store.run(&[verb]);
        assert_eq!(run.code, 0, "{verb}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{verb}: {run:?}");
        assert!(run.stderr.contains("not vouched for by the anchor"), "{verb}: {run:?}");
    }

    let unanchored = store_with(3);
    unanchored.run(&["checkpoint"]).expect(0);
    std::fs::remove_file(anchor_of(&unanchored)).unwrap();
    let before = std::fs::read(unanchored.db()).unwrap();
    for verb in ["compact", "rebuild"] {
        refused_for_the_anchor(&unanchored.run(&[verb]), verb);
        assert!(std::fs::read(unanchored.db()).unwrap() == before, "{verb} changed the file");
    }
}

/// The line of the anchor of `store` and the hash of its seq-2 event.
fn anchor_and_hash_of_seq_2(store: &Store) -> (String, String) {
    let text = anchor_line(store);
    let log = store.run(&["log", "--from-seq", "2", "--to-seq", "2"]).expect(0);
    let hash = log.json()["hash"].as_str().unwrap().to_owned();
    (text, hash)
}

/// Replaces the `n`th space-separated field of an anchor line (0: magic … 4: hash).
fn with_field(text: &str, n: usize, value: &str) -> String {
    let mut fields: Vec<String> = text.trim_end().split(' ').map(str::to_owned).collect();
    fields[n] = value.to_owned();
    format!("{}\n", fields.join(" "))
}

fn flip_hex(hex: &str) -> String {
    let mut chars: Vec<char> = hex.chars().collect();
    chars[0] = if chars[0] == '0' { '1' } else { '0' };
    chars.into_iter().collect()
}

/// One edit of the anchor: what it writes at the anchor's path.
enum Edit {
    Text(String),
    Bytes(Vec<u8>),
    Directory,
    SymlinkToCopy,
}

/// The anchor edits an attacker (or a bad backup) makes, against a store at seq 3.
fn anchor_edits(text: &str, other_store_anchor: &str) -> Vec<(&'static str, Edit)> {
    use hookstate_schema::anchor_file::{encode_file, encode_slot, slot_offset};
    let field = |n: usize| text.trim_end().split(' ').nth(n).unwrap().to_owned();
    let store_changed = with_field(text, 2, &flip_hex(&field(2)));
    let mut two_stores = encode_file(text).unwrap();
    let other = encode_slot(other_store_anchor).unwrap();
    two_stores[slot_offset(1)..slot_offset(1) + other.len()].copy_from_slice(&other);
    vec![
        ("seq ahead", Edit::Text(with_field(text, 3, "4"))),
        ("seq behind with the head's hash", Edit::Text(with_field(text, 3, "2"))),
        ("seq zero with the head's hash", Edit::Text(with_field(text, 3, "0"))),
        ("hash changed", Edit::Text(with_field(text, 4, &flip_hex(&field(4))))),
        ("store id changed", Edit::Text(with_field(text, 2, &flip_hex(&field(2))))),
        ("another store's anchor", Edit::Text(other_store_anchor.to_owned())),
        ("magic changed", Edit::Text(with_field(text, 0, "hookstate-anker"))),
        ("version changed", Edit::Text(with_field(text, 1, "v2"))),
        ("truncated", Edit::Text(text[..text.len() / 2].to_owned())),
        ("empty", Edit::Text(String::new())),
        ("no final newline", Edit::Text(text.trim_end().to_owned())),
        ("two lines", Edit::Text(format!("{text}{text}"))),
        (
            "upper-case hex",
            Edit::Text(text.to_uppercase().replace("HOOKSTATE-ANCHOR V1", "hookstate-anchor v1")),
        ),
        ("seq with a leading zero", Edit::Text(with_field(text, 3, "03"))),
        ("binary garbage", Edit::Bytes(vec![0xff, 0xfe, 0x00, 0x9c, b'\n'])),
        ("oversized", Edit::Text(format!("{}{text}", " ".repeat(1024)))),
        ("a slotted file with no intact slot", Edit::Bytes(vec![0; ANCHOR_FILE_BYTES])),
        ("slotted, seq ahead", Edit::Bytes(encode_file(&with_field(text, 3, "4")).unwrap())),
        ("slotted, store id changed", Edit::Bytes(encode_file(&store_changed).unwrap())),
        ("slotted, one slot another store's", Edit::Bytes(two_stores)),
        ("a directory", Edit::Directory),
        ("a symlink to a copy of itself", Edit::SymlinkToCopy),
    ]
}

fn apply_edit(store: &Store, edit: &Edit, original: &str) {
    let path = anchor_of(store);
    match edit {
        Edit::Text(text) => std::fs::write(&path, text).unwrap(),
        Edit::Bytes(bytes) => std::fs::write(&path, bytes).unwrap(),
        Edit::Directory => {
            std::fs::remove_file(&path).unwrap();
            std::fs::create_dir(&path).unwrap();
        }
        Edit::SymlinkToCopy => {
            let copy = store.dir.path().join("copy.head");
            std::fs::write(&copy, original).unwrap();
            std::fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink(&copy, &path).unwrap();
        }
    }
}

/// What the anchor's path holds, to tell that nothing rewrote it.
fn anchor_state(path: &Path) -> (bool, Vec<u8>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = if meta.is_file() { std::fs::read(path).unwrap() } else { Vec::new() };
    (meta.file_type().is_symlink() || meta.is_dir(), bytes)
}

/// Issue 13, item 1: of 14 kinds of anchor edit, 12 were laundered by the first write. Now every
/// edit that does not describe this store's log exactly (22 kinds here, of the single line and
/// of the slotted file) refuses writes with exit 5
/// and one line, is left as it is, marks reads, and fails `verify`; an anchor that honestly lags
/// (seq 2 with seq 2's hash) is accepted and moved forward.
#[test]
fn every_kind_of_anchor_edit_refuses_writes_and_is_never_laundered() {
    let other = store_with(1);
    let other_anchor = anchor_line(&other);
    let probe = anchor_line(&store_with(3));
    let kinds = anchor_edits(&probe, &other_anchor).len();
    let mut problems = Vec::new();
    for index in 0..kinds {
        let store = store_with(3);
        let original = anchor_line(&store);
        let (name, edit) = anchor_edits(&original, &other_anchor).swap_remove(index);
        apply_edit(&store, &edit, &original);
        let before = anchor_state(&anchor_of(&store));
        let put = store.run(&["kv", "put", "a", "9"]);
        let get = store.run(&["kv", "get", "a"]);
        let verify = store.run(&["verify"]);
        let after = anchor_state(&anchor_of(&store));
        if put.code != 5 || put.stderr.lines().count() != 1 {
            problems.push(format!("{name}: kv put exit {}: {}", put.code, put.stderr));
        }
        if after != before {
            problems.push(format!("{name}: the anchor was rewritten"));
        }
        if get.code != 0 || !get.stdout.contains("anchor_mismatch") {
            problems.push(format!("{name}: kv get was not marked: {get:?}"));
        }
        if verify.code != 5 {
            problems.push(format!("{name}: verify exit {}", verify.code));
        }
    }
    println!("integrity_anchor_edits kinds={kinds} problems={}", problems.len());
    assert!(problems.is_empty(), "{problems:#?}");

    let lagging = store_with(3);
    let (text, hash) = anchor_and_hash_of_seq_2(&lagging);
    let honest = with_field(&with_field(&text, 3, "2"), 4, &hash);
    std::fs::write(anchor_of(&lagging), &honest).unwrap();
    lagging.run(&["kv", "put", "a", "9"]).expect(0);
    let moved = anchor_line(&lagging);
    assert!(moved.contains(" 4 "), "a lagging anchor moves forward: {moved}");
    lagging.run(&["verify"]).expect(0);
}

/// Issue 12 (a cheap call): a commit moves the anchor with one write into the other slot of the
/// same file, no temp file and no rename (the inode stays). A file with a second link (one
/// planted outside the store's directory, say) is never written through: it is replaced, and
/// the other name keeps its bytes.
#[test]
fn an_anchor_moves_in_place_and_a_hard_link_is_never_written_through() {
    use std::os::unix::fs::MetadataExt;
    let store = store_with(2);
    let path = anchor_of(&store);
    let inode = std::fs::metadata(&path).unwrap().ino();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), ANCHOR_FILE_BYTES as u64);
    store.run(&["kv", "put", "a", "3"]).expect(0);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the anchor was replaced");
    assert!(anchor_line(&store).contains(" 3 "), "{}", anchor_line(&store));

    let outside = tempfile::tempdir().unwrap();
    let planted = outside.path().join("planted");
    std::fs::hard_link(&path, &planted).unwrap();
    let kept = std::fs::read(&planted).unwrap();
    store.run(&["kv", "put", "a", "4"]).expect(0);
    assert!(std::fs::read(&planted).unwrap() == kept, "written through a hard link");
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), inode);
    assert_eq!(std::fs::metadata(&path).unwrap().nlink(), 1);
    assert!(anchor_line(&store).contains(" 4 "), "{}", anchor_line(&store));
    assert_eq!(store.run(&["verify"]).expect(0).json()["anchor_seq"], 4);
}

/// Issue 13, item 1: a missing anchor passed `verify` with `anchor_seq: null` and the next write
/// wrote a fresh one. Now, on a store with events, it fails `verify`, refuses writes and marks
/// reads, until `verify --accept-missing-anchor` writes it.
#[test]
fn a_missing_anchor_fails_verify_until_an_operator_accepts_it() {
    let store = store_with(3);
    std::fs::remove_file(anchor_of(&store)).unwrap();
    let verify = store.run(&["verify"]);
    refused_for_the_anchor(&verify, "verify");
    assert!(verify.stderr.contains("--accept-missing-anchor"), "{verify:?}");
    refused_for_the_anchor(&store.run(&["kv", "put", "a", "9"]), "kv put");
    assert!(!anchor_of(&store).exists(), "a refused write wrote no anchor");
    marked_read(&store.run(&["kv", "get", "a"]), "kv get");
    let accepted = store.run(&["verify", "--accept-missing-anchor"]).expect(0).json();
    assert_eq!(accepted["re_anchored"], true, "{accepted}");
    assert_eq!(accepted["anchor_seq"], Value::Null);
    store.run(&["kv", "put", "a", "9"]).expect(0);
    assert_eq!(store.run(&["verify"]).expect(0).json()["anchor_seq"], 4);
    // A store without events needs no anchor: a new store's first write makes one.
    let fresh = Store::new();
    fresh.run(&["init"]).expect(0);
    std::fs::remove_file(anchor_of(&fresh)).unwrap();
    fresh.run(&["verify"]).expect(0);
    fresh.run(&["kv", "put", "a", "1"]).expect(0);
    assert_eq!(fresh.run(&["verify"]).expect(0).json()["anchor_seq"], 1);
}

fn is_root() -> bool {
    rustix_uid() == 0
}

fn rustix_uid() -> u32 {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(u32::MAX)
}

/// Runs the binary as `nobody` (through `setpriv`) on `db`.
fn as_nobody(db: &Path, args: &[&str]) -> Run {
    let id = NOBODY.to_string();
    let out = Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("HOOKSTATE_SESSION")
        .env_remove("HOOKSTATE_SCOPE")
        .env_remove("HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub(super) fn chown_nobody(path: &Path) {
    let owner = format!("{NOBODY}:{NOBODY}");
    assert!(Command::new("chown").args(["-R", &owner]).arg(path).status().unwrap().success());
}

pub(super) fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Issue 13, item 1: an anchor that could not be written left every write at exit 0 with no
/// warning. Now the write stands (it committed) but says so in one stderr line, and `stats`
/// counts it; the next write that can moves the anchor. Runs as `nobody` in a directory it may
/// not create files in (root may write anywhere); skipped without root.
#[test]
fn a_failed_anchor_write_is_one_line_and_counted_by_stats() {
    if !is_root() {
        println!("integrity_anchor_write skipped=1 (needs root for setpriv)");
        return;
    }
    let top = tempfile::tempdir().unwrap();
    chmod(top.path(), 0o755);
    let dir = top.path().join("own");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    chown_nobody(&dir);
    let db = dir.join("state.redb");
    let first = as_nobody(&db, &["kv", "put", "a", "1"]);
    assert_eq!((first.code, first.stderr.as_str()), (0, ""), "{first:?}");
    // Neither the anchor file (written in place) nor the directory (a replacement) is writable.
    let anchor = dir.join("state.redb.head");
    chmod(&anchor, 0o400);
    chmod(&dir, 0o500);
    let put = as_nobody(&db, &["kv", "put", "a", "2"]);
    assert_eq!(put.code, 0, "the commit stands: {put:?}");
    assert_eq!(put.stderr.lines().count(), 1, "{put:?}");
    assert!(put.stderr.contains("anchor was not moved"), "{put:?}");
    let stats = as_nobody(&db, &["stats"]);
    assert_eq!(stats.json()["anchor_write_failures"], 1, "{stats:?}");
    chmod(&dir, 0o700);
    chmod(&anchor, 0o600);
    let again = as_nobody(&db, &["kv", "put", "a", "3"]);
    assert_eq!((again.code, again.stderr.as_str()), (0, ""), "{again:?}");
    let verify = as_nobody(&db, &["verify"]);
    assert_eq!(verify.json()["anchor_seq"], 3, "{verify:?}");
}

/// Issue 13, item 1 (the second anchor): a copy of an old store together with its old anchor
/// looks consistent to the anchor beside it; the second anchor in `HOOKSTATE_ANCHOR_DIR`, which
/// the store's writer only appends to, still names the newer head, so writes are refused.
#[test]
fn a_second_anchor_catches_a_rollback_of_the_store_and_its_anchor_together() {
    let store = Store::new();
    let anchors = tempfile::tempdir().unwrap();
    let with_dir = |args: &[&str]| {
        let mut all = vec!["--anchor-dir", anchors.path().to_str().unwrap()];
        all.extend_from_slice(args);
        store.run(&all)
    };
    with_dir(&["kv", "put", "a", "1"]).expect(0);
    let (old_db, old_anchor) =
        (std::fs::read(store.db()).unwrap(), std::fs::read(anchor_of(&store)).unwrap());
    for value in 2..=4 {
        with_dir(&["kv", "put", "a", &value.to_string()]).expect(0);
    }
    let files: Vec<_> = std::fs::read_dir(anchors.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "one append-only file per store");
    std::fs::write(store.db(), &old_db).unwrap();
    std::fs::write(anchor_of(&store), &old_anchor).unwrap();
    refused_for_the_anchor(&with_dir(&["kv", "put", "a", "9"]), "kv put with the second anchor");
    refused_for_the_anchor(&with_dir(&["verify"]), "verify with the second anchor");
    // Without it, the pair looks consistent: what the README says the anchor cannot prove.
    store.run(&["verify"]).expect(0);

    // Appending the file's own old line for seq 1 (an append-only file allows it) moved the
    // second anchor back to the old store: `verify` passed and writes forked the history.
    let file = std::fs::read_dir(anchors.path()).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(&file).unwrap();
    let old_line = text.lines().find(|l| l.split(' ').nth(3) == Some("1")).unwrap().to_owned();
    let mut appended = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
    std::io::Write::write_all(&mut appended, format!("{old_line}\n").as_bytes()).unwrap();
    for args in [&["kv", "put", "a", "9"][..], &["verify"][..]] {
        let run = with_dir(args);
        assert_eq!(run.code, 5, "{args:?}: {run:?}");
        assert!(run.stderr.contains("goes back from seq 4 to seq 1"), "{run:?}");
    }
    // More old lines in order hide the step back from a call's look at the file's end; `verify`
    // reads the whole file.
    let again = text.lines().find(|l| l.split(' ').nth(3) == Some("1")).unwrap();
    std::io::Write::write_all(&mut appended, format!("{again}\n{again}\n").as_bytes()).unwrap();
    let run = with_dir(&["verify"]);
    assert_eq!(run.code, 5, "{run:?}");
    assert!(run.stderr.contains("goes back from seq 4 to seq 1"), "{run:?}");
}

/// The offsets of `needle` in `haystack`.
pub(super) fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// Issue 13, item 2: a 7-byte edit of a value in the views table was served by `kv get`, a CAS
/// went through on it, and the next `verify` passed. Now the row fails its checksum: reads and
/// the CAS exit 5 with one line, and `verify` keeps failing after them.
#[test]
fn a_damaged_view_row_is_never_served_and_never_written_over() {
    let store = Store::new();
    store.run(&["kv", "put", "a", "\"value-AAAAAAA\""]).expect(0);
    let mut bytes = std::fs::read(store.db()).unwrap();
    // The view row: `{"Record": {"value": "\"value-AAAAAAA\"", "rev": 1}}` in MessagePack.
    let row = b"\xa6Record\x82\xa5value\xaf\"value-AAAAAAA\"";
    let found = find_all(&bytes, row);
    assert!(!found.is_empty(), "the row is in the file");
    for at in found {
        let value = at + row.len() - 8;
        bytes[value..value + 7].copy_from_slice(b"BBBBBBB");
    }
    std::fs::write(store.db(), &bytes).unwrap();
    let get = store.run(&["kv", "get", "a"]);
    assert!(!get.stdout.contains("BBBBBBB"), "the edited value was served: {get:?}");
    let get = get.expect(5);
    assert!(get.stderr.contains("checksum"), "{get:?}");
    store.run(&["kv", "put", "a", "\"mine\"", "--expect-rev", "1"]).expect(5);
    store.run(&["verify"]).expect(5);
    // A write that does not read the row does not meet it, and does not launder it either: the
    // row keeps its bytes, and its checksum keeps failing.
    store.run(&["kv", "put", "b", "1"]).expect(0);
    store.run(&["verify"]).expect(5);
    // The log is intact: a rebuild recomputes the row, and everything works again.
    store.run(&["rebuild"]).expect(0);
    assert_eq!(store.run(&["kv", "get", "a"]).expect(0).json()["value"], "value-AAAAAAA");
    store.run(&["verify"]).expect(0);
}

/// Rows of the branch-damage store and their value size: enough leaves for a branch page above
/// them, few enough that one branch page (the table's root) holds every separator.
const BRANCH_ROWS: usize = 200;
const BRANCH_VALUE_BYTES: usize = 1_000;
/// redb's page size (its default, which hookstate keeps).
const PAGE_BYTES: usize = 4096;
/// redb's branch page type byte (`tree_store/btree_base.rs`).
const REDB_BRANCH: u8 = 2;

fn branch_key(n: usize) -> String {
    format!("k{n:04}")
}

/// The encoded view key of record `key` in scope `default` (`format::encode_view_key`).
fn view_key(key: &str) -> Vec<u8> {
    let mut out = b"rdefault\0".to_vec();
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out
}

/// A branch page's separators: `(offset in the page, key bytes)`, per redb's branch layout
/// (type, padding, `u16` key count, padding, 16-byte checksum and 8-byte page number per child,
/// `u32` key ends, key bytes).
fn separators(page: &[u8]) -> Option<Vec<(usize, Vec<u8>)>> {
    if page[0] != REDB_BRANCH {
        return None;
    }
    let keys = usize::from(u16::from_le_bytes([page[2], page[3]]));
    let ends_at = 8 + 24 * (keys + 1);
    if keys < 3 || ends_at + 4 * keys > page.len() {
        return None;
    }
    let mut start = ends_at + 4 * keys;
    let mut out = Vec::new();
    for i in 0..keys {
        let at = ends_at + 4 * i;
        let end = u32::from_le_bytes(page[at..at + 4].try_into().unwrap()) as usize;
        if end <= start || end > page.len() {
            return None;
        }
        out.push((start, page[start..end].to_vec()));
        start = end;
    }
    out.iter().all(|(_, k)| k.starts_with(b"rdefault\0k")).then_some(out)
}

/// One way to damage a branch page: raise separator `i` (same length, still below separator
/// `i + 1`), so lookups of the keys between its old and new value go to the child left of it,
/// which does not hold them, while a scan, which visits every child in order, still finds them.
struct Damage {
    offset: usize,
    separator: Vec<u8>,
    misrouted: Vec<String>,
}

fn damages(file: &[u8]) -> Vec<Damage> {
    let mut out = Vec::new();
    for (page_index, page) in file.chunks_exact(PAGE_BYTES).enumerate() {
        let Some(keys) = separators(page) else {
            continue;
        };
        for pair in keys.windows(2) {
            let ((at, low), (_, high)) = (&pair[0], &pair[1]);
            let mut raised = high[..low.len().min(high.len())].to_vec();
            if raised.len() < low.len() {
                continue;
            }
            if raised == *high {
                let last = raised.len() - 1;
                raised[last] = raised[last].saturating_sub(1);
            }
            if raised <= *low || raised >= *high {
                continue;
            }
            let misrouted: Vec<String> = (0..BRANCH_ROWS)
                .map(branch_key)
                .filter(|k| view_key(k) > *low && view_key(k) <= raised)
                .collect();
            if !misrouted.is_empty() {
                out.push(Damage {
                    offset: page_index * PAGE_BYTES + at,
                    separator: raised,
                    misrouted,
                });
            }
        }
    }
    out
}

/// A store of [`BRANCH_ROWS`] records of [`BRANCH_VALUE_BYTES`] each: its views table has a
/// branch page above its leaves.
fn branch_store() -> Store {
    let store = Store::new();
    let engine =
        hookstate_engine::Engine::open(&store.db(), hookstate_engine::OpenOptions::default())
            .unwrap();
    let value = serde_json::to_string(&"x".repeat(BRANCH_VALUE_BYTES)).unwrap();
    let call = hookstate_engine::Call::at("default", 1_000);
    for n in 0..BRANCH_ROWS {
        let command = hookstate_engine::Command::KvPut {
            key: branch_key(n),
            value: value.clone(),
            expect: hookstate_engine::Expect::Any,
        };
        engine.execute(&call, &command).unwrap();
    }
    store
}

/// Issue 13, item 2: one flipped bit in a branch page of the views table failed `verify` (redb's
/// page checksum), but after any unrelated write the page carried a fresh checksum and `verify`
/// passed while lookups missed rows (`feedback list` lost a comment, `proposals list` the queue):
/// a scan still agreed with the rebuild. Now `verify` also looks every rebuilt row up by its key,
/// so the damage stays visible after the write, until `rebuild` repairs it. The
/// `verify-scans-only` drill must fail here.
#[test]
fn a_damaged_branch_page_is_caught_by_verify_even_after_a_write_refreshes_its_checksum() {
    let store = branch_store();
    let original = std::fs::read(store.db()).unwrap();
    let candidates = damages(&original);
    assert!(!candidates.is_empty(), "no branch page of the views table in the file");
    for damage in &candidates {
        let mut bytes = original.clone();
        bytes[damage.offset..damage.offset + damage.separator.len()]
            .copy_from_slice(&damage.separator);
        std::fs::write(store.db(), &bytes).unwrap();
        let probe = store.run(&["kv", "get", &damage.misrouted[0]]);
        if probe.code != 0 || probe.json()["found"] != false {
            continue; // a stale copy of the page, or a damage that changed nothing
        }
        let before = store.run(&["verify"]);
        // An unrelated write: a new key after every row, through the same root.
        store.run(&["kv", "put", "zzzz", "1"]).expect(0);
        let after = store.run(&["verify"]);
        println!(
            "integrity_branch rows={BRANCH_ROWS} candidates={} misrouted_keys={} \
             verify_before={} verify_after={}",
            candidates.len(),
            damage.misrouted.len(),
            before.code,
            after.code
        );
        assert_eq!(before.code, 5, "{before:?}");
        assert_eq!(after.code, 5, "the write laundered the damage: {after:?}");
        assert!(after.stderr.contains("lookup"), "{after:?}");
        let rebuilt = store.run(&["rebuild"]).expect(0).json();
        // The lookups disagree with the scan: every row is dropped and written again.
        assert_eq!(rebuilt["rows_removed"], Value::Null, "{rebuilt}");
        assert_eq!(rebuilt["rows_written"], rebuilt["views"], "{rebuilt}");
        store.run(&["verify"]).expect(0);
        let found = store.run(&["kv", "get", &damage.misrouted[0]]).expect(0);
        assert_eq!(found.json()["found"], true, "rebuild repairs the table");
        return;
    }
    panic!("none of {} damages reached a live branch page", candidates.len());
}

/// A table hookstate never opens: only redb's check of every page reads its leaf.
const STRAY: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("stray");
/// The stray row's value, unique in the file.
const STRAY_VALUE: &[u8] = b"stray-leaf-value-read-only-by-the-page-check";

/// `verify` and `doctor` open the store read-only without redb's check on open and run it
/// beside the replay, as `rebuild` does as a writer: a damaged page that no read of hookstate's
/// meets still fails all three (exit 5), while a read that does not meet it still answers, and
/// `copy` (checked on open) refuses it.
#[test]
fn verify_and_doctor_run_the_page_check_on_a_page_no_replay_reads() {
    let store = Store::new();
    store.run(&["kv", "put", "a", "1"]).expect(0);
    {
        let db = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .open(store.db())
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(STRAY).unwrap().insert("x", STRAY_VALUE).unwrap();
        txn.commit().unwrap();
    }
    store.run(&["verify"]).expect(0);
    let mut bytes = std::fs::read(store.db()).unwrap();
    let found = find_all(&bytes, STRAY_VALUE);
    assert!(!found.is_empty(), "the stray row is in the file");
    for at in found {
        bytes[at] ^= 1;
    }
    std::fs::write(store.db(), &bytes).unwrap();
    assert_eq!(store.run(&["kv", "get", "a"]).expect(0).json()["value"], 1);
    let verify = store.run(&["verify"]).expect(5);
    assert!(verify.json()["ok"] == false, "{verify:?}");
    let doctor = store.run(&["doctor"]);
    assert_ne!(doctor.code, 0, "{doctor:?}");
    assert!(doctor.stdout.contains("integrity"), "{doctor:?}");
    let to = store.dir.path().join("copy.redb");
    let (from, to_text) = (store.db().display().to_string(), to.display().to_string());
    store.run(&["copy", "--from", &from, "--to", &to_text]).expect(5);
    assert!(!to.exists(), "a refused copy leaves nothing");
    // rebuild runs the check beside its replay too, and refuses the store before writing.
    let rebuild = store.run(&["rebuild"]).expect(5);
    assert!(
        rebuild.stderr.contains("corrupt") || rebuild.stderr.contains("checksum"),
        "{rebuild:?}"
    );
    assert_eq!(store.run(&["kv", "get", "a"]).expect(0).json()["value"], 1);
}

/// Where a branch page keeps the ends of its keys: after its 8-byte header and the 24 bytes
/// (16-byte checksum, 8-byte page number) of each of its `keys + 1` children.
fn key_ends_at(keys: usize) -> usize {
    8 + 24 * (keys + 1)
}

/// A key end past any page: redb slices the page with it and panics.
const KEY_END_PAST_THE_PAGE: u32 = 0xF000_0000;

/// redb panics on a branch page whose key ends point outside it (a slice out of range); the
/// lookups of `verify` meet such a page, and its page check, beside the replay, finds its
/// checksum wrong. The check's finding is the answer: exit 5 with the damaged store's line, not
/// the panic's "internal error", as when the check ran before the replay; the same for
/// `rebuild`, whose check runs beside its replay too.
#[test]
fn a_branch_page_redb_panics_on_fails_verify_with_the_page_check_not_a_panic() {
    let store = branch_store();
    store.run(&["verify"]).expect(0);
    let mut bytes = std::fs::read(store.db()).unwrap();
    let mut damaged = 0;
    for page in bytes.chunks_exact_mut(PAGE_BYTES) {
        let keys = usize::from(u16::from_le_bytes([page[2], page[3]]));
        let ends = key_ends_at(keys);
        if page[0] != REDB_BRANCH || keys == 0 || ends + 4 * keys > PAGE_BYTES {
            continue;
        }
        for i in 0..keys {
            page[ends + 4 * i..ends + 4 * i + 4]
                .copy_from_slice(&KEY_END_PAST_THE_PAGE.to_le_bytes());
        }
        damaged += 1;
    }
    assert!(damaged > 0, "no branch page in the file");
    std::fs::write(store.db(), &bytes).unwrap();
    let verify = store.run(&["verify"]);
    println!("integrity_branch_panic branch_pages={damaged} verify={}", verify.code);
    assert_eq!(verify.code, 5, "{verify:?}");
    assert!(!verify.stderr.contains("internal error"), "the replay's panic answered: {verify:?}");
    assert_eq!(verify.json()["ok"], false, "{verify:?}");
    // So does a rebuild, which runs the same check beside its replay.
    let rebuild = store.run(&["rebuild"]);
    assert_eq!(rebuild.code, 5, "{rebuild:?}");
    assert!(!rebuild.stderr.contains("internal error"), "the replay's panic answered: {rebuild:?}");
}

/// A damaged key in a page of the log table ends redb's range scan early: `log`, `dump` and
/// `backup` printed or copied the events before it and exited 0, a backup with one event of six
/// under a header that named the sixth as its head. They check that the log holds every event of
/// the range they read (`ops::snapshot::events_whole`) and exit 5 naming the first missing one.
#[test]
fn log_dump_and_backup_refuse_a_log_a_damaged_page_cut_short() {
    let store = Store::new();
    for n in 1..=6 {
        store.run(&["kv", "put", &format!("k{n}"), &n.to_string()]).expect(0);
    }
    let mut bytes = std::fs::read(store.db()).unwrap();
    // The log's leaf holds its fixed-width keys side by side: seqs 1..=6, little-endian u64.
    let keys: Vec<u8> = (1u64..=6).flat_map(u64::to_le_bytes).collect();
    let at = bytes.windows(keys.len()).rposition(|w| w == keys.as_slice());
    let at = at.expect("the log leaf's keys are in the file (redb 4.6's leaf layout)");
    bytes[at + 9] ^= 0xff; // the second byte of seq 2's key
    std::fs::write(store.db(), &bytes).unwrap();
    let backup = store.dir.path().join("backup.redb");
    for args in [vec!["log"], vec!["dump"], vec!["backup", "--to", backup.to_str().unwrap()]] {
        let run = store.run(&args).expect(5);
        assert!(run.stderr.contains("seq 2: event is missing"), "{args:?}: {run:?}");
    }
    assert!(!backup.exists(), "a refused backup left a file");
    assert_eq!(store.run(&["log", "--to-seq", "1"]).expect(0).stdout.lines().count(), 1);
}

/// A store whose table tree lost its views table (a damaged entry: the name `views` altered)
/// is refused by a write, exit 5 with the file unchanged, as it is by a read: a write once
/// created an empty views table in its place and committed, every other key and queue gone and
/// the written key back at revision 1.
#[test]
fn a_write_never_replaces_a_lost_views_table_with_an_empty_one() {
    let store = Store::new();
    store.run(&["kv", "put", "a", "1"]).expect(0);
    store.run(&["kv", "put", "a", "2"]).expect(0);
    let mut bytes = std::fs::read(store.db()).unwrap();
    let names = b"logmetaviews";
    let at = bytes.windows(names.len()).rposition(|w| w == names);
    let at = at.expect("the table tree's names are in the file (redb 4.6's leaf layout)");
    bytes[at + 9] ^= 0x01; // "views" -> "vievs": still a valid name, no longer the table's
    std::fs::write(store.db(), &bytes).unwrap();
    let read = store.run(&["kv", "get", "a"]).expect(5);
    assert!(read.stderr.contains("'views' does not exist"), "{read:?}");
    let write = store.run(&["kv", "put", "a", "3"]).expect(5);
    assert!(write.stderr.contains("'views' does not exist"), "{write:?}");
    assert!(std::fs::read(store.db()).unwrap() == bytes, "the refused write changed the file");
}
