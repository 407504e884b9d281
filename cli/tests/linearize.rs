//! Linearizability of per-key claim histories (RELIABILITY.md A7): eight workers run real
//! `hookstate` processes (push, claim, ack, release) over ten one-item queues, about 20% of them
//! SIGKILLed at a random instant; each item's history of real-time intervals and outcomes is then
//! checked against a sequential model of one claim-queue item with a Wing–Gong search (memoized
//! on the set of linearized operations and the model state, as in Lowe's variant).
//!
//! A killed (or busy) invocation with no answer is left in flight: it may or may not have taken
//! effect, at any instant after it was invoked. An answer received before the kill counts.
//! Does not read the log or call the engine in-process: the verdict rests on the answers alone.
//!
//! `HOOKSTATE_LIN_SEED` sets the seed (default [`SEED_DEFAULT`]).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{hookstate, Rng};

/// Concurrent workers, each running one process at a time.
const WORKERS: u64 = 8;
/// Invocations per worker.
const OPS_PER_WORKER: u64 = 120;
/// Items, each alone in its own queue, so that a key's history is one item's.
const KEYS: u64 = 10;
/// Share of invocations that get SIGKILL, in percent.
const KILL_PERCENT: u64 = 20;
/// Kills land uniformly in `0..=KILL_DELAY_MS_MAX` ms after the spawn.
const KILL_DELAY_MS_MAX: u64 = 30;
/// A lease longer than any run: a claimed item stays held until acked or released.
const LEASE_MS: u64 = 24 * 60 * 60 * 1000;
/// Deliveries allowed per item: more than any run makes, so no item is ever parked.
const MAX_DELIVERIES: u64 = 1000;
/// The seed when `HOOKSTATE_LIN_SEED` is unset.
const SEED_DEFAULT: u64 = 0x6c69_6e65_6172_697a;
/// Search nodes per key after which the checker gives up (counted as not linearizable).
const SEARCH_NODES_MAX: u64 = 20_000_000;
/// The item name inside each queue.
const ITEM: &str = "x";

/// An operation on the one item of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Push,
    Claim,
    Ack(u64),
    Release(u64),
}

/// What an operation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ret {
    /// Done; a claim carries its token.
    Ok(Option<u64>),
    /// Claim refused: held under this token.
    Held(u64),
    /// Push refused: the item is already in the queue.
    Exists,
    /// Ack or release refused: the token is not the item's current claim.
    Stale,
    /// The item is not in the queue.
    NotFound,
}

/// The sequential model of one item: absent, ready, or claimed under a token; plus the queue's
/// epoch (the last token handed out), which acks do not reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Model {
    item: Slot,
    epoch: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
enum Slot {
    #[default]
    Absent,
    Ready,
    Claimed(u64),
}

impl Model {
    fn step(self, op: Op) -> (Model, Ret) {
        let mut next = self;
        let ret = match (op, self.item) {
            (Op::Push, Slot::Absent) => {
                next.item = Slot::Ready;
                Ret::Ok(None)
            }
            (Op::Push, _) => Ret::Exists,
            (_, Slot::Absent) => Ret::NotFound,
            (Op::Claim, Slot::Ready) => {
                next.epoch += 1;
                next.item = Slot::Claimed(next.epoch);
                Ret::Ok(Some(next.epoch))
            }
            (Op::Claim, Slot::Claimed(token)) => Ret::Held(token),
            (Op::Ack(t) | Op::Release(t), Slot::Claimed(token)) if t == token => {
                next.item = if matches!(op, Op::Ack(_)) { Slot::Absent } else { Slot::Ready };
                Ret::Ok(None)
            }
            (Op::Ack(_) | Op::Release(_), _) => Ret::Stale,
        };
        (next, ret)
    }
}

/// One invocation: its interval in µs since the run started (`None` when left in flight) and its
/// answer (`None` when there was none).
#[derive(Debug, Clone)]
struct Entry {
    op: Op,
    invoked_us: u64,
    completed_us: Option<u64>,
    ret: Option<Ret>,
}

/// Whether `history` has a linearization against [`Model`]; `None` when the search gave up.
/// Completed operations must all be linearized inside their intervals; in-flight ones may be
/// linearized at any instant after their invocation, or never. `nodes` counts search steps.
fn linearizable(history: &[Entry], nodes: &mut u64) -> Option<bool> {
    let words = history.len().div_ceil(64);
    let mut seen: HashSet<(Vec<u64>, Model)> = HashSet::new();
    let mut stack = vec![(vec![0u64; words], Model::default())];
    let done = |set: &[u64], i: usize| set[i / 64] & (1 << (i % 64)) != 0;
    while let Some((set, model)) = stack.pop() {
        *nodes += 1;
        if *nodes > SEARCH_NODES_MAX {
            return None;
        }
        // The earliest completion among completed operations not yet linearized: only
        // operations invoked before it may come next.
        let mut horizon = u64::MAX;
        for (i, e) in history.iter().enumerate() {
            if let (false, Some(c)) = (done(&set, i), e.completed_us) {
                horizon = horizon.min(c);
            }
        }
        if horizon == u64::MAX {
            return Some(true);
        }
        for (i, e) in history.iter().enumerate() {
            if done(&set, i) || e.invoked_us > horizon {
                continue;
            }
            let (next, ret) = model.step(e.op);
            match e.ret {
                Some(want) if want != ret => continue,
                // An answerless operation that changes nothing is the same as never taking effect.
                None if next == model => continue,
                _ => {}
            }
            let mut next_set = set.clone();
            next_set[i / 64] |= 1 << (i % 64);
            if seen.insert((next_set.clone(), next)) {
                stack.push((next_set, next));
            }
        }
    }
    Some(false)
}

fn args(key: u64, op: Op, holder: &str) -> Vec<String> {
    let queue = format!("q{key}");
    let v: Vec<String> = match op {
        Op::Push => {
            let max = MAX_DELIVERIES.to_string();
            vec!["push".into(), queue, ITEM.into(), "--max-deliveries".into(), max]
        }
        Op::Claim => ["claim", &queue, "--item", ITEM, "--holder", holder, "--lease-ms"]
            .map(String::from)
            .into_iter()
            .chain([LEASE_MS.to_string()])
            .collect(),
        Op::Ack(t) => ["ack", &queue, ITEM, "--token", &t.to_string()].map(String::from).to_vec(),
        Op::Release(t) => {
            ["release", &queue, ITEM, "--token", &t.to_string()].map(String::from).to_vec()
        }
    };
    std::iter::once("queue".to_owned()).chain(v).collect()
}

/// Parses an answer line into the model's terms; `Err` is an answer the model does not know.
fn parse(op: Op, json: &Value) -> Result<Ret, String> {
    let token = || json["token"].as_u64().ok_or_else(|| format!("no token: {json}"));
    Ok(match (json["ok"].as_bool(), json["refused"].as_str()) {
        (Some(true), _) if op == Op::Claim => Ret::Ok(Some(token()?)),
        (Some(true), _) => Ret::Ok(None),
        (_, Some("held")) => Ret::Held(token()?),
        (_, Some("exists")) => Ret::Exists,
        (_, Some("stale_token")) => Ret::Stale,
        (_, Some("not_found")) => Ret::NotFound,
        _ => return Err(format!("{op:?}: unexpected answer {json}")),
    })
}

#[derive(Default)]
struct Tally {
    entries: Vec<(u64, Entry)>,
    kills: u64,
    unexpected: Vec<String>,
}

/// A worker; `direct` ones never look for a server.
fn worker_as(db: &Path, seed: u64, w: u64, direct: bool, epoch: Instant) -> Tally {
    let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut tally = Tally::default();
    // Tokens this worker knows per key: from its claims and from `held` refusals.
    let mut tokens: BTreeMap<u64, u64> = BTreeMap::new();
    let holder = format!("w{w}");
    let micros = |at: Instant| u64::try_from(at.duration_since(epoch).as_micros()).unwrap();
    for _ in 0..OPS_PER_WORKER {
        let key = rng.below(KEYS);
        let op = match (tokens.get(&key), rng.below(100)) {
            (Some(&t), 0..=39) => Op::Ack(t),
            (Some(&t), 40..=59) => Op::Release(t),
            (_, 0..=29) => Op::Push,
            _ => Op::Claim,
        };
        if matches!(op, Op::Ack(_) | Op::Release(_)) {
            tokens.remove(&key);
        }
        let kill_after = (rng.below(100) < KILL_PERCENT)
            .then(|| Duration::from_millis(rng.below(KILL_DELAY_MS_MAX + 1)));
        let invoked = Instant::now();
        let mut command = hookstate(db);
        if direct {
            command.env("HOOKSTATE_SERVE", "0");
        }
        let mut child = command
            .args(args(key, op, &holder))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(delay) = kill_after {
            std::thread::sleep(delay);
            // SIGKILL; an error only means the process already ended.
            tally.kills += u64::from(child.kill().is_ok());
        }
        // Reads stdout to EOF even after a kill: an answer written before the kill still counts.
        let out = child.wait_with_output().unwrap();
        let completed = micros(Instant::now());
        let line: Option<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .and_then(|l| serde_json::from_str(l).ok());
        let ret = match (line, out.status.code()) {
            (Some(json), _) => match parse(op, &json) {
                Ok(ret) => Some(ret),
                Err(e) => {
                    tally.unexpected.push(e);
                    None
                }
            },
            // Killed, or busy: no answer, left in flight.
            (None, None | Some(4)) => None,
            (None, Some(code)) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                tally.unexpected.push(format!("{op:?} exit {code}: {stderr}"));
                None
            }
        };
        if let Some(Ret::Ok(Some(t)) | Ret::Held(t)) = ret {
            tokens.insert(key, t);
        }
        let entry =
            Entry { op, invoked_us: micros(invoked), completed_us: ret.map(|_| completed), ret };
        tally.entries.push((key, entry));
    }
    tally
}

#[test]
fn per_key_claim_histories_of_killed_processes_are_linearizable() {
    linearize("linearize", None);
}

/// The same histories through `hookstate serve` (issue 14), the server SIGKILLed at random and
/// restarted, half the workers direct: still linearizable.
#[test]
fn claim_histories_through_a_killed_and_restarted_server_are_linearizable() {
    linearize("linearize-served", Some(WORKERS / 2));
}

/// One run; with `served` = `Some(direct)`, a supervised server runs beside the workers and
/// workers `0..direct` never look for it.
fn linearize(name: &str, served: Option<u64>) {
    let seed = std::env::var("HOOKSTATE_LIN_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    // Creates the store before the race, so that no kill lands in its creation.
    let init = hookstate(&db).args(["set", "add", "s", "init"]).output().unwrap();
    assert!(init.status.success(), "{init:?}");
    let supervisor = served.map(|_| crate::killloop::start_supervisor(&db, seed));
    let direct = served.unwrap_or(WORKERS);
    let epoch = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || worker_as(&db, seed, w, w < direct, epoch))
        })
        .collect();
    let mut histories: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    let (mut kills, mut unexpected) = (0, Vec::new());
    for handle in workers {
        let tally = handle.join().unwrap();
        kills += tally.kills;
        unexpected.extend(tally.unexpected);
        for (key, entry) in tally.entries {
            histories.entry(key).or_default().push(entry);
        }
    }
    let server = supervisor.map(|(stop, thread)| {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        thread.join().unwrap()
    });
    let ops: usize = histories.values().map(Vec::len).sum();
    let open = histories.values().flatten().filter(|e| e.ret.is_none()).count();
    let checker = Instant::now();
    let mut bad = Vec::new();
    let mut nodes = 0;
    for (key, history) in &histories {
        match linearizable(history, &mut nodes) {
            Some(true) => {}
            verdict => bad.push(format!("q{key} (gave up: {}): {history:#?}", verdict.is_none())),
        }
    }
    let checker_ms = checker.elapsed().as_millis();
    if let Some(server) = &server {
        println!(
            "{name} server_starts={} server_kills={} served_requests={} last_exit={:?}",
            server.starts, server.kills, server.requests, server.last_exit
        );
        assert!(server.failed_starts.is_empty(), "{:#?}", server.failed_starts);
        assert!(server.kills > 0 && server.requests > 0, "the server was not exercised");
        assert_eq!(server.last_exit, Some(0), "the last server did not stop cleanly");
    }
    println!(
        "{name} ops={ops} keys={} killed={kills} open={open} nonlinearizable_keys={} \
         checker_ms={checker_ms} search_nodes={nodes} unexpected={} seed={seed}",
        histories.len(),
        bad.len(),
        unexpected.len(),
    );
    assert!(bad.is_empty(), "not linearizable (seed {seed}): {}", bad.join("\n"));
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    assert!(kills > 0, "no process was killed");
    let oks = histories.values().flatten().filter(|e| matches!(e.ret, Some(Ret::Ok(_)))).count();
    assert!(oks > 0, "nothing was acknowledged");
}

/// The checker itself: it accepts a history whose killed claim explains a later `held`, and
/// rejects two acknowledged claims of one token and an ack that real time puts before its claim.
#[test]
fn the_checker_accepts_open_effects_and_rejects_impossible_histories() {
    let e = |op, invoked_us, completed_us: Option<u64>, ret| Entry {
        op,
        invoked_us,
        completed_us,
        ret,
    };
    let push = e(Op::Push, 0, Some(1), Some(Ret::Ok(None)));
    let killed_claim = e(Op::Claim, 2, None, None);
    let held = e(Op::Claim, 10, Some(11), Some(Ret::Held(1)));
    let mut nodes = 0;
    let ok = [push.clone(), killed_claim.clone(), held.clone()];
    assert_eq!(linearizable(&ok, &mut nodes), Some(true));
    let without_kill = [push.clone(), held];
    assert_eq!(linearizable(&without_kill, &mut nodes), Some(false));
    let double = [
        push.clone(),
        e(Op::Claim, 2, Some(3), Some(Ret::Ok(Some(1)))),
        e(Op::Claim, 4, Some(5), Some(Ret::Ok(Some(1)))),
    ];
    assert_eq!(linearizable(&double, &mut nodes), Some(false));
    let early_ack = [
        push,
        e(Op::Ack(1), 2, Some(3), Some(Ret::Ok(None))),
        e(Op::Claim, 4, Some(5), Some(Ret::Ok(Some(1)))),
    ];
    assert_eq!(linearizable(&early_ack, &mut nodes), Some(false));
}
