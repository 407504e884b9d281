//! The session domain on a store (issue 16): the `hermit-session` layout imported and exported
//! byte for byte, hostile files refused with the store unchanged, the `runtime.json` transition
//! table through the write path, and the mirror adopting outside writes per record, keeping the
//! store's record on a stale rewrite or a conflict, and quarantining corrupt files.
//!
//! Every test ends with `verify`, so the views the write path built equal a rebuild of the log.

use std::path::{Path, PathBuf};

use hookstate_engine::{Call, Engine, Layout};
use hookstate_engine::{RuntimeWrite, SessionAnswer as Answer, SessionExit as Exit};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy");
/// 2026-09-14T08:15:02.118Z, the fixtures' morning.
const NOW: u64 = 1_789_373_702_118;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else if path.file_name().is_some_and(|n| n != "README.md") {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Every file below `root` with its bytes, by relative path.
fn files(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel.starts_with(".hookstate-mirror") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

struct Hermit {
    _tmp: tempfile::TempDir,
    engine: Engine,
    dir: PathBuf,
    scope: String,
}

impl Hermit {
    /// A store and a state directory holding `fixture` (empty for `None`).
    fn new(fixture: Option<&str>) -> Hermit {
        let tmp = tempfile::tempdir().unwrap();
        let store = hookstate_testkit::store(&tmp.path().join("state.redb"));
        let engine = Engine::open(&store, hookstate_testkit::options()).unwrap();
        let dir = tmp.path().join(".claude-code-hermit");
        match fixture {
            Some(name) => copy_dir(&Path::new(FIXTURES).join(name), &dir),
            None => std::fs::create_dir_all(&dir).unwrap(),
        }
        let scope = hookstate_engine::hermit_scope(&dir).unwrap().0;
        Hermit { _tmp: tmp, engine, dir, scope }
    }

    fn call(&self, now_ms: u64) -> Call {
        Call::at(&self.scope, now_ms)
    }

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|w| (*w).to_owned()).collect()
    }

    fn runtime(&self) -> serde_json::Value {
        let answer = self.engine.session().runtime_get(&self.scope).unwrap();
        serde_json::from_str(&answer.verdict.lines[0]).unwrap()
    }

    fn mirrored(
        &self,
        now_ms: u64,
        verb: impl FnOnce(&Engine) -> hookstate_engine::Result<Answer>,
    ) -> hookstate_engine::Outcome {
        let call = self.call(now_ms);
        self.engine
            .mirrored(&call, &Layout::HermitSession, &self.dir, |e| Ok(verb(e)?.outcome))
            .unwrap()
    }

    fn file(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap()
    }
}

#[test]
fn import_then_export_is_byte_for_byte_on_the_fixtures() {
    let h = Hermit::new(Some("hermit-session"));
    let outcome = h.engine.session().import(&h.call(NOW), &h.dir).unwrap();
    assert_eq!(outcome.result["files"], 20, "{:?}", outcome.result);
    let out = h._tmp.path().join("export");
    h.engine.session().export(&h.scope, &out).unwrap();
    let (before, after) = (files(&h.dir), files(&out));
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (path, bytes) in &before {
        assert!(after[path] == *bytes, "{path} is not written back byte for byte");
    }
    // A second import of the same files changes nothing the export shows.
    h.engine.session().import(&h.call(NOW + 1), &h.dir).unwrap();
    h.engine.session().export(&h.scope, &out).unwrap();
    assert_eq!(files(&out), before);
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_hostile_file_is_refused_on_import_and_the_store_is_unchanged() {
    let hostile = Path::new(FIXTURES).join("hermit-session-hostile");
    let mut found = Vec::new();
    for sub in ["state", "tasks", "sessions"] {
        for entry in std::fs::read_dir(hostile.join(sub)).unwrap() {
            found.push(format!("{sub}/{}", entry.unwrap().file_name().to_string_lossy()));
        }
    }
    assert!(found.len() >= 10, "{found:?}");
    for rel in found {
        let h = Hermit::new(Some("hermit-session"));
        std::fs::copy(hostile.join(&rel), h.dir.join(&rel)).unwrap();
        let err = h.engine.session().import(&h.call(NOW), &h.dir).unwrap_err();
        let name = rel.rsplit('/').next().unwrap();
        assert!(err.to_string().contains(name), "{rel}: {err}");
        assert!(err.is_invalid(), "{rel}: {err}");
        assert_eq!(h.engine.head().unwrap().seq, 0, "{rel}: the store changed");
    }
}

fn say(answer: &Answer) -> String {
    answer.verdict.lines.join("\n")
}

fn write(h: &Hermit, now: u64, write: &RuntimeWrite) -> String {
    say(&h.engine.session().runtime(&h.call(now), write).unwrap())
}

fn merge(fields: &[(&str, &str)]) -> RuntimeWrite {
    let sets = fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    RuntimeWrite::Merge { sets, unset: Vec::new(), expect_updated_at: None }
}

#[test]
fn the_runtime_transition_table_through_the_write_path() {
    let h = Hermit::new(None);
    let seed = RuntimeWrite::Seed { runtime_mode: "tmux".into(), tmux_session: Some("h".into()) };
    assert_eq!(write(&h, NOW, &seed), "OK|seed");
    assert_eq!(write(&h, NOW, &seed), "{\"ok\":false,\"reason\":\"runtime-exists\"}");
    assert_eq!(h.runtime()["session_state"], "idle");
    let table: [(RuntimeWrite, &str, &str); 8] = [
        (RuntimeWrite::Resume, "{\"ok\":false,\"reason\":\"not-waiting\"}", "idle"),
        (RuntimeWrite::Halt, "{\"ok\":false,\"reason\":\"not-in-progress\"}", "idle"),
        (RuntimeWrite::Wait, "OK|wait", "waiting"),
        (RuntimeWrite::Wait, "{\"ok\":false,\"reason\":\"not-idle\"}", "waiting"),
        (
            RuntimeWrite::WaitTimeout { timeout: "10m".into() },
            "{\"ok\":false,\"reason\":\"not-timed-out\"}",
            "waiting",
        ),
        (RuntimeWrite::Resume, "OK|resume", "in_progress"),
        (RuntimeWrite::Halt, "OK|halt", "waiting"),
        (RuntimeWrite::ShutdownRequested, "OK|shutdown-requested", "waiting"),
    ];
    for (i, (mv, said, state)) in table.iter().enumerate() {
        assert_eq!(write(&h, NOW + i as u64, mv), *said, "{mv:?}");
        assert_eq!(h.runtime()["session_state"], *state, "after {mv:?}");
    }
    let later = NOW + 11 * 60_000;
    let timeout = RuntimeWrite::WaitTimeout { timeout: "10m".into() };
    assert_eq!(write(&h, later, &timeout), "OK|wait-timeout");
    let runtime = h.runtime();
    assert_eq!(runtime["session_state"], "idle");
    assert!(runtime.get("waiting_since").is_none() && runtime.get("waiting_reason").is_none());
    assert_eq!(
        write(&h, later, &merge(&[("session_state", "\"in_progress\"")])),
        "{\"ok\":false,\"reason\":\"lifecycle-field:session_state\"}"
    );
    assert_eq!(write(&h, later, &merge(&[("cost_usd", "1.5")])), "OK|runtime");
    let stale = RuntimeWrite::Merge {
        sets: vec![("cost_usd".into(), "2".into())],
        unset: Vec::new(),
        expect_updated_at: Some("2020-01-01T00:00:00+0000".into()),
    };
    assert_eq!(write(&h, later, &stale), "{\"ok\":false,\"reason\":\"changed\"}");
    assert_eq!(h.runtime()["cost_usd"], 1.5);
    // session-archive's moves: open, then an archive's begin, cleaning and end in one decision.
    let session = h.engine.session();
    let open = session.session_archive(&h.call(later), &Hermit::words(&["open"]), "Task: t");
    assert_eq!(say(&open.unwrap()), "{\"ok\":false,\"reason\":\"shell-template-missing\"}");
    std::fs::create_dir_all(h.dir.join("templates")).unwrap();
    let template = "# Active Session\n\n## Session Info\n- **ID:** S-NNN (assigned on close)\n- **Started:** YYYY-MM-DD HH:MM\n- **Tasks Completed:** 0\n\n## Task\n\n## Progress Log\n\n## Blockers\n\n## Findings\n\n## Changed\n\n## Monitoring\n\n## Session Summary\n";
    std::fs::write(h.dir.join("templates/SHELL.md.template"), template).unwrap();
    h.engine.session().import(&h.call(later), &h.dir).unwrap();
    let open = session.session_archive(&h.call(later), &Hermit::words(&["open"]), "Task: t");
    assert_eq!(say(&open.unwrap()), "{\"ok\":true,\"session_id\":\"S-001\"}");
    assert_eq!(h.runtime()["session_state"], "in_progress");
    let archive = Hermit::words(&["archive", "--mode=idle"]);
    let archived = session.session_archive(&h.call(later + 1), &archive, "Status: completed\n");
    let said: serde_json::Value = serde_json::from_str(&say(&archived.unwrap())).unwrap();
    assert_eq!((said["ok"].as_bool(), said["session_id"].as_str()), (Some(true), Some("S-001")));
    let runtime = h.runtime();
    assert_eq!(
        (runtime["session_state"].as_str(), runtime["session_id"].as_str()),
        (Some("idle"), Some("S-002"))
    );
    assert_eq!(runtime["transition"], serde_json::Value::Null);
    assert_eq!(runtime["cost_usd"], 1.5, "a merged field survives every move");
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn the_heartbeats_runtime_writes_and_the_sessions_share_one_runtime_json() {
    let h = Hermit::new(None);
    let call = h.call(NOW);
    let alerts = h.engine.alerts();
    alerts.runtime_set(&call, &[("watchdog".into(), serde_json::json!(1))], &[]).unwrap();
    assert_eq!(write(&h, NOW + 1, &merge(&[("cost_usd", "3")])), "OK|runtime");
    let heartbeat = alerts.runtime(&h.scope).unwrap().unwrap();
    assert_eq!(
        (heartbeat["watchdog"].as_i64(), heartbeat["cost_usd"].as_i64()),
        (Some(1), Some(3))
    );
    assert_eq!(h.runtime()["watchdog"], 1);
    h.engine.ops().verify(Default::default()).unwrap();
}

/// A hermit whose directory the first mirrored call adopted (the fixtures' files).
fn mirrored_hermit() -> Hermit {
    let h = Hermit::new(Some("hermit-session"));
    let before = files(&h.dir);
    let outcome = h.mirrored(NOW, |e| {
        e.session().shell_append(&h.call(NOW), Some("progress"), "[08:15] mirrored")
    });
    let report = outcome.mirror.unwrap();
    assert!(report.adopted >= 20, "{report:?}");
    assert_eq!(report.written, ["sessions/SHELL.md"], "{report:?}");
    let after = files(&h.dir);
    for (path, bytes) in &before {
        if path != "sessions/SHELL.md" {
            assert!(after[path] == *bytes, "{path} was rewritten");
        }
    }
    assert!(h.file("sessions/SHELL.md").contains("[08:15] mirrored\n"));
    h
}

#[test]
fn the_first_mirrored_call_adopts_the_directory_as_an_import_would() {
    let h = mirrored_hermit();
    let out = h._tmp.path().join("export");
    h.engine.session().export(&h.scope, &out).unwrap();
    assert_eq!(files(&out), files(&h.dir), "the store holds what the directory holds");
    h.engine.ops().verify(Default::default()).unwrap();
}

const TASK: &str = "tasks/T-20260914-081502.md";

/// A legacy `task.ts` write: the record read from `bytes` with a Progress entry appended, as
/// upstream's `append` places it (the section's text, trimmed, then the entry).
fn task_entry(bytes: &[u8], text: &str, at: &str) -> String {
    let record = String::from_utf8(bytes.to_vec()).unwrap();
    let end = record.find("\n\n## Decisions").unwrap();
    let written = format!("{}\n- {at} legacy: {text}{}", &record[..end], &record[end..]);
    let file = hookstate_engine::SessionFile::Task { path: TASK[6..].into() };
    hookstate_engine::parse_session_file(&file, written.as_bytes()).unwrap();
    written
}

/// A legacy writer's whole-object rewrite of a JSON file with one key set.
fn json_set(bytes: &[u8], key: &str, value: serde_json::Value) -> String {
    let mut map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes).unwrap();
    map.insert(key.into(), value);
    serde_json::to_string_pretty(&map).unwrap() + "\n"
}

#[test]
fn outside_writes_are_adopted_per_record() {
    let h = mirrored_hermit();
    let read = |rel: &str| std::fs::read(h.dir.join(rel)).unwrap();
    let runtime = json_set(&read("state/runtime.json"), "last_error", "boom".into());
    let binding = serde_json::json!({ "session_name": "n", "session_id": "s9", "worktree": "/w",
        "generation": 1, "card": null, "muted": false, "created": "2026-09-14T08:16:00.000Z",
        "last_activity": "2026-09-14T08:16:00.000Z", "status": "running" });
    let conversations = json_set(&read("state/conversations.json"), "slack:C1", binding);
    let mut ledger = read("state/observations.jsonl");
    ledger.extend_from_slice(b"{\"ts\":\"2026-09-14T08:16:00Z\",\"pattern\":\"outside\"}\n");
    let task = task_entry(&read(TASK), "outside entry", "2026-09-14T08:16:00.000Z");
    // `appendToSection`: the line at the Findings section's end, before the blank line.
    let shell = h.file("sessions/SHELL.md").replacen(
        "nightly\n\n## Changed",
        "nightly\n- outside finding\n\n## Changed",
        1,
    );
    let writes = [
        ("state/runtime.json", runtime.into_bytes()),
        ("state/conversations.json", conversations.into_bytes()),
        ("state/observations.jsonl", ledger),
        (TASK, task.into_bytes()),
        ("sessions/SHELL.md", shell.into_bytes()),
    ];
    for (rel, bytes) in &writes {
        std::fs::write(h.dir.join(rel), bytes).unwrap();
    }
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert_eq!(h.runtime()["last_error"], "boom");
    let lookup = h.engine.session().conversation(
        &h.call(NOW + 60_001),
        "lookup",
        &Hermit::words(&["slack:C1"]),
        "",
    );
    assert!(say(&lookup.unwrap()).contains("\"session_id\":\"s9\""));
    let out = h._tmp.path().join("export");
    h.engine.session().export(&h.scope, &out).unwrap();
    for (rel, bytes) in &writes {
        let exported = std::fs::read(out.join(rel)).unwrap();
        assert!(exported == *bytes, "{rel}: the store does not hold the outside write");
        assert!(std::fs::read(h.dir.join(rel)).unwrap() == *bytes, "{rel} was rewritten");
    }
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_stale_rewrite_never_reverts_an_acknowledged_change() {
    let h = mirrored_hermit();
    let read = |rel: &str| std::fs::read(h.dir.join(rel)).unwrap();
    let (runtime, ledger, task) =
        (read("state/runtime.json"), read("state/observations.jsonl"), read(TASK));
    // Acknowledged by hookstate after the legacy writer read the files.
    let now = NOW + 60_000;
    h.mirrored(now, |e| e.session().runtime(&h.call(now), &merge(&[("ack", "1")])));
    let observe = Hermit::words(&["quick-deferral"]);
    h.mirrored(now + 1, |e| e.session().observe(&h.call(now + 1), &observe, "acknowledged row"));
    let note = Hermit::words(&["T-20260914-081502", "--actor", "hermit"]);
    h.mirrored(now + 2, |e| {
        e.session().task(&h.call(now + 2), "note", &note, "acknowledged entry")
    });
    // The legacy writer writes back what it read, with its own change.
    std::fs::write(h.dir.join("state/runtime.json"), json_set(&runtime, "legacy", "1".into()))
        .unwrap();
    let mut stale = ledger.clone();
    stale.extend_from_slice(b"legacy row\n");
    std::fs::write(h.dir.join("state/observations.jsonl"), &stale).unwrap();
    let stale_task = task_entry(&task, "legacy entry", "2026-09-14T08:17:00.000Z");
    std::fs::write(h.dir.join(TASK), stale_task).unwrap();
    let outcome = h.mirrored(now + 3, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    let runtime = h.runtime();
    assert_eq!((runtime["ack"].as_i64(), runtime["legacy"].as_str()), (Some(1), Some("1")));
    let ledger = h.file("state/observations.jsonl");
    assert!(ledger.contains("\"pattern\":\"acknowledged row\"") && ledger.contains("legacy row\n"));
    // Both changed the task since the version the writer read: the store's record is kept and
    // the conflict reported once.
    assert_eq!(report.conflicts.len(), 1, "{report:?}");
    assert_eq!(report.conflicts[0].record, "T-20260914-081502");
    let task = h.file(TASK);
    assert!(task.contains("acknowledged entry") && !task.contains("legacy entry"), "{task}");
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_hand_formatted_json_file_is_adopted_and_written_back_in_upstreams_layout() {
    let h = mirrored_hermit();
    let pause = h.file("state/operator-pause.json");
    // A hand edit upstream's JSON.parse reads: 4-space indent, CRLF line ends, no final newline.
    let hand = |text: &str, field: &str, value: serde_json::Value| {
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).unwrap();
        doc.insert(field.into(), value);
        let pretty = serde_json::to_string_pretty(&doc).unwrap();
        pretty.replace("\n  ", "\r\n    ").replace("\n}", "\r\n}")
    };
    let runtime = hand(&h.file("state/runtime.json"), "session_state", serde_json::json!("idle"));
    std::fs::write(h.dir.join("state/runtime.json"), &runtime).unwrap();
    std::fs::write(
        h.dir.join("state/operator-pause.json"),
        hand(&pause, "reason", serde_json::json!("hand")),
    )
    .unwrap();
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    assert!(report.quarantined.is_empty(), "{report:?}");
    assert_eq!(h.runtime()["session_state"], "idle");
    // Written back as upstream writes it: 2-space indent, one final newline.
    let rewritten = h.file("state/runtime.json");
    assert!(rewritten.starts_with("{\n  \"") && rewritten.ends_with("}\n"), "{rewritten}");
    assert!(rewritten.contains("\"session_state\": \"idle\""), "{rewritten}");
    assert_eq!(h.file("state/operator-pause.json"), pause.replace("\"operator\"", "\"hand\""));
    h.engine.ops().verify(Default::default()).unwrap();
}

/// A task record closed by hand with a quoted value and saved with CRLF line ends (both of which
/// upstream's `decodeTask` reads) is adopted and written back in `encodeTask`'s layout; it was
/// quarantined and the close dropped.
#[test]
fn a_task_closed_by_hand_in_another_layout_is_adopted() {
    let h = mirrored_hermit();
    let closed = h
        .file(TASK)
        .replace("\nstatus: open\n", "\nstatus: closed\n")
        .replace("\nclosed_at: null\n", "\nclosed_at: 2026-09-14T10:00:00.000Z\n")
        .replace("\nclosed_by: null\n", "\nclosed_by: \"confirmed\"\n")
        .replace("\nclosed_actor: null\n", "\nclosed_actor: operator\n")
        .replace('\n', "\r\n");
    std::fs::write(h.dir.join(TASK), &closed).unwrap();
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    assert!(report.quarantined.is_empty() && report.conflicts.is_empty(), "{report:?}");
    let task = h.file(TASK);
    assert!(task.contains("\nstatus: closed\n") && !task.contains('\r'), "{task}");
    assert!(task.contains("\nclosed_by: confirmed\n"), "in encodeTask's layout: {task}");
    h.engine.ops().verify(Default::default()).unwrap();
}

/// The observations ledger rewritten by another JSON library (spacing, `\u` escapes) with CRLF
/// line ends holds the same records: nothing is appended or dropped; a line appended with a
/// carriage return is adopted once, without it.
#[test]
fn a_reformatted_observations_ledger_is_the_same_records() {
    let h = mirrored_hermit();
    let ledger = h.file("state/observations.jsonl");
    let count = |text: &str| text.lines().filter(|l| !l.trim().is_empty()).count();
    let before = count(&ledger);
    let reformat = |line: &str| {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut out = String::new();
        for c in serde_json::to_string(&value).unwrap().replace("\":", "\": ").chars() {
            match c.is_ascii() {
                true => out.push(c),
                false => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            }
        }
        out + "\r\n"
    };
    let rewritten: String = ledger.lines().map(reformat).collect();
    assert_ne!(rewritten, ledger);
    let appended =
        "{\"ts\":\"2026-09-14T11:00:00Z\",\"pattern\":\"by hand\",\"session_id\":\"S-045\"}";
    std::fs::write(h.dir.join("state/observations.jsonl"), rewritten + appended + "\r\n").unwrap();
    h.mirrored(NOW + 60_000, |e| e.session().runtime_get(&h.scope));
    let after = h.file("state/observations.jsonl");
    assert_eq!(count(&after), before + 1, "{after}");
    assert_eq!(after.matches("by hand").count(), 1, "{after}");
    let exported = tempfile::tempdir().unwrap();
    h.engine.session().export(&h.scope, exported.path()).unwrap();
    let stored = std::fs::read_to_string(exported.path().join("state/observations.jsonl")).unwrap();
    assert_eq!(count(&stored), before + 1, "{stored}");
    assert!(stored.contains(&format!("{appended}\n")), "adopted without its CR: {stored}");
    h.engine.ops().verify(Default::default()).unwrap();
}

/// A mirrored call killed after it wrote the ledger and before its baseline moved leaves its
/// announcement; an outside append on top of that write is adopted alone, the call's own line
/// (already the store's) is not adopted again.
#[test]
fn an_append_after_a_killed_calls_write_adopts_only_the_append() {
    let h = mirrored_hermit();
    let ledger = h.file("state/observations.jsonl");
    // The killed call: its line committed, the file written, the baseline not moved.
    let now = NOW + 60_000;
    let observe = Hermit::words(&["quick-deferral"]);
    h.engine.session().observe(&h.call(now), &observe, "own line").unwrap();
    let exported = tempfile::tempdir().unwrap();
    h.engine.session().export(&h.scope, exported.path()).unwrap();
    let written =
        std::fs::read_to_string(exported.path().join("state/observations.jsonl")).unwrap();
    assert!(written.starts_with(&ledger) && written.contains("own line"), "{written}");
    let base = h.dir.join(".hookstate-mirror/base/hermit-session/state/observations.jsonl");
    assert_eq!(std::fs::read_to_string(&base).unwrap(), ledger, "the baseline the test assumes");
    let mut pending = base.into_os_string();
    pending.push(".hookstate-pending");
    std::fs::write(&pending, &written).unwrap();
    let outside = "{\"ts\":\"2026-09-14T11:00:00Z\",\"pattern\":\"outside\"}\n";
    std::fs::write(h.dir.join("state/observations.jsonl"), format!("{written}{outside}")).unwrap();
    h.mirrored(now + 1, |e| e.session().runtime_get(&h.scope));
    let after = h.file("state/observations.jsonl");
    assert_eq!((after.matches("own line").count(), after.matches("outside").count()), (1, 1));
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_corrupt_file_is_quarantined_and_the_stores_version_written_back() {
    let h = mirrored_hermit();
    let (task, pause) = (h.file(TASK), h.file("state/operator-pause.json"));
    std::fs::write(h.dir.join(TASK), "---\nnot: a task\n").unwrap();
    std::fs::write(h.dir.join("state/operator-pause.json"), "{\"paused\": tru").unwrap();
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    let mut quarantined = report.quarantined.clone();
    quarantined.sort();
    assert_eq!(quarantined, ["state/operator-pause.json", TASK], "{report:?}");
    assert_eq!(h.file(TASK), task, "the store's record is written back");
    assert_eq!(h.file("state/operator-pause.json"), pause);
    let aside = std::fs::read_dir(h.dir.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("T-20260914-081502.md.corrupt-"));
    assert!(aside.is_some(), "the corrupt file is kept aside");
    let filter =
        hookstate_engine::LogFilter { kind: Some("file_quarantined".into()), ..Default::default() };
    assert_eq!(h.engine.log(&filter).unwrap().len(), 2);
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_corrupt_conversations_json_fails_the_call_and_changes_nothing() {
    let h = mirrored_hermit();
    let head = h.engine.head().unwrap();
    std::fs::write(h.dir.join("state/conversations.json"), "{\"a\":").unwrap();
    let before = files(&h.dir);
    let call = h.call(NOW + 60_000);
    let result = h.engine.mirrored(&call, &Layout::HermitSession, &h.dir, |e| {
        Ok(e.session().shell_append(&call, Some("progress"), "never")?.outcome)
    });
    assert!(result.unwrap_err().is_invalid());
    assert_eq!(h.engine.head().unwrap(), head, "the store is unchanged");
    assert_eq!(files(&h.dir), before, "every file is unchanged");
}

#[test]
fn a_deleted_file_is_rewritten_and_a_refused_verb_writes_nothing() {
    let h = mirrored_hermit();
    let shell = h.file("sessions/SHELL.md");
    std::fs::remove_file(h.dir.join("sessions/SHELL.md")).unwrap();
    let outcome = h.mirrored(NOW + 60_000, |e| {
        e.session().shell_append(&h.call(NOW + 60_000), Some("nope"), "x")
    });
    assert_eq!(outcome.refusal.as_ref().map(|r| r.reason), Some("invalid"));
    assert_eq!(outcome.mirror.unwrap().written, ["sessions/SHELL.md"]);
    assert_eq!(h.file("sessions/SHELL.md"), shell);
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_refusal_answers_with_upstreams_line_and_both_exits() {
    let h = Hermit::new(None);
    let session = h.engine.session();
    let observe = Hermit::words(&["cost-spike"]);
    let refused = session.observe(&h.call(NOW), &observe, "x").unwrap();
    assert_eq!(say(&refused), "ERROR|invalid-source:cost-spike");
    assert_eq!((refused.verdict_exit, refused.exit), (Exit::Ok, Exit::Invalid));
    let bad = session.task(&h.call(NOW), "note", &Hermit::words(&["T-1"]), "").unwrap();
    assert_eq!(
        (say(&bad).as_str(), bad.verdict_exit, bad.exit),
        ("invalid-id", Exit::Refused, Exit::Invalid)
    );
    let usage = session.task(&h.call(NOW), "frob", &[], "").unwrap();
    assert_eq!((usage.verdict_exit, usage.exit), (Exit::Usage, Exit::Usage));
    assert_eq!(h.engine.head().unwrap().seq, 0, "no refusal appends");
}

#[test]
fn a_marker_the_store_removes_is_removed_from_the_directory() {
    let h = mirrored_hermit();
    assert!(h.dir.join("state/operator-turn-open.json").exists());
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().close_turn(&h.call(NOW + 60_000)));
    assert_eq!(outcome.mirror.unwrap().removed, ["state/operator-turn-open.json"]);
    assert!(!h.dir.join("state/operator-turn-open.json").exists());
    let outcome =
        h.mirrored(NOW + 60_001, |e| e.session().unpause(&h.call(NOW + 60_001), "operator"));
    assert_eq!(outcome.mirror.unwrap().removed, ["state/operator-pause.json"]);
    // A removal the directory already shows changes nothing more.
    let outcome = h.mirrored(NOW + 60_002, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    assert!(report.removed.is_empty() && report.written.is_empty(), "{report:?}");
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_marker_removed_outside_is_adopted_while_the_store_holds_what_the_mirror_saw() {
    let h = mirrored_hermit();
    std::fs::remove_file(h.dir.join("state/operator-turn-open.json")).unwrap();
    let outcome = h.mirrored(NOW + 60_000, |e| e.session().markers(&h.scope, NOW + 60_000));
    let report = outcome.mirror.unwrap();
    assert!(report.conflicts.is_empty() && report.written.is_empty(), "{report:?}");
    assert!(!h.dir.join("state/operator-turn-open.json").exists(), "not written back");
    let status = h.engine.session().markers(&h.scope, NOW).unwrap();
    assert!(say(&status).contains("\"turn_open\":false"), "{}", say(&status));
    // Removed outside while the store wrote a newer marker (a call without the mirror): the
    // store's marker is kept, written back, and the conflict reported.
    let now = NOW + 60_001;
    h.engine.session().record_operator_action(&h.call(now), true, "").unwrap();
    std::fs::remove_file(h.dir.join("state/last-operator-action.json")).unwrap();
    let outcome = h.mirrored(now + 1, |e| e.session().runtime_get(&h.scope));
    let report = outcome.mirror.unwrap();
    assert_eq!(report.conflicts.len(), 1, "{report:?}");
    assert_eq!(report.conflicts[0].file, "state/last-operator-action.json");
    assert_eq!(
        h.file("state/last-operator-action.json"),
        "{\"at\":\"2026-09-14T08:16:02.119Z\"}\n"
    );
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn the_marker_writers_and_readers_on_the_store() {
    let h = Hermit::new(None);
    std::fs::write(
        h.dir.join("config.json"),
        "{\"timezone\":\"Europe/Berlin\",\"heartbeat\":{\"every\":\"40m\"}}\n",
    )
    .unwrap();
    let session = h.engine.session();
    assert_eq!(say(&session.compact_request(&h.call(NOW)).unwrap()), "OK|compact");
    assert_eq!(say(&session.stamp_drain(&h.call(NOW)).unwrap()), "OK|drain");
    // A 40-minute heartbeat gives the precheck min(30, 40 / 2) = 20 minutes, the routine poll
    // 30: at 10 minutes neither expired, at 25 only the precheck's.
    let status = |at: u64| -> serde_json::Value {
        serde_json::from_str(&say(&session.markers(&h.scope, at).unwrap())).unwrap()
    };
    let at_20 = status(NOW + 20 * 60_000);
    assert_eq!(
        (
            at_20["drain_cooldown_expired"].as_bool(),
            at_20["precheck_drain_cooldown_expired"].as_bool()
        ),
        (Some(false), Some(false))
    );
    let at_40 = status(NOW + 40 * 60_000);
    assert_eq!(at_40["precheck_drain_cooldown_expired"], true);
    let pause = hookstate_engine::PauseInput {
        reason: "watchdog".into(),
        by: "hermit-watchdog".into(),
        until: Some("2h".into()),
    };
    assert_eq!(say(&session.pause(&h.call(NOW), &pause).unwrap()), "OK|pause");
    let budget = hookstate_engine::PauseInput { reason: "budget".into(), ..pause };
    assert_eq!(say(&session.pause(&h.call(NOW), &budget).unwrap()), "NOOP|watchdog");
    assert_eq!(status(NOW)["paused"]["reason"], "watchdog");
    let out = h._tmp.path().join("export");
    session.export(&h.scope, &out).unwrap();
    let compact = std::fs::read_to_string(out.join("state/compact-requested.json")).unwrap();
    assert_eq!(
        compact,
        "{\"requested_at\":\"2026-09-14T10:15:02+02:00\",\"reason\":\"proposal-resolve\"}\n"
    );
    h.engine.ops().verify(Default::default()).unwrap();
}
