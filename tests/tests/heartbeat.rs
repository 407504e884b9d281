//! The heartbeat half of the hermit `alerts` domain against the engine: budget alerts created
//! once, never reset, reaped by period (daily, ISO weekly, monthly, in the configured zone); the
//! monitor's start-check / start-commit / stop cycle with the `started_at` rule and every health
//! reason; injection damping; the next-task ack refused after any intervening change; and byte
//! round trips of the spec-written `hermit-heartbeat` fixtures, corrupt ones quarantined.
//!
//! Does not start processes; `cli/tests/heartbeat.rs` races real ones.

use std::path::Path;

use hookstate_engine::monitor_command;
use hookstate_engine::read_heartbeat_files;
use hookstate_engine::{BudgetInput, MonitorSetup};
use hookstate_engine::{Error, Layout, LogFilter};
use hookstate_engine::{HEARTBEAT_STATE_FILES as STATE_FILES, NEXT_TASK_FILE};
use hookstate_testkit::copy_dir as copy_tree;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy");
/// 2026-09-14T09:12:03.554Z, a Monday (ISO week 38).
const SEP_14: u64 = 1_789_377_123_554;
const DAY_MS: u64 = 86_400_000;
const HOUR_MS: u64 = 3_600_000;

/// The shared hermit harness (a state directory beside a fresh store), with this file's helpers.
struct Hermit(hookstate_testkit::Hermit);

impl std::ops::Deref for Hermit {
    type Target = hookstate_testkit::Hermit;
    fn deref(&self) -> &hookstate_testkit::Hermit {
        &self.0
    }
}

fn hermit(fixture: Option<&str>) -> Hermit {
    Hermit(hookstate_testkit::Hermit::new(Path::new(FIXTURES), fixture))
}

impl Hermit {
    /// Writes the state directory's `config.json`: its time zone, and whether the next-task
    /// ack is enabled (`always_on` with conservative escalation).
    fn configure(&self, tz: &str, ack: bool) {
        let config = json!({ "timezone": tz, "always_on": ack, "escalation": "conservative" });
        std::fs::write(self.dir.join("config.json"), config.to_string()).unwrap();
    }

    fn record(&self, now: u64, tz: &str, level: &str, period: &str, spend: f64) -> Value {
        let input = BudgetInput {
            level: level.into(),
            period: period.into(),
            action: "alert".into(),
            spend,
            cap: 50.0,
        };
        self.configure(tz, false);
        self.engine.alerts().budget_record(&self.call(now), &input).unwrap().to_json()
    }

    fn alerts(&self) -> serde_json::Map<String, Value> {
        self.engine.alerts().budget_alerts(&self.scope).unwrap()
    }

    fn import(&self, now: u64) -> Value {
        let files = read_heartbeat_files(&self.dir).unwrap();
        self.engine.alerts().import_heartbeat(&self.call(now), &self.dir, files).unwrap().to_json()
    }

    fn verify(&self) {
        self.engine.ops().verify(Default::default()).unwrap();
    }
}

fn layout_files(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for file in STATE_FILES {
        out.push((file.to_owned(), std::fs::read(dir.join("state").join(file)).ok()));
    }
    out.push((
        NEXT_TASK_FILE.into(),
        std::fs::read(dir.join("sessions").join(NEXT_TASK_FILE)).ok(),
    ));
    out
}

#[test]
fn budget_alerts_are_created_once_and_never_reset() {
    let h = hermit(None);
    let first = h.record(SEP_14, "UTC", "warn", "weekly", 41.273_149);
    assert_eq!(first["verdict"], "OK|created|budget-warn:weekly:2026-W38");
    assert_eq!(first["created"], true);
    let again = h.record(SEP_14 + HOUR_MS, "UTC", "warn", "weekly", 47.0);
    assert_eq!(again["verdict"], "OK|exists|budget-warn:weekly:2026-W38");
    let key = "budget-warn:weekly:2026-W38";
    assert_eq!(h.alerts()[key]["spend"], json!(41.2731), "an existing key is never rewritten");
    assert_eq!(h.alerts()[key]["ts"], "2026-09-14T09:12:03.554Z");
    let marked = h.engine.alerts().budget_mark(&h.call(SEP_14), key).unwrap();
    assert!(marked.refusal.is_none());
    let twice = h.engine.alerts().budget_mark(&h.call(SEP_14), key).unwrap();
    assert_eq!(twice.refusal.unwrap().reason, "already_notified");
    let missing = h.engine.alerts().budget_mark(&h.call(SEP_14), "budget-warn:daily:x").unwrap();
    assert_eq!(missing.to_json()["verdict"], "NONE|no-match");
    let after = h.record(SEP_14 + 2 * HOUR_MS, "UTC", "warn", "weekly", 49.0);
    assert_eq!(after["notified"], true);
    assert_eq!(h.alerts()[key]["notified"], true, "notified never goes back to false");
    let breach = h.record(SEP_14, "UTC", "breach", "weekly", 52.0);
    assert_eq!(breach["verdict"], "OK|created|budget-breach:weekly:2026-W38");
    assert_eq!(h.alerts()["budget-breach:weekly:2026-W38"]["ratio"], json!(1.04));
    h.verify();
}

/// `(period, zone, first record, reap time that keeps it, reap time that removes it)`.
fn reap_cases() -> Vec<(&'static str, &'static str, u64, u64, u64)> {
    // 2027-01-01T03:00Z: 2026-12-31 22:00 in New York, whose New Year is at 05:00Z.
    let ny_eve = 1_798_772_400_000;
    // 2026-09-20T23:30Z (Sunday, W38) and 2026-09-21T00:30Z (Monday, W39).
    let sunday = SEP_14 + 6 * DAY_MS + 14 * HOUR_MS;
    vec![
        ("daily", "UTC", SEP_14, SEP_14 + 14 * HOUR_MS, SEP_14 + 15 * HOUR_MS),
        ("daily", "America/New_York", ny_eve, ny_eve + HOUR_MS, ny_eve + 3 * HOUR_MS),
        ("daily", "UTC", ny_eve - 5 * HOUR_MS, ny_eve - 4 * HOUR_MS, ny_eve),
        ("weekly", "UTC", SEP_14, sunday, sunday + HOUR_MS),
        ("weekly", "Asia/Tokyo", SEP_14, sunday - 10 * HOUR_MS, sunday),
        ("monthly", "UTC", SEP_14, SEP_14 + 16 * DAY_MS, SEP_14 + 17 * DAY_MS),
        ("monthly", "America/New_York", ny_eve, ny_eve + HOUR_MS, ny_eve + 3 * HOUR_MS),
    ]
}

#[test]
fn reaps_remove_exactly_the_past_periods_in_the_configured_zone() {
    for (period, tz, at, keep, gone) in reap_cases() {
        let h = hermit(None);
        let key = h.record(at, tz, "warn", period, 45.0)["key"].as_str().unwrap().to_owned();
        let other = h.record(at, tz, "breach", "monthly", 60.0)["key"].as_str().unwrap().to_owned();
        let kept = h.engine.alerts().budget_reap(&h.call(keep)).unwrap().to_json();
        assert_eq!(kept["reaped"], json!([]), "{period} {tz}: {key} is still current at {keep}");
        let reaped = h.engine.alerts().budget_reap(&h.call(gone)).unwrap().to_json();
        let reaped: Vec<String> = serde_json::from_value(reaped["reaped"].clone()).unwrap();
        assert!(reaped.contains(&key), "{period} {tz}: {key} is past at {gone}: {reaped:?}");
        assert_eq!(h.alerts().contains_key(&other), !reaped.contains(&other), "{period} {tz}");
        h.verify();
    }
}

#[test]
fn a_record_in_a_new_period_reaps_the_old_key_and_keeps_others_in_order() {
    let h = hermit(Some("hermit-heartbeat"));
    h.import(1);
    let next_week = SEP_14 + 7 * DAY_MS;
    let out = h.record(next_week, "UTC", "warn", "weekly", 40.0);
    assert_eq!(out["reaped"], json!(["budget-warn:weekly:2026-W37"]));
    let exported = tempfile::tempdir().unwrap();
    h.engine.alerts().export_heartbeat(&h.scope, exported.path()).unwrap();
    let text = std::fs::read_to_string(exported.path().join("state/budget-alerts.json")).unwrap();
    assert!(text.starts_with("{\"alerts\":{\"budget-warn:weekly:2026-W39\":{\"kind\":\"budget\""));
    assert!(text.ends_with("\"last_digest_date\":null,\"self_eval\":{},\"total_ticks\":0}\n"));
    // Telemetry and doctor alerts never reap with the budget file.
    assert!(h.alerts().contains_key("telemetry:export-failed"));
}

fn setup(interval_s: u64, boot: Option<&str>) -> MonitorSetup {
    MonitorSetup {
        interval_s,
        command: monitor_command("/opt/plug", interval_s, "/srv/h"),
        boot_id: boot.map(str::to_owned),
        disabled: false,
    }
}

fn monitor_file(h: &Hermit) -> Value {
    let files = h.engine.alerts().heartbeat_files(&h.scope).unwrap();
    let text = files.iter().find(|(f, _)| f == "heartbeat-monitor.runtime.json").unwrap();
    serde_json::from_str(text.1.as_deref().unwrap()).unwrap()
}

#[test]
fn monitor_start_check_commit_and_stop_cycle() {
    let h = hermit(None);
    let s = setup(60, Some("boot-1"));
    let check = h.engine.alerts().monitor_check(&h.call(SEP_14), &s).unwrap().to_json();
    let cmd = "bash /opt/plug/scripts/heartbeat-monitor.sh 60 /srv/h";
    let rearm = format!("REARM|runtime-missing\nFIRST_START:1\nINTERVAL:60\nCMD:{cmd}");
    assert_eq!(check["verdict"], rearm);
    assert_eq!(monitor_file(&h), json!({ "armed_at": "2026-09-14T09:12:03.554Z" }));
    // A peek in the arming second (whole seconds) is adopted as started_at.
    h.engine.alerts().liveness_peek(&h.call(SEP_14 + 100)).unwrap();
    let commit = h.engine.alerts().monitor_commit(&h.call(SEP_14 + 900), &s, "task-1", 0).unwrap();
    assert_eq!(commit.to_json()["verdict"], "OK|registered|interval=60");
    let expected = json!({
        "description": "heartbeat-monitor", "task_id": "task-1", "command": cmd, "interval": 60,
        "started_at": "2026-09-14T09:12:03Z", "boot_id": "boot-1",
    });
    assert_eq!(monitor_file(&h), expected);
    let fresh = h.engine.alerts().monitor_check(&h.call(SEP_14 + 1000), &s).unwrap();
    assert_eq!(fresh.to_json()["verdict"], "FRESH|interval=60");
    assert_eq!(fresh.appended, 0, "a fresh check writes nothing");
    // Stale: no peek for more than 3 intervals; the re-arm names the old task and keeps fields.
    let late = SEP_14 + 181_000;
    let stale = h.engine.alerts().monitor_check(&h.call(late), &s).unwrap().to_json();
    assert_eq!(
        stale["verdict"],
        format!("REARM|liveness-stale\nOLD_TASK:task-1\nINTERVAL:60\nCMD:{cmd}")
    );
    let mut armed = expected.clone();
    armed["armed_at"] = json!("2026-09-14T09:15:04.554Z");
    assert_eq!(monitor_file(&h), armed);
    assert!(h.engine.alerts().liveness(&h.scope).unwrap().is_none(), "re-arm deletes liveness");
    // A peek from before the arming second is not adopted: started_at is the commit's now.
    let commit = h.engine.alerts().monitor_commit(&h.call(late + 5000), &s, "task-2", 0).unwrap();
    assert_eq!(commit.to_json()["verdict"], "DEAD|liveness-absent");
    assert_eq!(monitor_file(&h)["started_at"], "2026-09-14T09:15:09.554Z");
    h.engine.alerts().liveness_peek(&h.call(late - 2000)).unwrap();
    h.engine.alerts().monitor_commit(&h.call(late + 6000), &s, "task-3", 0).unwrap();
    assert_eq!(monitor_file(&h)["started_at"], "2026-09-14T09:15:10.554Z");
    let stop = h.engine.alerts().monitor_stop(&h.call(late + 7000)).unwrap().to_json();
    assert_eq!(stop["verdict"], "OK|stopped");
    assert_eq!(monitor_file(&h), json!({}));
    assert!(h.engine.alerts().liveness(&h.scope).unwrap().is_none());
    let after = h.engine.alerts().monitor_check(&h.call(late + 8000), &s).unwrap().to_json();
    assert_eq!(
        after["verdict"],
        format!("REARM|runtime-missing\nFIRST_START:1\nINTERVAL:60\nCMD:{cmd}")
    );
    h.verify();
}

#[test]
fn monitor_health_names_each_failure() {
    let h = hermit(None);
    let s = setup(60, Some("boot-1"));
    h.engine.alerts().monitor_check(&h.call(SEP_14), &s).unwrap();
    h.engine.alerts().liveness_peek(&h.call(SEP_14)).unwrap();
    h.engine.alerts().monitor_commit(&h.call(SEP_14), &s, "t", 0).unwrap();
    let status = |setup: &MonitorSetup, now: u64| {
        let status = h.engine.alerts().monitor_status(&h.scope, setup, now).unwrap();
        (status.healthy, status.reason)
    };
    assert_eq!(status(&s, SEP_14 + 1000), (true, "fresh".into()));
    assert_eq!(status(&setup(60, Some("boot-2")), SEP_14), (false, "boot-mismatch".into()));
    assert_eq!(
        status(&setup(60, None), SEP_14),
        (true, "fresh".into()),
        "no boot id: not compared"
    );
    assert_eq!(status(&setup(90, Some("boot-1")), SEP_14), (false, "interval-drift".into()));
    let moved = MonitorSetup { command: monitor_command("/elsewhere", 60, "/srv/h"), ..s.clone() };
    assert_eq!(status(&moved, SEP_14), (false, "command-drift".into()));
    assert_eq!(status(&s, SEP_14 + 181_000), (false, "liveness-stale".into()));
    let off = MonitorSetup { disabled: true, ..s.clone() };
    assert_eq!(status(&off, SEP_14 + 181_000), (true, "disabled".into()));
    // start-check treats disabled as a re-arm (reaching start is an explicit act).
    let check = h.engine.alerts().monitor_check(&h.call(SEP_14), &off).unwrap().to_json();
    assert!(check["verdict"].as_str().unwrap().starts_with("REARM|disabled\nOLD_TASK:t\n"));
}

#[test]
fn liveness_reads_alive_then_unknown() {
    let h = hermit(None);
    let read = |now: u64| {
        let read = h.engine.alerts().liveness_read(&h.scope, now).unwrap();
        (read.state == "alive", read.age_s)
    };
    assert_eq!(read(SEP_14), (false, None));
    h.engine.alerts().liveness_peek(&h.call(SEP_14)).unwrap();
    assert_eq!(read(SEP_14 + 600_000), (true, Some(600)));
    assert_eq!(read(SEP_14 + 601_000), (false, Some(601)));
}

#[test]
fn injection_alerts_are_damped_once_per_file_version() {
    let h = hermit(None);
    let check = |hash: &str| {
        let read = h.engine.alerts().injection_check(&h.scope, hash).unwrap();
        (read.announced, read.stored_hash)
    };
    assert_eq!(check("9c04be1f"), (false, None));
    h.engine.alerts().injection_record(&h.call(SEP_14), "9c04be1f", None).unwrap();
    assert_eq!(check("9c04be1f"), (true, Some("9c04be1f".into())));
    assert!(!check("0badf00d").0, "edited file");
    let stamp = Some("2026-09-14T11:20:00+02:00");
    h.engine.alerts().injection_record(&h.call(SEP_14), "0badf00d", stamp).unwrap();
    assert!(!check("9c04be1f").0);
    assert!(check("0badf00d").0);
    let bad = h.engine.alerts().injection_record(&h.call(SEP_14), "9C04BE1F", None);
    assert!(bad.as_ref().is_err_and(Error::is_invalid));
    let files = h.engine.alerts().heartbeat_files(&h.scope).unwrap();
    let text = files.iter().find(|(f, _)| f == "injection-alert.json").unwrap().1.clone();
    assert_eq!(
        text.unwrap(),
        "{\"hash\":\"0badf00d\",\"announced_at\":\"2026-09-14T11:20:00+02:00\"}\n"
    );
}

/// A scope with an idle runtime and a queued task, and its token.
fn queued(h: &Hermit) -> String {
    h.import(1);
    h.configure("Europe/Berlin", true);
    h.engine.alerts().next_task_token(&h.scope).unwrap().token.unwrap()
}

fn ack(h: &Hermit, token: &str, now: u64) -> Value {
    h.configure("Europe/Berlin", true);
    h.engine.alerts().next_task_ack(&h.call(now), token).unwrap().to_json()
}

type Change = fn(&Hermit);

fn set(h: &Hermit, fields: &[(&str, Value)]) {
    let sets: Vec<(String, Value)> =
        fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    h.engine.alerts().runtime_set(&h.call(SEP_14), &sets, &[]).unwrap();
}

fn queue(h: &Hermit, text: &str) {
    h.engine.alerts().next_task_queue(&h.call(SEP_14), text, true).unwrap();
}

fn same_queue(h: &Hermit) -> String {
    let files = h.engine.alerts().heartbeat_files(&h.scope).unwrap();
    files.into_iter().find(|(f, _)| f == NEXT_TASK_FILE).unwrap().1.unwrap()
}

/// Every intervening change, and the reason the ack then gives.
fn intervening_changes() -> Vec<(&'static str, Change, &'static str)> {
    vec![
        ("runtime field changed", |h| set(h, &[("last_error", json!("x"))]), "changed"),
        ("runtime rewritten with the same fields", |h| set(h, &[]), "changed"),
        (
            "runtime changed and changed back in one second",
            |h| {
                set(h, &[("session_state", json!("in_progress"))]);
                set(h, &[("session_state", json!("idle"))]);
                let old = json!("2026-09-14T10:40:00+0200");
                set(h, &[("updated_at", old)]);
            },
            "changed",
        ),
        ("runtime busy", |h| set(h, &[("session_state", json!("in_progress"))]), "not-idle"),
        ("runtime in transition", |h| set(h, &[("transition", json!("archiving"))]), "not-idle"),
        (
            "runtime re-imported as it was",
            |h| {
                h.import(2);
            },
            "changed",
        ),
        ("queue replaced", |h| queue(h, "## Task\nSomething else\n"), "changed"),
        ("queue replaced with the same text", |h| queue(h, &same_queue(h)), "changed"),
        (
            "queue consumed",
            |h| {
                h.engine.alerts().next_task_consume(&h.call(SEP_14)).unwrap();
            },
            "queue-missing",
        ),
        (
            "queue consumed and re-queued as it was",
            |h| {
                let text = same_queue(h);
                h.engine.alerts().next_task_consume(&h.call(SEP_14)).unwrap();
                h.engine.alerts().next_task_queue(&h.call(SEP_14), &text, false).unwrap();
            },
            "changed",
        ),
    ]
}

#[test]
fn next_task_ack_is_refused_after_any_intervening_change() {
    for (what, change, reason) in intervening_changes() {
        let h = hermit(Some("hermit-heartbeat"));
        let token = queued(&h);
        let before = h.engine.alerts().runtime(&h.scope).unwrap();
        change(&h);
        let out = ack(&h, &token, SEP_14);
        assert_eq!(out["parked"], false, "{what}: {out}");
        assert_eq!(out["reason"], reason, "{what}: {out}");
        assert_eq!(out["verdict"], json!({ "parked": false, "reason": reason }).to_string());
        let after = h.engine.alerts().runtime(&h.scope).unwrap().unwrap();
        assert_ne!(after.get("waiting_reason"), Some(&json!("conservative_pickup")), "{what}");
        assert!(before.is_some());
        h.verify();
    }
}

#[test]
fn next_task_ack_parks_an_unchanged_idle_session_once() {
    let h = hermit(Some("hermit-heartbeat"));
    let token = queued(&h);
    assert_eq!(token.len(), 64);
    let out = ack(&h, &token, SEP_14);
    assert_eq!(out["verdict"], "{\"parked\":true}");
    let runtime = h.engine.alerts().runtime(&h.scope).unwrap().unwrap();
    assert_eq!(runtime["session_state"], "waiting");
    assert_eq!(runtime["waiting_reason"], "conservative_pickup");
    assert_eq!(runtime["waiting_since"], "2026-09-14T09:12:03.554Z");
    assert_eq!(runtime["updated_at"], "2026-09-14T11:12:03+0200");
    let keys: Vec<&String> = runtime.keys().collect();
    assert_eq!(keys.first().map(|k| k.as_str()), Some("version"), "key order kept");
    assert_eq!(keys.last().map(|k| k.as_str()), Some("waiting_since"), "new keys appended");
    let again = ack(&h, &token, SEP_14 + 1000);
    assert_eq!(again["reason"], "not-idle", "never parked twice");
    h.configure("UTC", false);
    let disabled = h.engine.alerts().next_task_ack(&h.call(SEP_14), &token).unwrap();
    assert_eq!(disabled.to_json()["reason"], "disabled");
    assert_eq!(h.engine.alerts().next_task_token(&h.scope).unwrap().reason, Some("disabled"));
    h.verify();
}

#[test]
fn spec_fixtures_round_trip_byte_for_byte() {
    let h = hermit(Some("hermit-heartbeat"));
    let original = layout_files(&h.dir);
    assert!(original.iter().all(|(_, bytes)| bytes.is_some()), "every file of the layout");
    let out = h.import(1);
    assert_eq!(out["files"].as_array().unwrap().len(), 8, "{out}");
    assert_eq!(out["quarantined"], json!([]));
    let exported = tempfile::tempdir().unwrap();
    h.engine.alerts().export_heartbeat(&h.scope, exported.path()).unwrap();
    assert_eq!(layout_files(exported.path()), original, "export(import(files)) == files");
    // import(export(state)) == state: a second store adopting the export exports the same bytes.
    let again = hermit(None);
    copy_tree(exported.path(), &again.dir);
    again.import(1);
    let twice = tempfile::tempdir().unwrap();
    again.engine.alerts().export_heartbeat(&again.scope, twice.path()).unwrap();
    assert_eq!(layout_files(twice.path()), original);
    // A mutation keeps the file's layout, key order and unknown keys.
    let key = "budget-warn:weekly:2026-W37";
    h.engine.alerts().budget_mark(&h.call(SEP_14), key).unwrap();
    h.engine.alerts().export_heartbeat(&h.scope, exported.path()).unwrap();
    let budget = std::fs::read(exported.path().join("state/budget-alerts.json")).unwrap();
    let expected = original[0].1.clone().unwrap();
    let expected =
        String::from_utf8(expected).unwrap().replace("\"notified\":false", "\"notified\":true");
    assert_eq!(String::from_utf8(budget).unwrap(), expected);
    // A new runtime.json gets the mode upstream's writer gives it: 0666 less the umask.
    let mode_of = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    let probe = exported.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    assert_eq!(mode_of(&exported.path().join("state/runtime.json")), mode_of(&probe));
    h.verify();
}

#[test]
fn corrupt_files_are_quarantined_and_rebuilt_from_the_log() {
    let h = hermit(Some("hermit-heartbeat-corrupt"));
    let runtime_bytes = std::fs::read(h.dir.join("state/runtime.json")).unwrap();
    // The store already holds a runtime: the corrupt file is rebuilt from it.
    h.engine
        .alerts()
        .runtime_set(&h.call(SEP_14), &[("session_state".into(), json!("idle"))], &[])
        .unwrap();
    let out = h.import(SEP_14);
    assert_eq!(out["files"], json!(["heartbeat-liveness.json", "NEXT-TASK.md"]), "{out}");
    let quarantined: Vec<&str> =
        out["quarantined"].as_array().unwrap().iter().map(|q| q["to"].as_str().unwrap()).collect();
    let ms = SEP_14.to_string();
    assert_eq!(
        quarantined,
        vec![format!("budget-alerts.json.corrupt-{ms}"), format!("runtime.json.corrupt-{ms}")]
    );
    assert_eq!(out["rebuilt"], json!(["runtime.json"]));
    let state = h.dir.join("state");
    assert_eq!(
        std::fs::read(state.join(format!("runtime.json.corrupt-{ms}"))).unwrap(),
        runtime_bytes
    );
    let rebuilt = std::fs::read_to_string(state.join("runtime.json")).unwrap();
    assert_eq!(
        rebuilt,
        "{\n  \"session_state\": \"idle\",\n  \"updated_at\": \"2026-09-14T09:12:03+0000\"\n}\n"
    );
    assert!(!state.join("budget-alerts.json").exists(), "nothing stored: not invented");
    assert!(h.alerts().is_empty(), "the corrupt budget file was never adopted");
    h.verify();
}

#[test]
fn oversized_files_are_refused_before_anything_is_written() {
    let h = hermit(None);
    std::fs::create_dir_all(h.dir.join("sessions")).unwrap();
    let big = "x".repeat(hookstate_engine::HEARTBEAT_FILE_BYTES_MAX + 1);
    std::fs::write(h.dir.join("sessions").join(NEXT_TASK_FILE), big).unwrap();
    assert!(read_heartbeat_files(&h.dir).as_ref().is_err_and(Error::is_invalid));
    std::fs::write(h.dir.join("sessions").join(NEXT_TASK_FILE), b"\xff\xfe").unwrap();
    assert!(read_heartbeat_files(&h.dir).as_ref().is_err_and(Error::is_invalid));
    assert_eq!(h.engine.head().unwrap().seq, 0);
}

/// One budget operation of the model test: times are hours after [`SEP_14`].
#[derive(Debug, Clone)]
enum BudgetOp {
    Record { level: usize, period: usize, hours: u64, spend: u32 },
    Mark { level: usize, period: usize, hours: u64 },
    Reap { hours: u64 },
}

fn budget_op() -> impl proptest::strategy::Strategy<Value = BudgetOp> {
    use proptest::prelude::*;
    // Four instants over ~33 days, so daily, weekly and monthly periods all roll over and the
    // same key is hit again often enough to mark it twice.
    let hours = proptest::sample::select(vec![0u64, 100, 400, 800]);
    prop_oneof![
        (0..2usize, 0..3usize, hours.clone(), 0..100u32).prop_map(
            |(level, period, hours, spend)| BudgetOp::Record { level, period, hours, spend }
        ),
        (0..2usize, 0..3usize, hours.clone()).prop_map(|(level, period, hours)| BudgetOp::Mark {
            level,
            period,
            hours
        }),
        hours.prop_map(|hours| BudgetOp::Reap { hours }),
    ]
}

const MODEL_TZ: &str = "America/New_York";

fn model_key(level: usize, period: usize, at: u64) -> String {
    let (level, period) = (["warn", "breach"][level], ["daily", "weekly", "monthly"][period]);
    let key = hookstate_engine::period_key(period, at, MODEL_TZ).unwrap().unwrap();
    format!("budget-{level}:{period}:{key}")
}

/// The model: key → (period, spend at creation, notified); creates, marks and reaps counted.
#[derive(Default)]
struct BudgetModel {
    alerts: std::collections::BTreeMap<String, (usize, u32, bool)>,
    marks: usize,
}

impl BudgetModel {
    fn reap(&mut self, at: u64) {
        self.alerts.retain(|key, (period, _, _)| {
            let period = ["daily", "weekly", "monthly"][*period];
            let current = hookstate_engine::period_key(period, at, MODEL_TZ);
            // Only an older period goes; a later one (a clock ahead recorded it) stays.
            key.rsplit(':').next().unwrap() >= current.unwrap().unwrap().as_str()
        });
    }
}

fn run_budget_model(ops: &[BudgetOp]) -> Result<(), proptest::test_runner::TestCaseError> {
    let h = hermit(None);
    h.configure(MODEL_TZ, false);
    let mut model = BudgetModel::default();
    for op in ops {
        match *op {
            BudgetOp::Record { level, period, hours, spend } => {
                let at = SEP_14 + hours * HOUR_MS;
                let input = BudgetInput {
                    level: ["warn", "breach"][level].into(),
                    period: ["daily", "weekly", "monthly"][period].into(),
                    action: "alert".into(),
                    spend: f64::from(spend),
                    cap: 50.0,
                };
                h.engine.alerts().budget_record(&h.call(at), &input).unwrap();
                model.alerts.entry(model_key(level, period, at)).or_insert((period, spend, false));
                model.reap(at);
            }
            BudgetOp::Mark { level, period, hours } => {
                let key = model_key(level, period, SEP_14 + hours * HOUR_MS);
                let out = h.engine.alerts().budget_mark(&h.call(SEP_14), &key).unwrap();
                let expected = model.alerts.get_mut(&key).filter(|(_, _, notified)| !notified);
                proptest::prop_assert_eq!(out.refusal.is_none(), expected.is_some(), "{}", key);
                if let Some(entry) = expected {
                    entry.2 = true;
                    model.marks += 1;
                }
            }
            BudgetOp::Reap { hours } => {
                let at = SEP_14 + hours * HOUR_MS;
                h.engine.alerts().budget_reap(&h.call(at)).unwrap();
                model.reap(at);
            }
        }
        let stored = h.alerts();
        let mut keys: Vec<&String> = stored.keys().collect();
        keys.sort();
        let model_keys: Vec<&String> = model.alerts.keys().collect();
        proptest::prop_assert_eq!(keys, model_keys);
        for (key, (_, spend, notified)) in &model.alerts {
            proptest::prop_assert_eq!(&stored[key]["notified"], &json!(notified), "{}", key);
            proptest::prop_assert_eq!(&stored[key]["spend"], &json!(spend), "never reset: {}", key);
        }
    }
    let filter = LogFilter { kind: Some("budget_notified".into()), ..LogFilter::default() };
    let notified = h.engine.log(&filter).unwrap().len();
    proptest::prop_assert_eq!(notified, model.marks);
    h.verify();
    Ok(())
}

fn model_cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: model_cases(),
        ..proptest::prelude::ProptestConfig::default()
    })]

    #[test]
    fn budget_alerts_agree_with_the_model(ops in proptest::collection::vec(budget_op(), 1..48)) {
        run_budget_model(&ops)?;
    }
}

/// cost-tracker reads a falsy entry (a hand-edited `null`) as no alert (`if (alerts[key])`) and
/// creates over it, and marks only an alert object whose `notified` is falsy
/// (`entry && !entry.notified`): a `null` entry is no match, a `"notified": 1` is marked already.
#[test]
fn falsy_budget_entries_are_no_alerts_and_truthy_marks_are_marks() {
    let h = hermit(None);
    std::fs::create_dir_all(h.dir.join("state")).unwrap();
    let file = "{\n  \"alerts\": {\n    \"budget-warn:weekly:2026-W38\": null,\n    \
                \"budget-warn:daily:2026-09-14\": {\n      \"kind\": \"budget\",\n      \
                \"period\": \"daily\",\n      \"notified\": 1\n    }\n  }\n}\n";
    std::fs::write(h.dir.join("state/budget-alerts.json"), file).unwrap();
    h.import(SEP_14);
    let mark = |key: &str| {
        let out = h.engine.alerts().budget_mark(&h.call(SEP_14), key).unwrap().to_json();
        out["verdict"].as_str().unwrap().to_owned()
    };
    assert_eq!(mark("budget-warn:weekly:2026-W38"), "NONE|no-match", "null is no alert");
    assert_eq!(
        mark("budget-warn:daily:2026-09-14"),
        "NOOP|already-notified|budget-warn:daily:2026-09-14"
    );
    let out = h.record(SEP_14, "UTC", "warn", "weekly", 45.0);
    assert_eq!(out["verdict"], "OK|created|budget-warn:weekly:2026-W38", "{out}");
    let entry = &h.alerts()["budget-warn:weekly:2026-W38"];
    assert_eq!(entry["kind"], "budget");
    assert_eq!(entry["notified"], false);
    assert_eq!(mark("budget-warn:weekly:2026-W38"), "OK|notified|budget-warn:weekly:2026-W38");
    assert_eq!(h.alerts()["budget-warn:weekly:2026-W38"]["notified"], true);
}

/// A record that would grow `budget-alerts.json` past the bytes a layout file may hold
/// (`FILE_BYTES_MAX`, which import and the mirror read) is refused, the file unchanged; it never
/// stores a file that every later import or mirrored call would refuse as oversized.
#[test]
fn a_record_never_grows_the_budget_file_past_the_file_bound() {
    let h = hermit(None);
    std::fs::create_dir_all(h.dir.join("state")).unwrap();
    let pad = "x".repeat(hookstate_engine::HEARTBEAT_FILE_BYTES_MAX - 200);
    let file = format!(
        "{{\n  \"alerts\": {{\n    \"note\": {{\n      \"kind\": \"other\",\n      \"text\": \"{pad}\"\n    }}\n  }}\n}}\n"
    );
    std::fs::write(h.dir.join("state/budget-alerts.json"), &file).unwrap();
    h.import(SEP_14);
    let input = BudgetInput {
        level: "warn".into(),
        period: "weekly".into(),
        action: "alert".into(),
        spend: 45.0,
        cap: 50.0,
    };
    let err = h.engine.alerts().budget_record(&h.call(SEP_14), &input).unwrap_err();
    assert!(err.is_invalid(), "{err:?}");
    assert_eq!(h.alerts().len(), 1, "nothing recorded");
    let out = tempfile::tempdir().unwrap();
    h.engine.alerts().export_heartbeat(&h.scope, out.path()).unwrap();
    assert_eq!(std::fs::read_to_string(out.path().join("state/budget-alerts.json")).unwrap(), file);
    assert!(read_heartbeat_files(out.path()).is_ok(), "the exported layout still imports");
}

/// A mirror rewrites only what it knows: a heartbeat file another writer changes after the
/// mirror adopted (between adopt and the end of the call, e.g. an unmigrated script writing
/// `runtime.json` while a peek runs) is left as that writer wrote it, and adopted by the next
/// mirrored call, never overwritten with the store's older copy.
#[test]
fn a_mirror_never_overwrites_a_file_changed_after_its_adoption() {
    let h = hermit(None);
    let runtime = h.dir.join("state/runtime.json");
    let cycle = |now: u64, during: &dyn Fn()| {
        let call = h.call(now);
        let outcome = h.engine.mirrored(&call, &Layout::Hermit, &h.dir, |engine| {
            during();
            engine.alerts().liveness_peek(&call)
        });
        assert!(outcome.unwrap().mirror.unwrap().conflicts.is_empty());
    };
    h.engine
        .alerts()
        .runtime_set(&h.call(SEP_14), &[("session_state".into(), json!("idle"))], &[])
        .unwrap();
    cycle(SEP_14, &|| {});
    let ours = std::fs::read_to_string(&runtime).unwrap();
    let theirs = ours.replace("\"idle\"", "\"in_progress\"");
    cycle(SEP_14 + 1000, &|| std::fs::write(&runtime, &theirs).unwrap());
    assert_eq!(std::fs::read_to_string(&runtime).unwrap(), theirs, "the outside write survives");
    cycle(SEP_14 + 2000, &|| {});
    let stored = h.engine.alerts().runtime(&h.scope).unwrap().unwrap();
    assert_eq!(stored["session_state"], "in_progress", "adopted by the next call");
    assert_eq!(std::fs::read_to_string(&runtime).unwrap(), theirs);
    let peek = std::fs::read_to_string(h.dir.join("state/heartbeat-liveness.json")).unwrap();
    assert_eq!(
        peek, "{\"last_peek_at\":\"2026-09-14T09:12:05Z\"}\n",
        "the verb's own file is written"
    );
    h.verify();
}

/// `alerts runtime set` stops where the session layout's codec stops reading `runtime.json`
/// (1,024 keys): a write past it is refused, so the file it leaves is still read by every
/// mirrored hermit verb (past 64 keys it was set aside as corrupt at the next outside write).
#[test]
fn runtime_set_refuses_keys_the_session_codec_would_not_read_back() {
    let h = hermit(None);
    let mut refused = None;
    for batch in 0..20 {
        let sets: Vec<(String, Value)> =
            (0..64).map(|n| (format!("f{batch}_{n}"), json!(n))).collect();
        if let Err(err) = h.engine.alerts().runtime_set(&h.call(SEP_14), &sets, &[]) {
            refused = Some(err);
            break;
        }
    }
    let err = refused.expect("refused before 20 batches of 64 keys");
    assert!(matches!(err, hookstate_engine::Error::TooMany { .. }), "{err:?}");
    let stored = h.engine.alerts().runtime(&h.scope).unwrap().unwrap();
    assert!(stored.len() > 960 && stored.len() <= 1024, "{}", stored.len());
    let read = h.engine.session().runtime_get(&h.scope).unwrap();
    assert!(read.verdict.lines[0].contains("\"f0_0\""), "the session codec reads it back");
}
