//! `backends` bench: the per-call cost of `hookstate queue claim` and K = 1, 2, 4, 8 concurrent
//! claim loops, on a redb file and on PostgreSQL, in the same run, with same-run PostgreSQL/redb
//! ratios and a double-claim count per run.
//!
//! The PostgreSQL store is a schema of `HOOKSTATE_BENCH_PG_URL` when set (a throw-away database:
//! the schema is left there); otherwise the bench starts a throw-away cluster of its own on
//! 127.0.0.1 with scripts/pg-cluster.sh and stops it by its pid when done. The per-call rounds
//! alternate the two backends so that both see the same machine. Does not assert or fail on any
//! figure; it exits non-zero only when it cannot run at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use hookstate_benches::{
    locate_hookstate, machine, ms, per_second, ratio, scale, scratch_dir, timed, utc_now,
    BenchResult, Sample, CLEARED_ENV,
};

/// Alternating rounds of one redb claim and one PostgreSQL claim.
const PER_CALL_ROUNDS: usize = 150;
/// Untimed rounds before them.
const PER_CALL_WARMUP: usize = 5;
/// Items each concurrent run drains.
const CONCURRENT_ITEMS: usize = 200;
/// Concurrent claimer processes, one run each per backend.
const CONCURRENCY: [usize; 4] = [1, 2, 4, 8];
/// Failed calls after which a concurrent worker gives up.
const WORKER_ERRORS_MAX: usize = 5;
/// Lease of every claim: longer than the bench, so any second claim is a double claim.
const LEASE_MS: &str = "600000";
/// The one queue.
const QUEUE: &str = "q";
/// The variable naming a PostgreSQL database to use instead of a cluster of the bench's own.
const PG_URL_VAR: &str = "HOOKSTATE_BENCH_PG_URL";

/// A throw-away cluster of the bench's own, stopped by its pid on drop.
struct Cluster {
    dir: PathBuf,
    script: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.script).arg("stop").arg(&self.dir).output();
    }
}

fn start_cluster(scratch: &Path) -> BenchResult<(Cluster, String)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg-cluster.sh");
    let dir = scratch.join("pg");
    std::fs::create_dir(&dir)?;
    let cluster = Cluster { dir: dir.clone(), script: script.clone() };
    let out = Command::new("bash").arg(&script).arg("start").arg(&dir).output()?;
    if !out.status.success() {
        return Err(format!("pg-cluster.sh start: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok((cluster, String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// `base` with its search_path set to `schema`, made by `psql`-free means: `hookstate init`
/// creates the tables in whatever schema the path names, so the schema is made here first.
fn schema_store(base: &str, schema: &str) -> BenchResult<String> {
    let mut client = postgres::Client::connect(base, postgres::NoTls)?;
    client.batch_execute(&format!("CREATE SCHEMA {schema}"))?;
    let separator = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{separator}options=-c%20search_path%3D{schema}"))
}

fn hookstate(bin: &Path, home: &Path, store: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    command.env("HOME", home).arg("--db").arg(store).args(args);
    command
}

fn fill(bin: &Path, home: &Path, store: &str, items: usize) -> BenchResult<()> {
    for n in 0..items {
        let out = hookstate(bin, home, store, &["queue", "push", QUEUE, &format!("i{n}"), "{}"])
            .output()?;
        if !out.status.success() {
            return Err(format!("push {n}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
    }
    Ok(())
}

fn claim(bin: &Path, home: &Path, store: &str, holder: &str) -> Command {
    hookstate(
        bin,
        home,
        store,
        &["queue", "claim", QUEUE, "--holder", holder, "--lease-ms", LEASE_MS],
    )
}

/// What a claim printed: the item, when it claimed one.
fn claimed(stdout: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    (value["claimed"] == true).then(|| value["item"].as_str().unwrap_or_default().to_owned())
}

/// Makes a new store of one backend and returns its address.
type MakeStore = Box<dyn Fn(&str) -> BenchResult<String> + Sync>;

struct Backends {
    bin: PathBuf,
    home: PathBuf,
    /// (label, a new store's address) for each backend.
    stores: Vec<(&'static str, MakeStore)>,
}

fn per_call(b: &Backends, rounds: usize) -> BenchResult<Vec<(Sample, usize)>> {
    let items = rounds + PER_CALL_WARMUP;
    let stores: Vec<String> =
        b.stores.iter().map(|(_, make)| make("percall")).collect::<BenchResult<_>>()?;
    for store in &stores {
        fill(&b.bin, &b.home, store, items)?;
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); stores.len()];
    let mut failed = vec![0usize; stores.len()];
    for round in 0..PER_CALL_WARMUP + rounds {
        if round == PER_CALL_WARMUP {
            times.iter_mut().for_each(Vec::clear);
            failed.iter_mut().for_each(|f| *f = 0);
        }
        for step in 0..stores.len() {
            let which = (round + step) % stores.len();
            let (out, latency) = timed(&mut claim(&b.bin, &b.home, &stores[which], "bench"))?;
            times[which].push(latency);
            if !out.status.success() || claimed(&out.stdout).is_none() {
                failed[which] += 1;
            }
        }
    }
    Ok(times.into_iter().map(Sample::new).zip(failed).collect())
}

struct Race {
    claims: usize,
    elapsed: Duration,
    sample: Sample,
    double_claims: usize,
    unclaimed: usize,
    errors: usize,
}

fn race(b: &Backends, store: &str, k: usize, items: usize) -> BenchResult<Race> {
    fill(&b.bin, &b.home, store, items)?;
    let start = Instant::now();
    let logs: Vec<(Vec<(String, Duration)>, usize)> = thread::scope(|s| {
        let handles: Vec<_> = (0..k)
            .map(|id| {
                s.spawn(move || {
                    let holder = format!("w{id}");
                    let (mut claims, mut errors) = (Vec::new(), 0);
                    loop {
                        let Ok((out, latency)) = timed(&mut claim(&b.bin, &b.home, store, &holder))
                        else {
                            return (claims, WORKER_ERRORS_MAX);
                        };
                        if !out.status.success() {
                            errors += 1;
                            if errors >= WORKER_ERRORS_MAX {
                                return (claims, errors);
                            }
                            continue;
                        }
                        match claimed(&out.stdout) {
                            Some(item) => claims.push((item, latency)),
                            None => return (claims, errors),
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let elapsed = start.elapsed();
    let mut per_item: BTreeMap<&str, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    for (item, latency) in logs.iter().flat_map(|(claims, _)| claims) {
        *per_item.entry(item.as_str()).or_default() += 1;
        latencies.push(*latency);
    }
    Ok(Race {
        claims: latencies.len(),
        elapsed,
        sample: Sample::new(latencies),
        double_claims: per_item.values().filter(|n| **n > 1).count(),
        unclaimed: items.saturating_sub(per_item.len()),
        errors: logs.iter().map(|(_, e)| e).sum(),
    })
}

fn main() -> BenchResult<()> {
    let scale = scale()?;
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "backends-")?;
    println!("hookstate `backends` bench — {}", utc_now());
    println!("machine: {}", machine(scratch.path()));
    println!("BENCH_SCALE={scale} (multiplies every iteration count)");
    let located = match locate_hookstate() {
        Ok(located) => located,
        Err(looked) => {
            println!(
                "hookstate binary: NOT FOUND ({looked}); run `cargo build --release -p hookstate`"
            );
            return Ok(());
        }
    };
    println!("hookstate binary: {} ({})", located.path.display(), located.how);
    let (_cluster, base) = match std::env::var(PG_URL_VAR).ok().filter(|u| !u.is_empty()) {
        Some(url) => (None, url),
        None => {
            let (cluster, url) = start_cluster(scratch.path())?;
            (Some(cluster), url)
        }
    };
    println!(
        "PostgreSQL: {} (a local server on the same 2 cores: no network latency)",
        hookstate_engine::remote_address(Path::new(&base)).unwrap_or_default()
    );
    println!();
    let home = scratch.path().join("home");
    std::fs::create_dir(&home)?;
    let dir = scratch.path().to_path_buf();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let redb = move |name: &str| -> BenchResult<String> {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(dir.join(format!("{name}-{n}.redb")).display().to_string())
    };
    let pg_next = std::sync::atomic::AtomicUsize::new(0);
    let pid = std::process::id();
    let pg = move |name: &str| -> BenchResult<String> {
        let n = pg_next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        schema_store(&base, &format!("bench_{name}_{pid}_{n}"))
    };
    let b = Backends {
        bin: located.path.clone(),
        home,
        stores: vec![("redb", Box::new(redb)), ("postgres", Box::new(pg))],
    };

    let rounds = PER_CALL_ROUNDS * scale;
    println!("== per-call `hookstate queue claim`, {rounds} alternating rounds (+{PER_CALL_WARMUP} warmup)");
    let per = per_call(&b, rounds)?;
    for ((label, _), (sample, failed)) in b.stores.iter().zip(&per) {
        println!(
            "   {label:<9} p50 {:>8.3} ms  p99 {:>8.3} ms  failed calls {failed}",
            ms(sample.p50()),
            ms(sample.p99())
        );
    }
    println!();
    let items = CONCURRENT_ITEMS * scale;
    let mut races = Vec::new();
    for k in CONCURRENCY {
        for (label, make) in &b.stores {
            let store = make(&format!("k{k}"))?;
            let r = race(&b, &store, k, items)?;
            println!(
                "== K={k} {label}: {:.0} claims/s, p50 {:.3} ms, p99 {:.3} ms, double claims {}, \
                 unclaimed {}, failed calls {} ({:.2} s)",
                per_second(r.claims, r.elapsed),
                ms(r.sample.p50()),
                ms(r.sample.p99()),
                r.double_claims,
                r.unclaimed,
                r.errors,
                r.elapsed.as_secs_f64()
            );
            races.push((k, *label, r));
        }
    }

    println!();
    println!("== summary ({})", utc_now());
    println!("| measure                       | redb          | postgres      | postgres/redb");
    println!("|-------------------------------|---------------|---------------|--------------");
    if let [(redb_s, _), (pg_s, _)] = &per[..] {
        println!(
            "| per call p50 / p99 ms         | {:>5.2} / {:>5.2} | {:>5.2} / {:>5.2} | {:.2}x / {:.2}x",
            ms(redb_s.p50()),
            ms(redb_s.p99()),
            ms(pg_s.p50()),
            ms(pg_s.p99()),
            ratio(ms(pg_s.p50()), ms(redb_s.p50())),
            ratio(ms(pg_s.p99()), ms(redb_s.p99()))
        );
    }
    for k in CONCURRENCY {
        let of = |label: &str| races.iter().find(|(rk, l, _)| *rk == k && *l == label);
        if let (Some((_, _, r)), Some((_, _, p))) = (of("redb"), of("postgres")) {
            let (rr, pr) = (per_second(r.claims, r.elapsed), per_second(p.claims, p.elapsed));
            println!(
                "| K={k} claims/s (p99 ms)        | {rr:>5.0} ({:>5.1}) | {pr:>5.0} ({:>5.1}) | {:.2}x (double claims {} / {})",
                ms(r.sample.p99()),
                ms(p.sample.p99()),
                ratio(pr, rr),
                r.double_claims,
                p.double_claims
            );
        }
    }
    println!();
    println!(
        "reproduce: cargo build --release -p hookstate && cargo bench -p hookstate-benches \
         --bench backends"
    );
    Ok(())
}
