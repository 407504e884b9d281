//! Section 5 of the `claims` bench: the same claims through `hookstate serve` (issue 14). One
//! server per round, on a store prefilled in-process: K persistent-connection clients speaking
//! the socket protocol, then K `hookstate queue claim` processes that find the server by
//! themselves. Each round prints its throughput, latency, double claims and the server's own
//! counters (durable commits, the batch-size distribution); the summary sets them beside the
//! direct per-call rounds and the raw fdatasync floor of the same run.
//!
//! Does not assert or fail on any figure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use hookstate_benches::{ms, per_second, ratio, BenchResult, Sample};
use hookstate_engine::{socket_path, Answer, Client, ClientFrame, Run, ServeStats, ServerFrame};
use serde_json::Value;

use super::{prefill, race, row, Concurrent, CLEARED_ENV, LEASE_MS, QUEUE, SCOPE};

/// Persistent-connection clients per round.
pub(crate) const PERSISTENT_K: [usize; 5] = [1, 2, 4, 8, 16];
/// CLI processes through the server per round.
pub(crate) const CLI_K: [usize; 4] = [1, 2, 4, 8];
/// Items each persistent round drains (times BENCH_SCALE).
pub(crate) const PERSISTENT_ITEMS: usize = 1000;
/// Items each CLI round drains (times BENCH_SCALE): as many as the direct rounds.
pub(crate) const CLI_ITEMS: usize = 200;
/// How long the server may take to say it listens.
const START_WAIT: Duration = Duration::from_secs(10);
/// How long a persistent client waits for one answer before it counts the call as failed.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// How long a client waits for the server's hello.
const HELLO_WAIT: Duration = Duration::from_secs(2);
/// Failed calls after which a persistent client gives up.
const CLIENT_ERRORS_MAX: usize = 5;
/// How long a persistent client may drain its round before it gives up (a failed call): a
/// round of 16,000 claims takes a few seconds.
const CLIENT_ROUND_MAX: Duration = Duration::from_secs(300);
/// How long a stopped server may take to exit after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How often a stopping server is polled.
const STOP_POLL: Duration = Duration::from_millis(20);

/// One round through the server.
pub(crate) struct Round {
    pub(crate) k: usize,
    pub(crate) items: usize,
    pub(crate) claims: usize,
    pub(crate) errors: usize,
    pub(crate) elapsed: Duration,
    pub(crate) sample: Sample,
    pub(crate) double_claims: usize,
    pub(crate) duplicate_tokens: usize,
    pub(crate) unclaimed: usize,
    /// The server's counters at the end of the round (it served this round only).
    pub(crate) stats: ServeStats,
}

/// Everything section 5 measured.
pub(crate) struct Served {
    pub(crate) persistent: Vec<Round>,
    pub(crate) cli: Vec<Round>,
}

/// A running `hookstate serve`, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    socket: PathBuf,
}

impl Server {
    fn start(bin: &Path, store: &Path) -> BenchResult<Server> {
        let mut command = Command::new(bin);
        for var in CLEARED_ENV {
            command.env_remove(var);
        }
        let mut child = command
            .arg("--db")
            .arg(store)
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the server's stdout is not piped")?;
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_WAIT).map_err(|_| "the server did not start")?;
        let value: Value = serde_json::from_str(&line)
            .map_err(|e| format!("the server's first line {line:?}: {e}"))?;
        let socket = value["socket"].as_str().map_or_else(|| socket_path(store), PathBuf::from);
        Ok(Server { child, socket })
    }

    fn stats(&self) -> BenchResult<ServeStats> {
        let mut client = Client::connect(&self.socket, HELLO_WAIT)?;
        client.send(&ClientFrame::Stats { id: 0 })?;
        match client.receive(Instant::now() + ANSWER_WAIT)? {
            ServerFrame::Stats { stats, .. } => Ok(stats),
            other => Err(format!("asked for stats, got {other:?}").into()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let stopped = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        let deadline = Instant::now() + STOP_WAIT;
        while stopped && Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            thread::sleep(STOP_POLL);
        }
        if stopped {
            eprintln!("bench: the server did not stop on SIGTERM within {STOP_WAIT:?}; killing it");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One claim a client saw.
struct Claimed {
    latency: Duration,
    item: String,
    token: Option<u64>,
}

/// A persistent client: claims until the queue is empty, one request at a time.
fn client(socket: &Path, id: usize) -> Result<(Vec<Claimed>, usize), String> {
    let mut client = Client::connect(socket, HELLO_WAIT).map_err(|e| format!("connect: {e}"))?;
    let holder = format!("client-{id}");
    let lease = LEASE_MS.to_string();
    let argv = ["--scope", SCOPE, "queue", "claim", QUEUE, "--lease-ms", &lease, "--holder"];
    let mut argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
    argv.push(holder);
    let mut claims = Vec::new();
    let mut errors = 0;
    let round_start = Instant::now();
    for n in 0.. {
        if round_start.elapsed() > CLIENT_ROUND_MAX {
            errors += 1;
            break;
        }
        let run =
            Run { id: n, argv: argv.clone(), pid: Some(std::process::id()), ..Run::default() };
        let start = Instant::now();
        let answer = client.run(&run, &mut || None, start + ANSWER_WAIT);
        let latency = start.elapsed();
        let value = match answer {
            Ok(Answer::Reply(reply)) if reply.exit == 0 => {
                serde_json::from_str::<Value>(&reply.stdout).unwrap_or_default()
            }
            _ => {
                errors += 1;
                if errors >= CLIENT_ERRORS_MAX {
                    break;
                }
                continue;
            }
        };
        if value["claimed"] != Value::Bool(true) {
            break;
        }
        claims.push(Claimed {
            latency,
            item: value["item"].as_str().unwrap_or_default().to_owned(),
            token: value["token"].as_u64(),
        });
    }
    Ok((claims, errors))
}

/// Tallies a round from every claim its clients saw.
fn tally(
    k: usize,
    items: usize,
    claims: Vec<Claimed>,
    errors: usize,
    elapsed: Duration,
    stats: ServeStats,
) -> Round {
    let mut per_item: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_token: BTreeMap<u64, usize> = BTreeMap::new();
    for claim in &claims {
        *per_item.entry(claim.item.as_str()).or_default() += 1;
        if let Some(token) = claim.token {
            *per_token.entry(token).or_default() += 1;
        }
    }
    let double_claims = per_item.values().filter(|n| **n > 1).count();
    let duplicate_tokens = per_token.values().filter(|n| **n > 1).count();
    let unclaimed = items.saturating_sub(per_item.len());
    let count = claims.len();
    let sample = Sample::new(claims.into_iter().map(|c| c.latency).collect());
    Round {
        k,
        items,
        claims: count,
        errors,
        elapsed,
        sample,
        double_claims,
        duplicate_tokens,
        unclaimed,
        stats,
    }
}

fn persistent_round(bin: &Path, dir: &Path, k: usize, items: usize) -> BenchResult<Round> {
    let store = dir.join(format!("served-persistent-{k}.redb"));
    prefill(&store, items)?;
    let server = Server::start(bin, &store)?;
    let socket = server.socket.clone();
    let start = Instant::now();
    let results = thread::scope(|s| {
        let socket = &socket;
        let handles: Vec<_> = (0..k).map(|id| s.spawn(move || client(socket, id))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a client thread panicked".into())))
            .collect::<Result<Vec<_>, String>>()
    })?;
    let elapsed = start.elapsed();
    let stats = server.stats()?;
    drop(server);
    let errors = results.iter().map(|(_, e)| e).sum();
    let claims = results.into_iter().flat_map(|(c, _)| c).collect();
    let round = tally(k, items, claims, errors, elapsed, stats);
    print_round("persistent clients", &round);
    remove_store(&store);
    Ok(round)
}

fn cli_round(bin: &Path, dir: &Path, k: usize, items: usize) -> BenchResult<Round> {
    let store = dir.join(format!("served-cli-{k}.redb"));
    prefill(&store, items)?;
    let server = Server::start(bin, &store)?;
    let (logs, elapsed) = race(bin, &store, k)?;
    let stats = server.stats()?;
    drop(server);
    let errors = logs.iter().map(|log| log.errors).sum();
    let claims = logs
        .into_iter()
        .flat_map(|log| log.claims)
        .map(|c| Claimed { latency: c.latency, item: c.item, token: c.token })
        .collect();
    let round = tally(k, items, claims, errors, elapsed, stats);
    print_round("`hookstate queue claim` processes through the server", &round);
    remove_store(&store);
    Ok(round)
}

fn remove_store(store: &Path) {
    for suffix in ["", ".head", ".serve", ".sock"] {
        let mut path = store.as_os_str().to_owned();
        path.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(path));
    }
}

fn print_round(what: &str, round: &Round) {
    println!(
        "== 5. K={} {what}, {} items: {:.0} claims/s, p50 {:.3} ms, p99 {:.3} ms, double claims \
         {}, duplicate tokens {}, unclaimed {}, failed calls {}; {} durable commits ({:.2} claims \
         per commit), batch sizes {} ({:.2} s)",
        round.k,
        round.items,
        per_second(round.claims, round.elapsed),
        ms(round.sample.p50()),
        ms(round.sample.p99()),
        round.double_claims,
        round.duplicate_tokens,
        round.unclaimed,
        round.errors,
        round.stats.commits,
        ratio(round.claims as f64, round.stats.commits as f64),
        distribution(&round.stats),
        round.elapsed.as_secs_f64()
    );
}

/// The batch-size distribution as `size:count` pairs, empty buckets left out.
fn distribution(stats: &ServeStats) -> String {
    const BUCKETS: [&str; 7] = ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"];
    let parts: Vec<String> = BUCKETS
        .iter()
        .zip(stats.batch_sizes)
        .filter(|(_, n)| *n > 0)
        .map(|(label, n)| format!("{label}:{n}"))
        .collect();
    format!("[{}] max {}", parts.join(" "), stats.batch_max)
}

/// Runs section 5.
pub(crate) fn run(bin: &Path, dir: &Path, scale: usize) -> BenchResult<Served> {
    let mut served = Served { persistent: Vec::new(), cli: Vec::new() };
    for k in PERSISTENT_K {
        served.persistent.push(persistent_round(bin, dir, k, PERSISTENT_ITEMS * scale)?);
    }
    for k in CLI_K {
        served.cli.push(cli_round(bin, dir, k, CLI_ITEMS * scale)?);
    }
    println!();
    Ok(served)
}

/// The summary rows of section 5, with ratios against the same run's floor and direct rounds.
pub(crate) fn rows(served: &Served, fsync_per_s: f64, direct: &[Concurrent]) {
    for round in &served.persistent {
        let rate = per_second(round.claims, round.elapsed);
        row(
            &format!("K={} persistent clients through serve", round.k),
            &format!("{rate:.0}/s"),
            &round.sample,
            &format!(
                "{:.2} claims per raw fdatasync, {:.2} per commit, batches {}, double claims {}",
                ratio(rate, fsync_per_s),
                ratio(round.claims as f64, round.stats.commits as f64),
                distribution(&round.stats),
                round.double_claims
            ),
        );
    }
    for round in &served.cli {
        let rate = per_second(round.claims, round.elapsed);
        let direct_rate =
            direct.iter().find(|c| c.k == round.k).map_or(0.0, |c| per_second(c.claims, c.elapsed));
        row(
            &format!("K={} CLI processes through serve", round.k),
            &format!("{rate:.0}/s"),
            &round.sample,
            &format!(
                "served/direct = {:.2}x, {:.2} per commit, double claims {} (failed calls {})",
                ratio(rate, direct_rate),
                ratio(round.claims as f64, round.stats.commits as f64),
                round.double_claims,
                round.errors
            ),
        );
    }
}
