//! The kill -9 crash loop (RELIABILITY.md A6): eight workers spawn real `hookstate` processes on a
//! hot key set and SIGKILL about 40% of them at a random instant; then the store must verify,
//! every acknowledged effect must be in the log at its seq and hash, and no item may have two
//! acknowledged holders at once.
//!
//! An invocation is `ok` when its ack line was received, even if the process was killed after it
//! (the strict rule); `fail` for a definite refusal; `info` when killed (or busy) before an ack.
//! Does not call the engine in-process: it sees the store only through the binary.
//!
//! `HOOKSTATE_KILL_SECS` sets the budget (default [`BUDGET_SECS_DEFAULT`]) and
//! `HOOKSTATE_KILL_SEED` the seed; `scripts/soak.sh --seconds N` runs the long version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{hookstate, Rng};

/// The default budget of the normal test run.
const BUDGET_SECS_DEFAULT: u64 = 20;
/// The default budget of each served kill loop (two of them run beside the direct one).
const SERVED_BUDGET_SECS_DEFAULT: u64 = 12;
/// A supervised server lives this long at least before its SIGKILL, in ms: long enough to take
/// calls and batch them.
const SERVER_LIFE_MS_MIN: u64 = 100;
/// …and at most this long: several kills in every run.
const SERVER_LIFE_MS_MAX: u64 = 1500;
/// How long the supervisor waits for a server's counters before its kill.
const STATS_WAIT_MS: u64 = 500;
/// How often the supervisor looks at its stop flag while a server lives, in ms.
const SUPERVISOR_TICK_MS: u64 = 20;
/// Concurrent workers, each running one process at a time.
const WORKERS: u64 = 8;
/// Share of invocations that get SIGKILL, in percent.
const KILL_PERCENT: u64 = 40;
/// Kills land uniformly in `0..=KILL_DELAY_MS_MAX` after the spawn (about 1–2× the p99 latency).
const KILL_DELAY_MS_MAX: u64 = 40;
/// The hot sets: few keys, so that contention is real.
const ITEMS: u64 = 6;
const KV_KEYS: u64 = 4;
const SET_MEMBERS: u64 = 64;
/// A lease longer than any run: a second `ok` claim of an item whose claim was not acked or
/// released before it is a double claim, whatever the clock says.
const LEASE_MS: u64 = 24 * 60 * 60 * 1000;
/// Events per `hookstate log` page when reading the history back.
const LOG_PAGE_EVENTS: u64 = 50_000;
/// The seed when `HOOKSTATE_KILL_SEED` is unset.
const SEED_DEFAULT: u64 = 0x6b69_6c6c_6c6f_6f70;

/// What the harness learned from one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    /// The ack line was received: the effect must be present.
    Ok(Value),
    /// A definite refusal was received: the effect must be absent.
    Fail(Value),
    /// Killed or busy before an ack: the effect may be present or absent.
    Info,
}

#[derive(Debug, Default)]
struct Tally {
    invocations: u64,
    kills: u64,
    ok: Vec<(String, Value)>,
    fail: u64,
    /// Every `ok` with an event and every `held` refusal, with its real-time interval.
    timed: Vec<Timed>,
    info: u64,
    /// Exit codes no invocation may give unless killed: a panic, corrupt, io, usage, invalid.
    unexpected: Vec<String>,
    latencies_us: Vec<u64>,
}

/// One answered invocation and when it ran, in µs since the run started.
#[derive(Debug, Clone)]
struct Timed {
    verb: String,
    json: Value,
    invoked_us: u64,
    completed_us: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Draws the next command of worker `w`; `tokens` are claims the worker may ack (its own, or
/// ones a `held` refusal named, so that items claimed by a killed process come back).
fn draw(rng: &mut Rng, w: u64, n: u64, tokens: &mut Vec<(String, u64)>) -> (String, Vec<String>) {
    let item = format!("i{}", rng.below(ITEMS));
    // Percent shares: 35 claim, 20 ack (when the worker knows a token), 15 push (35 without a
    // token), 15 kv put, 13 set add, 2 rebuild (a kill inside the one transaction that rewrites
    // every view).
    let args: Vec<String> = match rng.below(100) {
        0..=34 => {
            let holder = format!("w{w}");
            let lease = LEASE_MS.to_string();
            ["queue", "claim", "q", "--item", &item, "--holder", &holder, "--lease-ms", &lease]
                .map(String::from)
                .to_vec()
        }
        35..=54 if !tokens.is_empty() => {
            let (item, token) =
                tokens.swap_remove(usize::try_from(rng.below(tokens.len() as u64)).unwrap());
            ["queue", "ack", "q", &item, "--token", &token.to_string()].map(String::from).to_vec()
        }
        35..=69 => ["queue", "push", "q", &item].map(String::from).to_vec(),
        70..=84 => {
            let key = format!("k{}", rng.below(KV_KEYS));
            ["kv", "put", &key, &format!("{{\"w\":{w},\"n\":{n}}}")].map(String::from).to_vec()
        }
        85..=97 => {
            let member = format!("m{}", rng.below(SET_MEMBERS));
            ["set", "add", "s", &member].map(String::from).to_vec()
        }
        _ => vec!["rebuild".to_owned()],
    };
    (args[..args.len().min(2)].join("-"), args)
}

/// Runs one invocation, killing it after a random delay with probability `KILL_PERCENT`, and
/// classifies it by what stdout carried.
fn invoke(
    db: &Path,
    rng: &mut Rng,
    args: &[String],
    direct: bool,
    tally: &mut Tally,
) -> (Class, Instant) {
    let kill_after = (rng.below(100) < KILL_PERCENT)
        .then(|| Duration::from_millis(rng.below(KILL_DELAY_MS_MAX + 1)));
    let start = Instant::now();
    let mut command = hookstate(db);
    if direct {
        // Never looks for a server: the call runs in-process even while one serves the store.
        command.env("HOOKSTATE_SERVE", "0");
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tally.invocations += 1;
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        // SIGKILL; an error only means the process already ended.
        if child.kill().is_ok() {
            tally.kills += 1;
        }
    }
    // Reads stdout to EOF even after a kill: an ack line written before the kill still counts.
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line: Option<Value> = stdout.lines().next().and_then(|l| serde_json::from_str(l).ok());
    let code = out.status.code();
    if kill_after.is_none() {
        tally.latencies_us.push(u64::try_from(start.elapsed().as_micros()).unwrap());
    }
    let class = match (line, code) {
        (Some(json), _) if json["ok"] == true => Class::Ok(json),
        (Some(json), _) if json["refused"].is_string() => Class::Fail(json),
        // Killed (no exit code) or busy: nothing definite.
        (_, None | Some(4)) => Class::Info,
        (_, Some(code)) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            tally.unexpected.push(format!("{args:?} exit {code}: {stderr}"));
            Class::Info
        }
    };
    (class, start)
}

fn worker(db: &Path, seed: u64, w: u64, direct: bool, epoch: Instant, deadline: Instant) -> Tally {
    let mut rng = Rng(seed ^ w.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut tally = Tally::default();
    let mut tokens: Vec<(String, u64)> = Vec::new();
    let mut n = 0;
    while Instant::now() < deadline {
        n += 1;
        let (verb, args) = draw(&mut rng, w, n, &mut tokens);
        let (class, invoked) = invoke(db, &mut rng, &args, direct, &mut tally);
        let micros = |at: Instant| u64::try_from(at.duration_since(epoch).as_micros()).unwrap();
        let timed = |json: &Value| Timed {
            verb: verb.clone(),
            json: json.clone(),
            invoked_us: micros(invoked),
            completed_us: micros(Instant::now()),
        };
        match &class {
            Class::Ok(json) if json["seq"].is_u64() => tally.timed.push(timed(json)),
            Class::Fail(json) if json["refused"] == "held" || json["refused"] == "stale_token" => {
                tally.timed.push(timed(json));
            }
            _ => {}
        }
        match class {
            Class::Ok(json) => {
                if verb == "queue-claim" {
                    tokens.push((
                        json["item"].as_str().unwrap().into(),
                        json["token"].as_u64().unwrap(),
                    ));
                }
                tally.ok.push((verb, json));
            }
            Class::Fail(json) => {
                if json["refused"] == "held" {
                    tokens.push((
                        json["item"].as_str().unwrap().into(),
                        json["token"].as_u64().unwrap(),
                    ));
                }
                tally.fail += 1;
            }
            Class::Info => tally.info += 1,
        }
    }
    tally
}

/// Every event of the store, by seq, read back through `hookstate log` in pages; the failed
/// call when the store refuses to give its log (a rolled-back or damaged store).
fn read_log(db: &Path) -> Result<BTreeMap<u64, Value>, String> {
    let mut events = BTreeMap::new();
    let mut from = 1;
    loop {
        let out = hookstate(db)
            .args(["log", "--from-seq", &from.to_string(), "--limit", &LOG_PAGE_EVENTS.to_string()])
            .output()
            .unwrap();
        if out.status.code() != Some(0) {
            return Err(format!("{out:?}"));
        }
        let before = events.len();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let event: Value = serde_json::from_str(line).unwrap();
            events.insert(event["seq"].as_u64().unwrap(), event);
        }
        if events.len() == before {
            return Ok(events);
        }
        from = events.keys().next_back().unwrap() + 1;
    }
}

/// Acked events missing from the log or replaced by another event at their seq.
fn lost_acked(ok: &[(String, Value)], log: &BTreeMap<u64, Value>) -> Vec<String> {
    ok.iter()
        .filter(|(_, ack)| ack["seq"].is_u64())
        .filter(|(_, ack)| {
            let seq = ack["seq"].as_u64().unwrap();
            log.get(&seq).is_none_or(|event| event["hash"] != ack["hash"])
        })
        .map(|(verb, ack)| format!("{verb} {ack}"))
        .collect()
}

/// Pairs of acked claims of one item where the later one came before the earlier one's claim was
/// acked or released in the log: with leases longer than the run, both were held at once.
fn double_claims(ok: &[(String, Value)], log: &BTreeMap<u64, Value>) -> Vec<String> {
    let mut ended: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for (seq, event) in log {
        if matches!(event["kind"].as_str(), Some("item_acked" | "item_released")) {
            let body = &event["body"];
            let key = (body["item"].as_str().unwrap().to_owned(), body["token"].as_u64().unwrap());
            ended.entry(key).or_insert(*seq);
        }
    }
    let mut claims: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (_, ack) in ok.iter().filter(|(verb, _)| verb == "queue-claim") {
        let item = ack["item"].as_str().unwrap().to_owned();
        claims
            .entry(item)
            .or_default()
            .push((ack["seq"].as_u64().unwrap(), ack["token"].as_u64().unwrap()));
    }
    let mut doubles = Vec::new();
    for (item, mut held) in claims {
        held.sort_unstable();
        for pair in held.windows(2) {
            let ((_, token), (next_seq, next_token)) = (pair[0], pair[1]);
            let end = ended.get(&(item.clone(), token)).copied();
            if end.is_none_or(|end| end > next_seq) {
                doubles.push(format!("{item}: token {token} still held at token {next_token}"));
            }
        }
    }
    doubles
}

/// Effects the log holds twice or out of order, whatever the outcomes were: a set member added
/// twice (dedup must be idempotent) and a record revision that does not follow the previous one.
fn history_anomalies(log: &BTreeMap<u64, Value>) -> Vec<String> {
    let mut members = BTreeSet::new();
    let mut revs: BTreeMap<String, u64> = BTreeMap::new();
    let mut anomalies = Vec::new();
    for (seq, event) in log {
        let body = &event["body"];
        match event["kind"].as_str() {
            Some("set_added") => {
                let member = body["member"].as_str().unwrap().to_owned();
                if !members.insert(member.clone()) {
                    anomalies.push(format!("seq {seq}: member {member} added twice"));
                }
            }
            Some("record_put") => {
                let key = body["key"].as_str().unwrap().to_owned();
                let rev = body["rev"].as_u64().unwrap();
                let previous = revs.insert(key.clone(), rev).unwrap_or(0);
                if rev != previous + 1 {
                    anomalies.push(format!("seq {seq}: {key} rev {rev} after rev {previous}"));
                }
            }
            _ => {}
        }
    }
    anomalies
}

/// Acked events whose log order contradicts real time: A completed before B was invoked, yet A's
/// seq is after B's. The log order is the linearization of acked effects, so it must respect
/// real time.
fn realtime_violations(timed: &[Timed]) -> Vec<String> {
    let mut acked: Vec<&Timed> = timed.iter().filter(|t| t.json["ok"] == true).collect();
    let mut by_completion = acked.clone();
    by_completion.sort_by_key(|t| t.completed_us);
    acked.sort_by_key(|t| t.invoked_us);
    let (mut done, mut max_seq, mut violations) = (0, 0, Vec::new());
    for b in acked {
        while done < by_completion.len() && by_completion[done].completed_us < b.invoked_us {
            max_seq = max_seq.max(by_completion[done].json["seq"].as_u64().unwrap());
            done += 1;
        }
        let seq = b.json["seq"].as_u64().unwrap();
        if max_seq > seq {
            violations
                .push(format!("{} seq {seq} after an earlier-completed seq {max_seq}", b.verb));
        }
    }
    violations
}

/// Refusals that no linearization explains: a `held` whose named claim (item, token, holder) is
/// not in the log, or whose acknowledged ack completed before the refusal was invoked, or whose
/// acknowledged claim was invoked after the refusal completed; a `stale_token` for a claim that
/// was acknowledged before the refusal began and that the log never ends.
fn bad_denials(timed: &[Timed], log: &BTreeMap<u64, Value>) -> Vec<String> {
    let key =
        |json: &Value| (json["item"].as_str().unwrap().to_owned(), json["token"].as_u64().unwrap());
    let claimed: BTreeMap<(String, u64), &Value> = log
        .values()
        .filter(|e| e["kind"] == "item_claimed")
        .map(|e| (key(&e["body"]), &e["body"]))
        .collect();
    let acked = |verb: &str| -> BTreeMap<(String, u64), &Timed> {
        timed
            .iter()
            .filter(|t| t.verb == verb && t.json["ok"] == true)
            .map(|t| (key(&t.json), t))
            .collect()
    };
    let (claims, acks) = (acked("queue-claim"), acked("queue-ack"));
    let mut bad = Vec::new();
    for denial in timed.iter().filter(|t| t.json["refused"] == "held") {
        let named = key(&denial.json);
        let holder_matches =
            claimed.get(&named).is_some_and(|c| c["holder"] == denial.json["holder"]);
        let ended_before = acks.get(&named).is_some_and(|a| a.completed_us < denial.invoked_us);
        let claimed_after = claims.get(&named).is_some_and(|c| c.invoked_us > denial.completed_us);
        if !holder_matches || ended_before || claimed_after {
            bad.push(format!("{}: {named:?}", denial.json));
        }
    }
    // A token is stale only after its claim ended; a claim that the log never ends stays live
    // for the whole run (the lease outlasts it), so from its acknowledgement on it is current.
    let ended: BTreeSet<(String, u64)> = log
        .values()
        .filter(|e| matches!(e["kind"].as_str(), Some("item_acked" | "item_released")))
        .map(|e| key(&e["body"]))
        .collect();
    for denial in timed.iter().filter(|t| t.json["refused"] == "stale_token") {
        let named = key(&denial.json);
        let live = claims.get(&named).is_some_and(|c| c.completed_us < denial.invoked_us);
        if live && !ended.contains(&named) {
            bad.push(format!("{}: {named:?} is live", denial.json));
        }
    }
    bad
}

/// Keeps the store and writes the answered history beside it (one JSON line per `ok` or `held`
/// invocation, with its interval), so that a failing run can be examined after the test.
fn keep_evidence(dir: tempfile::TempDir, tally: &Tally) -> PathBuf {
    let kept = dir.keep();
    let lines: Vec<String> = tally
        .timed
        .iter()
        .map(|t| {
            serde_json::json!({
                "verb": t.verb, "answer": t.json,
                "invoked_us": t.invoked_us, "completed_us": t.completed_us,
            })
            .to_string()
        })
        .collect();
    std::fs::write(kept.join("history.jsonl"), lines.join("\n")).unwrap();
    kept
}

fn percentile_ms(sorted_us: &[u64], percent: usize) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let index = (sorted_us.len() * percent / 100).min(sorted_us.len() - 1);
    #[expect(clippy::cast_precision_loss, reason = "latencies are far below 2^52 us")]
    let ms = sorted_us[index] as f64 / 1000.0;
    ms
}

fn setup(db: &Path) {
    let init = hookstate(db).arg("init").output().unwrap();
    assert_eq!(init.status.code(), Some(0), "{init:?}");
    for n in 0..ITEMS {
        let out = hookstate(db).args(["queue", "push", "q", &format!("i{n}")]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
}

/// Runs the workers until `budget` passed; workers `0..direct` never look for a server.
fn run_workers(db: &Path, seed: u64, budget: Duration, direct: u64) -> Tally {
    let epoch = Instant::now();
    let deadline = epoch + budget;
    let db: Arc<PathBuf> = Arc::new(db.to_path_buf());
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || worker(&db, seed, w, w < direct, epoch, deadline))
        })
        .collect();
    let mut total = Tally::default();
    for handle in handles {
        let tally = handle.join().unwrap();
        total.invocations += tally.invocations;
        total.kills += tally.kills;
        total.ok.extend(tally.ok);
        total.timed.extend(tally.timed);
        total.fail += tally.fail;
        total.info += tally.info;
        total.unexpected.extend(tally.unexpected);
        total.latencies_us.extend(tally.latencies_us);
    }
    total
}

#[test]
fn kill_loop_loses_no_acked_event_and_never_double_claims() {
    let budget = Duration::from_secs(env_u64("HOOKSTATE_KILL_SECS", BUDGET_SECS_DEFAULT));
    kill_loop("killloop", budget, None);
}

/// The kill loop through `hookstate serve` (issue 14): every call finds the server by itself and
/// forwards to it, while the server is SIGKILLed at random and restarted; a call whose answer was
/// lost runs again in-process under its idempotency key. Same checks as the direct loop.
#[test]
fn kill_loop_through_a_killed_and_restarted_server_loses_nothing() {
    let budget = Duration::from_secs(env_u64("HOOKSTATE_KILL_SECS", SERVED_BUDGET_SECS_DEFAULT));
    kill_loop("killloop-served", budget, Some(0));
}

/// The same with half the workers direct (never looking for the server) and half through it:
/// both write the one store at once.
#[test]
fn kill_loop_mixed_direct_and_served_loses_nothing() {
    let budget = Duration::from_secs(env_u64("HOOKSTATE_KILL_SECS", SERVED_BUDGET_SECS_DEFAULT));
    kill_loop("killloop-mixed", budget, Some(WORKERS / 2));
}

/// What the server supervisor of a served kill loop did.
#[derive(Debug, Default)]
pub(crate) struct ServerTally {
    pub(crate) starts: u64,
    pub(crate) kills: u64,
    /// Starts that did not end in serving (an exit before the kill, other than by it).
    pub(crate) failed_starts: Vec<String>,
    /// The last server's exit on SIGTERM (`Some(0)` when it stopped cleanly).
    pub(crate) last_exit: Option<i32>,
    /// Requests and durable commits the servers reported just before their end (a server that
    /// did not answer the question in time is not counted).
    pub(crate) requests: u64,
    pub(crate) commits: u64,
}

/// Asks the server of `db` for its counters: (requests, commits).
fn server_counts(db: &Path) -> Option<(u64, u64)> {
    use hookstate_engine::{socket_path, Client, ClientFrame, ServerFrame};
    let wait = Duration::from_millis(STATS_WAIT_MS);
    let mut client = Client::connect(&socket_path(db), wait).ok()?;
    client.send(&ClientFrame::Stats { id: 1 }).ok()?;
    match client.receive(Instant::now() + wait).ok()? {
        ServerFrame::Stats { stats, .. } => Some((stats.requests, stats.commits)),
        _ => None,
    }
}

/// Keeps a `hookstate serve` on `db` until `stop` is set, SIGKILLing each one after a random
/// `SERVER_LIFE_MS_MIN..=SERVER_LIFE_MS_MAX` ms and starting the next at once; the last one is
/// stopped with SIGTERM. Also used by the served linearizability test.
pub(crate) fn supervise(db: &Path, seed: u64, stop: &AtomicBool) -> ServerTally {
    let deadline = || stop.load(Ordering::SeqCst);
    let mut rng = Rng(seed ^ 0x5e72_7665);
    let mut tally = ServerTally::default();
    loop {
        let mut child = hookstate(db)
            .args(["serve", "--idle-exit-s", crate::served::LEFT_BEHIND_IDLE_S])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        tally.starts += 1;
        // Its first line says it listens (and has taken SIGTERM); its life starts there.
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        if line.is_empty() {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            tally.failed_starts.push(format!("exit {}: {stderr}", out.status));
            if deadline() {
                return tally;
            }
            continue;
        }
        let life = Duration::from_millis(
            SERVER_LIFE_MS_MIN + rng.below(SERVER_LIFE_MS_MAX - SERVER_LIFE_MS_MIN + 1),
        );
        let born = Instant::now();
        while born.elapsed() < life && !deadline() {
            std::thread::sleep(Duration::from_millis(SUPERVISOR_TICK_MS));
        }
        let last = deadline();
        if let Some((requests, commits)) = server_counts(db) {
            tally.requests += requests;
            tally.commits += commits;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            tally.failed_starts.push(format!("exit {status}: {stderr}"));
        } else if last {
            let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            assert!(term.unwrap().success(), "kill -TERM the server");
            tally.last_exit = child.wait().unwrap().code();
            return tally;
        } else {
            child.kill().unwrap();
            child.wait().unwrap();
            tally.kills += 1;
        }
        if last {
            return tally;
        }
    }
}

/// Runs [`supervise`] on its own thread until the returned flag is set.
pub(crate) fn start_supervisor(
    db: &Path,
    seed: u64,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<ServerTally>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (db, flag) = (db.to_path_buf(), Arc::clone(&stop));
    (stop, std::thread::spawn(move || supervise(&db, seed, &flag)))
}

/// One kill loop: with `served` = `Some(direct)`, a supervised server runs beside the workers
/// and workers `0..direct` never look for it.
fn kill_loop(name: &str, budget: Duration, served: Option<u64>) {
    let seed = env_u64("HOOKSTATE_KILL_SEED", SEED_DEFAULT);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    setup(&db);
    let supervisor = served.map(|_| start_supervisor(&db, seed));
    let mut tally = run_workers(&db, seed, budget, served.unwrap_or(WORKERS));
    let server = supervisor.map(|(stop, thread)| {
        stop.store(true, Ordering::SeqCst);
        thread.join().unwrap()
    });
    let verify = hookstate(&db).arg("verify").output().unwrap();
    // A store that no longer gives its log back has lost every acknowledged event to its reader.
    let (log, log_refused) = match read_log(&db) {
        Ok(log) => (log, None),
        Err(call) => (BTreeMap::new(), Some(call)),
    };
    let lost = lost_acked(&tally.ok, &log);
    let doubles = double_claims(&tally.ok, &log);
    let anomalies = history_anomalies(&log);
    let realtime = realtime_violations(&tally.timed);
    // Temporary files of killed writers (anchor or store creation): counted, not refused.
    let leftover_temps = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".state.redb."))
        .count();
    let denials = bad_denials(&tally.timed, &log);
    tally.latencies_us.sort_unstable();
    if let Some(server) = &server {
        println!(
            "{name} server_starts={} server_kills={} failed_starts={} last_exit={:?} \
             served_requests={} served_commits={}",
            server.starts,
            server.kills,
            server.failed_starts.len(),
            server.last_exit,
            server.requests,
            server.commits
        );
    }
    println!(
        "{name} invocations={} kills={} ok={} fail={} info={} lost_acked={} double_claims={} \
         history_anomalies={} realtime_violations={} bad_denials={}/{} unexpected_exits={} \
         events={} log_refused={} verify={} leftover_temps={leftover_temps} seed={seed} \
         p50_ms={:.1} p99_ms={:.1}",
        tally.invocations,
        tally.kills,
        tally.ok.len(),
        tally.fail,
        tally.info,
        lost.len(),
        doubles.len(),
        anomalies.len(),
        realtime.len(),
        denials.len(),
        tally.timed.iter().filter(|t| t.json["refused"].is_string()).count(),
        tally.unexpected.len(),
        log.len(),
        log_refused.is_some(),
        if verify.status.success() { "ok" } else { "failed" },
        percentile_ms(&tally.latencies_us, 50),
        percentile_ms(&tally.latencies_us, 99),
    );
    let failed = !lost.is_empty()
        || !doubles.is_empty()
        || !anomalies.is_empty()
        || !realtime.is_empty()
        || !denials.is_empty()
        || !tally.unexpected.is_empty()
        || !verify.status.success()
        || log_refused.is_some();
    if failed {
        println!("{name} evidence kept at {}", keep_evidence(dir, &tally).display());
    }
    assert!(log_refused.is_none(), "the log after the kill loop: {log_refused:?}");
    assert!(lost.is_empty(), "acked events lost (seed {seed}): {lost:#?}");
    assert!(doubles.is_empty(), "double claims (seed {seed}): {doubles:#?}");
    assert!(anomalies.is_empty(), "history anomalies (seed {seed}): {anomalies:#?}");
    assert!(realtime.is_empty(), "real-time order violated (seed {seed}): {realtime:#?}");
    assert!(denials.is_empty(), "bad denials (seed {seed}): {denials:#?}");
    assert!(tally.unexpected.is_empty(), "unexpected exits: {:#?}", tally.unexpected);
    assert!(verify.status.success(), "verify after the kill loop: {verify:?}");
    // The run must have exercised what it claims to: kills, acks of every verb, refusals.
    assert!(tally.kills > 0, "no process was killed");
    let verbs: BTreeSet<&str> = tally.ok.iter().map(|(verb, _)| verb.as_str()).collect();
    for verb in ["queue-claim", "queue-ack", "queue-push", "kv-put", "set-add", "rebuild"] {
        assert!(verbs.contains(verb), "no {verb} was acknowledged: {verbs:?}");
    }
    assert!(tally.fail > 0, "no refusal was seen");
    if let Some(server) = server {
        assert!(
            server.failed_starts.is_empty(),
            "servers that failed: {:#?}",
            server.failed_starts
        );
        assert!(server.kills > 0, "no server was killed");
        assert!(server.requests > 0 && server.commits > 0, "no call went through a server");
        assert_eq!(server.last_exit, Some(0), "the last server did not stop cleanly on SIGTERM");
    }
}

/// Rounds of the first-use kill test, each on a fresh directory.
const FIRST_USE_ROUNDS: u64 = 30;
/// Processes racing to create the store in each round.
const FIRST_USE_PROCESSES: u64 = 4;
/// Share of first-use processes that get SIGKILL, in percent.
const FIRST_USE_KILL_PERCENT: u64 = 50;
/// Kills in the first-use test land in `0..=FIRST_USE_KILL_MS_MAX` ms: the creation window.
const FIRST_USE_KILL_MS_MAX: u64 = 25;

/// kill -9 during the atomic creation of a store (first use by several processes at once): the
/// store that remains, if any, verifies, holds every acknowledged event, and takes the next write.
/// A creator builds the store in a file with no name (`O_TMPFILE`), so where the filesystem has
/// such files a killed creator leaves nothing in the directory; where it has none, the temporary
/// files killed creators leave are counted, not refused, and never mistaken for the store.
#[test]
fn kill_during_first_use_leaves_one_verifying_store() {
    let seed = env_u64("HOOKSTATE_KILL_SEED", SEED_DEFAULT);
    let mut rng = Rng(seed);
    let root = tempfile::tempdir().unwrap();
    let (mut kills, mut acked, mut no_store_rounds, mut leftover_temps) = (0, 0, 0, 0);
    let (mut unopenable, mut unexpected_exits, mut lost, mut next_failed) = (0, 0, 0, 0);
    let mut problems = Vec::new();
    for round in 0..FIRST_USE_ROUNDS {
        let dir = root.path().join(format!("r{round}"));
        let db = dir.join("state.redb");
        let mut children: Vec<_> = (0..FIRST_USE_PROCESSES)
            .map(|n| {
                let kill_at = (rng.below(100) < FIRST_USE_KILL_PERCENT)
                    .then(|| rng.below(FIRST_USE_KILL_MS_MAX + 1));
                let child = hookstate(&db)
                    .args(["set", "add", "s", &format!("m{n}")])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (kill_at, child)
            })
            .collect();
        let start = Instant::now();
        children.sort_by_key(|(kill_at, _)| *kill_at);
        let mut acks = Vec::new();
        for (kill_at, mut child) in children {
            if let Some(ms) = kill_at {
                std::thread::sleep(Duration::from_millis(ms).saturating_sub(start.elapsed()));
                kills += u64::from(child.kill().is_ok());
            }
            let out = child.wait_with_output().unwrap();
            let line: Option<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .and_then(|l| serde_json::from_str(l).ok());
            match line {
                Some(json) if json["ok"] == true => acks.push(("set-add".to_owned(), json)),
                _ if out.status.code().is_none() => {}
                _ => {
                    unexpected_exits += 1;
                    problems.push(format!("round {round}: unexpected exit: {out:?}"));
                }
            }
        }
        acked += acks.len();
        let verify = hookstate(&db).arg("verify").output().unwrap();
        if !db.exists() {
            assert!(acks.is_empty(), "round {round}: acked without a store");
            no_store_rounds += 1;
        } else if verify.status.code() == Some(0) {
            let log = read_log(&db).unwrap_or_else(|call| panic!("round {round}: {call}"));
            let missing = lost_acked(&acks, &log);
            lost += missing.len();
            problems.extend(missing.into_iter().map(|m| format!("round {round}: lost {m}")));
        } else {
            unopenable += 1;
            problems.push(format!("round {round}: the store does not verify: {verify:?}"));
        }
        let next = hookstate(&db).args(["set", "add", "s", "after"]).output().unwrap();
        if next.status.code() != Some(0) {
            next_failed += 1;
            problems.push(format!("round {round}: the next write failed: {next:?}"));
        }
        leftover_temps += std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".create-"))
            .count();
    }
    println!(
        "firstuse rounds={FIRST_USE_ROUNDS} processes={FIRST_USE_PROCESSES} kills={kills} \
         acked={acked} no_store_rounds={no_store_rounds} leftover_temps={leftover_temps} \
         unopenable={unopenable} unexpected_exits={unexpected_exits} lost_acked={lost} \
         next_failed={next_failed} seed={seed}"
    );
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(kills > 0, "no creator was killed");
    if unnamed_files_in(root.path()) {
        assert_eq!(leftover_temps, 0, "killed creators left named temporary files");
    }
}

/// Whether `dir`'s filesystem makes files with no name (`O_TMPFILE`), in which a store is built.
fn unnamed_files_in(dir: &std::path::Path) -> bool {
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::TMPFILE;
    rustix::fs::open(dir, flags, rustix::fs::Mode::from_raw_mode(0o600)).is_ok()
}
