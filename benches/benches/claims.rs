//! `claims` bench: claim throughput and per-call cost, printed side by side with the baselines
//! of the same run (raw fdatasync, `/bin/true`, the legacy bash rename claim), then one summary
//! table with same-run ratios, the date and how to reproduce it. With `HOOKSTATE_BASELINE_BIN` set
//! to another `hookstate` binary (an earlier build), the per-call rounds time it too, on its own
//! store, for a before/after ratio in the same run.
//!
//! Owns the five sections of PERF.md it measures: the durability floor (and the I/O of one redb
//! two-phase commit, scattered pages and two fdatasyncs, which bounds commits per second on
//! the disk whatever the engine does; and of a one-phase commit, what a server holding the file
//! alone could write), in-process claims at one
//! claim per durable commit and with group commit (batches 1, 8, 64, 512 through
//! `engine.ops().execute_batch`, with claims per raw fdatasync), the per-call cost of the `hookstate` binary, K concurrent
//! per-call processes with a double-claim count, and the same claims through `hookstate serve`
//! (`serve/mod.rs`: persistent clients and CLI processes, the server's batch sizes). Does not assert or fail on any figure: it is a
//! benchmark, never a test; it exits non-zero only when it cannot run at all.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use hookstate_benches::{
    locate_hookstate, machine, ms, now_ms, per_second, ratio, scale, scratch_dir, timed, utc_now,
    BenchResult, Located, Sample, CLEARED_ENV, LEGACY_CLAIM,
};
use hookstate_engine::limits::DELIVERIES_DEFAULT;
use hookstate_engine::{Call, Command as EngineCommand, Engine, OpenOptions};
use serde_json::Value;

mod serve;

/// Iterations of the raw write + fdatasync loop.
const FSYNC_ITERS: usize = 2000;
/// Untimed fdatasyncs before the timed loop.
const FSYNC_WARMUP: usize = 10;
/// Bytes written before each fdatasync.
const BLOCK_BYTES: usize = 4096;
/// Data pages a redb commit of a batch of 8 claims writes, one pwrite each at scattered offsets
/// (strace of the server's writer, 2026-12-07: 6,319 one-page and 40 two-page writes over 285
/// commits), before the header and the two fdatasyncs of its two-phase commit.
const COMMIT_SHAPE_PAGES: usize = 22;
/// Claims per commit the commit shape's ceiling is given for: the batches 8 persistent clients
/// make (the serve issue's target is 10,000 claims/s from 8 of them).
const CEILING_BATCH: f64 = 8.0;
/// Pages of the file the commit shape writes into (24 MiB, the served store's size after a bench
/// round), so that its pages land as far apart as a store's do.
const COMMIT_SHAPE_FILE_PAGES: u64 = 6144;
/// Iterations of the commit-shape loop.
const COMMIT_SHAPE_ITERS: usize = 500;
/// Seed of the commit shape's page offsets (xorshift64), so every run writes the same pages.
const COMMIT_SHAPE_SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// Items pushed, then claimed one per durable commit, in process.
const IN_PROCESS_CLAIMS: usize = 500;
/// Batch sizes of the in-process group-commit round (`engine.ops().execute_batch`).
const GROUP_BATCHES: [usize; 4] = [1, 8, 64, 512];
/// Durable commits each group-commit batch size is timed over (items = commits × batch).
const GROUP_COMMITS: usize = 64;
/// Items one prefill batch pushes.
const PREFILL_BATCH: usize = 512;
/// Alternating rounds of `/bin/true`, `hookstate queue claim` and the legacy bash claim.
const PER_CALL_ROUNDS: usize = 150;
/// Untimed rounds before them (page cache, binary loading).
const PER_CALL_WARMUP: usize = 5;
/// Items in the one queue the concurrent processes drain.
const CONCURRENT_ITEMS: usize = 200;
/// Concurrent claimer processes, one run each.
const CONCURRENCY: [usize; 4] = [1, 2, 4, 8];
/// Failed calls after which a concurrent worker gives up.
const WORKER_ERRORS_MAX: usize = 5;
/// Lease of every claim: far longer than the bench, so any second claim is a double claim.
const LEASE_MS: u64 = 600_000;
/// Scope of every item.
const SCOPE: &str = "bench";
/// The one queue name.
const QUEUE: &str = "q";
/// Columns of the summary table's first column.
const LABEL_WIDTH: usize = 44;

const REPRODUCE: &str =
    "reproduce: cargo build --release -p hookstate && cargo bench -p hookstate-benches --bench claims";

/// Section 1.
struct Floor {
    per_s: f64,
    sample: Sample,
}

/// Section 1, second part: the I/O of a redb commit with no CPU behind it, in two phases (what
/// the multi-writer mode every hookstate store uses writes) or in one (what redb's
/// single-process mode writes: a server that held the file alone could commit so).
struct CommitShape {
    phases: usize,
    per_s: f64,
    sample: Sample,
}

/// Section 2.
struct InProcess {
    pushes_per_s: f64,
    claims_per_s: f64,
    sample: Sample,
    not_claimed: usize,
}

/// Section 2b, one batch size.
struct Grouped {
    batch: usize,
    claims: usize,
    elapsed: Duration,
    /// One latency per batch: every claim of a batch is answered when its commit returns.
    sample: Sample,
    not_claimed: usize,
    double_claims: usize,
}

/// Section 3.
struct PerCall {
    bin_true: Sample,
    hookstate: Sample,
    legacy: Sample,
    hookstate_failed: usize,
    legacy_failed: usize,
    /// Another `hookstate` binary claiming from its own store in the same rounds
    /// (`HOOKSTATE_BASELINE_BIN`): an earlier build, for a before/after ratio.
    baseline: Option<(Sample, usize)>,
}

/// The environment variable naming a second `hookstate` binary to time beside the first.
const BASELINE_VAR: &str = "HOOKSTATE_BASELINE_BIN";

/// Section 4, one K.
struct Concurrent {
    k: usize,
    claims: usize,
    calls: usize,
    errors: usize,
    elapsed: Duration,
    sample: Sample,
    double_claims: usize,
    duplicate_tokens: usize,
    unclaimed: usize,
}

/// One claiming call of a concurrent worker.
struct ClaimRecord {
    latency: Duration,
    item: String,
    token: Option<u64>,
}

/// What one concurrent worker saw.
#[derive(Default)]
struct WorkerLog {
    claims: Vec<ClaimRecord>,
    calls: usize,
    errors: usize,
}

fn main() -> BenchResult<()> {
    let scale = scale()?;
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "claims-")?;
    println!("hookstate `claims` bench — {}", utc_now());
    println!("machine: {}", machine(scratch.path()));
    println!("scratch: {}", scratch.path().display());
    println!("BENCH_SCALE={scale} (multiplies every iteration count)");
    println!();

    let floor = raw_fdatasync(scratch.path(), FSYNC_ITERS * scale)?;
    let shape = commit_shape(scratch.path(), COMMIT_SHAPE_ITERS * scale, floor.per_s, 2)?;
    let shape_alone = commit_shape(scratch.path(), COMMIT_SHAPE_ITERS * scale, floor.per_s, 1)?;
    let in_process = in_process_claims(scratch.path(), IN_PROCESS_CLAIMS * scale, floor.per_s)?;
    let mut grouped = Vec::new();
    for batch in GROUP_BATCHES {
        grouped.push(group_commit_claims(
            scratch.path(),
            batch,
            GROUP_COMMITS * scale,
            floor.per_s,
        )?);
    }
    println!();
    let located = match locate_hookstate() {
        Ok(located) => {
            println!(
                "hookstate binary: {} ({}{})",
                located.path.display(),
                located.how,
                age(&located.path)
            );
            Some(located)
        }
        Err(looked) => {
            println!("hookstate binary: NOT FOUND ({looked}).");
            println!(
                "  Run `cargo build --release -p hookstate` first (or set HOOKSTATE_BIN); \
                 skipping sections 3 to 5."
            );
            None
        }
    };
    println!();
    let mut per_call = None;
    let mut concurrent = Vec::new();
    let mut served = None;
    if let Some(located) = &located {
        per_call = Some(per_call_cost(&located.path, scratch.path(), scale)?);
        for k in CONCURRENCY {
            concurrent.push(concurrent_claims(
                &located.path,
                scratch.path(),
                k,
                CONCURRENT_ITEMS * scale,
            )?);
        }
        println!();
        served = Some(serve::run(&located.path, scratch.path(), scale)?);
    }
    let measured = Measured {
        floor,
        shapes: [shape, shape_alone],
        in_process,
        grouped,
        per_call,
        concurrent,
        served,
    };
    summary(&measured, located.as_ref());
    Ok(())
}

/// How long ago the binary was built, so a stale build is visible.
fn age(path: &Path) -> String {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| format!(", built {} s ago", d.as_secs()))
        .unwrap_or_default()
}

fn call() -> Call {
    Call::at(SCOPE, now_ms())
}

fn item_id(n: usize) -> String {
    format!("item-{n:06}")
}

/// The push of item `n` into the bench's queue.
fn push_command(n: usize) -> EngineCommand {
    EngineCommand::QueuePush {
        queue: QUEUE.into(),
        item: item_id(n),
        payload: format!("{{\"n\":{n}}}"),
        for_session: None,
        max_deliveries: DELIVERIES_DEFAULT,
    }
}

/// A claim of the next item of the bench's queue, leased past the bench's end.
fn claim_command() -> EngineCommand {
    EngineCommand::QueueClaim {
        queue: QUEUE.into(),
        item: None,
        holder: "bench".into(),
        lease_ms: LEASE_MS,
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Raw durability floor.

fn raw_fdatasync(dir: &Path, iters: usize) -> BenchResult<Floor> {
    println!("== 1. raw durability floor: {BLOCK_BYTES} B write + fdatasync, {iters} iterations");
    let path = dir.join("fdatasync.bin");
    let mut file = File::create(&path)?;
    let mut block = vec![0u8; BLOCK_BYTES];
    file.write_all(&block)?;
    file.sync_all()?;
    let start = Instant::now();
    let sample = synced_rounds(iters, &mut block, |block| {
        file.write_all_at(block, 0)?;
        file.sync_data()
    })?;
    let elapsed = start.elapsed();
    let per_s = per_second(sample.len(), sample.total());
    println!(
        "   {per_s:.0} fdatasyncs/s, p50 {:.3} ms, p99 {:.3} ms ({:.2} s incl. warmup)",
        ms(sample.p50()),
        ms(sample.p99()),
        elapsed.as_secs_f64()
    );
    std::fs::remove_file(&path)?;
    Ok(Floor { per_s, sample })
}

/// Times `iters` rounds of `round` after [`FSYNC_WARMUP`] untimed ones; each round's block
/// carries the round's number in its first bytes, so no two rounds write the same bytes.
fn synced_rounds(
    iters: usize,
    block: &mut [u8],
    mut round: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> BenchResult<Sample> {
    let mut latencies = Vec::with_capacity(iters);
    for n in 0..FSYNC_WARMUP + iters {
        let stamp = n.to_le_bytes();
        block[..stamp.len()].copy_from_slice(&stamp);
        let t = Instant::now();
        round(block)?;
        if n >= FSYNC_WARMUP {
            latencies.push(t.elapsed());
        }
    }
    Ok(Sample::new(latencies))
}

/// The I/O of one redb commit, without the engine: [`COMMIT_SHAPE_PAGES`] 4 KiB writes at
/// scattered offsets and a header page, an fdatasync, and with `phases` 2 (multi-writer mode, as
/// every hookstate store commits) the header page again and a second fdatasync. Its rate bounds
/// durable commits per second on this disk, and eight times it the claims per second of batches
/// of 8, whatever the CPU does.
fn commit_shape(
    dir: &Path,
    iters: usize,
    fsync_per_s: f64,
    phases: usize,
) -> BenchResult<CommitShape> {
    let (part, what) = match phases {
        2 => ("1b", "a two-phase commit's I/O (multi-writer mode, every store's)"),
        _ => ("1c", "a one-phase commit's I/O (single-process mode: a server holding the file)"),
    };
    println!(
        "== {part}. {what}: {COMMIT_SHAPE_PAGES} scattered {BLOCK_BYTES} B pages and a header, \
         fdatasync{}; {iters} iterations",
        if phases == 2 { ", the header, fdatasync" } else { "" }
    );
    let path = dir.join("commit-shape.bin");
    let mut file = File::create(&path)?;
    let mut block = vec![0u8; BLOCK_BYTES];
    for _ in 0..COMMIT_SHAPE_FILE_PAGES {
        file.write_all(&block)?;
    }
    file.sync_all()?;
    let mut state = COMMIT_SHAPE_SEED;
    let mut next_page = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        1 + state % (COMMIT_SHAPE_FILE_PAGES - 1)
    };
    let block_bytes = BLOCK_BYTES as u64;
    let sample = synced_rounds(iters, &mut block, |block| {
        for _ in 0..COMMIT_SHAPE_PAGES {
            file.write_all_at(block, next_page() * block_bytes)?;
        }
        for _ in 0..phases {
            file.write_all_at(block, 0)?;
            file.sync_data()?;
        }
        Ok(())
    })?;
    let per_s = per_second(sample.len(), sample.total());
    println!(
        "   {per_s:.0} commits/s, p50 {:.3} ms, p99 {:.3} ms: {:.2} raw fdatasyncs each; \
         ceiling at batches of {CEILING_BATCH}: {:.0} claims/s, {:.2} per raw fdatasync",
        ms(sample.p50()),
        ms(sample.p99()),
        ratio(fsync_per_s, per_s),
        per_s * CEILING_BATCH,
        ratio(per_s * CEILING_BATCH, fsync_per_s)
    );
    std::fs::remove_file(&path)?;
    Ok(CommitShape { phases, per_s, sample })
}

// ---------------------------------------------------------------------------------------------
// 2. In-process claims, one per durable commit.

/// Pushes `items` items into the queue through an in-process engine, which is dropped (store
/// closed) on return. Returns the time the pushes took.
fn prefill(store: &Path, items: usize) -> BenchResult<Duration> {
    let engine = Engine::open(store, OpenOptions::default())?;
    let start = Instant::now();
    for n in 0..items {
        let outcome = engine.execute(&call(), &push_command(n))?;
        if let Some(refusal) = outcome.refusal {
            return Err(format!("push {n} refused: {}", refusal.message).into());
        }
    }
    Ok(start.elapsed())
}

fn in_process_claims(dir: &Path, n: usize, fsync_per_s: f64) -> BenchResult<InProcess> {
    println!("== 2. in-process claims, one claim per durable commit, {n} items");
    let store = dir.join("in-process.redb");
    let push_time = prefill(&store, n)?;
    let engine = Engine::open(&store, OpenOptions::default())?;
    let claim = claim_command();
    let mut latencies = Vec::with_capacity(n);
    let mut not_claimed = 0;
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let outcome = engine.execute(&call(), &claim)?;
        latencies.push(t.elapsed());
        if outcome.result.get("claimed") != Some(&Value::Bool(true)) {
            not_claimed += 1;
        }
    }
    let elapsed = start.elapsed();
    drop(engine);
    let sample = Sample::new(latencies);
    let claims_per_s = per_second(n, elapsed);
    let pushes_per_s = per_second(n, push_time);
    println!(
        "   {claims_per_s:.0} claims/s, p50 {:.3} ms, p99 {:.3} ms; {:.3} claims per raw \
         fdatasync; pushes {pushes_per_s:.0}/s; calls that claimed nothing: {not_claimed}",
        ms(sample.p50()),
        ms(sample.p99()),
        ratio(claims_per_s, fsync_per_s)
    );
    println!();
    Ok(InProcess { pushes_per_s, claims_per_s, sample, not_claimed })
}

// ---------------------------------------------------------------------------------------------
// 2b. In-process group commit: many claims per durable commit.

/// Pushes `items` items through `engine` in batches of [`PREFILL_BATCH`] pushes.
fn prefill_grouped(engine: &Engine, items: usize) -> BenchResult<()> {
    let pushes: Vec<(Call, EngineCommand)> =
        (0..items).map(|n| (call(), push_command(n))).collect();
    for chunk in pushes.chunks(PREFILL_BATCH) {
        for answer in engine.ops().execute_batch(chunk)? {
            if let Some(refusal) = answer?.refusal {
                return Err(format!("a prefill push was refused: {}", refusal.message).into());
            }
        }
    }
    Ok(())
}

fn group_commit_claims(
    dir: &Path,
    batch: usize,
    commits: usize,
    fsync_per_s: f64,
) -> BenchResult<Grouped> {
    let items = batch * commits;
    let store = dir.join(format!("grouped-{batch}.redb"));
    let engine = Engine::open(&store, OpenOptions::default())?;
    prefill_grouped(&engine, items)?;
    let claim = claim_command();
    let mut latencies = Vec::with_capacity(commits);
    let mut seen = BTreeMap::<String, usize>::new();
    let mut not_claimed = 0;
    let start = Instant::now();
    for _ in 0..commits {
        let calls: Vec<(Call, EngineCommand)> =
            (0..batch).map(|_| (call(), claim.clone())).collect();
        let t = Instant::now();
        let answers = engine.ops().execute_batch(&calls)?;
        latencies.push(t.elapsed());
        for answer in answers {
            let outcome = answer?;
            match outcome.result.get("item").and_then(Value::as_str) {
                Some(item) if outcome.result.get("claimed") == Some(&Value::Bool(true)) => {
                    *seen.entry(item.to_owned()).or_default() += 1;
                }
                _ => not_claimed += 1,
            }
        }
    }
    let elapsed = start.elapsed();
    drop(engine);
    let double_claims = seen.values().map(|n| n.saturating_sub(1)).sum();
    let sample = Sample::new(latencies);
    let claims_per_s = per_second(items, elapsed);
    println!(
        "== 2b. group commit, batch {batch:>3}: {claims_per_s:.0} claims/s, commit p50 {:.3} ms, \
         p99 {:.3} ms; {:.2} claims per raw fdatasync; double claims {double_claims}, \
         unclaimed {not_claimed}",
        ms(sample.p50()),
        ms(sample.p99()),
        ratio(claims_per_s, fsync_per_s)
    );
    Ok(Grouped { batch, claims: items, elapsed, sample, not_claimed, double_claims })
}

// ---------------------------------------------------------------------------------------------
// 3. Per-call cost: /bin/true, the hookstate binary, the legacy bash claim, alternated.

fn hookstate_claim(bin: &Path, store: &Path, holder: Option<&str>) -> Command {
    let mut command = Command::new(bin);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    command
        .arg("--db")
        .arg(store)
        .args(["--scope", SCOPE, "queue", "claim", QUEUE, "--lease-ms"])
        .arg(LEASE_MS.to_string());
    if let Some(holder) = holder {
        command.args(["--holder", holder]);
    }
    command
}

fn legacy_claim(dir: &Path) -> Command {
    let mut command = Command::new("bash");
    command.args(["-c", LEGACY_CLAIM, "legacy-claim"]).arg(dir);
    command
}

fn claimed(output: &Output) -> Option<Value> {
    if !output.status.success() {
        return None;
    }
    let value: Value = serde_json::from_slice(&output.stdout).ok()?;
    (value["claimed"] == Value::Bool(true)).then_some(value)
}

fn legacy_fill(dir: &Path, items: usize) -> BenchResult<()> {
    std::fs::create_dir_all(dir)?;
    for n in 0..items {
        let id = item_id(n);
        let text =
            format!("{{\"id\":\"{id}\",\"status\":\"pending\",\"payload\":{{\"n\":{n}}}}}\n");
        std::fs::write(dir.join(format!("{id}.json")), text)?;
    }
    Ok(())
}

fn per_call_cost(bin: &Path, dir: &Path, scale: usize) -> BenchResult<PerCall> {
    let rounds = PER_CALL_ROUNDS * scale;
    let items = rounds + PER_CALL_WARMUP;
    let baseline = std::env::var_os(BASELINE_VAR).filter(|b| !b.is_empty()).map(PathBuf::from);
    let steps = if baseline.is_some() { 4 } else { 3 };
    println!(
        "== 3. per-call cost, {rounds} alternating rounds (+{PER_CALL_WARMUP} warmup) of \
         /bin/true | hookstate queue claim | legacy bash claim{}, {items} items each",
        if baseline.is_some() { " | baseline hookstate queue claim" } else { "" }
    );
    let store = dir.join("per-call.redb");
    prefill(&store, items)?;
    let legacy_dir = dir.join("legacy-comments");
    legacy_fill(&legacy_dir, items)?;
    let baseline_store = dir.join("baseline.redb");
    if let Some(old) = &baseline {
        // Filled by the baseline binary itself: its format may be an older one.
        baseline_fill(old, &baseline_store, items)?;
    }
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut failed = [0usize; 4];
    for round in 0..PER_CALL_WARMUP + rounds {
        if round == PER_CALL_WARMUP {
            times.iter_mut().for_each(Vec::clear);
            failed = [0; 4];
        }
        for step in 0..steps {
            let which = (round + step) % steps;
            let mut command = match (which, &baseline) {
                (0, _) => Command::new("/bin/true"),
                (1, _) => hookstate_claim(bin, &store, None),
                (3, Some(old)) => hookstate_claim(old, &baseline_store, None),
                _ => legacy_claim(&legacy_dir),
            };
            let (output, latency) = timed(&mut command)?;
            times[which].push(latency);
            let ok = match which {
                0 => output.status.success(),
                _ => claimed(&output).is_some(),
            };
            if !ok {
                failed[which] += 1;
            }
        }
    }
    let [bin_true, hookstate, legacy, old] = times.map(Sample::new);
    let result = PerCall {
        bin_true,
        hookstate,
        legacy,
        hookstate_failed: failed[1],
        legacy_failed: failed[2],
        baseline: baseline.as_ref().map(|_| (old, failed[3])),
    };
    for (label, sample, fails) in [
        ("/bin/true", &result.bin_true, failed[0]),
        ("hookstate queue claim", &result.hookstate, failed[1]),
        ("legacy bash claim", &result.legacy, failed[2]),
    ]
    .into_iter()
    .chain(result.baseline.as_ref().map(|(s, f)| ("baseline hookstate claim", s, *f)))
    {
        println!(
            "   {label:<24} p50 {:>8.3} ms  p99 {:>8.3} ms  failed calls {fails}",
            ms(sample.p50()),
            ms(sample.p99())
        );
    }
    println!(
        "   legacy p50 / hookstate p50 = {:.2}x; hookstate p50 / true p50 = {:.2}x",
        ratio(ms(result.legacy.p50()), ms(result.hookstate.p50())),
        ratio(ms(result.hookstate.p50()), ms(result.bin_true.p50()))
    );
    if let Some((old, _)) = &result.baseline {
        println!(
            "   hookstate p50 / baseline p50 = {:.2}x ({})",
            ratio(ms(result.hookstate.p50()), ms(old.p50())),
            baseline.as_ref().map(|b| b.display().to_string()).unwrap_or_default()
        );
    }
    println!();
    Ok(result)
}

/// Pushes `items` items into the baseline binary's own store with that binary.
fn baseline_fill(bin: &Path, store: &Path, items: usize) -> BenchResult<()> {
    for n in 0..items {
        let mut command = Command::new(bin);
        command.args(["--db", &store.display().to_string(), "--scope", SCOPE]);
        command.args(["queue", "push", QUEUE, &format!("item-{n}"), "null"]);
        for var in CLEARED_ENV {
            command.env_remove(var);
        }
        let output = command.output()?;
        if !output.status.success() {
            return Err(
                format!("baseline push {n}: {}", String::from_utf8_lossy(&output.stderr)).into()
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4. K concurrent per-call processes draining one queue.

fn worker(bin: &Path, store: &Path, id: usize) -> Result<WorkerLog, String> {
    let holder = format!("worker-{id}");
    let mut log = WorkerLog::default();
    loop {
        let mut command = hookstate_claim(bin, store, Some(&holder));
        let (output, latency) =
            timed(&mut command).map_err(|e| format!("start {}: {e}", bin.display()))?;
        log.calls += 1;
        if !output.status.success() {
            log.errors += 1;
            if log.errors >= WORKER_ERRORS_MAX {
                return Ok(log);
            }
            continue;
        }
        match claimed(&output) {
            Some(value) => log.claims.push(ClaimRecord {
                latency,
                item: value["item"].as_str().unwrap_or_default().to_owned(),
                token: value["token"].as_u64(),
            }),
            None => return Ok(log),
        }
    }
}

fn race(bin: &Path, store: &Path, k: usize) -> BenchResult<(Vec<WorkerLog>, Duration)> {
    let start = Instant::now();
    let logs = thread::scope(|s| {
        let handles: Vec<_> = (0..k).map(|id| s.spawn(move || worker(bin, store, id))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker thread panicked".into())))
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok((logs, start.elapsed()))
}

fn concurrent_claims(bin: &Path, dir: &Path, k: usize, items: usize) -> BenchResult<Concurrent> {
    let store = dir.join(format!("concurrent-{k}.redb"));
    prefill(&store, items)?;
    let (logs, elapsed) = race(bin, &store, k)?;
    let mut per_item: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_token: BTreeMap<u64, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    for record in logs.iter().flat_map(|log| &log.claims) {
        *per_item.entry(record.item.as_str()).or_default() += 1;
        if let Some(token) = record.token {
            *per_token.entry(token).or_default() += 1;
        }
        latencies.push(record.latency);
    }
    let result = Concurrent {
        k,
        claims: latencies.len(),
        calls: logs.iter().map(|log| log.calls).sum(),
        errors: logs.iter().map(|log| log.errors).sum(),
        elapsed,
        sample: Sample::new(latencies),
        double_claims: per_item.values().filter(|n| **n > 1).count(),
        duplicate_tokens: per_token.values().filter(|n| **n > 1).count(),
        unclaimed: items.saturating_sub(per_item.len()),
    };
    println!(
        "== 4. K={k} concurrent `hookstate queue claim` loops, {items} items: {:.0} claims/s, \
         p50 {:.3} ms, p99 {:.3} ms, double claims {}, duplicate tokens {}, unclaimed {}, \
         failed calls {} of {} ({:.2} s)",
        per_second(result.claims, elapsed),
        ms(result.sample.p50()),
        ms(result.sample.p99()),
        result.double_claims,
        result.duplicate_tokens,
        result.unclaimed,
        result.errors,
        result.calls,
        elapsed.as_secs_f64()
    );
    std::fs::remove_file(&store)?;
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Summary.

fn row(label: &str, rate: &str, sample: &Sample, note: &str) {
    println!(
        "| {label:<LABEL_WIDTH$} | {rate:>14} | {:>9.3} | {:>9.3} | {note}",
        ms(sample.p50()),
        ms(sample.p99())
    );
}

/// Everything one run measured, for the summary.
struct Measured {
    floor: Floor,
    /// The two-phase commit's I/O, then the one-phase commit's.
    shapes: [CommitShape; 2],
    in_process: InProcess,
    grouped: Vec<Grouped>,
    per_call: Option<PerCall>,
    concurrent: Vec<Concurrent>,
    served: Option<serve::Served>,
}

fn summary(measured: &Measured, located: Option<&Located>) {
    let Measured { floor, shapes, in_process, grouped, per_call, concurrent, served } = measured;
    println!();
    println!("== summary ({})", utc_now());
    println!(
        "| {:<LABEL_WIDTH$} | {:>14} | {:>9} | {:>9} | same-run ratio",
        "measure", "rate", "p50 ms", "p99 ms"
    );
    println!(
        "|{}|----------------|-----------|-----------|---------------",
        "-".repeat(LABEL_WIDTH + 2)
    );
    row(
        "raw 4 KiB write + fdatasync (floor)",
        &format!("{:.0}/s", floor.per_s),
        &floor.sample,
        "1 durable commit = 1 fdatasync",
    );
    for shape in shapes {
        row(
            &format!("{COMMIT_SHAPE_PAGES} scattered pages + {} fdatasync(s)", shape.phases),
            &format!("{:.0}/s", shape.per_s),
            &shape.sample,
            &format!(
                "{:.2} raw fdatasyncs each; ceiling at batch {CEILING_BATCH}: {:.0} claims/s",
                ratio(floor.per_s, shape.per_s),
                shape.per_s * CEILING_BATCH
            ),
        );
    }
    row(
        "in-process claim, 1 per durable commit",
        &format!("{:.0}/s", in_process.claims_per_s),
        &in_process.sample,
        &format!(
            "{:.3} claims per fdatasync (pushes {:.0}/s, unclaimed {})",
            ratio(in_process.claims_per_s, floor.per_s),
            in_process.pushes_per_s,
            in_process.not_claimed
        ),
    );
    for g in grouped {
        let claims_per_s = per_second(g.claims, g.elapsed);
        row(
            &format!("in-process group commit, batch {}", g.batch),
            &format!("{claims_per_s:.0}/s"),
            &g.sample,
            &format!(
                "{:.2} claims per raw fdatasync (double claims {}, unclaimed {})",
                ratio(claims_per_s, floor.per_s),
                g.double_claims,
                g.not_claimed
            ),
        );
    }
    if let (Some(located), Some(per_call)) = (located, per_call) {
        per_call_rows(located, per_call);
        for c in concurrent {
            row(
                &format!("K={} per-call processes, one queue", c.k),
                &format!("{:.0}/s", per_second(c.claims, c.elapsed)),
                &c.sample,
                &format!(
                    "double claims {} (unclaimed {}, failed calls {})",
                    c.double_claims, c.unclaimed, c.errors
                ),
            );
        }
    } else {
        println!(
            "| sections 3 to 5 skipped: no hookstate binary (cargo build --release -p hookstate)"
        );
    }
    if let Some(served) = served {
        serve::rows(served, floor.per_s, concurrent);
    }
    println!();
    println!("{REPRODUCE}");
}

fn per_call_rows(located: &Located, per_call: &PerCall) {
    if let Some((old, fails)) = &per_call.baseline {
        let serial = per_second(old.len(), old.total());
        row(
            "per call: baseline hookstate (HOOKSTATE_BASELINE_BIN)",
            &format!("{serial:.0}/s"),
            old,
            &format!(
                "hookstate/baseline p50 = {:.2}x (failed calls {fails})",
                ratio(ms(per_call.hookstate.p50()), ms(old.p50()))
            ),
        );
    }
    let serial = |s: &Sample| format!("{:.0}/s", per_second(s.len(), s.total()));
    let true_p50 = ms(per_call.bin_true.p50());
    let hookstate_p50 = ms(per_call.hookstate.p50());
    row(
        "per call: /bin/true (process start)",
        &serial(&per_call.bin_true),
        &per_call.bin_true,
        "1.00x true",
    );
    row(
        &format!("per call: hookstate queue claim ({})", short_how(located)),
        &serial(&per_call.hookstate),
        &per_call.hookstate,
        &format!(
            "hookstate/true p50 = {:.2}x (failed calls {})",
            ratio(hookstate_p50, true_p50),
            per_call.hookstate_failed
        ),
    );
    row(
        "per call: legacy bash claim (mv,grep,sed,mv)",
        &serial(&per_call.legacy),
        &per_call.legacy,
        &format!(
            "legacy/hookstate p50 = {:.2}x (not durable; failed calls {})",
            ratio(ms(per_call.legacy.p50()), hookstate_p50),
            per_call.legacy_failed
        ),
    );
}

fn short_how(located: &Located) -> &'static str {
    if located.how.starts_with("DEBUG") {
        "debug"
    } else if located.how.starts_with("release") {
        "release"
    } else {
        "HOOKSTATE_BIN"
    }
}
