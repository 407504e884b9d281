//! `hookstate alerts` as a drop-in for `heartbeat.ts alert-state` and precheck's tick count:
//! upstream's stdout line, its silent rejections and exit codes, bad input leaving the store
//! byte-identical, real processes ticking and counting at once with nothing lost, and the
//! hermit-alerts layout through import, export and `--mirror` (a corrupt file quarantined).
//!
//! Does not run upstream's scripts; their outputs are pinned from the spec and the fixture.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::{Run, Store};
use hookstate_testkit::copy_dir;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/legacy");
/// 2026-11-29T21:50:47Z: 16:50 in New York.
const NOW: &str = "1795989047000";

/// A store and a copy of a hermit fixture.
struct Hermit {
    store: Store,
    dir: PathBuf,
    _home: tempfile::TempDir,
}

impl Hermit {
    fn new(fixture: &str) -> Hermit {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("h");
        copy_dir(&Path::new(FIXTURES).join(fixture), &dir);
        Hermit { store: Store::new(), dir, _home: home }
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    fn alerts(&self, format: &str, args: &[&str], stdin: Option<&str>) -> Run {
        let mut full = vec!["--now-ms", NOW, "--format", format, "alerts", "--dir", self.dir()];
        full.extend_from_slice(args);
        self.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    }

    fn import(&self, layout: &str) -> Run {
        self.store.run(&["--now-ms", NOW, "import", "--layout", layout, "--from", self.dir()])
    }

    fn state(&self) -> Value {
        self.alerts("json", &["list"], None).expect(0).json()
    }

    fn alert_file(&self) -> PathBuf {
        self.dir.join("state").join("alert-state.json")
    }
}

#[test]
fn tick_prints_upstream_line_in_verdict_mode_and_the_result_in_json() {
    let h = Hermit::new("hermit");
    std::fs::remove_file(h.alert_file()).unwrap();
    h.import("hermit-proposals").expect(0);
    let payload = "{\"firing\":[{\"key\":\"custom:ci\",\"text\":\"CI red\"}]}";
    let run = h.alerts("verdict", &["tick"], Some(payload)).expect(0);
    // Upstream's line at 44b85f9: exactly these three keys, in this order.
    let expected = "{\"monitoring_lines\":[\"[16:50] Heartbeat: CI red\",\
        \"[16:50] Heartbeat: micro-proposal 'MP-20261129-3' awaiting operator input — Pin node \
        to 20.x in CI? [1: yes, pin 20.x, 2: no, track latest LTS, 3: ask again next week]\",\
        \"[16:50] Heartbeat: PROP-002 \\\"Nightly digest of flaky tests\\\"\"],\
        \"notifications\":[\"CI red\"],\"heartbeat_result\":\"ALERT\"}\n";
    assert_eq!(run.stdout, expected);
    let out = h.alerts("json", &["tick"], Some("{\"firing\":[]}")).expect(0).json();
    assert_eq!((out["ok"].clone(), out["heartbeat_result"].clone()), (json!(true), json!("ALERT")));
    assert_eq!(out["seq"], 15, "13 imported events, then one per tick");
    let counted = h.alerts("json", &["count-tick"], None).expect(0).json();
    assert_eq!(counted["total_ticks"], 1);
    assert_eq!(h.state()["alerts"]["custom:ci"]["consecutive_clean"], 1);
}

#[test]
fn rejected_payloads_change_nothing_and_exit_as_documented() {
    let h = Hermit::new("hermit");
    h.import("hermit-alerts").expect(0);
    let before = h.store.snapshot();
    for bad in ["", "{\"firing\":", "null", "{\"firing\":{}}", "{\"firing\":[{\"text\":\"t\"}]}"] {
        let run = h.alerts("json", &["tick"], Some(bad)).expect(3);
        assert!(run.stdout.is_empty(), "{run:?}");
        assert!(run.stderr.contains("alerts tick") || run.stderr.contains("stdin"), "{run:?}");
    }
    // Upstream's fail-safe contract: unparseable JSON exits 1 with a stderr line; every other
    // rejection exits 0 with nothing on stdout; neither writes.
    let run = h.alerts("verdict", &["tick"], Some("{\"firing\":")).expect(1);
    assert!(run.stdout.is_empty(), "{run:?}");
    for bad in [
        "{\"firing\":{}}",
        "{\"firing\":[{\"item\":\"- x\",\"text\":\"t\"}]}",
        "{\"firing\":[],\"unreadable\":[\"HEARTBEAT.md\"]}",
    ] {
        let run = h.alerts("verdict", &["tick"], Some(bad)).expect(0);
        assert_eq!(run.stdout, "", "{bad}: {run:?}");
    }
    assert_eq!(h.store.snapshot(), before, "the store is byte-identical");
}

#[test]
fn a_tick_too_big_for_one_event_is_refused_and_a_smaller_one_still_lands() {
    let h = Hermit::new("hermit");
    h.import("hermit-alerts").expect(0);
    let before = h.store.run(&["log"]).expect(0).stdout;
    let firing = |n: usize| {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({ "key": format!("custom:k{i}"), "text": format!("{i} {}", "x".repeat(400)) }))
            .collect();
        json!({ "firing": items }).to_string()
    };
    let run = h.alerts("json", &["tick"], Some(&firing(200))).expect(3);
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    assert!(run.stderr.contains("the tick was not applied"), "{}", run.stderr);
    // The refusal comes from inside the write transaction, which is rolled back: the log (and so
    // every view) is unchanged, though redb's open and close rewrite its header.
    assert!(h.store.run(&["log"]).expect(0).stdout == before, "the log changed");
    let run = h.alerts("json", &["tick"], Some(&firing(20))).expect(0);
    assert_eq!(run.json()["heartbeat_result"], "ALERT");
}

/// Spawns `hookstate` on the store with `args` and `stdin`.
fn spawn(db: &Path, args: &[&str], stdin: &str) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("HOOKSTATE_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    // `count-tick` reads no stdin and may exit before the write: a broken pipe is not an error.
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    if let Err(err) = written {
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
    }
    child
}

const PROCESSES: usize = 8;
const ROUNDS: usize = 6;

#[test]
fn overlapping_ticks_and_counts_from_real_processes_lose_nothing() {
    let h = Hermit::new("hermit-alerts/spec");
    h.import("hermit-alerts").expect(0);
    let db = h.store.db();
    let dir = h.dir().to_owned();
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let (db, dir) = (db.clone(), dir.clone());
            std::thread::spawn(move || {
                let mut outs = Vec::new();
                for _ in 0..ROUNDS {
                    for verb in ["count-tick", "tick"] {
                        let payload =
                            "{\"firing\":[{\"key\":\"custom:shared\",\"text\":\"shared\"}]}";
                        let args =
                            ["--now-ms", NOW, "--wait-ms", "60000", "alerts", "--dir", &dir, verb];
                        let out = spawn(&db, &args, payload).wait_with_output().unwrap();
                        assert_eq!(out.status.code(), Some(0), "{out:?}");
                        outs.push(String::from_utf8(out.stdout).unwrap());
                    }
                }
                outs
            })
        })
        .collect();
    let outs: Vec<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let calls = PROCESSES * ROUNDS;
    let state = h.state();
    assert_eq!(state["total_ticks"], 361 + calls, "every count landed exactly once");
    assert_eq!(state["alerts"]["custom:shared"]["count"], calls, "every tick saw the last");
    assert_eq!(state["last_stale_wake_at"], "2026-09-14T09:00:00.004Z", "precheck field kept");
    assert_eq!(state["last_micro_corrupt_wake_at"], "2026-09-14T08:30:00.120Z");
    assert_eq!(state["operator_note"], "kept as written: a key no upstream writer owns");
    let notes: Vec<Value> = outs
        .iter()
        .filter_map(|o| serde_json::from_str::<Value>(o).ok())
        .filter_map(|o| o.get("notifications").cloned())
        .flat_map(|n| n.as_array().cloned().unwrap_or_default())
        .collect();
    let count = |text: &str| notes.iter().filter(|n| n.as_str() == Some(text)).count();
    assert_eq!(count("shared"), 1, "one tick saw the key new: {notes:?}");
    let suppressed = "Heartbeat: \"shared\" suppressed after 5 fires — daily digest only.";
    assert_eq!(count(suppressed), 1, "one tick saw the sixth fire: {notes:?}");
    println!(
        "alerts overlap: {PROCESSES} processes x {ROUNDS} rounds, total_ticks {}",
        state["total_ticks"]
    );
    h.store.run(&["verify"]).expect(0);
}

#[test]
fn import_export_round_trip_byte_for_byte_and_a_corrupt_import_is_quarantined() {
    let h = Hermit::new("hermit");
    let out = h.import("hermit-alerts").expect(0).json();
    assert_eq!(out["round_trip"], true);
    h.import("hermit-alerts").expect(1);
    let to = h._home.path().join("out");
    let scope = format!("hermit:{}", std::fs::canonicalize(&h.dir).unwrap().display());
    let args =
        ["--scope", &scope, "export", "--layout", "hermit-alerts", "--to", to.to_str().unwrap()];
    h.store.run(&args).expect(0);
    let written = to.join("state").join("alert-state.json");
    assert_eq!(std::fs::read(&written).unwrap(), std::fs::read(h.alert_file()).unwrap());
    assert_eq!(std::fs::metadata(&written).unwrap().permissions().mode() & 0o777, 0o600);

    let bad = Hermit::new("hermit-alerts/corrupt");
    let bytes = std::fs::read(bad.alert_file()).unwrap();
    let run = bad.import("hermit-alerts").expect(3);
    assert!(
        run.stderr.contains("quarantined as state/alert-state.json.corrupt-1795989047000"),
        "{run:?}"
    );
    let quarantined = bad.dir.join("state").join("alert-state.json.corrupt-1795989047000");
    assert_eq!(std::fs::read(quarantined).unwrap(), bytes);
    assert!(!bad.alert_file().exists());
    assert!(!bad.store.db().exists(), "the store was never opened");
}

#[test]
fn the_mirror_keeps_alert_state_current_and_adopts_or_quarantines_outside_writes() {
    let h = Hermit::new("hermit");
    h.import("hermit-proposals").expect(0);
    let mirror = |stdin: &str| {
        let args = ["--now-ms", NOW, "--mirror", h.dir(), "alerts", "--dir", h.dir(), "tick"];
        h.store.run_with_stdin(&args, Some(stdin.as_bytes())).expect(0)
    };
    mirror("{\"firing\":[]}");
    let file: Value = serde_json::from_slice(&std::fs::read(h.alert_file()).unwrap()).unwrap();
    assert_eq!(file["alerts"]["proposal-pending:PROP-002"]["count"], 5, "adopted, then ticked");
    // precheck, not yet migrated, writes the file itself.
    let mut edited = file.clone();
    edited["total_ticks"] = json!(40);
    let text = serde_json::to_string_pretty(&edited).unwrap() + "\n";
    std::fs::write(h.alert_file(), text).unwrap();
    mirror("{\"firing\":[]}");
    assert_eq!(h.state()["total_ticks"], 40, "the outside write was adopted");
    assert_eq!(h.state()["alerts"]["proposal-pending:PROP-002"]["count"], 6);
    std::fs::write(h.alert_file(), "{\"alerts\":").unwrap();
    let args = ["--now-ms", NOW, "--mirror", h.dir(), "alerts", "--dir", h.dir(), "tick"];
    let run = h.store.run_with_stdin(&args, Some(b"{\"firing\":[]}"));
    assert_eq!(run.code, 0, "{run:?}");
    let said = "mirror renamed state/alert-state.json aside (a .corrupt- copy";
    assert!(run.stderr.lines().count() == 1 && run.stderr.contains(said), "{run:?}");
    let corrupt = h.dir.join("state").join("alert-state.json.corrupt-1795989047000");
    assert_eq!(std::fs::read(corrupt).unwrap(), b"{\"alerts\":");
    let file: Value = serde_json::from_slice(&std::fs::read(h.alert_file()).unwrap()).unwrap();
    assert_eq!(file["total_ticks"], 40, "rewritten from the log");
    assert_eq!(file["alerts"]["proposal-pending:PROP-002"]["count"], 7);
    let mode = std::fs::metadata(h.alert_file()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A reformat of `alert-state.json` (another indent, CRLF) changes no field: the next mirrored
/// count adds its one tick, not a second one taken for a stale counter's.
#[test]
fn a_reformatted_alert_state_adds_no_tick() {
    let h = Hermit::new("hermit");
    h.import("hermit-proposals").expect(0);
    let count = || {
        let args = ["--now-ms", NOW, "--mirror", h.dir(), "alerts", "--dir", h.dir(), "count-tick"];
        h.store.run(&args).expect(0).json()["total_ticks"].as_u64().unwrap()
    };
    let first = count();
    assert_eq!(count(), first + 1);
    let file: Value = serde_json::from_slice(&std::fs::read(h.alert_file()).unwrap()).unwrap();
    let mut text = Vec::new();
    let indent = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    serde::Serialize::serialize(
        &file,
        &mut serde_json::Serializer::with_formatter(&mut text, indent),
    )
    .unwrap();
    let text = String::from_utf8(text).unwrap().replace('\n', "\r\n") + "\r\n";
    std::fs::write(h.alert_file(), text).unwrap();
    assert_eq!(count(), first + 2, "one tick, not two");
}

/// An export from a scope that holds no alert state leaves an existing `alert-state.json` as it
/// is (upstream's precheck and alert-update own it until it is imported); with no file there, it
/// writes the seed template.
#[test]
fn an_export_never_replaces_an_alert_state_the_scope_does_not_hold() {
    let h = Hermit::new("hermit");
    h.store.run(&["init"]).expect(0);
    let before = std::fs::read(h.alert_file()).unwrap();
    let scope = format!("hermit:{}", std::fs::canonicalize(&h.dir).unwrap().display());
    let args = ["--scope", &scope, "export", "--layout", "hermit-alerts", "--to", h.dir()];
    let out = h.store.run(&args).expect(0).json();
    assert_eq!(out["left"], true, "{out}");
    assert_eq!(std::fs::read(h.alert_file()).unwrap(), before, "upstream's file untouched");
    std::fs::remove_file(h.alert_file()).unwrap();
    let out = h.store.run(&args).expect(0).json();
    assert_eq!(out["left"], false, "{out}");
    let seed = "{\n  \"alerts\": {},\n  \"last_digest_date\": null,\n  \"self_eval\": {},\n  \
                \"total_ticks\": 0\n}\n";
    assert_eq!(std::fs::read_to_string(h.alert_file()).unwrap(), seed);
}

/// `alerts tick --mirror` on a directory whose proposals were never imported adopts the queue and
/// the ledger as an import would and never rewrites them (their rendering equals the files);
/// the tick writes `alert-state.json`, and an unchanged alert-state file is not re-adopted.
#[test]
fn a_mirrored_tick_never_replaces_a_queue_or_ledger_that_was_never_imported() {
    let h = Hermit::new("hermit");
    let state = h.dir.join("state");
    let queue = std::fs::read(state.join("micro-proposals.json")).unwrap();
    let ledger = std::fs::read(state.join("proposal-metrics.jsonl")).unwrap();
    let before = std::fs::read(h.alert_file()).unwrap();
    let tick = || {
        let args = ["--now-ms", NOW, "--mirror", h.dir(), "alerts", "--dir", h.dir(), "tick"];
        h.store.run_with_stdin(&args, Some(b"{\"firing\":[]}")).expect(0)
    };
    tick();
    assert_eq!(std::fs::read(state.join("micro-proposals.json")).unwrap(), queue);
    assert_eq!(std::fs::read(state.join("proposal-metrics.jsonl")).unwrap(), ledger);
    let dir = h.dir();
    let queued = h.store.run(&["proposals", "--dir", dir, "queue"]).expect(0).json();
    assert_eq!(queued["pending"].as_array().unwrap().len(), 2, "the queue was adopted");
    let after = std::fs::read(h.alert_file()).unwrap();
    assert_ne!(after, before, "the tick is mirrored");
    assert_eq!(serde_json::from_slice::<Value>(&after).unwrap(), h.state());
    tick();
    let imported = h.store.run(&["log", "--kind", "state_imported"]).expect(0);
    assert_eq!(imported.stdout.lines().count(), 1, "adopted once, not again: {imported:?}");
    assert_eq!(std::fs::read(state.join("micro-proposals.json")).unwrap(), queue);
    h.store.run(&["verify"]).expect(0);
}

/// The alert state is written pretty, which is larger than the compact text the event bound
/// (`TICK_BYTES_MAX`) measures: a tick whose file would be over the bytes import and the mirror
/// read (`ALERT_STATE_FILE_BYTES_MAX`) is refused, so every file hookstate writes reads back.
#[test]
fn a_tick_whose_file_would_be_too_big_to_read_back_is_refused() {
    let h = Hermit::new("hermit");
    let entry = |i: usize| {
        json!({ "count": 7, "consecutive_clean": 0, "suppressed": true,
                "first_seen": "2026-11-28", "last_seen": "2026-11-28",
                "text": format!("{i:03} {}", "y".repeat(96)) })
    };
    let mut alerts = serde_json::Map::new();
    let mut n = 0;
    loop {
        alerts.insert(format!("custom:a{n:03}"), entry(n));
        let state = json!({ "alerts": alerts, "last_digest_date": "2026-11-29",
                            "self_eval": {}, "total_ticks": 1 });
        let text = serde_json::to_string_pretty(&state).unwrap() + "\n";
        if text.len() > 63_000 {
            std::fs::write(h.alert_file(), text).unwrap();
            break;
        }
        n += 1;
    }
    h.import("hermit-alerts").expect(0);
    let mut firing: Vec<Value> =
        alerts.iter().map(|(k, e)| json!({ "key": k, "text": e["text"] })).collect();
    firing.push(json!({ "key": "custom:new", "text": "z".repeat(3000) }));
    let payload = json!({ "firing": firing }).to_string();
    let run = h.alerts("json", &["tick"], Some(&payload)).expect(3);
    assert!(run.stderr.contains("bytes"), "{run:?}");
    let to = h._home.path().join("out");
    let scope = format!("hermit:{}", std::fs::canonicalize(&h.dir).unwrap().display());
    let args =
        ["--scope", &scope, "export", "--layout", "hermit-alerts", "--to", to.to_str().unwrap()];
    h.store.run(&args).expect(0);
    let again = Hermit::new("hermit");
    std::fs::copy(to.join("state").join("alert-state.json"), again.alert_file()).unwrap();
    again.import("hermit-alerts").expect(0);
}
