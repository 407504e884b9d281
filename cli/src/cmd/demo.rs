//! `hookstate demo`: the main job end to end on the embedded default. It creates a store, pushes
//! items, races several real `hookstate` processes claiming and acking from one queue, checks that
//! no item was claimed twice, prints the log's tail, runs `verify`, and prints a summary.
//!
//! Writes only inside its own directory. Does not call the engine in-process: every step is a
//! child `hookstate` process, as a hook would run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::args::DemoArgs;
use crate::exit::CliError;

/// Workers the demo may start: enough to show contention, few enough for a laptop.
const DEMO_WORKERS_MAX: u32 = 32;
/// Items the demo may push.
const DEMO_ITEMS_MAX: u32 = 10_000;
/// Lease of a demo claim: far longer than the demo, so any second claim would be a double claim.
const DEMO_LEASE_MS: &str = "600000";
const QUEUE: &str = "demo";

struct Claim {
    item: String,
    worker: u32,
    ms: f64,
}

fn hookstate(db: &Path, args: &[&str]) -> Result<Output, CliError> {
    let exe = std::env::current_exe()
        .map_err(|source| CliError::Io { op: "find the hookstate binary".into(), source })?;
    Command::new(exe)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| CliError::Io { op: "run hookstate".into(), source })
}

fn json_of(output: &Output) -> Result<Value, CliError> {
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim()).map_err(|_| {
        CliError::Failed(format!(
            "a child hookstate printed no JSON (exit {:?}): {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    })
}

/// One worker: claim, ack, repeat until the queue is empty.
fn worker(db: &Path, worker: u32, claims: &Mutex<Vec<Claim>>) -> Result<(), CliError> {
    let session = format!("demo-worker-{worker}");
    loop {
        let start = Instant::now();
        let out = hookstate(
            db,
            &["--session", &session, "queue", "claim", QUEUE, "--lease-ms", DEMO_LEASE_MS],
        )?;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        let result = json_of(&out)?;
        if result["claimed"] != Value::Bool(true) {
            return Ok(());
        }
        let item = result["item"].as_str().unwrap_or_default().to_owned();
        let token = result["token"].to_string();
        let ack = hookstate(
            db,
            &["--session", &session, "queue", "ack", QUEUE, &item, "--token", &token],
        )?;
        if !ack.status.success() {
            return Err(CliError::Failed(format!("ack of {item} failed: {}", json_of(&ack)?)));
        }
        claims.lock().map_err(|_| CliError::Failed("a worker panicked".into()))?.push(Claim {
            item,
            worker,
            ms,
        });
    }
}

/// The value at `permille`/1000 of a sorted sample (nearest rank, rounded down).
fn percentile(sorted: &[f64], permille: usize) -> f64 {
    let index = sorted.len().saturating_sub(1) * permille / 1000;
    sorted.get(index).copied().unwrap_or(0.0)
}

fn say(line: &str) {
    println!("{line}");
}

pub(crate) fn run(args: &DemoArgs) -> Result<(), CliError> {
    if args.workers == 0 || args.workers > DEMO_WORKERS_MAX {
        return Err(CliError::Invalid(format!("--workers must be 1..={DEMO_WORKERS_MAX}")));
    }
    if args.items == 0 || args.items > DEMO_ITEMS_MAX {
        return Err(CliError::Invalid(format!("--items must be 1..={DEMO_ITEMS_MAX}")));
    }
    let temp;
    let dir: PathBuf = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp =
                tempfile::Builder::new().prefix("hookstate-demo-").tempdir().map_err(|source| {
                    CliError::Io { op: "create a temporary directory".into(), source }
                })?;
            temp.path().to_path_buf()
        }
    };
    let db = dir.join("state.redb");
    say(&format!("hookstate demo: store {}", db.display()));
    let init = hookstate(&db, &["init"])?;
    if !init.status.success() {
        return Err(CliError::Failed(format!(
            "init failed: {}",
            String::from_utf8_lossy(&init.stderr).trim()
        )));
    }
    push_items(&db, args.items)?;
    let (claims, elapsed) = race(&db, args.workers)?;
    report(&db, args, &claims, elapsed)
}

fn push_items(db: &Path, items: u32) -> Result<(), CliError> {
    let start = Instant::now();
    for n in 0..items {
        let item = format!("item-{n:04}");
        let payload = format!("{{\"n\":{n}}}");
        let out = hookstate(db, &["--agent", "demo", "queue", "push", QUEUE, &item, &payload])?;
        if !out.status.success() {
            return Err(CliError::Failed(format!("push of {item} failed: {}", json_of(&out)?)));
        }
    }
    say(&format!(
        "pushed {items} items to queue '{QUEUE}' with {items} hookstate processes in {:.0} ms",
        start.elapsed().as_secs_f64() * 1000.0
    ));
    Ok(())
}

fn race(db: &Path, workers: u32) -> Result<(Vec<Claim>, Duration), CliError> {
    say(&format!(
        "racing {workers} workers, each a loop of `hookstate queue claim` + `queue ack` processes"
    ));
    let claims = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let claims = Arc::clone(&claims);
            let db = db.to_path_buf();
            thread::spawn(move || worker(&db, w, &claims))
        })
        .collect();
    for handle in handles {
        handle.join().map_err(|_| CliError::Failed("a worker thread panicked".into()))??;
    }
    let elapsed = start.elapsed();
    let claims = Arc::try_unwrap(claims)
        .map_err(|_| CliError::Failed("workers still running".into()))?
        .into_inner()
        .map_err(|_| CliError::Failed("a worker panicked".into()))?;
    Ok((claims, elapsed))
}

fn report(db: &Path, args: &DemoArgs, claims: &[Claim], elapsed: Duration) -> Result<(), CliError> {
    let mut per_item: BTreeMap<&str, u32> = BTreeMap::new();
    let mut per_worker: BTreeMap<u32, u32> = BTreeMap::new();
    for claim in claims {
        *per_item.entry(&claim.item).or_default() += 1;
        *per_worker.entry(claim.worker).or_default() += 1;
    }
    let double_claims = per_item.values().filter(|n| **n > 1).count();
    let missing = u64::from(args.items).saturating_sub(per_item.len() as u64);
    let mut ms: Vec<f64> = claims.iter().map(|c| c.ms).collect();
    ms.sort_by(f64::total_cmp);
    say(&format!("claims per worker: {per_worker:?}"));
    say("tail of the log (`hookstate log --tail 6 --format text`):");
    let tail = hookstate(db, &["--format", "text", "log", "--tail", "6"])?;
    for line in String::from_utf8_lossy(&tail.stdout).lines() {
        say(&format!("  {line}"));
    }
    let verify = hookstate(db, &["verify"])?;
    let verify_json = json_of(&verify)?;
    say(&format!("hookstate verify: {verify_json}"));
    let secs = elapsed.as_secs_f64().max(1e-9);
    say(&format!(
        "summary: items={} workers={} claims={} double_claims={double_claims} unclaimed={missing} \
         elapsed_ms={:.0} claims_per_s={:.1} claim_call_p50_ms={:.2} claim_call_p99_ms={:.2} \
         verify={}",
        args.items,
        args.workers,
        claims.len(),
        secs * 1000.0,
        claims.len() as f64 / secs,
        percentile(&ms, 500),
        percentile(&ms, 990),
        if verify.status.success() { "ok" } else { "FAILED" },
    ));
    if double_claims > 0 || missing > 0 || !verify.status.success() {
        return Err(CliError::Failed("the demo found a problem (see above)".into()));
    }
    Ok(())
}
