//! The scale bench: what a hook call costs on an empty store against stores holding 100k and 1M
//! events of history (finished work) and of live work (pending comments in accumulate projects,
//! ready queue items, pending micro-proposals in other state directories), in the same run:
//! idle `hook stop`, `queue claim` (next) and a mirrored hermit verb; claim at 200 and 5,000
//! ready items; file bytes per event, and what the tables hold (redb's table statistics);
//! `verify` and `rebuild` time and peak memory; and the claims bench's per-call and
//! K = 1, 2, 4, 8 tables, with the fdatasyncs of one mutating call (per call, and forwarded to a
//! `hookstate serve`: the CLI's and the server's, summed).
//!
//! Stores are built with the engine's bulk loader (`hookstate_engine::append_unchecked`, `testing`
//! feature) in batched transactions, so a 1M-event store takes seconds to minutes. Prints one
//! summary table; never passes or fails on timing. `HOOKSTATE_SCALE_SIZES` (default
//! `100000,1000000`) picks the store sizes. With `HOOKSTATE_BASELINE_BIN` naming another
//! `hookstate` binary (an earlier build), its `verify` is timed on the same stores in the same
//! run, for a before/after ratio. With `HOOKSTATE_SCALE_KEEP=1` the scratch directory and its
//! stores are left in place (its path is printed), for profiling a verb on them. With
//! `HOOKSTATE_SCALE_AUDIT_ONLY=1` only the stores are built and `verify` and `rebuild` timed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use hookstate_benches::{
    locate_hookstate, machine, ms, now_ms, per_second, ratio, scratch_dir, timed, utc_now,
    BenchResult, Sample, CLEARED_ENV, LEGACY_CLAIM,
};
use hookstate_engine::schema::feedback::{FeedbackEvent, FileKind, JsonDoc, Style};
use hookstate_engine::schema::proposals::{MicroQueued, ProposalsEvent};
use hookstate_engine::schema::{Body, CoreEvent};
use hookstate_engine::{Call, Command as CoreCommand, Engine, Expect, OpenOptions};
use serde_json::Value;

/// Store sizes (events of history, and of live work) unless `HOOKSTATE_SCALE_SIZES` says.
const SIZES_DEFAULT: [usize; 2] = [100_000, 1_000_000];
const SIZES_VAR: &str = "HOOKSTATE_SCALE_SIZES";
/// Set to 1, the stores are kept after the run.
const KEEP_VAR: &str = "HOOKSTATE_SCALE_KEEP";
/// Set to 1, only the stores are built and audited (`verify`, `rebuild`).
const AUDIT_ONLY_VAR: &str = "HOOKSTATE_SCALE_AUDIT_ONLY";
/// Events per bulk transaction while building a store.
const BATCH: usize = 50_000;
/// Measured calls per verb and store (after the warmup).
const CALLS: usize = 25;
const WARMUP: usize = 3;
/// Comments per accumulate project: moonshine's per-project limit.
const COMMENTS_PER_PROJECT: usize = 10_000;
/// Live items per queue: the engine's per-queue limit.
const ITEMS_PER_QUEUE: usize = 100_000;
/// Pending micro-proposals per hermit state directory (upstream's queue limit).
const MICRO_PER_SCOPE: usize = 1_000;
/// Depths of the claim-depth pair (Done when: claim at 5,000 ≤ 1.3× claim at 200).
const DEPTHS: [usize; 2] = [200, 5_000];
/// Events of each kind for the bytes-per-event stores, one commit per call: enough that the
/// file's free pages (it grows in steps of about half its length) weigh less than at 3,000.
const BYTES_EVENTS: usize = 30_000;
/// Alternating rounds of the per-call table.
const PER_CALL_ROUNDS: usize = 100;
/// Items per concurrent claim race.
const RACE_ITEMS: usize = 200;
const CONCURRENCY: [usize; 4] = [1, 2, 4, 8];
const LEASE_MS: u64 = 600_000;
const SCOPE: &str = "bench";
const QUEUE: &str = "work";
/// The listening project every store has: listen mode with a fresh listener heartbeat and
/// nothing to deliver, so an idle Stop hook prints nothing.
const LISTENING: &str = "listening";
const STOP_PAYLOAD: &str =
    r#"{"session_id":"bench-session","cwd":"/","hook_event_name":"Stop","stop_hook_active":false}"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Empty,
    History,
    Live,
}

struct Store {
    label: String,
    db: PathBuf,
    hermit: PathBuf,
    events: u64,
    bytes: u64,
    built: Duration,
    micro_next: usize,
}

fn main() -> BenchResult<()> {
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "scale-")?;
    let keep = std::env::var(KEEP_VAR).is_ok_and(|v| v == "1");
    let audit_only = std::env::var(AUDIT_ONLY_VAR).is_ok_and(|v| v == "1");
    let dir = scratch.path();
    let sizes = sizes()?;
    println!("hookstate `scale` bench — {}", utc_now());
    println!("machine: {}", machine(dir));
    println!("scratch: {}", dir.display());
    let located = locate_hookstate().map_err(|looked| {
        format!("no hookstate binary ({looked}): run `cargo build --release -p hookstate` first")
    })?;
    let bin = located.path.clone();
    println!("hookstate binary: {} ({})", bin.display(), located.how);
    println!("sizes: {sizes:?} events ({SIZES_VAR}); {CALLS} calls per verb and store");
    println!();

    let mut stores = vec![build(dir, Kind::Empty, 0)?];
    for &n in &sizes {
        stores.push(build(dir, Kind::History, n)?);
        stores.push(build(dir, Kind::Live, n)?);
    }
    if audit_only {
        audit(&bin, &stores)?;
        if keep {
            println!("stores kept ({KEEP_VAR}=1): {}", scratch.keep().display());
        }
        return Ok(());
    }
    let calls = measure_calls(&bin, dir, &mut stores)?;
    let depth = claim_depths(&bin, dir)?;
    let bytes = bytes_per_event(dir)?;
    let audits = audit(&bin, &stores)?;
    let per_call = per_call(&bin, dir)?;
    let syncs = fdatasyncs(&bin, dir)?;
    let mut races = Vec::new();
    for k in CONCURRENCY {
        races.push(race(&bin, dir, k)?);
    }
    summary(&stores, &calls, &depth, &bytes, &audits, &per_call, &syncs, &races);
    if keep {
        println!("stores kept ({KEEP_VAR}=1): {}", scratch.keep().display());
    }
    Ok(())
}

fn sizes() -> BenchResult<Vec<usize>> {
    match std::env::var(SIZES_VAR) {
        Err(_) => Ok(SIZES_DEFAULT.to_vec()),
        Ok(text) => text
            .split(',')
            .map(|t| t.trim().parse::<usize>().map_err(|e| format!("{SIZES_VAR}: {t:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Into::into),
    }
}

fn call(scope: &str) -> Call {
    Call::at(scope, now_ms())
}

/// A UTC timestamp `ms` after the epoch in the web's spelling (`…T…Z`, milliseconds).
fn stamp(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

fn json_str(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

fn doc(fields: &[(&str, String)], style: Style) -> JsonDoc {
    JsonDoc { fields: fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(), style }
}

fn feedback(project: &str, event: FeedbackEvent) -> (String, Body) {
    (format!("moonshine:{project}"), Body::Feedback(event))
}

fn comment_added(project: &str, id: &str, at: u64) -> (String, Body) {
    let target = r#"{"kind":"block","path":"posts/a.md","excerpt":"the quick brown fox"}"#;
    let fields = [
        ("id", json_str(id)),
        ("ts", json_str(&stamp(at))),
        ("project", json_str(project)),
        ("status", json_str("pending")),
        ("target", target.to_owned()),
        ("comment", json_str("Could this sentence say what the figure shows?")),
        ("reply", "null".into()),
        ("deliveredAt", "null".into()),
        ("addressedAt", "null".into()),
    ];
    let event = FeedbackEvent::CommentAdded { id: id.into(), doc: doc(&fields, Style::Pretty) };
    feedback(project, event)
}

/// A project's control, adapter and (for a listening one) a heartbeat fresh for days.
fn project_files(project: &str, mode: &str, now: u64) -> Vec<(String, Body)> {
    let control =
        doc(&[("mode", json_str(mode)), ("updatedAt", json_str(&stamp(now)))], Style::Pretty);
    let adapter = doc(
        &[
            ("harness", json_str("claude-code")),
            ("version", json_str("adapter")),
            ("installedAt", json_str(&stamp(now))),
        ],
        Style::Compact,
    );
    let mut out = vec![
        feedback(
            project,
            FeedbackEvent::FileWritten { file: FileKind::Control, doc: control, request: 0 },
        ),
        feedback(
            project,
            FeedbackEvent::FileWritten { file: FileKind::Adapter, doc: adapter, request: 0 },
        ),
    ];
    if mode == "listen" {
        let heartbeat = doc(
            &[
                ("harness", json_str("claude-code")),
                ("mode", json_str("listen")),
                ("ts", json_str(&stamp(now))),
                ("intervalSec", "86400".into()),
                ("pending", "0".into()),
            ],
            Style::Compact,
        );
        out.push(feedback(
            project,
            FeedbackEvent::FileWritten { file: FileKind::Heartbeat, doc: heartbeat, request: 0 },
        ));
    }
    out
}

fn core(scope: &str, event: CoreEvent) -> (String, Body) {
    (scope.to_owned(), Body::Core(event))
}

fn push(queue: &str, item: &str) -> (String, Body) {
    core(
        SCOPE,
        CoreEvent::ItemPushed {
            queue: queue.into(),
            item: item.into(),
            payload: r#"{"task":"bench"}"#.into(),
            for_session: None,
            max_deliveries: 5,
        },
    )
}

fn micro_id(n: usize) -> String {
    format!("MP-20260101-{n}")
}

fn micro_queued(scope: &str, n: usize, now: u64) -> (String, Body) {
    let event = ProposalsEvent::MicroQueued(MicroQueued {
        id: micro_id(n),
        tier: 1,
        question: format!("Should the nightly job {n} move to the weekend?"),
        options: None,
        on_resolve: None,
        ts: stamp(now),
    });
    (scope.to_owned(), Body::Proposals(event))
}

fn micro_resolved(scope: &str, n: usize, now: u64) -> (String, Body) {
    let event = ProposalsEvent::MicroResolved {
        id: micro_id(n),
        action: "approved".into(),
        question: format!("Should the nightly job {n} move to the weekend?"),
        answer: None,
        ts: stamp(now),
        channel: None,
    };
    (scope.to_owned(), Body::Proposals(event))
}

fn hermit_scope(dir: &Path) -> String {
    format!("hermit:{}", dir.display())
}

/// Appends `events` in batches; returns how many.
fn load(engine: &Engine, events: impl Iterator<Item = (String, Body)>) -> BenchResult<u64> {
    let mut batch = Vec::with_capacity(BATCH);
    let mut count = 0u64;
    for event in events {
        batch.push(event);
        if batch.len() == BATCH {
            hookstate_engine::append_unchecked(engine, &call(SCOPE), &batch)?;
            count += batch.len() as u64;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        hookstate_engine::append_unchecked(engine, &call(SCOPE), &batch)?;
        count += batch.len() as u64;
    }
    Ok(count)
}

/// The rows every store has: the listening project, the measured queue's ready items and the
/// measured hermit directory's pending micro-proposals.
fn fixtures(engine: &Engine, hermit: &Path, now: u64) -> BenchResult<u64> {
    let calls = WARMUP + CALLS;
    let scope = hermit_scope(hermit);
    let events = project_files(LISTENING, "listen", now)
        .into_iter()
        .chain((0..calls * 2).map(|n| push(QUEUE, &format!("fixture-{n:06}"))))
        .chain((1..=calls).map(|n| micro_queued(&scope, n, now)));
    load(engine, events)
}

/// History: addressed comments in accumulate projects (3 events each, 60%), acked queue items
/// (3 events each, 30%), resolved micro-proposals in other state directories (2 events, 10%).
fn history(engine: &Engine, n: usize, now: u64) -> BenchResult<u64> {
    let comments = n * 6 / 10 / 3;
    let cycles = n * 3 / 10 / 3;
    let micros = n / 10 / 2;
    let projects = comments.div_ceil(COMMENTS_PER_PROJECT);
    let files = (0..projects).flat_map(|p| project_files(&format!("acc{p:04}"), "accumulate", now));
    let mut count = load(engine, files)?;
    let comment_events = (0..comments).flat_map(|c| {
        let project = format!("acc{:04}", c / COMMENTS_PER_PROJECT);
        let id = format!("fb_{c:08}");
        let token = (c % COMMENTS_PER_PROJECT + 1) as u64;
        let at = now - 30 * 86_400_000 + c as u64;
        [
            comment_added(&project, &id, at),
            feedback(
                &project,
                FeedbackEvent::CommentClaimed {
                    id: id.clone(),
                    token,
                    holder: "stop-hook".into(),
                    session: Some("old-session".into()),
                    delivered_at: stamp(at + 1000),
                },
            ),
            feedback(
                &project,
                FeedbackEvent::CommentReplied {
                    id,
                    token,
                    reply: "Done: the sentence now names the figure.".into(),
                    addressed_at: stamp(at + 2000),
                },
            ),
        ]
    });
    count += load(engine, comment_events)?;
    let queue_events = (0..cycles).flat_map(|c| {
        let item = format!("done-{c:08}");
        let token = c as u64 + 1;
        [
            push("done", &item),
            core(
                SCOPE,
                CoreEvent::ItemClaimed {
                    queue: "done".into(),
                    item: item.clone(),
                    holder: "worker".into(),
                    session: None,
                    token,
                    lease_until_ms: now,
                    delivery: 1,
                },
            ),
            core(SCOPE, CoreEvent::ItemAcked { queue: "done".into(), item, token }),
        ]
    });
    count += load(engine, queue_events)?;
    let micro_events = (0..micros).flat_map(|m| {
        let scope = format!("hermit:/bench/other-{:04}/.claude-code-hermit", m / MICRO_PER_SCOPE);
        let n = m % MICRO_PER_SCOPE + 1;
        [micro_queued(&scope, n, now), micro_resolved(&scope, n, now)]
    });
    count += load(engine, micro_events)?;
    Ok(count)
}

/// Live work: pending comments in accumulate projects (50%), ready items in other queues
/// (40%), pending micro-proposals in other state directories (10%).
fn live(engine: &Engine, n: usize, now: u64) -> BenchResult<u64> {
    let comments = n / 2;
    let items = n * 4 / 10;
    let micros = n / 10;
    let projects = comments.div_ceil(COMMENTS_PER_PROJECT);
    let files = (0..projects).flat_map(|p| project_files(&format!("acc{p:04}"), "accumulate", now));
    let mut count = load(engine, files)?;
    let comment_events = (0..comments).map(|c| {
        let project = format!("acc{:04}", c / COMMENTS_PER_PROJECT);
        comment_added(&project, &format!("fb_{c:08}"), now - 86_400_000 + c as u64)
    });
    count += load(engine, comment_events)?;
    let item_events = (0..items)
        .map(|i| push(&format!("live{:03}", i / ITEMS_PER_QUEUE), &format!("item-{i:08}")));
    count += load(engine, item_events)?;
    let micro_events = (0..micros).map(|m| {
        let scope = format!("hermit:/bench/live-{:04}/.claude-code-hermit", m / MICRO_PER_SCOPE);
        micro_queued(&scope, m % MICRO_PER_SCOPE + 1, now)
    });
    count += load(engine, micro_events)?;
    Ok(count)
}

fn build(dir: &Path, kind: Kind, n: usize) -> BenchResult<Store> {
    let label = match kind {
        Kind::Empty => "empty".to_owned(),
        Kind::History => format!("{} history", short(n)),
        Kind::Live => format!("{} live", short(n)),
    };
    let name = label.replace(' ', "-");
    let db = dir.join(format!("{name}.redb"));
    let hermit = dir.join(format!("{name}-hermit/.claude-code-hermit"));
    std::fs::create_dir_all(&hermit)?;
    let start = Instant::now();
    let engine = Engine::open(&db, OpenOptions::default())?;
    let now = now_ms();
    let mut events = fixtures(&engine, &hermit, now)?;
    events += match kind {
        Kind::Empty => 0,
        Kind::History => history(&engine, n, now)?,
        Kind::Live => live(&engine, n, now)?,
    };
    drop(engine);
    let built = start.elapsed();
    let bytes = std::fs::metadata(&db)?.len();
    println!(
        "built {label:<14} {events:>9} events in {:>6.1} s ({:>6.1} µs/event), {:>7.1} MiB, \
         {:>5.0} B/event",
        built.as_secs_f64(),
        built.as_secs_f64() * 1e6 / events.max(1) as f64,
        bytes as f64 / 1048576.0,
        bytes as f64 / events.max(1) as f64
    );
    Ok(Store { label, db, hermit, events, bytes, built, micro_next: 1 })
}

fn short(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn hookstate(bin: &Path, db: &Path) -> Command {
    let mut command = Command::new(bin);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    command.arg("--db").arg(db);
    command
}

fn claim_command(bin: &Path, db: &Path, queue: &str) -> Command {
    let mut command = hookstate(bin, db);
    command.args(["--scope", SCOPE, "queue", "claim", queue, "--lease-ms"]);
    command.arg(LEASE_MS.to_string());
    command
}

fn claimed(output: &Output) -> bool {
    output.status.success()
        && serde_json::from_slice::<Value>(&output.stdout)
            .is_ok_and(|v| v["claimed"] == Value::Bool(true))
}

/// Runs `command` with `stdin` as its input, timed from spawn to exit.
fn timed_with_stdin(command: &mut Command, stdin: &str) -> std::io::Result<(Output, Duration)> {
    use std::io::Write as _;
    let start = Instant::now();
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    Ok((output, start.elapsed()))
}

fn stop_call(bin: &Path, store: &Store, home: &Path) -> BenchResult<(Duration, bool)> {
    let mut command = hookstate(bin, &store.db);
    command.args(["hook", "stop"]).env("MOONSHINE_HOME", home);
    let (output, took) = timed_with_stdin(&mut command, STOP_PAYLOAD)?;
    Ok((took, output.status.success() && output.stdout.is_empty()))
}

fn hermit_call(bin: &Path, store: &mut Store) -> BenchResult<(Duration, bool)> {
    let id = micro_id(store.micro_next);
    store.micro_next += 1;
    let mut command = hookstate(bin, &store.db);
    command.args(["--format", "verdict", "--mirror"]).arg(&store.hermit);
    command.args(["proposals", "--dir"]).arg(&store.hermit);
    command.args(["micro", "resolve", &id, "--action", "approved"]);
    let (output, took) = timed(&mut command)?;
    let ok = output.status.success() && output.stdout.starts_with(b"RESOLVED|");
    Ok((took, ok))
}

/// Per store: idle Stop hook, claim-next, mirrored hermit resolve; rounds interleave the stores.
struct Calls {
    stop: Vec<Sample>,
    claim: Vec<Sample>,
    hermit: Vec<Sample>,
    failed: Vec<usize>,
}

fn measure_calls(bin: &Path, dir: &Path, stores: &mut [Store]) -> BenchResult<Calls> {
    println!("\n== calls: {CALLS} rounds (+{WARMUP} warmup) over {} stores", stores.len());
    let home = dir.join("moonshine-home");
    std::fs::create_dir_all(&home)?;
    let mut times = vec![[Vec::new(), Vec::new(), Vec::new()]; stores.len()];
    let mut failed = vec![0usize; stores.len()];
    for round in 0..WARMUP + CALLS {
        for (index, store) in stores.iter_mut().enumerate() {
            let (stop, stop_ok) = stop_call(bin, store, &home)?;
            let (claim_out, claim) = timed(&mut claim_command(bin, &store.db, QUEUE))?;
            let (hermit, hermit_ok) = hermit_call(bin, store)?;
            if round >= WARMUP {
                times[index][0].push(stop);
                times[index][1].push(claim);
                times[index][2].push(hermit);
                failed[index] += usize::from(!stop_ok)
                    + usize::from(!claimed(&claim_out))
                    + usize::from(!hermit_ok);
            }
        }
    }
    let mut calls = Calls { stop: Vec::new(), claim: Vec::new(), hermit: Vec::new(), failed };
    for [stop, claim, hermit] in times {
        calls.stop.push(Sample::new(stop));
        calls.claim.push(Sample::new(claim));
        calls.hermit.push(Sample::new(hermit));
    }
    for (index, store) in stores.iter().enumerate() {
        println!(
            "   {:<14} hook stop p50 {:>8.2} ms | queue claim p50 {:>8.2} ms | micro resolve \
             (mirrored) p50 {:>8.2} ms | failed {}",
            store.label,
            ms(calls.stop[index].p50()),
            ms(calls.claim[index].p50()),
            ms(calls.hermit[index].p50()),
            calls.failed[index]
        );
    }
    Ok(calls)
}

/// Claim-next at 200 and at 5,000 ready items, alternating.
fn claim_depths(bin: &Path, dir: &Path) -> BenchResult<Vec<Sample>> {
    let mut dbs = Vec::new();
    for depth in DEPTHS {
        let db = dir.join(format!("depth-{depth}.redb"));
        let engine = Engine::open(&db, OpenOptions::default())?;
        let items = depth + WARMUP + CALLS;
        load(&engine, (0..items).map(|n| push(QUEUE, &format!("d-{n:06}"))))?;
        dbs.push(db);
    }
    let mut times = vec![Vec::new(); dbs.len()];
    let mut failed = 0;
    for round in 0..WARMUP + CALLS {
        for (index, db) in dbs.iter().enumerate() {
            let (output, took) = timed(&mut claim_command(bin, db, QUEUE))?;
            if round >= WARMUP {
                times[index].push(took);
                failed += usize::from(!claimed(&output));
            }
        }
    }
    let samples: Vec<Sample> = times.into_iter().map(Sample::new).collect();
    println!(
        "\n== claim depth: {} ready p50 {:.2} ms, {} ready p50 {:.2} ms ({:.2}x), failed {failed}",
        DEPTHS[0],
        ms(samples[0].p50()),
        DEPTHS[1],
        ms(samples[1].p50()),
        ratio(ms(samples[1].p50()), ms(samples[0].p50()))
    );
    Ok(samples)
}

/// File bytes per event: kv puts and claim cycles (push, claim, ack) one commit per call, in
/// process, as hooks commit them; each with the size of the store before its first event, so
/// the table shows the growth per event too (the fixed part weighs less as the log grows).
fn bytes_per_event(dir: &Path) -> BenchResult<Bytes> {
    let mut out = Vec::new();
    let empty = dir.join("bytes-empty.redb");
    drop(Engine::open(&empty, OpenOptions::default())?);
    let empty = std::fs::metadata(&empty)?.len();
    let kv = dir.join("bytes-kv.redb");
    {
        let engine = Engine::open(&kv, OpenOptions::default())?;
        for n in 0..BYTES_EVENTS {
            let command = CoreCommand::KvPut {
                key: format!("key-{}", n % 100),
                value: format!(r#"{{"n":{n},"note":"a small hook record"}}"#),
                expect: Expect::Any,
            };
            engine.execute(&call(SCOPE), &command)?;
        }
    }
    out.push(("kv put", BYTES_EVENTS as u64, std::fs::metadata(&kv)?.len(), tables(&kv)?));
    let claims = dir.join("bytes-claims.redb");
    let mut events = 0u64;
    {
        let engine = Engine::open(&claims, OpenOptions::default())?;
        for n in 0..BYTES_EVENTS / 3 {
            let item = format!("item-{n:06}");
            let push = CoreCommand::QueuePush {
                queue: QUEUE.into(),
                item: item.clone(),
                payload: r#"{"task":"bench"}"#.into(),
                for_session: None,
                max_deliveries: 5,
            };
            engine.execute(&call(SCOPE), &push)?;
            let claim = CoreCommand::QueueClaim {
                queue: QUEUE.into(),
                item: None,
                holder: "worker".into(),
                lease_ms: LEASE_MS,
            };
            let outcome = engine.execute(&call(SCOPE), &claim)?;
            let token = outcome.result.get("token").and_then(Value::as_u64).unwrap_or_default();
            let ack = CoreCommand::QueueAck { queue: QUEUE.into(), item, token };
            engine.execute(&call(SCOPE), &ack)?;
            events += 3;
        }
    }
    let size = std::fs::metadata(&claims)?.len();
    out.push(("claim cycle (push, claim, ack)", events, size, tables(&claims)?));
    let bytes = Bytes { empty, rows: out };
    for &(what, events, size, tables) in &bytes.rows {
        let (all, grown) = bytes.per_event(size, events);
        let per = |n: u64| n as f64 / events as f64;
        println!(
            "\n== bytes: {what}: {events} events, {size} bytes, {all:.0} B/event, {grown:.0} \
             B/event over the empty store's {empty}; table pages {:.0} B/event, log records \
             {:.0} B/event",
            per(tables.pages),
            per(tables.log_stored)
        );
    }
    Ok(bytes)
}

/// The bytes-per-event stores (what, events, file bytes, what its tables hold) and the size of
/// a store with no event.
struct Bytes {
    empty: u64,
    rows: Vec<(&'static str, u64, u64, Tables)>,
}

/// What a store's tables hold, from redb's own table statistics: the file's length also counts
/// free pages, which come in growth steps far larger than a few thousand events, so these say
/// what each event costs where the file length cannot.
#[derive(Clone, Copy, Default)]
struct Tables {
    /// The log's records: keys (8-byte seqs) and values (the encoded events).
    log_stored: u64,
    /// Every page of the log, views and meta tables: stored bytes, branch keys and other
    /// metadata, and the unused parts of their pages.
    pages: u64,
}

fn tables(path: &Path) -> BenchResult<Tables> {
    use hookstate_engine::schema::format::{LOG_TABLE, META_TABLE, VIEWS_TABLE};
    use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition, TableStats};
    const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new(LOG_TABLE);
    const VIEWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new(VIEWS_TABLE);
    const META: TableDefinition<&str, &[u8]> = TableDefinition::new(META_TABLE);
    let db = redb::Database::builder()
        .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
        .open(path)?;
    let txn = db.begin_read()?;
    let pages = |stats: TableStats| {
        stats.stored_bytes() + stats.metadata_bytes() + stats.fragmented_bytes()
    };
    let log = txn.open_table(LOG)?.stats()?;
    let log_stored = log.stored_bytes();
    let all =
        pages(log) + pages(txn.open_table(VIEWS)?.stats()?) + pages(txn.open_table(META)?.stats()?);
    Ok(Tables { log_stored, pages: all })
}

impl Bytes {
    /// A store's bytes per event, whole and over the empty store.
    fn per_event(&self, size: u64, events: u64) -> (f64, f64) {
        let events = events as f64;
        (size as f64 / events, size.saturating_sub(self.empty) as f64 / events)
    }
}

/// `verify` and `rebuild` of every non-empty store: seconds and peak RSS (`/usr/bin/time`).
struct Audit {
    label: String,
    events: u64,
    verify: Option<(f64, u64)>,
    rebuild: Option<(f64, u64)>,
    /// `verify` by the baseline binary (`HOOKSTATE_BASELINE_BIN`), on the same store.
    baseline_verify: Option<(f64, u64)>,
}

/// The environment variable naming an earlier `hookstate` binary whose `verify` is timed beside.
const BASELINE_VAR: &str = "HOOKSTATE_BASELINE_BIN";

fn time_verb(bin: &Path, db: &Path, verb: &str) -> BenchResult<Option<(f64, u64)>> {
    if !Path::new("/usr/bin/time").is_file() {
        return Ok(None);
    }
    let mut command = Command::new("/usr/bin/time");
    command.args(["-f", "TIME %e %M"]).arg(bin).arg("--db").arg(db).arg(verb);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    let output = command.stdin(Stdio::null()).output()?;
    if !output.status.success() {
        println!("   {verb} failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        return Ok(None);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr.lines().rev().find(|l| l.starts_with("TIME ")).unwrap_or_default();
    let mut parts = line.split_whitespace().skip(1);
    let secs = parts.next().and_then(|s| s.parse::<f64>().ok()).unwrap_or_default();
    let kib = parts.next().and_then(|s| s.parse::<u64>().ok()).unwrap_or_default();
    Ok(Some((secs, kib)))
}

fn audit(bin: &Path, stores: &[Store]) -> BenchResult<Vec<Audit>> {
    println!();
    let mut out = Vec::new();
    let baseline = std::env::var_os(BASELINE_VAR).filter(|b| !b.is_empty()).map(PathBuf::from);
    for store in stores.iter().filter(|s| s.events > 10_000) {
        let baseline_verify = match &baseline {
            Some(old) => time_verb(old, &store.db, "verify")?,
            None => None,
        };
        let verify = time_verb(bin, &store.db, "verify")?;
        let rebuild = time_verb(bin, &store.db, "rebuild")?;
        let show = |r: &Option<(f64, u64)>| {
            r.map_or("n/a".to_owned(), |(s, k)| format!("{s:.2} s, {:.0} MiB", k as f64 / 1024.0))
        };
        println!(
            "== audit {:<14} verify {} | rebuild {}{}",
            store.label,
            show(&verify),
            show(&rebuild),
            baseline.as_ref().map_or(String::new(), |_| format!(
                " | baseline verify {}",
                show(&baseline_verify)
            ))
        );
        let label = store.label.clone();
        out.push(Audit { label, events: store.events, verify, rebuild, baseline_verify });
    }
    Ok(out)
}

/// The per-call table: alternating rounds of `/bin/true`, `kv get`, `kv put`, `queue claim` and
/// the legacy bash claim.
const PER_CALL_LABELS: [&str; 5] = [
    "/bin/true",
    "hookstate kv get (read)",
    "hookstate kv put",
    "hookstate queue claim",
    "legacy bash claim (not durable)",
];

fn per_call(bin: &Path, dir: &Path) -> BenchResult<(Vec<Sample>, Vec<usize>)> {
    let db = dir.join("per-call.redb");
    {
        let engine = Engine::open(&db, OpenOptions::default())?;
        let items = PER_CALL_ROUNDS + WARMUP;
        load(&engine, (0..items).map(|n| push(QUEUE, &format!("p-{n:06}"))))?;
        let put = CoreCommand::KvPut { key: "k".into(), value: "1".into(), expect: Expect::Any };
        engine.execute(&call(SCOPE), &put)?;
    }
    let legacy = dir.join("legacy-claims");
    std::fs::create_dir_all(&legacy)?;
    for n in 0..PER_CALL_ROUNDS + WARMUP {
        let id = format!("item-{n:06}");
        let text =
            format!("{{\"id\":\"{id}\",\"status\":\"pending\",\"payload\":{{\"n\":{n}}}}}\n");
        std::fs::write(legacy.join(format!("{id}.json")), text)?;
    }
    let mut times = vec![Vec::new(); PER_CALL_LABELS.len()];
    let mut failed = vec![0usize; PER_CALL_LABELS.len()];
    for round in 0..WARMUP + PER_CALL_ROUNDS {
        for step in 0..PER_CALL_LABELS.len() {
            let which = (round + step) % PER_CALL_LABELS.len();
            let mut command = match which {
                0 => Command::new("/bin/true"),
                1 => {
                    let mut c = hookstate(bin, &db);
                    c.args(["--scope", SCOPE, "kv", "get", "k"]);
                    c
                }
                2 => {
                    let mut c = hookstate(bin, &db);
                    c.args(["--scope", SCOPE, "kv", "put", "k", &round.to_string()]);
                    c
                }
                3 => claim_command(bin, &db, QUEUE),
                _ => {
                    let mut c = Command::new("bash");
                    c.args(["-c", LEGACY_CLAIM, "legacy-claim"]).arg(&legacy);
                    c
                }
            };
            let (output, took) = timed(&mut command)?;
            let ok = match which {
                3 => claimed(&output),
                4 => String::from_utf8_lossy(&output.stdout).contains("\"claimed\":true"),
                _ => output.status.success(),
            };
            if round >= WARMUP {
                times[which].push(took);
                failed[which] += usize::from(!ok);
            }
        }
    }
    println!();
    let samples: Vec<Sample> = times.into_iter().map(Sample::new).collect();
    for (index, label) in PER_CALL_LABELS.iter().enumerate() {
        println!(
            "== per call {label:<32} p50 {:>7.3} ms p99 {:>7.3} ms failed {}",
            ms(samples[index].p50()),
            ms(samples[index].p99()),
            failed[index]
        );
    }
    Ok((samples, failed))
}

/// Sync calls of one `queue claim` and one `kv put` process, counted by `strace -f -c`.
/// The sync calls `strace -c` counted, by name, in its summary `text`.
fn sync_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "% time  seconds  usecs/call  calls  [errors]  syscall"
        if let (Some(name), true) = (fields.last(), fields.len() >= 5) {
            if SYNC_CALLS.contains(name) {
                if let Ok(calls) = fields[3].parse::<u64>() {
                    *counts.entry((*name).to_owned()).or_default() += calls;
                }
            }
        }
    }
    counts
}

/// The system calls that make data durable, as strace names them.
const SYNC_CALLS: [&str; 6] = ["fsync", "fdatasync", "sync_file_range", "msync", "sync", "syncfs"];
/// How long a server or a tracer is given to start before the traced call.
const SETTLE: Duration = Duration::from_millis(300);

fn strace_filter() -> String {
    format!("trace={}", SYNC_CALLS.join(","))
}

fn fdatasyncs(bin: &Path, dir: &Path) -> BenchResult<Vec<(&'static str, BTreeMap<String, u64>)>> {
    if Command::new("strace").arg("-V").output().is_err() {
        println!("\n== fdatasyncs: strace not found, skipped");
        return Ok(Vec::new());
    }
    let db = dir.join("syncs.redb");
    {
        let engine = Engine::open(&db, OpenOptions::default())?;
        load(&engine, (0..4).map(|n| push(QUEUE, &format!("s-{n}"))))?;
    }
    let mut out = Vec::new();
    for (what, args) in [
        ("queue claim", vec!["--scope", SCOPE, "queue", "claim", QUEUE]),
        ("kv put", vec!["--scope", SCOPE, "kv", "put", "k", "1"]),
    ] {
        let mut command = Command::new("strace");
        command.args(["-f", "-c", "-e", &strace_filter()]);
        command.arg(bin).arg("--db").arg(&db).args(&args);
        for var in CLEARED_ENV {
            command.env_remove(var);
        }
        let output = command.stdin(Stdio::null()).output()?;
        let counts = sync_counts(&String::from_utf8_lossy(&output.stderr));
        println!("\n== syncs of one `{what}` process (strace -f -c): {counts:?}");
        out.push((what, counts));
    }
    out.push(("queue claim through serve", served_syncs(bin, &db)?));
    Ok(out)
}

/// The syncs of one `queue claim` process that forwards to a running `hookstate serve`, counted
/// in both processes (the CLI's and the server's, traced while the call runs), summed.
fn served_syncs(bin: &Path, db: &Path) -> BenchResult<BTreeMap<String, u64>> {
    let mut server =
        hookstate(bin, db).args(["serve", "--idle-exit-s", "60"]).stdout(Stdio::null()).spawn()?;
    let socket = PathBuf::from(format!("{}.sock", db.display()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(SETTLE);
    let log = db.with_extension("server-strace");
    let mut tracer = Command::new("strace")
        .args(["-f", "-c", "-e", &strace_filter(), "-o"])
        .arg(&log)
        .args(["-p", &server.id().to_string()])
        .stderr(Stdio::null())
        .spawn()?;
    thread::sleep(SETTLE);
    let mut command = Command::new("strace");
    command.args(["-f", "-c", "-e", &strace_filter()]);
    command.arg(bin).arg("--db").arg(db).args(["--scope", SCOPE, "queue", "claim", QUEUE]);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    let output = command.stdin(Stdio::null()).output()?;
    let client = sync_counts(&String::from_utf8_lossy(&output.stderr));
    thread::sleep(SETTLE);
    Command::new("kill").args(["-INT", &tracer.id().to_string()]).status()?;
    tracer.wait()?;
    Command::new("kill").args(["-TERM", &server.id().to_string()]).status()?;
    server.wait()?;
    let served = sync_counts(&std::fs::read_to_string(&log).unwrap_or_default());
    let claimed = String::from_utf8_lossy(&output.stdout).contains("\"claimed\":true");
    println!(
        "\n== syncs of one `queue claim` through serve: client {client:?}, server {served:?} \
         (claimed: {claimed})"
    );
    let mut total = client;
    for (name, calls) in served {
        *total.entry(name).or_default() += calls;
    }
    Ok(total)
}

struct Race {
    k: usize,
    claims: usize,
    elapsed: Duration,
    sample: Sample,
    double: usize,
}

fn race(bin: &Path, dir: &Path, k: usize) -> BenchResult<Race> {
    let db = dir.join(format!("race-{k}.redb"));
    {
        let engine = Engine::open(&db, OpenOptions::default())?;
        load(&engine, (0..RACE_ITEMS).map(|n| push(QUEUE, &format!("r-{n:06}"))))?;
    }
    let start = Instant::now();
    let logs: Vec<Vec<(String, Duration)>> = thread::scope(|s| {
        let handles: Vec<_> = (0..k)
            .map(|id| {
                let db = &db;
                s.spawn(move || {
                    let mut claims = Vec::new();
                    let mut errors = 0;
                    loop {
                        let mut command = claim_command(bin, db, QUEUE);
                        command.args(["--holder", &format!("w{id}")]);
                        let Ok((output, took)) = timed(&mut command) else { break };
                        if !output.status.success() {
                            errors += 1;
                            if errors > 5 {
                                break;
                            }
                            continue;
                        }
                        let value: Value =
                            serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
                        if value["claimed"] != Value::Bool(true) {
                            break;
                        }
                        claims.push((value["item"].as_str().unwrap_or_default().to_owned(), took));
                    }
                    claims
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let elapsed = start.elapsed();
    let mut per_item: BTreeMap<&str, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    for (item, took) in logs.iter().flatten() {
        *per_item.entry(item.as_str()).or_default() += 1;
        latencies.push(*took);
    }
    let race = Race {
        k,
        claims: latencies.len(),
        elapsed,
        sample: Sample::new(latencies),
        double: per_item.values().filter(|n| **n > 1).count(),
    };
    println!(
        "\n== K={k}: {:.0} claims/s p50 {:.2} ms p99 {:.2} ms double claims {} ({} claims)",
        per_second(race.claims, elapsed),
        ms(race.sample.p50()),
        ms(race.sample.p99()),
        race.double,
        race.claims
    );
    Ok(race)
}

#[expect(clippy::too_many_arguments, reason = "the summary prints every section's figures")]
fn summary(
    stores: &[Store],
    calls: &Calls,
    depth: &[Sample],
    bytes: &Bytes,
    audits: &[Audit],
    per_call: &(Vec<Sample>, Vec<usize>),
    syncs: &[(&'static str, BTreeMap<String, u64>)],
    races: &[Race],
) {
    println!("\n==================== summary (same run; ratios against the empty store) ====================");
    println!("| store | events | build s | MiB | B/event | idle hook stop p50 ms (×empty) | queue claim p50 ms (×empty) | mirrored micro resolve p50 ms (×empty) | failed |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let base = |v: &[Sample]| ms(v[0].p50());
    for (i, store) in stores.iter().enumerate() {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.0} | {:.2} ({:.2}×) | {:.2} ({:.2}×) | {:.2} ({:.2}×) | {} |",
            store.label,
            store.events,
            store.built.as_secs_f64(),
            store.bytes as f64 / 1048576.0,
            store.bytes as f64 / store.events.max(1) as f64,
            ms(calls.stop[i].p50()),
            ratio(ms(calls.stop[i].p50()), base(&calls.stop)),
            ms(calls.claim[i].p50()),
            ratio(ms(calls.claim[i].p50()), base(&calls.claim)),
            ms(calls.hermit[i].p50()),
            ratio(ms(calls.hermit[i].p50()), base(&calls.hermit)),
            calls.failed[i]
        );
    }
    println!();
    println!(
        "| claim at {} ready: {:.2} ms | claim at {} ready: {:.2} ms | ratio {:.2}× |",
        DEPTHS[0],
        ms(depth[0].p50()),
        DEPTHS[1],
        ms(depth[1].p50()),
        ratio(ms(depth[1].p50()), ms(depth[0].p50()))
    );
    println!();
    println!(
        "| bytes per event | events | file bytes | B/event | B/event over the empty store | \
         table pages B/event | log records B/event |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &(what, events, size, tables) in &bytes.rows {
        let (all, grown) = bytes.per_event(size, events);
        let per = |n: u64| n as f64 / events as f64;
        println!(
            "| {what} (one commit per call) | {events} | {size} | {all:.0} | {grown:.0} | {:.0} | \
             {:.0} |",
            per(tables.pages),
            per(tables.log_stored)
        );
    }
    for store in stores.iter().filter(|s| s.events > 10_000) {
        let (all, grown) = bytes.per_event(store.bytes, store.events);
        println!(
            "| {} (bulk-built) | {} | {} | {all:.0} | {grown:.0} | | |",
            store.label, store.events, store.bytes
        );
    }
    println!();
    println!(
        "| audit | events | verify s | verify peak MiB | rebuild s | rebuild peak MiB | \
         baseline verify s | baseline verify MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let cell = |r: &Option<(f64, u64)>| {
        r.map_or(("n/a".to_owned(), "n/a".to_owned()), |(s, k)| {
            (format!("{s:.2}"), format!("{:.0}", k as f64 / 1024.0))
        })
    };
    for a in audits {
        let (vs, vm) = cell(&a.verify);
        let (rs, rm) = cell(&a.rebuild);
        let (bs, bm) = cell(&a.baseline_verify);
        println!("| {} | {} | {vs} | {vm} | {rs} | {rm} | {bs} | {bm} |", a.label, a.events);
    }
    println!();
    let (samples, failed) = per_call;
    let truth = ms(samples[0].p50());
    println!("| per call | p50 ms | p99 ms | ×/bin/true | failed |");
    println!("|---|---|---|---|---|");
    for (i, label) in PER_CALL_LABELS.iter().enumerate() {
        println!(
            "| {label} | {:.3} | {:.3} | {:.2} | {} |",
            ms(samples[i].p50()),
            ms(samples[i].p99()),
            ratio(ms(samples[i].p50()), truth),
            failed[i]
        );
    }
    println!(
        "| legacy bash claim p50 / hookstate claim p50 | {:.2}× | | | |",
        ratio(ms(samples[4].p50()), ms(samples[3].p50()))
    );
    println!(
        "| read p50 against 1.5 × /bin/true + 1 ms | {:.3} vs {:.3} | | | |",
        ms(samples[1].p50()),
        1.5 * truth + 1.0
    );
    for (what, counts) in syncs {
        let total: u64 = counts.values().sum();
        println!("| syncs of one `{what}` | {total} ({counts:?}) | | | |");
    }
    println!();
    println!("| K concurrent claim processes | claims/s | p50 ms | p99 ms | double claims |");
    println!("|---|---|---|---|---|");
    for r in races {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {} |",
            r.k,
            per_second(r.claims, r.elapsed),
            ms(r.sample.p50()),
            ms(r.sample.p99()),
            r.double
        );
    }
    println!("\nreproduce: cargo build --release -p hookstate && cargo bench -p hookstate-benches --bench scale");
}
