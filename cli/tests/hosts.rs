//! A claim race from several hosts (issue 15): three network namespaces made by the test (each
//! with one veth pair to the server's side and nothing else: no route beyond its peer), each
//! running 8 concurrent `hookstate queue claim` loops against a PostgreSQL server of the test's
//! own that listens on the veth addresses only. Phase one: 0 double claims, every item claimed
//! and acked once, `verify` ok. Phase two: claimers killed at random and the server crashed and
//! restarted once mid-run: 0 acknowledged claims or acks lost, 0 double claims.
//!
//! Needs root (namespaces) and a PostgreSQL server (scripts/pg-cluster.sh); skipped with a
//! message only where namespaces cannot be made. `HOOKSTATE_PG_LONG=1` runs many more items.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hookstate_testkit::Rng;
use serde_json::Value;

use crate::{finish, hookstate, Run};

/// Hosts (network namespaces) of the race.
const HOSTS: u32 = 3;
/// Concurrent claim loops on each host.
const LOOPS: u32 = 8;
/// Items of each phase in the default run: a few per loop, so every loop races for work.
const ITEMS_LEAN: u32 = 72;
/// Items of each phase with HOOKSTATE_PG_LONG=1.
const ITEMS_LONG: u32 = 720;
/// The lease of phase one: longer than the run, so an item is never claimed twice.
const LEASE_MS_LONG: u64 = 600_000;
/// The lease of phase two: items of killed claimers come back within it.
const LEASE_MS_SHORT: u64 = 1_500;
/// The per-call wait: a call spans the server's restart rather than fail at once.
const WAIT_MS: &str = "10000";
/// One phase's deadline: far beyond what it takes, so a hang fails instead of blocking CI.
const PHASE_DEADLINE: Duration = Duration::from_secs(600);
/// Out of this many calls of phase two, one is killed.
const KILL_ONE_IN: u64 = 5;
/// A killed call is killed within this many ms of its start (often mid-transaction).
const KILL_WITHIN_MS: u64 = 40;
/// Deliveries before an item is parked: more than a killed claimer can use up, so every item is
/// acked in the end.
const DELIVERIES: &str = "1000";
/// The third octet of each host's /30 is 10.(this).(host).0.
const NET_OCTET: u32 = 231;

/// The namespaces, veths and server of the race, removed and stopped on drop.
struct Lab {
    tag: String,
    cluster: PathBuf,
    script: PathBuf,
}

impl Lab {
    fn ns(&self, host: u32) -> String {
        format!("{}h{host}", self.tag)
    }

    fn server_addr(host: u32) -> String {
        format!("10.{NET_OCTET}.{host}.1")
    }

    fn make(cluster: &Path) -> Result<Lab, String> {
        let tag = format!("hs{}", std::process::id() % 100_000);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg-cluster.sh");
        let lab = Lab { tag, cluster: cluster.to_path_buf(), script };
        for host in 1..=HOSTS {
            let (ns, outer, inner) =
                (lab.ns(host), format!("{}o{host}", lab.tag), format!("{}i{host}", lab.tag));
            let host_addr = format!("10.{NET_OCTET}.{host}.2/30");
            let server_addr = format!("{}/30", Lab::server_addr(host));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["addr", "add", &server_addr, "dev", &outer])?;
            ip(&["link", "set", &outer, "up"])?;
            ip(&["-n", &ns, "addr", "add", &host_addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    fn cluster(&self, verb: &str, extra: &[&str]) -> String {
        let out = Command::new("bash")
            .arg(&self.script)
            .arg(verb)
            .arg(&self.cluster)
            .args(extra)
            .output();
        let out = out.unwrap();
        assert!(out.status.success(), "pg-cluster.sh {verb}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.script).arg("stop").arg(&self.cluster).output();
        for host in 1..=HOSTS {
            // Deleting the namespace deletes the veth inside it and so its peer.
            let _ = ip(&["netns", "del", &self.ns(host)]);
            let _ = ip(&["link", "del", &format!("{}o{host}", self.tag)]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr))),
    }
}

/// What the claimers were told: each acknowledged claim (item, token, holder) and each
/// acknowledged ack (item, token).
#[derive(Default)]
struct Acks {
    claims: Vec<(String, u64, String)>,
    acks: Vec<(String, u64)>,
    calls: u64,
    killed: u64,
    failed: u64,
}

/// A call of the binary on `host`'s namespace, against the server address of that host.
fn on_host(lab: &Lab, home: &Path, host: u32, db: &str, args: &[&str]) -> Command {
    let mut command = hookstate(home);
    let program = command.get_program().to_owned();
    let mut netns = Command::new("ip");
    netns.args(["netns", "exec", &lab.ns(host)]).arg(program).arg("--db").arg(db);
    netns.args(["--wait-ms", WAIT_MS]).args(args);
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => netns.env(key, value),
            None => netns.env_remove(key),
        };
    }
    // Each host keeps its own per-host anchor.
    netns.env("HOOKSTATE_ANCHOR_DIR", home.join(format!("anchors-{host}")));
    command = netns;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// Runs `command`, killing it `kill_after` into its run when given; `None` when it was killed.
fn call(mut command: Command, kill_after: Option<Duration>) -> Option<Run> {
    let mut child: Child = command.spawn().unwrap();
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        if child.try_wait().unwrap().is_none() {
            // `ip netns exec` execs the binary, so this pid is the hookstate process.
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    }
    let out = child.wait_with_output().unwrap();
    Some(Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

struct Phase<'a> {
    lab: &'a Lab,
    home: &'a Path,
    queue: &'a str,
    items: u32,
    lease_ms: u64,
    kill: bool,
}

/// Whether the queue holds no item any more (every item acked, whether or not its acker heard).
fn queue_is_empty(phase: &Phase<'_>, host: u32, db: &str) -> bool {
    let list =
        finish(&mut on_host(phase.lab, phase.home, host, db, &["queue", "list", phase.queue]));
    list.code == 0 && list.json()["items"].as_array().is_some_and(Vec::is_empty)
}

/// Runs LOOPS claim loops on each host until the queue is empty; each loop claims, then acks
/// what it claimed. With `kill`, one call in KILL_ONE_IN is killed within KILL_WITHIN_MS.
fn race(phase: &Phase<'_>, db_of: &(dyn Fn(u32) -> String + Sync), restart: Option<u32>) -> Acks {
    let acks = Mutex::new(Acks::default());
    let done_acks = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let restarted = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for host in 1..=HOSTS {
            for index in 0..LOOPS {
                let (acks, done_acks, stop) = (&acks, &done_acks, &stop);
                let restarted = &restarted;
                scope.spawn(move || {
                    let db = db_of(host);
                    let holder = format!("h{host}-{index}");
                    let mut rng = Rng(u64::from(host * 100 + index) ^ 0x5eed);
                    let mut idle = 0u32;
                    while !stop.load(Ordering::Relaxed) && start.elapsed() < PHASE_DEADLINE {
                        let kill = |rng: &mut Rng| {
                            (phase.kill && rng.below(KILL_ONE_IN) == 0)
                                .then(|| Duration::from_millis(rng.below(KILL_WITHIN_MS)))
                        };
                        let lease = phase.lease_ms.to_string();
                        let args = [
                            "queue",
                            "claim",
                            phase.queue,
                            "--holder",
                            &holder,
                            "--lease-ms",
                            &lease,
                        ];
                        let claim =
                            call(on_host(phase.lab, phase.home, host, &db, &args), kill(&mut rng));
                        acks.lock().unwrap().calls += 1;
                        let Some(claim) = claim else {
                            acks.lock().unwrap().killed += 1;
                            continue;
                        };
                        if claim.code != 0 {
                            // The server is down or restarting, or the wait ran out: again.
                            assert!([4, 6].contains(&claim.code), "{claim:?}");
                            acks.lock().unwrap().failed += 1;
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        let json = claim.json();
                        if json["claimed"] != true {
                            idle += 1;
                            if done_acks.load(Ordering::Relaxed) >= u64::from(phase.items)
                                || queue_is_empty(phase, host, &db)
                            {
                                break;
                            }
                            // Items of killed claimers come back when their lease ends.
                            std::thread::sleep(Duration::from_millis(50 * u64::from(idle.min(10))));
                            continue;
                        }
                        idle = 0;
                        let item = json["item"].as_str().unwrap().to_owned();
                        let token = json["token"].as_u64().unwrap();
                        acks.lock().unwrap().claims.push((item.clone(), token, holder.clone()));
                        if let Some(host_restart) = restart {
                            let claims = acks.lock().unwrap().claims.len();
                            if host == host_restart
                                && claims >= phase.items as usize / 3
                                && !restarted.swap(true, Ordering::SeqCst)
                            {
                                phase.lab.cluster("restart", &[]);
                            }
                        }
                        let token_text = token.to_string();
                        let args = ["queue", "ack", phase.queue, &item, "--token", &token_text];
                        let ack =
                            call(on_host(phase.lab, phase.home, host, &db, &args), kill(&mut rng));
                        acks.lock().unwrap().calls += 1;
                        match ack {
                            Some(ack) if ack.code == 0 => {
                                acks.lock().unwrap().acks.push((item, token));
                                done_acks.fetch_add(1, Ordering::Relaxed);
                            }
                            // A stale token (the lease ran out meanwhile): the item is back.
                            Some(ack) if ack.code == 1 => {}
                            Some(ack) => {
                                assert!([4, 6].contains(&ack.code), "{ack:?}");
                                acks.lock().unwrap().failed += 1;
                            }
                            None => acks.lock().unwrap().killed += 1,
                        }
                    }
                });
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    if restart.is_some() {
        assert!(restarted.load(Ordering::SeqCst), "the server was restarted mid-run");
    }
    acks.into_inner().unwrap()
}

/// (item, token) pairs.
type Pairs = BTreeSet<(String, u64)>;

/// The claims of `queue` in the log, replayed: (item, token) of each claim, and how many claims
/// were made while another claim of the same item was live (not acked or released, its lease
/// not run out by the server's clock): double claims.
fn replay(lab: &Lab, home: &Path, host: u32, db: &str, queue: &str) -> (Pairs, Pairs, u64) {
    let log =
        finish(on_host(lab, home, host, db, &["log", "--domain", "core"]).stdout(Stdio::piped()));
    assert_eq!(log.code, 0, "{log:?}");
    let mut live: BTreeMap<String, u64> = BTreeMap::new();
    let (mut claims, mut acks, mut doubles) = (BTreeSet::new(), BTreeSet::new(), 0);
    for line in log.stdout.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let body = &event["body"];
        if body["queue"] != queue {
            continue;
        }
        let item = body["item"].as_str().unwrap_or_default().to_owned();
        let at = event["at_ms"].as_u64().unwrap();
        match event["kind"].as_str().unwrap() {
            "item_claimed" => {
                if live.get(&item).is_some_and(|until| *until > at) {
                    doubles += 1;
                }
                live.insert(item.clone(), body["lease_until_ms"].as_u64().unwrap());
                claims.insert((item, body["token"].as_u64().unwrap()));
            }
            "item_acked" => {
                live.remove(&item);
                acks.insert((item, body["token"].as_u64().unwrap()));
            }
            "item_released" => {
                live.remove(&item);
            }
            _ => {}
        }
    }
    (claims, acks, doubles)
}

#[test]
fn claimers_on_three_hosts_never_double_claim_nor_lose_an_acknowledged_claim() {
    if crate::base().is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    for host in 1..=HOSTS {
        std::fs::create_dir(home.path().join(format!("anchors-{host}"))).unwrap();
    }
    let cluster = tempfile::tempdir().unwrap();
    let lab = match Lab::make(cluster.path()) {
        Ok(lab) => lab,
        Err(why) => {
            eprintln!("skipped: cannot make network namespaces here ({why})");
            return;
        }
    };
    let addrs: Vec<String> = (1..=HOSTS).map(Lab::server_addr).collect();
    let url = lab.cluster("start", &[&addrs.join(",")]);
    let first = Lab::server_addr(1);
    let db_of =
        |host: u32| url.replace(&format!("@{first}:"), &format!("@{}:", Lab::server_addr(host)));
    let items = match std::env::var_os("HOOKSTATE_PG_LONG") {
        Some(_) => ITEMS_LONG,
        None => ITEMS_LEAN,
    };
    // The server is reached only through the namespaces' veths: not from 127.0.0.1.
    let direct =
        finish(hookstate(home.path()).arg("--db").arg(url.replace(&first, "127.0.0.1")).args([
            "--wait-ms",
            "200",
            "stats",
        ]));
    assert_eq!(direct.code, 6, "{direct:?}");
    // A host reaches only its own side of its veth: not the server's address of another host.
    let across = finish(&mut on_host(&lab, home.path(), 1, &db_of(2), &["stats"]));
    assert_eq!(across.code, 6, "{across:?}");
    assert!(across.stderr.contains("unreachable"), "{across:?}");
    let init = finish(&mut on_host(&lab, home.path(), 1, &db_of(1), &["init"]));
    assert_eq!(init.code, 0, "{init:?}");

    for (queue, lease_ms, kill, restart) in
        [("race", LEASE_MS_LONG, false, None), ("crash", LEASE_MS_SHORT, true, Some(2))]
    {
        for n in 0..items {
            let push = finish(&mut on_host(
                &lab,
                home.path(),
                1 + n % HOSTS,
                &db_of(1 + n % HOSTS),
                &["queue", "push", queue, &format!("i{n}"), "{}", "--max-deliveries", DELIVERIES],
            ));
            assert_eq!(push.code, 0, "{push:?}");
        }
        let started = Instant::now();
        let phase = Phase { lab: &lab, home: home.path(), queue, items, lease_ms, kill };
        let told = race(&phase, &db_of, restart);
        let secs = started.elapsed().as_secs_f64();
        let (claims, acks, doubles) = replay(&lab, home.path(), 3, &db_of(3), queue);
        let lost_claims =
            told.claims.iter().filter(|(i, t, _)| !claims.contains(&(i.clone(), *t))).count();
        let lost_acks = told.acks.iter().filter(|a| !acks.contains(a)).count();
        let acked_items: BTreeSet<&String> = acks.iter().map(|(item, _)| item).collect();
        println!(
            "several-host race {queue}: hosts={HOSTS} loops_per_host={LOOPS} items={items} \
             calls={} killed={} failed_calls={} acknowledged_claims={} claims_in_log={} \
             acks={} double_claims={doubles} lost_claims={lost_claims} lost_acks={lost_acks} \
             secs={secs:.1}",
            told.calls,
            told.killed,
            told.failed,
            told.claims.len(),
            claims.len(),
            acks.len(),
        );
        assert_eq!(doubles, 0, "{queue}: double claims");
        assert_eq!(lost_claims, 0, "{queue}: acknowledged claims missing from the log");
        assert_eq!(lost_acks, 0, "{queue}: acknowledged acks missing from the log");
        assert_eq!(acked_items.len(), items as usize, "{queue}: every item acked");
        assert_eq!(acks.len(), items as usize, "{queue}: every item acked once");
        if !kill {
            assert_eq!(claims.len(), items as usize, "{queue}: every item claimed once");
            assert_eq!(told.claims.len(), items as usize, "{queue}: every claim acknowledged");
        } else {
            assert!(told.killed > 0, "{queue}: claimers were killed");
        }
        let verify = finish(&mut on_host(&lab, home.path(), 2, &db_of(2), &["verify"]));
        assert_eq!(verify.code, 0, "{verify:?}");
        assert_eq!(verify.json()["ok"], true, "{verify:?}");
    }
    drop(lab);
}
