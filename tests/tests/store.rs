//! Store-level tests on real redb files: tampering found at its seq, rollback found by the
//! anchor, damaged files never panic, unsafe paths refused, views rebuilt, idempotent replays.
//!
//! Tampering goes through redb directly, so the file stays consistent and only the chain can
//! catch it. Does not spawn processes; `cli/tests` does.

use std::path::{Path, PathBuf};

use hookstate_engine::limits::{REPLAY_BATCH_EVENTS, REPLAY_QUEUE_BATCHES};
use hookstate_engine::schema::format::{self, FORMAT_VERSION, LOG_TABLE, META_TABLE, VIEWS_TABLE};
use hookstate_engine::schema::{Body, CoreEvent};
use hookstate_engine::{Call, Command, Engine, Error, Expect, OpenOptions};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new(LOG_TABLE);
const VIEWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new(VIEWS_TABLE);
const META: TableDefinition<&str, &[u8]> = TableDefinition::new(META_TABLE);

fn call(now_ms: u64) -> Call {
    Call::at("t", now_ms)
}

fn put(engine: &Engine, n: u64) {
    let command =
        Command::KvPut { key: format!("k{}", n % 3), value: n.to_string(), expect: Expect::Any };
    engine.execute(&call(1_000 + n), &command).unwrap();
}

/// A store with `events` record puts, closed.
fn store_with(events: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let engine = Engine::open(&path, OpenOptions::default()).unwrap();
    for n in 1..=events {
        put(&engine, n);
    }
    (dir, path)
}

fn open(path: &Path) -> Result<Engine, Error> {
    Engine::open(
        path,
        OpenOptions {
            wait_ms: 1_000,
            create: false,
            check_integrity: true,
            check_beside_replay: false,
            read_only: false,
            absent_is_empty: false,
            anchor_dir: None,
            server_clock: true,
            upgrade_schema: false,
        },
    )
}

fn redb_open(path: &Path) -> redb::Database {
    redb::Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(path)
        .unwrap()
}

/// Rewrites event `seq` through redb: `rehash` recomputes its own hash so it decodes cleanly.
fn rewrite_event(path: &Path, seq: u64, rehash: bool) {
    let db = redb_open(path);
    let txn = db.begin_write().unwrap();
    {
        let mut log = txn.open_table(LOG).unwrap();
        let bytes = log.get(seq).unwrap().unwrap().value().to_vec();
        let mut event = format::decode_event(&bytes).unwrap();
        event.content.body = Body::Core(CoreEvent::RecordPut {
            key: "k0".into(),
            value: "\"forged\"".into(),
            rev: 99,
        });
        let record = if rehash {
            format::encode_event(seq, &event.prev, &event.content).0
        } else {
            let (mut forged, _) = format::encode_event(seq, &event.prev, &event.content);
            // Keep the old hash bytes: splice the original hash field (its stored part) back in.
            let stored = format::RECORD_CHECK_BYTES;
            let new_hash = format::encode_event(seq, &event.prev, &event.content).1;
            let at = find(&forged, &new_hash[..stored]);
            forged[at..at + stored].copy_from_slice(&event.hash[..stored]);
            forged
        };
        log.insert(seq, record.as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).position(|w| w == needle).unwrap()
}

fn chain_broken_at(result: Result<hookstate_engine::VerifyReport, Error>) -> u64 {
    match result {
        Err(Error::ChainBroken { seq, .. }) => seq,
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

#[test]
fn verify_passes_on_a_clean_store_and_counts_everything() {
    let (_dir, path) = store_with(12);
    let report = open(&path).unwrap().ops().verify(Default::default()).unwrap();
    assert_eq!(report.events, 12);
    assert_eq!(report.anchor_seq, Some(12));
    assert_eq!(report.views, 3);
}

#[test]
fn rewritten_event_with_its_old_hash_is_found_at_its_seq() {
    let (_dir, path) = store_with(8);
    rewrite_event(&path, 5, false);
    assert_eq!(chain_broken_at(open(&path).unwrap().ops().verify(Default::default())), 5);
}

#[test]
fn rewritten_and_rehashed_event_breaks_the_next_link() {
    let (_dir, path) = store_with(8);
    rewrite_event(&path, 5, true);
    assert_eq!(chain_broken_at(open(&path).unwrap().ops().verify(Default::default())), 6);
}

#[test]
fn rewritten_last_event_with_a_moved_head_is_caught_by_the_anchor() {
    let (_dir, path) = store_with(8);
    rewrite_event(&path, 8, true);
    let db = redb_open(&path);
    let txn = db.begin_write().unwrap();
    {
        let log = txn.open_table(LOG).unwrap();
        let event = format::decode_event(log.get(8).unwrap().unwrap().value()).unwrap();
        let head = format::encode_head(&format::Head { seq: 8, hash: event.hash });
        txn.open_table(META).unwrap().insert("head", head.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    let result = open(&path).unwrap().ops().verify(Default::default());
    assert!(matches!(result, Err(Error::AnchorMismatch { .. })), "{result:?}");
}

#[test]
fn rollback_to_an_older_copy_is_caught_by_the_anchor() {
    let (dir, path) = store_with(3);
    let old = dir.path().join("old-copy");
    std::fs::copy(&path, &old).unwrap();
    {
        let engine = open(&path).unwrap();
        for n in 4..=6 {
            put(&engine, n);
        }
    }
    std::fs::copy(&old, &path).unwrap();
    let result = open(&path).unwrap().ops().verify(Default::default());
    match result {
        Err(Error::AnchorMismatch { why }) => assert!(why.contains("seq 6"), "{why}"),
        other => panic!("rollback went unseen: {other:?}"),
    }
}

#[test]
fn deleted_view_row_is_found_and_rebuild_restores_it() {
    let (_dir, path) = store_with(4);
    let db = redb_open(&path);
    let txn = db.begin_write().unwrap();
    {
        let mut views = txn.open_table(VIEWS).unwrap();
        let first = views.first().unwrap().unwrap().0.value().to_vec();
        views.remove(first.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    let engine = open(&path).unwrap();
    assert!(matches!(engine.ops().verify(Default::default()), Err(Error::ViewMismatch { .. })));
    let rebuilt = engine.ops().rebuild().unwrap();
    assert_eq!((rebuilt.events, rebuilt.views), (4, 3));
    assert_eq!((rebuilt.written, rebuilt.removed), (1, Some(0)), "the one missing row");
    engine.ops().verify(Default::default()).unwrap();
}

/// The record of `event` as a format 3 build wrote it: positional, envelope version 2 (its body
/// is at shape 1), the whole hash. By hand: the schema keeps its envelope type private.
fn whole_hash_record(event: &hookstate_engine::schema::Event) -> Vec<u8> {
    let content = format::encode_content(&event.content);
    let mut out = vec![0x95, 0x02, 0xcf];
    out.extend_from_slice(&event.seq.to_be_bytes());
    for hash in [&event.prev, &event.hash] {
        out.extend_from_slice(&[0xc4, 0x20]);
        out.extend_from_slice(hash);
    }
    out.push(0xc6);
    out.extend_from_slice(&u32::try_from(content.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&content);
    out
}

fn stored_format(path: &Path) -> u16 {
    let db = redb_open(path);
    let txn = db.begin_read().unwrap();
    let bytes = txn.open_table(META).unwrap().get("format").unwrap().unwrap().value().to_vec();
    u16::from_be_bytes(bytes.as_slice().try_into().unwrap())
}

/// A store of three puts rewritten as a format 3 build wrote it: whole-hash records, format 3.
fn format_3_store() -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = store_with(3);
    let db = redb_open(&path);
    let txn = db.begin_write().unwrap();
    {
        let mut log = txn.open_table(LOG).unwrap();
        let records: Vec<(u64, Vec<u8>)> = log
            .iter()
            .unwrap()
            .map(|entry| {
                let (seq, record) = entry.unwrap();
                (seq.value(), record.value().to_vec())
            })
            .collect();
        assert_eq!(records.len(), 3);
        for (seq, record) in records {
            let event = format::decode_event(&record).unwrap();
            let whole = whole_hash_record(&event);
            assert_eq!(format::decode_event(&whole).unwrap(), event, "seq {seq}");
            assert!(whole.len() > record.len() + 24, "seq {seq}: the short record keeps 8 bytes");
            log.insert(seq, whole.as_slice()).unwrap();
        }
        txn.open_table(META).unwrap().insert("format", 3u16.to_be_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    (dir, path)
}

/// A store of format 3 (records with the whole hash) needs no rebuild: it verifies and reads as
/// it is, its first write moves it to format 4 (so a format 3 build refuses it as too new rather
/// than misread the shorter records), and its old and new records make one chain.
#[test]
fn a_format_3_store_is_written_in_place_and_moves_to_format_4() {
    let (_dir, path) = format_3_store();
    let engine = open(&path).unwrap();
    assert_eq!(engine.ops().verify(Default::default()).unwrap().events, 3);
    drop(engine);
    assert_eq!(stored_format(&path), 3, "opening and verifying write nothing");
    let engine = open(&path).unwrap();
    put(&engine, 4);
    assert_eq!(engine.ops().verify(Default::default()).unwrap().events, 4);
    drop(engine);
    assert_eq!(stored_format(&path), FORMAT_VERSION);
    let db = redb_open(&path);
    let txn = db.begin_read().unwrap();
    let log = txn.open_table(LOG).unwrap();
    let old = log.get(3).unwrap().unwrap().value().to_vec();
    let new = log.get(4).unwrap().unwrap().value().to_vec();
    assert_eq!(old[1], 2, "an old record keeps its bytes");
    assert_eq!(new[1], 4, "a new one is of envelope version 4");
    assert_eq!(format::decode_event(&new).unwrap().prev, format::decode_event(&old).unwrap().hash);
}

/// Every path that appends a record moves a format 3 store to format 4 in the same commit: a
/// group commit, a checkpoint and the bulk loader, as well as the per-call write above.
#[test]
fn every_write_path_moves_a_format_3_store_to_format_4() {
    type Write = fn(&Engine);
    let writers: [(&str, Write); 3] = [
        ("group commit", |engine| {
            let command =
                Command::KvPut { key: "g".into(), value: "1".into(), expect: Expect::Any };
            let answers = engine.ops().execute_batch(&[(call(5_000), command)]).unwrap();
            assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        }),
        ("checkpoint", |engine| {
            engine.ops().checkpoint(&call(5_000)).unwrap();
        }),
        ("bulk", |engine| {
            let body =
                Body::Core(CoreEvent::RecordPut { key: "b".into(), value: "1".into(), rev: 1 });
            hookstate_engine::append_unchecked(engine, &call(5_000), &[("t".into(), body)])
                .unwrap();
        }),
    ];
    for (what, write) in writers {
        let (_dir, path) = format_3_store();
        let engine = open(&path).unwrap();
        write(&engine);
        assert_eq!(engine.ops().verify(Default::default()).unwrap().events, 4, "{what}");
        drop(engine);
        assert_eq!(stored_format(&path), FORMAT_VERSION, "{what}");
    }
}

const BLOBS: TableDefinition<&str, &[u8]> = TableDefinition::new(format::BLOBS_TABLE);

/// A compacted store of format 4 keeps its checkpoint rows among its meta rows, beside the head
/// every call reads (a call on a big store read them whole): this build reads them there, and
/// its first write moves them to their own table and the store to format 5.
#[test]
fn a_format_4_stores_checkpoint_rows_are_read_and_moved_by_its_first_write() {
    let (_dir, path) = store_with(6);
    let mut engine = open(&path).unwrap();
    engine.ops().checkpoint(&call(5_000)).unwrap();
    put(&engine, 7);
    let day_ms = 24 * 60 * 60 * 1000;
    hookstate_engine::compact(&mut engine, 0, 10_000 + day_ms).unwrap();
    drop(engine);
    let in_meta = |path: &Path| {
        let db = redb_open(path);
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        format::BLOB_KEYS.iter().filter(|k| meta.get(**k).unwrap().is_some()).count()
    };
    assert_eq!(in_meta(&path), 0, "a checkpoint of this build writes them to their own table");
    // As a format 4 build left it.
    let db = redb_open(&path);
    let txn = db.begin_write().unwrap();
    {
        let mut blobs = txn.open_table(BLOBS).unwrap();
        let mut meta = txn.open_table(META).unwrap();
        for key in format::BLOB_KEYS {
            let value = blobs.remove(key).unwrap().unwrap().value().to_vec();
            meta.insert(key, value.as_slice()).unwrap();
        }
        meta.insert("format", 4u16.to_be_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    let engine = open(&path).unwrap();
    let verified = engine.ops().verify(Default::default()).unwrap();
    assert_eq!(verified.from_checkpoint, Some(6), "{verified:?}");
    assert!(engine.ops().at_seq(6).is_ok(), "the compaction base is read from the meta rows");
    drop(engine);
    assert_eq!((stored_format(&path), in_meta(&path)), (4, 2), "reads move nothing");
    let engine = open(&path).unwrap();
    put(&engine, 8);
    assert_eq!(engine.ops().verify(Default::default()).unwrap().from_checkpoint, Some(6));
    drop(engine);
    assert_eq!((stored_format(&path), in_meta(&path)), (FORMAT_VERSION, 0));
}

/// A rebuild that upgrades a store drops every view and writes it in this format: no row is
/// kept as an older build wrote it, so none is reported as left alone.
#[test]
fn a_rebuild_that_upgrades_a_store_rewrites_every_row() {
    let (_dir, path) = format_3_store();
    let engine = open(&path).unwrap();
    let rebuilt = engine.ops().rebuild().unwrap();
    assert_eq!(rebuilt.upgraded_to, Some(FORMAT_VERSION));
    assert_eq!((rebuilt.written, rebuilt.removed), (rebuilt.views, None));
    assert!(rebuilt.views > 0, "the store has rows to rewrite");
    engine.ops().verify(Default::default()).unwrap();
    drop(engine);
    assert_eq!(stored_format(&path), FORMAT_VERSION);
}

/// Events enough that a replay's reading thread refills batches its projecting thread handed
/// back, several times over.
const RECYCLED_EVENTS: usize = REPLAY_BATCH_EVENTS * (REPLAY_QUEUE_BATCHES + 4);

#[test]
fn a_replay_applies_each_event_once_in_order_across_its_batches() {
    // Items pushed and each acked right after: an event applied again, or out of its order,
    // brings an acked item back, which the stored views (projected once, in order) do not have.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let engine = Engine::open(&path, OpenOptions::default()).unwrap();
    let events: Vec<(String, Body)> = (0..RECYCLED_EVENTS / 2)
        .flat_map(|n| {
            let (queue, item) = ("q".to_owned(), format!("i{n}"));
            let pushed = CoreEvent::ItemPushed {
                queue: queue.clone(),
                item: item.clone(),
                payload: "{}".into(),
                for_session: None,
                max_deliveries: 5,
            };
            let acked = CoreEvent::ItemAcked { queue, item, token: 0 };
            [("t".to_owned(), Body::Core(pushed)), ("t".to_owned(), Body::Core(acked))]
        })
        .collect();
    hookstate_engine::append_unchecked(&engine, &call(1_000), &events).unwrap();
    let report = engine.ops().verify(Default::default()).unwrap();
    assert_eq!(usize::try_from(report.events).unwrap(), RECYCLED_EVENTS);
    let rebuilt = engine.ops().rebuild().unwrap();
    assert_eq!((rebuilt.written, rebuilt.removed), (0, Some(0)));
}

#[test]
fn newer_format_is_refused() {
    let (_dir, path) = store_with(1);
    let db = redb_open(&path);
    let txn = db.begin_write().unwrap();
    let newer = (FORMAT_VERSION + 1).to_be_bytes();
    txn.open_table(META).unwrap().insert("format", newer.as_slice()).unwrap();
    txn.commit().unwrap();
    drop(db);
    let result = open(&path);
    assert!(matches!(result, Err(Error::FormatTooNew { .. })), "{result:?}");
}

/// Seeded xorshift, so failures reproduce.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn flipped_file_bytes_never_panic_and_never_verify_wrongly() {
    const FLIPS: u64 = 60;
    let (dir, path) = store_with(30);
    let clean = std::fs::read(&path).unwrap();
    let anchor = std::fs::read(dir.path().join("state.redb.head")).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let (mut verified, mut refused) = (0, 0);
    for case in 0..FLIPS {
        let mut bytes = clean.clone();
        let at = usize::try_from(next(&mut seed) % bytes.len() as u64).unwrap();
        bytes[at] ^= 1 << (next(&mut seed) % 8);
        let case_dir = tempfile::tempdir().unwrap();
        let case_path = case_dir.path().join("state.redb");
        std::fs::write(&case_path, &bytes).unwrap();
        std::fs::write(case_dir.path().join("state.redb.head"), &anchor).unwrap();
        let outcome = std::panic::catch_unwind(|| {
            open(&case_path).and_then(|e| e.ops().verify(Default::default()))
        });
        match outcome {
            Ok(Ok(report)) => {
                assert_eq!(report.events, 30, "case {case}: a flip lost events yet verified");
                verified += 1;
            }
            Ok(Err(_)) => refused += 1,
            Err(_) => panic!("case {case}: flipping byte {at} panicked"),
        }
    }
    println!("bit_flips={FLIPS} verified_ok={verified} refused={refused} panics=0");
}

#[test]
fn damaged_or_foreign_paths_are_refused_with_the_right_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(open(&empty), Err(Error::NotAStore { .. })));
    let garbage = dir.path().join("garbage.redb");
    std::fs::write(&garbage, vec![0x5a; 9000]).unwrap();
    let result = open(&garbage);
    assert!(
        matches!(result, Err(Error::StoreCorrupt(_) | Error::NotAStore { .. } | Error::StoreIo(_))),
        "{result:?}"
    );
    let as_dir = dir.path().join("dir.redb");
    std::fs::create_dir(&as_dir).unwrap();
    assert!(matches!(open(&as_dir), Err(Error::NotAStore { .. })));
    let fifo = dir.path().join("fifo.redb");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert!(matches!(open(&fifo), Err(Error::NotAStore { .. })));
    let (_store_dir, real) = store_with(1);
    let link = dir.path().join("link.redb");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert!(matches!(open(&link), Err(Error::UnsafePath { .. })));
    assert!(matches!(open(&dir.path().join("absent.redb")), Err(Error::NoStore { .. })));
    // Nothing was created by refusing.
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert!(!dir.path().join("absent.redb").exists());
}

#[test]
fn store_in_a_directory_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let result = Engine::open(&shared.join("state.redb"), OpenOptions::default());
    assert!(matches!(result, Err(Error::UnsafePath { .. })), "{result:?}");
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0);
}

#[test]
fn created_files_and_directories_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/state.redb");
    put(&Engine::open(&path, OpenOptions::default()).unwrap(), 1);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("a/b/state.redb.head")), 0o600);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    let names: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files left behind: {names:?}");
}

#[test]
fn idempotency_key_replays_the_first_result_and_appends_once() {
    let (_dir, path) = store_with(0);
    let engine = open(&path).unwrap();
    let push = Command::QueuePush {
        queue: "q".into(),
        item: "a".into(),
        payload: "{}".into(),
        for_session: None,
        max_deliveries: 3,
    };
    engine.execute(&call(1), &push).unwrap();
    let claim =
        Command::QueueClaim { queue: "q".into(), item: None, holder: "h".into(), lease_ms: 50 };
    let keyed = call(2).with_idem_key("turn-7");
    let first = engine.execute(&keyed, &claim).unwrap();
    let again = engine.execute(&Call::at("t", 500).with_idem_key("turn-7"), &claim).unwrap();
    assert!(again.replayed);
    assert_eq!(again.head, first.head);
    assert_eq!(again.result["token"], first.result["token"]);
    assert_eq!(engine.head().unwrap().seq, 2, "the replay appended nothing");
    engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn events_survive_reopen_and_the_log_filters() {
    let (_dir, path) = store_with(5);
    let engine = open(&path).unwrap();
    assert_eq!(engine.head().unwrap().seq, 5);
    let filter = hookstate_engine::LogFilter {
        from_seq: Some(2),
        to_seq: Some(4),
        kind: Some("record_put".into()),
        ..Default::default()
    };
    let seqs: Vec<u64> = engine.log(&filter).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3, 4]);
    let tail = hookstate_engine::LogFilter { limit: Some(2), tail: true, ..Default::default() };
    let seqs: Vec<u64> = engine.log(&tail).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [4, 5]);
    let other = hookstate_engine::LogFilter { scope: Some("nope".into()), ..Default::default() };
    assert!(engine.log(&other).unwrap().is_empty());
}

/// A file copied while a writer had it open carries redb's recovery flag with no live writer, as
/// a writer killed before its clean close leaves it. redb refuses a read-only open of such a
/// file; a read must still answer (by opening as a writer, which repairs), not fail.
#[test]
fn a_read_of_a_store_left_needing_repair_still_answers() {
    let (dir, path) = store_with(3);
    let copy = dir.path().join("copy.redb");
    {
        let writer = redb_open(&path);
        std::fs::copy(&path, &copy).unwrap();
        drop(writer);
    }
    let options = OpenOptions {
        wait_ms: 1_000,
        create: false,
        check_integrity: false,
        check_beside_replay: false,
        read_only: true,
        absent_is_empty: false,
        anchor_dir: None,
        server_clock: true,
        upgrade_schema: false,
    };
    let engine = Engine::open(&copy, options).unwrap();
    let value = engine.query("t", &hookstate_engine::Query::KvGet { key: "k1".into() }, 0).unwrap();
    assert_eq!(value["found"], true, "{value}");
    assert_eq!(engine.head().unwrap().seq, 3);
}

/// How long the test below holds the anchor lock, as a creator writing the seq-0 anchor would:
/// well inside the first write's wait for that lock (`GENESIS_ANCHOR_TRIES` × 1 ms, 50 ms), and
/// longer than one small commit, so that a first write that did not wait would commit and then
/// find the lock still held.
const CREATOR_LOCK_HOLD: std::time::Duration = std::time::Duration::from_millis(10);

#[test]
fn a_first_write_waits_for_a_creator_holding_the_anchor_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let engine = Engine::open(&path, OpenOptions::default()).unwrap();
    let anchor = engine.location().unwrap().anchor_path;
    // A creator killed before its seq-0 anchor was written: a store of no events, no anchor.
    std::fs::remove_file(&anchor).unwrap();
    // Another creator holds the anchor lock (an advisory lock on the directory) for a moment.
    let lock = std::fs::File::open(dir.path()).unwrap();
    lock.lock().unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(CREATOR_LOCK_HOLD);
        lock.unlock().unwrap();
    });
    put(&engine, 1);
    holder.join().unwrap();
    // The first write anchored its store: the next write is not refused for a missing anchor,
    // and verify finds the anchor at the head.
    assert!(anchor.exists(), "the first write left no anchor");
    put(&engine, 2);
    let report = engine.ops().verify(Default::default()).unwrap();
    assert_eq!(report.events, 2);
}

/// A table hookstate never opens, so only redb's check of every page reads its leaf.
const STRAY: TableDefinition<&str, &[u8]> = TableDefinition::new("stray");
/// The stray row's value, unique in the file.
const STRAY_VALUE: &[u8] = b"stray-leaf-value-read-only-by-the-page-check";

/// A store of five events with a stray table whose one leaf has a flipped bit: only redb's
/// check of every page reads that leaf.
fn store_with_a_damaged_stray_leaf() -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = store_with(5);
    {
        let db = redb_open(&path);
        let txn = db.begin_write().unwrap();
        txn.open_table(STRAY).unwrap().insert("x", STRAY_VALUE).unwrap();
        txn.commit().unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    let found: Vec<usize> = bytes
        .windows(STRAY_VALUE.len())
        .enumerate()
        .filter(|(_, window)| *window == STRAY_VALUE)
        .map(|(at, _)| at)
        .collect();
    assert!(!found.is_empty(), "the stray row is in the file");
    for at in found {
        bytes[at] ^= 1;
    }
    std::fs::write(&path, &bytes).unwrap();
    (dir, path)
}

/// How the page-check tests open a store.
fn checked_options(read_only: bool, check_integrity: bool, beside_replay: bool) -> OpenOptions {
    OpenOptions {
        wait_ms: 1_000,
        create: false,
        check_integrity,
        check_beside_replay: beside_replay,
        read_only,
        absent_is_empty: false,
        anchor_dir: None,
        server_clock: true,
        upgrade_schema: false,
    }
}

/// `verify` on a store opened without the check on open (the CLI's and `doctor`'s read-only
/// open, and an embedding program's writer) runs redb's check of every page itself, beside its
/// replay: a damaged page that neither the replay nor the comparison reads still fails it, as it
/// does the check on open. Its answer does not depend on how the store was opened.
#[test]
fn verify_of_a_store_opened_without_the_page_check_runs_it_beside_its_replay() {
    let (_dir, path) = store_with_a_damaged_stray_leaf();
    let with =
        |read_only: bool, check_integrity: bool| checked_options(read_only, check_integrity, false);
    // The check on open refuses the file.
    let checked = Engine::open(&path, with(true, true));
    assert!(matches!(checked, Err(Error::StoreCorrupt(_))), "{:?}", checked.err());
    // Opened without it, read-only or for writing, the store answers, and its verify runs the
    // check.
    for read_only in [true, false] {
        let engine = Engine::open(&path, with(read_only, false)).unwrap();
        assert_eq!(engine.head().unwrap().seq, 5);
        let verified = engine.ops().verify(Default::default());
        assert!(matches!(verified, Err(Error::StoreCorrupt(_))), "{read_only}: {verified:?}");
    }
    // The replay alone never meets the damaged leaf: a rebuild of the writer, which checks no
    // page unless its open asked it to (the next test), passes over it.
    let writer = Engine::open(&path, with(false, false)).unwrap();
    let report = writer.ops().rebuild().unwrap();
    assert_eq!((report.events, report.written), (5, 0), "{report:?}");
}

/// `rebuild` (the CLI's open: a writer with the check left to the rebuild) opens a store with a
/// damaged page, runs redb's check beside its replay and fails on it before writing anything:
/// the views it would have rewritten are as they were. A rebuild of a store opened without the
/// check at all passes over the same page.
#[test]
fn rebuild_with_the_page_check_beside_its_replay_refuses_a_damaged_page_and_writes_nothing() {
    let (_dir, path) = store_with_a_damaged_stray_leaf();
    // A row the rebuild would put back, so a rebuild that wrote anything would show.
    {
        let db = redb_open(&path);
        let txn = db.begin_write().unwrap();
        let mut views = txn.open_table(VIEWS).unwrap();
        let key = views.iter().unwrap().next().unwrap().unwrap().0.value().to_vec();
        views.remove(key.as_slice()).unwrap();
        drop(views);
        txn.commit().unwrap();
    }
    let views_before = table_rows(&path);
    let rebuilder = Engine::open(&path, checked_options(false, true, true)).unwrap();
    assert_eq!(rebuilder.head().unwrap().seq, 5);
    let rebuilt = rebuilder.ops().rebuild();
    assert!(matches!(rebuilt, Err(Error::StoreCorrupt(_))), "{rebuilt:?}");
    drop(rebuilder);
    assert_eq!(table_rows(&path), views_before, "the failed rebuild wrote a view");
    // Without any check, the same rebuild passes and puts the row back.
    let unchecked = Engine::open(&path, checked_options(false, false, false)).unwrap();
    let report = unchecked.ops().rebuild().unwrap();
    assert_eq!(report.written, 1, "{report:?}");
}

/// The views table's rows, read straight from the file.
fn table_rows(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = redb_open(path);
    let txn = db.begin_read().unwrap();
    let views = txn.open_table(VIEWS).unwrap();
    views
        .iter()
        .unwrap()
        .map(|row| {
            let (key, value) = row.unwrap();
            (key.value().to_vec(), value.value().to_vec())
        })
        .collect()
}
