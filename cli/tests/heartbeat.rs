//! `hookstate alerts` (heartbeat half) as a drop-in for `cost-tracker.ts --mark-budget-notified`,
//! `heartbeat.ts start-check | start-commit | ack-next-task` and `heartbeat-monitor.sh`'s peek:
//! verdict lines and exit codes, bad input refused with the store unchanged, real processes
//! recording, marking and reaping budget alerts at once (each key created once and announced
//! once), racing acks parking once, start-commit's bounded wait for a peek from another process,
//! and `--mirror` keeping the files current and adopting outside writes.
//!
//! Does not run upstream's scripts; their outputs are pinned from the spec and upstream's source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{Run, Store};

/// 2026-09-14T09:12:03.554Z, a Monday (ISO week 38).
const SEP_14: u64 = 1_789_377_123_554;
const PLUGIN: &str = "/opt/plugins/claude-code-hermit";

struct Hermit {
    store: Store,
    dir: PathBuf,
    _home: tempfile::TempDir,
}

impl Hermit {
    fn new(config: &str) -> Hermit {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("h");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        Hermit { store: Store::new(), dir, _home: home }
    }

    fn args<'a>(&'a self, verdict: bool, now: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut full = if verdict { vec!["--format", "verdict"] } else { Vec::new() };
        full.extend(["--now-ms", now, "alerts", "--dir", self.dir.to_str().unwrap()]);
        full.extend_from_slice(args);
        full
    }

    fn verdict(&self, now: u64, args: &[&str]) -> Run {
        let now = now.to_string();
        self.store.run(&self.args(true, &now, args))
    }

    fn json(&self, now: u64, args: &[&str], stdin: Option<&str>) -> Run {
        let now = now.to_string();
        self.store.run_with_stdin(&self.args(false, &now, args), stdin.map(str::as_bytes))
    }

    fn spawn(&self, now: u64, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .arg("--db")
            .arg(self.store.db())
            .args(["--now-ms", &now.to_string(), "alerts", "--dir", self.dir.to_str().unwrap()])
            .args(args)
            .env_remove("HOOKSTATE_SESSION")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn kinds(&self, kind: &str) -> usize {
        let run = self.store.run(&["log", "--kind", kind]).expect(0);
        run.stdout.lines().count()
    }

    fn alerts(&self) -> serde_json::Map<String, Value> {
        let run = self.json(SEP_14, &["budget", "list"], None).expect(0);
        run.json()["alerts"].as_object().unwrap().clone()
    }
}

fn line(run: Run, code: i32, expected: &str) {
    let run = run.expect(code);
    assert_eq!(run.stdout, format!("{expected}\n"), "{run:?}");
}

const KEY: &str = "budget-warn:weekly:2026-W38";

#[test]
fn budget_verbs_print_their_lines_and_refuse_bad_input_without_a_write() {
    let h = Hermit::new("{\"timezone\":\"UTC\"}\n");
    let record = [
        "budget", "record", "--level", "warn", "--period", "weekly", "--spend", "41.2731", "--cap",
        "50",
    ];
    for (args, what) in [
        (
            vec![
                "budget", "record", "--level", "nope", "--period", "weekly", "--spend", "1",
                "--cap", "2",
            ],
            "level",
        ),
        (
            vec![
                "budget",
                "record",
                "--level",
                "warn",
                "--period",
                "weekly",
                "--spend=-1",
                "--cap",
                "2",
            ],
            "spend",
        ),
        (
            vec![
                "budget", "record", "--level", "warn", "--period", "weekly", "--spend", "1",
                "--cap", "0",
            ],
            "cap",
        ),
        (vec!["injection", "check", "XYZ"], "hash"),
        (vec!["injection", "record", "9c04be1f", "--announced-at", ""], "announced_at"),
        (vec!["runtime", "set", "no-equals-sign"], "FIELD=VALUE"),
    ] {
        let run = h.json(SEP_14, &args, None).expect(3);
        assert!(run.stderr.contains(what), "{what}: {run:?}");
        assert!(!h.store.db().exists(), "{what}: bad input created the store");
    }
    line(h.verdict(SEP_14, &record), 0, &format!("OK|created|{KEY}"));
    let before = h.store.snapshot();
    h.json(SEP_14, &["budget", "mark-notified", "x\u{7}"], None).expect(3);
    h.json(
        SEP_14,
        &["monitor", "start-commit", "t", "--liveness-wait-ms", "10001", "--plugin-root", PLUGIN],
        None,
    )
    .expect(3);
    assert!(before == h.store.snapshot(), "the store changed");
    line(h.verdict(SEP_14, &record), 0, &format!("OK|exists|{KEY}"));
    line(h.verdict(SEP_14, &["budget", "mark-notified", KEY]), 0, &format!("OK|notified|{KEY}"));
    line(
        h.verdict(SEP_14, &["budget", "mark-notified", KEY]),
        0,
        &format!("NOOP|already-notified|{KEY}"),
    );
    line(h.verdict(SEP_14, &["budget", "mark-notified", "budget-x"]), 0, "NONE|no-match");
    let refused = h.json(SEP_14, &["budget", "mark-notified", KEY], None).expect(1);
    assert_eq!(refused.json()["refused"], "already_notified");
    line(h.verdict(SEP_14, &["budget", "reap"]), 0, "OK|reaped=0");
    line(h.verdict(SEP_14 + 7 * 86_400_000, &["budget", "reap"]), 0, "OK|reaped=1");
    line(h.verdict(SEP_14, &["injection", "check", "9c04be1f"]), 0, "NEW|9c04be1f");
    line(h.verdict(SEP_14, &["injection", "record", "9c04be1f"]), 0, "OK|recorded|9c04be1f");
    line(
        h.verdict(SEP_14, &["injection", "check", "9c04be1f"]),
        0,
        "SKIP|injection-suspect (announced)",
    );
    line(h.verdict(SEP_14, &["liveness", "read"]), 0, "UNKNOWN|absent");
    line(h.verdict(SEP_14, &["liveness", "peek"]), 0, "OK|peek|2026-09-14T09:12:03Z");
    line(h.verdict(SEP_14 + 30_000, &["liveness", "read"]), 0, "ALIVE|age=30");
    line(h.verdict(SEP_14 + 700_000, &["liveness", "read"]), 0, "UNKNOWN|stale");
}

/// Real processes at once: each records the three periods' warn alerts, marks every key
/// notified and reaps, while an old key waits to be reaped. Upstream's unlocked read-modify-write
/// can lose a mark (the alert is announced again) or an entry; here each key is created once,
/// marked once, and the old key reaped once.
#[test]
fn racing_record_mark_and_reap_create_and_announce_each_key_once() {
    const PROCESSES: usize = 8;
    let h = Hermit::new("{\"timezone\":\"America/New_York\"}\n");
    let last_month = SEP_14 - 31 * 86_400_000;
    let old = [
        "budget", "record", "--level", "breach", "--period", "monthly", "--spend", "60", "--cap",
        "50",
    ];
    h.verdict(last_month, &old).expect(0);
    let keys = ["budget-warn:daily:2026-09-14", KEY, "budget-warn:monthly:2026-09"];
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        for period in ["daily", "weekly", "monthly"] {
            let spend = format!("{}", 40 + i);
            let args = [
                "budget", "record", "--level", "warn", "--period", period, "--spend", &spend,
                "--cap", "50",
            ];
            children.push(("record", h.spawn(SEP_14, &args)));
        }
        for key in keys {
            children.push(("mark", h.spawn(SEP_14, &["budget", "mark-notified", key])));
        }
        children.push(("reap", h.spawn(SEP_14, &["budget", "reap"])));
    }
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (verb, child) in children {
        let out = child.wait_with_output().unwrap();
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
        let code = out.status.code().unwrap();
        assert!(code == 0 || (code == 1 && verb == "mark"), "{verb} exited {code}: {stdout}");
        let outcome = match verb {
            "record" if stdout["created"] == true => "created",
            "mark" if code == 0 => "marked",
            "mark" => stdout["refused"].as_str().unwrap(),
            _ => "other",
        }
        .to_owned();
        let key = stdout["key"].as_str().unwrap_or_default().to_owned();
        *counts.entry((outcome, key)).or_default() += 1;
    }
    for key in keys {
        assert_eq!(
            counts.get(&("created".to_owned(), key.to_owned())),
            Some(&1),
            "{key}: {counts:?}"
        );
        assert_eq!(
            counts.get(&("marked".to_owned(), key.to_owned())),
            Some(&1),
            "{key}: {counts:?}"
        );
    }
    assert_eq!(h.kinds("budget_created"), 4, "three keys and the old one, each created once");
    assert_eq!(h.kinds("budget_notified"), 3, "each key announced once");
    assert_eq!(h.kinds("budget_reaped"), 1, "the old key reaped once");
    let alerts = h.alerts();
    assert_eq!(alerts.keys().collect::<Vec<_>>().len(), 3);
    assert!(alerts.values().all(|a| a["notified"] == true), "no mark was lost: {alerts:?}");
    h.store.run(&["verify"]).expect(0);
    println!(
        "budget race: processes={} calls={} created=3 marked=3 reaped=1",
        PROCESSES,
        PROCESSES * 7
    );
}

const ACK_CONFIG: &str =
    "{\"timezone\":\"UTC\",\"always_on\":true,\"escalation\":\"conservative\"}\n";

fn ready_token(h: &Hermit) -> String {
    h.json(SEP_14, &["runtime", "set", "session_state=idle", "version=1"], None).expect(0);
    h.json(SEP_14, &["next-task", "queue"], Some("## Task\nShip it\n")).expect(0);
    let run = h.json(SEP_14, &["next-task", "token"], None).expect(0);
    run.json()["token"].as_str().unwrap().to_owned()
}

#[test]
fn racing_acks_park_the_session_once() {
    const ACKERS: usize = 6;
    let h = Hermit::new(ACK_CONFIG);
    let token = ready_token(&h);
    let children: Vec<_> =
        (0..ACKERS).map(|_| h.spawn(SEP_14, &["next-task", "ack", &token])).collect();
    let mut parked = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
        if stdout["parked"] == true {
            parked += 1;
            assert_eq!(out.status.code(), Some(0));
        } else {
            assert_eq!(stdout["reason"], "not-idle", "{stdout}");
            assert_eq!(out.status.code(), Some(1));
        }
    }
    assert_eq!(parked, 1);
    assert_eq!(h.kinds("next_task_parked"), 1);
    println!("ack race: ackers={ACKERS} parked={parked}");
}

#[test]
fn ack_verdicts_are_upstreams_json_lines() {
    let h = Hermit::new(ACK_CONFIG);
    let token = ready_token(&h);
    h.json(SEP_14, &["runtime", "set", "last_error=null"], None).expect(0);
    line(
        h.verdict(SEP_14, &["next-task", "ack", &token]),
        0,
        "{\"parked\":false,\"reason\":\"changed\"}",
    );
    let fresh = h.json(SEP_14, &["next-task", "token"], None).expect(0).json()["token"].clone();
    let fresh = fresh.as_str().unwrap();
    line(h.verdict(SEP_14, &["next-task", "ack", fresh]), 0, "{\"parked\":true}");
    line(h.verdict(SEP_14, &["next-task", "token"]), 0, "NONE|not-idle");
    line(h.verdict(SEP_14, &["next-task", "consume"]), 0, "OK|consumed");
    line(h.verdict(SEP_14, &["next-task", "consume"]), 0, "NONE|no-queue");
    h.json(SEP_14, &["next-task", "queue"], Some("a\n")).expect(0);
    let exists = h.json(SEP_14, &["next-task", "queue"], Some("b\n")).expect(1);
    assert_eq!(exists.json()["verdict"], "ERROR|next-task-exists");
    let off = Hermit::new("{\"always_on\":true,\"escalation\":\"balanced\"}\n");
    off.json(SEP_14, &["runtime", "set", "session_state=idle"], None).expect(0);
    off.json(SEP_14, &["next-task", "queue"], Some("## Task\nShip it\n")).expect(0);
    line(off.verdict(SEP_14, &["next-task", "token"]), 0, "NONE|disabled");
    line(
        off.verdict(SEP_14, &["next-task", "ack", "x"]),
        0,
        "{\"parked\":false,\"reason\":\"disabled\"}",
    );
}

#[test]
fn monitor_cycle_waits_for_a_peek_from_another_process() {
    let h = Hermit::new("{\"heartbeat\":{\"every\":\"2m\"}}\n");
    std::fs::create_dir_all(h.dir.join("state")).unwrap();
    std::fs::write(h.dir.join("state/.boot-id"), "boot-A\n").unwrap();
    let dir = h.dir.to_str().unwrap().to_owned();
    let cmd = format!("CMD:bash {PLUGIN}/scripts/heartbeat-monitor.sh 120 {dir}");
    let check = h.verdict(SEP_14, &["monitor", "start-check", "--plugin-root", PLUGIN]).expect(0);
    assert_eq!(
        check.stdout,
        format!("REARM|runtime-missing\nFIRST_START:1\nINTERVAL:120\n{cmd}\n")
    );
    // start-commit polls for the first peek; another process peeks while it waits.
    let commit = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(h.store.db())
        .args([
            "--format",
            "verdict",
            "--now-ms",
            &(SEP_14 + 2000).to_string(),
            "alerts",
            "--dir",
            &dir,
        ])
        .args(["monitor", "start-commit", "task-7", "--plugin-root", PLUGIN])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    h.verdict(SEP_14 + 1000, &["liveness", "peek"]).expect(0);
    let out = commit.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK|registered|interval=120\n");
    line(
        h.verdict(SEP_14 + 3000, &["monitor", "status", "--plugin-root", PLUGIN]),
        0,
        "HEALTHY|fresh",
    );
    line(
        h.verdict(SEP_14 + 3000, &["monitor", "start-check", "--plugin-root", PLUGIN]),
        0,
        "FRESH|interval=120",
    );
    line(
        h.verdict(SEP_14 + 3000, &["monitor", "status", "--plugin-root", "/other"]),
        0,
        "UNHEALTHY|command-drift",
    );
    line(
        h.verdict(
            SEP_14 + 3000,
            &["monitor", "status", "--plugin-root", PLUGIN, "--interval", "60"],
        ),
        0,
        "UNHEALTHY|interval-drift",
    );
    let runtime = read(&h.dir, "state/heartbeat-monitor.runtime.json");
    assert!(runtime.is_none(), "no --mirror: the store only");
    let stored = h.json(SEP_14, &["monitor", "start-check", "--plugin-root", PLUGIN], None);
    assert_eq!(stored.expect(0).json()["fresh"], true);
    std::fs::write(h.dir.join("state/.boot-id"), "boot-B\n").unwrap();
    line(
        h.verdict(SEP_14 + 3000, &["monitor", "status", "--plugin-root", PLUGIN]),
        0,
        "UNHEALTHY|boot-mismatch",
    );
    line(
        h.verdict(
            SEP_14 + 3000,
            &["monitor", "status", "--plugin-root", PLUGIN, "--boot-id", "boot-A"],
        ),
        0,
        "HEALTHY|fresh",
    );
    line(h.verdict(SEP_14 + 4000, &["monitor", "stop"]), 0, "OK|stopped");
    let started = std::time::Instant::now();
    let dead = h.verdict(
        SEP_14 + 5000,
        &["monitor", "start-commit", "t8", "--plugin-root", PLUGIN, "--liveness-wait-ms", "200"],
    );
    line(dead, 0, "DEAD|liveness-absent");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the wait is bounded");
    let usage = h.json(SEP_14, &["monitor", "start-check"], None);
    assert!(usage.code == 64 || usage.stderr.contains("plugin-root"), "{usage:?}");
}

fn read(dir: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(rel)).ok()
}

#[test]
fn mirror_keeps_the_files_current_and_adopts_outside_writes() {
    let h = Hermit::new(ACK_CONFIG);
    let dir = h.dir.to_str().unwrap().to_owned();
    let mirrored = |now: u64, args: &[&str], stdin: Option<&str>| {
        let mut full = vec!["--mirror", dir.as_str()];
        full.extend_from_slice(args);
        h.json(now, &full, stdin)
    };
    mirrored(SEP_14, &["liveness", "peek"], None).expect(0);
    assert_eq!(
        read(&h.dir, "state/heartbeat-liveness.json").unwrap(),
        "{\"last_peek_at\":\"2026-09-14T09:12:03Z\"}\n"
    );
    mirrored(SEP_14, &["next-task", "queue"], Some("## Task\nA\n")).expect(0);
    assert_eq!(read(&h.dir, "sessions/NEXT-TASK.md").unwrap(), "## Task\nA\n");
    // An unmigrated writer edits runtime.json and session-start consumes the queue.
    std::fs::write(
        h.dir.join("state/runtime.json"),
        "{\n  \"session_state\": \"idle\",\n  \"x\": 1\n}\n",
    )
    .unwrap();
    std::fs::remove_file(h.dir.join("sessions/NEXT-TASK.md")).unwrap();
    mirrored(SEP_14, &["runtime", "set", "y=2"], None).expect(0);
    let runtime = read(&h.dir, "state/runtime.json").unwrap();
    assert_eq!(runtime, "{\n  \"session_state\": \"idle\",\n  \"x\": 1,\n  \"y\": 2,\n  \"updated_at\": \"2026-09-14T09:12:03+0000\"\n}\n");
    assert!(read(&h.dir, "sessions/NEXT-TASK.md").is_none(), "the outside consumption was adopted");
    line(h.verdict(SEP_14, &["next-task", "token"]), 0, "NONE|queue-missing");
    // A corrupt outside write is quarantined and the file rebuilt from the log.
    std::fs::write(h.dir.join("state/heartbeat-liveness.json"), "{\"last_peek_at\":").unwrap();
    let run = mirrored(SEP_14 + 1000, &["injection", "record", "9c04be1f"], None);
    assert_eq!(run.code, 0, "{run:?}");
    let said = "mirror renamed state/heartbeat-liveness.json aside (a .corrupt- copy";
    assert!(run.stderr.lines().count() == 1 && run.stderr.contains(said), "{run:?}");
    let quarantine = format!("state/heartbeat-liveness.json.corrupt-{}", SEP_14 + 1000);
    assert_eq!(read(&h.dir, &quarantine).unwrap(), "{\"last_peek_at\":");
    assert_eq!(
        read(&h.dir, "state/heartbeat-liveness.json").unwrap(),
        "{\"last_peek_at\":\"2026-09-14T09:12:03Z\"}\n"
    );
    assert!(read(&h.dir, "state/micro-proposals.json").is_none(), "proposals never mirrored");
    h.store.run(&["verify"]).expect(0);
}

#[test]
fn import_and_export_the_layout_through_the_cli() {
    let h = Hermit::new("{}\n");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/legacy/hermit-heartbeat");
    let copy = |to: &Path| {
        for sub in ["state", "sessions"] {
            std::fs::create_dir_all(to.join(sub)).unwrap();
            for entry in std::fs::read_dir(Path::new(fixture).join(sub)).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), to.join(sub).join(entry.file_name())).unwrap();
            }
        }
    };
    copy(&h.dir);
    let scope = format!("hermit:{}", h.dir.to_str().unwrap());
    let from = h.dir.to_str().unwrap();
    let out = h.store.run(&["import", "--layout", "hermit-heartbeat", "--from", from]).expect(0);
    assert_eq!(out.json()["files"].as_array().unwrap().len(), 8);
    let to = tempfile::tempdir().unwrap();
    let to_text = to.path().to_str().unwrap();
    h.store
        .run(&["--scope", &scope, "export", "--layout", "hermit-heartbeat", "--to", to_text])
        .expect(0);
    for sub in ["state", "sessions"] {
        for entry in std::fs::read_dir(Path::new(fixture).join(sub)).unwrap() {
            let entry = entry.unwrap();
            let exported = std::fs::read(to.path().join(sub).join(entry.file_name())).unwrap();
            assert_eq!(exported, std::fs::read(entry.path()).unwrap(), "{:?}", entry.file_name());
        }
    }
}

#[test]
fn an_import_whose_quarantine_fails_commits_nothing() {
    let h = Hermit::new("{}\n");
    let state = h.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("injection-alert.json"), "{\"hash\":\"9c04be1f\"}\n").unwrap();
    std::fs::write(state.join("runtime.json"), "{not json\n").unwrap();
    // The quarantine name is taken, so the rename (which never replaces) fails.
    let now = SEP_14.to_string();
    std::fs::write(state.join(format!("runtime.json.corrupt-{now}")), "earlier\n").unwrap();
    h.store.run(&["init"]).expect(0);
    let before = h.store.run(&["log"]).expect(0).stdout;
    let from = h.dir.to_str().unwrap();
    let args = ["--now-ms", &now, "import", "--layout", "hermit-heartbeat", "--from", from];
    let run = h.store.run(&args).expect(6);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert_eq!(h.store.run(&["log"]).expect(0).stdout, before, "the good file was committed");
    assert_eq!(std::fs::read_to_string(state.join("runtime.json")).unwrap(), "{not json\n");
}

#[test]
fn an_export_leaves_files_the_scope_does_not_hold() {
    let h = Hermit::new("{}\n");
    let scope = format!("hermit:{}", h.dir.to_str().unwrap());
    h.json(SEP_14, &["injection", "record", "9c04be1f"], None).expect(0);
    let to = tempfile::tempdir().unwrap();
    let foreign = "{\"alerts\":{\"telemetry:export-failed\":{}}}\n";
    std::fs::create_dir_all(to.path().join("state")).unwrap();
    std::fs::write(to.path().join("state/telemetry-alert.json"), foreign).unwrap();
    let to_text = to.path().to_str().unwrap();
    let out = h
        .store
        .run(&["--scope", &scope, "export", "--layout", "hermit-heartbeat", "--to", to_text])
        .expect(0);
    assert_eq!(out.json()["left"], serde_json::json!(["telemetry-alert.json"]));
    assert_eq!(out.json()["files"], serde_json::json!(["injection-alert.json"]));
    let kept = std::fs::read_to_string(to.path().join("state/telemetry-alert.json")).unwrap();
    assert_eq!(kept, foreign);
    assert!(to.path().join("state/injection-alert.json").exists());
}

/// An idempotency key names the verb's own write, never the mirror's adoption of outside
/// writes: a mark whose mirror first adopts an outside change still marks, and its retry
/// replays the mark (and still adopts what changed outside in between).
#[test]
fn an_idem_keyed_mark_through_a_mirror_that_adopts_an_outside_write_still_marks() {
    let h = Hermit::new("{}\n");
    let dir = h.dir.to_str().unwrap().to_owned();
    let record = ["budget", "record", "--level", "warn", "--period", "weekly", "--action"];
    let mut args = vec!["--mirror", dir.as_str()];
    args.extend(record);
    args.extend(["alert", "--spend", "41", "--cap", "50"]);
    h.json(SEP_14, &args, None).expect(0);
    // Upstream's cost-tracker, not yet migrated, adds a daily breach to the mirrored file.
    let path = h.dir.join("state/budget-alerts.json");
    let text = read(&h.dir, "state/budget-alerts.json").unwrap();
    let daily =
        "\"budget-breach:daily:2026-09-14\": {\"kind\": \"budget\", \"period\": \"daily\"},";
    std::fs::write(&path, text.replacen("\"alerts\": {", &format!("\"alerts\": {{{daily}"), 1))
        .unwrap();
    let key = "budget-warn:weekly:2026-W38";
    let mark = |now: u64, format: &str| {
        let args = ["--idem-key", "mark-1", "--mirror", dir.as_str()];
        let now = now.to_string();
        let mut full = vec!["--format", format];
        full.extend(args);
        full.extend(["--now-ms", &now, "alerts", "--dir", dir.as_str()]);
        full.extend(["budget", "mark-notified", key]);
        h.store.run(&full)
    };
    line(mark(SEP_14 + 1000, "verdict"), 0, &format!("OK|notified|{key}"));
    let alerts = h.alerts();
    assert_eq!(alerts[key]["notified"], true, "the mark landed: {alerts:?}");
    assert!(alerts.contains_key("budget-breach:daily:2026-09-14"), "the outside write adopted");
    // Another outside change, then the retry: adopted, and the mark replayed, not redone.
    let text = read(&h.dir, "state/budget-alerts.json").unwrap();
    std::fs::write(&path, text.replace("\"period\": \"daily\"", "\"period\": \"daily\", \"x\": 1"))
        .unwrap();
    let marks = h.kinds("budget_notified");
    let retry = mark(SEP_14 + 2000, "json").expect(0).json();
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(h.kinds("budget_notified"), marks, "the retry marks nothing again");
    assert_eq!(h.alerts()["budget-breach:daily:2026-09-14"]["x"], 1, "the retry still adopts");
    h.store.run(&["verify"]).expect(0);
}

/// A repeated call with the same `--idem-key` prints the first call's verdict line again
/// (`--help`: "a repeated call with this key returns the first result"), never `ERROR|unexpected`.
#[test]
fn idempotent_repeats_print_the_first_calls_verdict() {
    let h = Hermit::new(ACK_CONFIG);
    let twice = |idem: &str, now: u64, args: &[&str], stdin: Option<&str>, expected: &str| {
        for _ in 0..2 {
            let now = now.to_string();
            let mut full = vec!["--idem-key", idem, "--format", "verdict", "--now-ms", &now];
            full.extend(["alerts", "--dir", h.dir.to_str().unwrap()]);
            full.extend_from_slice(args);
            let run = h.store.run_with_stdin(&full, stdin.map(str::as_bytes)).expect(0);
            assert_eq!(run.stdout, format!("{expected}\n"), "{args:?}");
        }
    };
    let record = |level: &'static str, period: &'static str| {
        let mut args = vec!["budget", "record", "--level", level, "--period", period];
        args.extend(["--action", "alert", "--spend", "45", "--cap", "50"]);
        args
    };
    let a_week_earlier = SEP_14 - 7 * 86_400_000;
    twice(
        "r0",
        a_week_earlier,
        &record("warn", "weekly"),
        None,
        "OK|created|budget-warn:weekly:2026-W37",
    );
    twice("r1", SEP_14, &record("warn", "weekly"), None, "OK|created|budget-warn:weekly:2026-W38");
    twice(
        "r2",
        SEP_14,
        &record("breach", "daily"),
        None,
        "OK|created|budget-breach:daily:2026-09-14",
    );
    let key = "budget-warn:weekly:2026-W38";
    twice("m1", SEP_14, &["budget", "mark-notified", key], None, &format!("OK|notified|{key}"));
    twice("p1", SEP_14, &["liveness", "peek"], None, "OK|peek|2026-09-14T09:12:03Z");
    twice("i1", SEP_14, &["injection", "record", "9c04be1f"], None, "OK|recorded|9c04be1f");
    twice("s1", SEP_14, &["monitor", "stop"], None, "OK|stopped");
    twice("s2", SEP_14, &["monitor", "stop"], None, "OK|stopped");
    twice("t1", SEP_14, &["runtime", "set", "session_state=idle"], None, "OK|runtime");
    twice("q1", SEP_14, &["next-task", "queue"], Some("## Task\nShip it\n"), "OK");
    let token = h.json(SEP_14, &["next-task", "token"], None).expect(0).json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    twice("a1", SEP_14, &["next-task", "ack", &token], None, "{\"parked\":true}");
    twice("c1", SEP_14, &["next-task", "consume"], None, "OK|consumed");
    assert_eq!(h.kinds("budget_created"), 3);
    assert_eq!(h.kinds("budget_notified"), 1);
    assert_eq!(h.kinds("next_task_parked"), 1);
    h.store.run(&["verify"]).expect(0);
}

/// A time past 9999-12-31T23:59:59.999Z (where toISOString changes to a six-digit year) or
/// beyond what a date holds is refused before anything is written, never stamped as an empty
/// string (`{"last_peek_at":""}`, `armed_at: ""`).
#[test]
fn a_time_past_year_9999_is_refused_without_a_write() {
    let h = Hermit::new("{}\n");
    h.store.run(&["init"]).expect(0);
    let before = h.store.snapshot();
    for now in [253_402_300_800_000, u64::MAX] {
        for args in [
            vec!["liveness", "peek"],
            vec!["monitor", "start-check", "--plugin-root", PLUGIN],
            vec!["monitor", "stop"],
            vec!["injection", "record", "9c04be1f"],
            vec!["runtime", "set", "a=1"],
            vec!["budget", "record", "--level", "warn", "--period", "daily", "--spend", "9"],
        ] {
            let mut args = args.clone();
            if args[0] == "budget" {
                args.extend(["--cap", "10"]);
            }
            let run = h.json(now, &args, None).expect(3);
            assert!(run.stderr.contains("time"), "{args:?}: {run:?}");
        }
        let run = h.json(now, &["tick"], Some("{\"firing\":[]}")).expect(3);
        assert!(run.stderr.contains("time"), "{run:?}");
    }
    assert!(before == h.store.snapshot(), "the store changed");
    line(h.verdict(253_402_300_799_999, &["liveness", "peek"]), 0, "OK|peek|9999-12-31T23:59:59Z");
}

/// A mirrored verb that removes a file from the store (the consume of the queued task, the stop
/// clearing the liveness record) deletes it from the directory too, but only a file that still
/// holds what the call saw: readers that still read the directory never run a consumed task.
#[test]
fn a_mirrored_consume_or_stop_deletes_the_file_the_store_removed() {
    let h = Hermit::new(ACK_CONFIG);
    let dir = h.dir.to_str().unwrap().to_owned();
    let mirrored = |now: u64, args: &[&str], stdin: Option<&str>| {
        let mut full = vec!["--format", "verdict", "--mirror", dir.as_str()];
        full.extend_from_slice(args);
        h.json(now, &full, stdin)
    };
    line(mirrored(SEP_14, &["next-task", "queue"], Some("## Task\nA\n")), 0, "OK");
    line(mirrored(SEP_14, &["liveness", "peek"], None), 0, "OK|peek|2026-09-14T09:12:03Z");
    assert!(read(&h.dir, "sessions/NEXT-TASK.md").is_some());
    line(mirrored(SEP_14 + 1000, &["next-task", "consume"], None), 0, "OK|consumed");
    assert!(read(&h.dir, "sessions/NEXT-TASK.md").is_none(), "the consumed task is gone");
    line(mirrored(SEP_14 + 2000, &["monitor", "stop"], None), 0, "OK|stopped");
    assert!(read(&h.dir, "state/heartbeat-liveness.json").is_none(), "the liveness record is gone");
    assert_eq!(read(&h.dir, "state/heartbeat-monitor.runtime.json").unwrap(), "{}\n");
    line(mirrored(SEP_14 + 3000, &["next-task", "consume"], None), 0, "NONE|no-queue");
    assert!(read(&h.dir, "sessions/NEXT-TASK.md").is_none(), "and it is not written back");
    h.store.run(&["verify"]).expect(0);
}
