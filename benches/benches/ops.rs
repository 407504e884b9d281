//! `ops` bench: operating the log at 100k and 1M events (issue 18): restore from a dump, dump,
//! verify, rebuild, an as-of read at the middle of the log, a backup, a checkpoint and a
//! compaction (and verify after it), each printed with its
//! per-event cost and its ratio to `verify` (one walk of the log) of the same run, and the
//! bytes of the store, its dump and its backup.
//!
//! The store is built by restoring a generated dump (records, puts, counters and capped lists
//! over a few thousand keys), so no figure waits on a million fsyncs. Never asserts on a
//! figure; exits non-zero only when it cannot run. `OPS_BENCH_EVENTS=10000,50000` picks other
//! sizes.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use hookstate_benches::{machine, ms, ratio, scratch_dir, utc_now, BenchResult};
use hookstate_engine::schema::format::{encode_event, genesis_hash, to_hex};
use hookstate_engine::schema::{Actor, Body, CoreEvent, Event, EventContent};
use hookstate_engine::{
    render_event, Call, Engine, OpenOptions, Query, DUMP_VERSION, LOG_FIELD_BYTES_DEFAULT,
};
use serde_json::json;

/// The sizes measured unless `OPS_BENCH_EVENTS` names others.
const SIZES: [u64; 2] = [100_000, 1_000_000];
/// Distinct record keys the generated log writes.
const KEYS: u64 = 5_000;
/// Rows the generated capped list keeps.
const LIST_CAP: u32 = 100;
/// The generated store's id.
const STORE_ID: [u8; 16] = [7; 16];
/// Time of the first generated event, UTC ms; one event per millisecond after it.
const START_MS: u64 = 1_780_000_000_000;
const SCOPE: &str = "bench";

fn sizes() -> BenchResult<Vec<u64>> {
    match std::env::var("OPS_BENCH_EVENTS") {
        Err(_) => Ok(SIZES.to_vec()),
        Ok(text) => text
            .split(',')
            .map(|n| {
                n.trim()
                    .parse::<u64>()
                    .map_err(|e| format!("OPS_BENCH_EVENTS {text:?}: {e}").into())
            })
            .collect(),
    }
}

/// The body of generated event `seq` (from 1): a record put, a counter add or a list row.
fn body(seq: u64, revs: &mut [u64], total: &mut i64) -> Body {
    match seq % 10 {
        0..=6 => {
            let key = usize::try_from(seq % KEYS).unwrap_or(0);
            revs[key] += 1;
            let value = format!("{{\"n\":{seq},\"tag\":\"t{}\"}}", seq % 97);
            Body::Core(CoreEvent::RecordPut { key: format!("k{key}"), value, rev: revs[key] })
        }
        7 | 8 => {
            *total += 1;
            Body::Core(CoreEvent::CounterAdded { name: "c".into(), delta: 1, value: *total })
        }
        _ => Body::Core(CoreEvent::ListAppended {
            list: "l".into(),
            row: format!("{seq}"),
            cap: LIST_CAP,
        }),
    }
}

/// The content of generated event `seq`, for a generator at its state.
fn content(seq: u64, revs: &mut [u64], total: &mut i64) -> EventContent {
    EventContent {
        at_ms: START_MS + seq,
        actor: Actor { session: Some("bench".into()), ..Actor::default() },
        scope: SCOPE.into(),
        idem_key: None,
        body: body(seq, revs, total),
        request: None,
    }
}

/// Writes a dump of `events` generated events to `path`: one pass for the head the header
/// names, one that streams the lines.
fn generate(path: &Path, events: u64) -> BenchResult<()> {
    let genesis = genesis_hash(&STORE_ID);
    let keys = usize::try_from(KEYS)?;
    let (mut revs, mut total, mut prev) = (vec![0u64; keys], 0i64, genesis);
    for seq in 1..=events {
        prev = encode_event(seq, &prev, &content(seq, &mut revs, &mut total)).1;
    }
    let mut out = BufWriter::new(File::create(path)?);
    let header = json!({
        "hookstate_dump": DUMP_VERSION, "store_id": to_hex(&STORE_ID), "format": 2,
        "genesis": to_hex(&genesis), "head": { "seq": events, "hash": to_hex(&prev) },
    });
    writeln!(out, "{header}")?;
    let (mut revs, mut total, mut prev) = (vec![0u64; keys], 0i64, genesis);
    for seq in 1..=events {
        let content = content(seq, &mut revs, &mut total);
        let (record, hash) = encode_event(seq, &prev, &content);
        let event = Event { seq, prev, hash, content };
        let line = json!({
            "seq": seq, "prev": to_hex(&prev), "hash": to_hex(&hash), "record": to_hex(&record),
            "event": render_event(&event, LOG_FIELD_BYTES_DEFAULT),
        });
        writeln!(out, "{line}")?;
        prev = hash;
    }
    out.flush()?;
    Ok(())
}

fn timed<T>(f: impl FnOnce() -> BenchResult<T>) -> BenchResult<(T, Duration)> {
    let start = Instant::now();
    let value = f()?;
    Ok((value, start.elapsed()))
}

fn bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn run(dir: &Path, events: u64) -> BenchResult<()> {
    let source = dir.join(format!("generated-{events}.jsonl"));
    generate(&source, events)?;
    let db = dir.join(format!("store-{events}/state.redb"));
    let (_, restore) = timed(|| {
        Ok(hookstate_engine::restore(
            &db,
            &source,
            None,
            &mut BufReader::new(File::open(&source)?),
        )?)
    })?;
    let engine = Engine::open(&db, OpenOptions { create: false, ..OpenOptions::default() })?;
    let dumped = dir.join(format!("dump-{events}.jsonl"));
    let (_, dump) = timed(|| {
        let mut out = BufWriter::new(File::create(&dumped)?);
        engine.ops().dump(&mut |line| writeln!(out, "{line}").is_ok(), &mut |_, _| {})?;
        Ok(out.flush()?)
    })?;
    let (_, verify) = timed(|| Ok(engine.ops().verify(Default::default())?))?;
    let (_, rebuild) = timed(|| Ok(engine.ops().rebuild()?))?;
    let middle = events / 2;
    let (_, as_of) = timed(|| {
        let past = engine.ops().at_seq(middle)?;
        Ok(past.query(SCOPE, &Query::KvGet { key: "k1".into() }, START_MS + events)?)
    })?;
    let backup_path = dir.join(format!("backup-{events}/state.redb"));
    let (_, backup) = timed(|| Ok(engine.ops().backup(&backup_path)?))?;
    let mut engine = engine;
    let call = Call::at(SCOPE, START_MS + events + 1);
    let (_, checkpoint) = timed(|| Ok(engine.ops().checkpoint(&call)?))?;
    let before = bytes(&db);
    let (compacted, compact) =
        timed(|| Ok(hookstate_engine::compact(&mut engine, 0, START_MS + events + 2)?))?;
    let (_, verify_after) = timed(|| Ok(engine.ops().verify(Default::default())?))?;
    let per_event_us = |d: Duration| d.as_secs_f64() * 1e6 / events as f64;
    println!(
        "\n{events} events: store {before} bytes (before compact), dump {} bytes, backup {} bytes",
        bytes(&dumped),
        bytes(&backup_path)
    );
    println!("{:<34} {:>10} {:>12} {:>12}", "step", "ms", "us/event", "x verify");
    for (label, took) in [
        ("restore (from a dump)", restore),
        ("dump", dump),
        ("verify (chain, anchor, views)", verify),
        ("rebuild", rebuild),
        ("as-of read at the middle seq", as_of),
        ("backup (live, consistent)", backup),
        ("checkpoint", checkpoint),
        ("compact (drop events, compact file)", compact),
        ("verify after compact", verify_after),
    ] {
        println!(
            "{label:<34} {:>10.1} {:>12.2} {:>12.2}",
            ms(took),
            per_event_us(took),
            ratio(ms(took), ms(verify))
        );
    }
    println!(
        "compact dropped {} events: store {before} -> {} bytes ({:.1}x smaller)",
        compacted.dropped,
        compacted.file_bytes_after,
        ratio(before as f64, compacted.file_bytes_after as f64)
    );
    for path in [&source, &dumped] {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = scratch_dir(&base, "ops-bench")?;
    println!("ops bench, {}; {}", utc_now(), machine(dir.path()));
    println!("reproduce: cargo bench -p hookstate-benches --bench ops (OPS_BENCH_EVENTS=N,M for other sizes)");
    for events in sizes()? {
        run(dir.path(), events)?;
    }
    Ok(())
}
