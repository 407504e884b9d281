//! The alerts domain against legacy state: the real alert state written by upstream's own
//! `heartbeat.ts alert-state` (reproduced by replaying its four ticks, and round-tripped byte for
//! byte), fixtures written from the spec (precheck's fields and a foreign key kept through
//! ticks, doctor residue purged, a corrupt file quarantined), and structured keys that follow
//! the proposals domain of the same scope.
//!
//! Does not start processes; `cli/tests/alerts.rs` races real ones.

use std::path::Path;

use hookstate_engine::Layout;
use hookstate_engine::ALERT_STATE_FILE;
use hookstate_engine::{parse_tick_input, read_hermit_alerts, AlertFile};
use hookstate_engine::{read_hermit_files, ResolveInput};
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy");
/// 2026-11-29T21:50:47Z: 16:50 on the 29th in New York, when upstream ran its four ticks.
const NOV_29_2150: u64 = 1_795_989_047_000;

/// The shared hermit harness (a state directory beside a fresh store), with this file's helpers.
struct Hermit(hookstate_testkit::Hermit);

impl std::ops::Deref for Hermit {
    type Target = hookstate_testkit::Hermit;
    fn deref(&self) -> &hookstate_testkit::Hermit {
        &self.0
    }
}

impl Hermit {
    /// A store and a copy of the fixture `name` (never the fixture itself).
    fn new(name: &str) -> Hermit {
        Hermit(hookstate_testkit::Hermit::new(Path::new(FIXTURES), Some(name)))
    }

    fn tick(&self, payload: &Value, now_ms: u64) -> Value {
        let input = parse_tick_input(&payload.to_string()).unwrap();
        self.engine.alerts().tick(&self.call(now_ms), &input).unwrap().to_json()
    }

    fn import_alerts(&self) -> bool {
        let AlertFile::Found { state, round_trip } = read_hermit_alerts(&self.dir, 1).unwrap()
        else {
            panic!("no alert state in {}", self.dir.display());
        };
        self.engine.alerts().import_alerts(&self.call(1), &state, round_trip).unwrap();
        round_trip
    }

    /// Exports the alert state into a fresh directory and returns the file's bytes.
    fn export(&self) -> Vec<u8> {
        let out = self
            .tmp
            .path()
            .join(format!("out-{}", self.engine.alerts().state(&self.scope).unwrap().len()));
        let _ = std::fs::remove_dir_all(&out);
        self.engine.alerts().export_alerts(&self.scope, &out).unwrap();
        std::fs::read(out.join("state").join(ALERT_STATE_FILE)).unwrap()
    }
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join(name).join("state").join(ALERT_STATE_FILE)).unwrap()
}

#[test]
fn upstream_four_ticks_reproduce_the_real_alert_state_byte_for_byte() {
    let h = Hermit::new("hermit");
    std::fs::remove_file(h.dir.join("state").join(ALERT_STATE_FILE)).unwrap();
    let files = read_hermit_files(&h.dir).unwrap();
    h.engine.proposals().import(&h.call(1), files).unwrap();
    // One key fires once, then three clean ticks resolve it; MP-…-3 (tier 1) and PROP-002
    // (proposed) are derived from the proposals in the store on every tick.
    let fired =
        h.tick(&json!({ "firing": [{ "key": "custom:ci", "text": "CI red" }] }), NOV_29_2150);
    assert_eq!(fired["notifications"], json!(["CI red"]), "structured keys silent");
    let mut lines = Vec::new();
    for _ in 0..3 {
        lines.push(h.tick(&json!({ "firing": [] }), NOV_29_2150)["monitoring_lines"].clone());
    }
    assert_eq!(lines[1][0], "[16:50] Heartbeat: resolved — CI red");
    assert_eq!(h.export(), fixture_bytes("hermit"), "the ladder reproduces upstream's file");
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn real_and_spec_alert_states_round_trip_byte_for_byte() {
    for name in ["hermit", "hermit-alerts/spec", "hermit-alerts/residue"] {
        let h = Hermit::new(name);
        assert!(h.import_alerts(), "{name} is in upstream's layout");
        let state = h.engine.alerts().state(&h.scope).unwrap();
        let exported = h.export();
        assert_eq!(exported, fixture_bytes(name), "{name}: export(import(file)) == file");
        let again = Hermit::new(name);
        std::fs::write(again.dir.join("state").join(ALERT_STATE_FILE), &exported).unwrap();
        again.import_alerts();
        assert_eq!(again.engine.alerts().state(&again.scope).unwrap(), state, "{name}");
    }
}

#[test]
fn a_corrupt_alert_state_is_quarantined_never_read_as_empty() {
    let h = Hermit::new("hermit-alerts/corrupt");
    let bytes = fixture_bytes("hermit-alerts/corrupt");
    let got = read_hermit_alerts(&h.dir, 1_795_989_047_123).unwrap();
    let AlertFile::Quarantined { to, why } = got else { panic!("read {got:?}") };
    assert_eq!(to, "alert-state.json.corrupt-1795989047123");
    assert!(why.contains("EOF"), "{why}");
    assert!(!h.dir.join("state").join(ALERT_STATE_FILE).exists());
    assert_eq!(std::fs::read(h.dir.join("state").join(&to)).unwrap(), bytes, "kept as it was");
    assert_eq!(h.engine.alerts().state(&h.scope).unwrap()["total_ticks"], 0, "nothing imported");
}

#[test]
fn ticks_keep_precheck_fields_and_foreign_keys_in_place_and_date_in_the_configured_zone() {
    let h = Hermit::new("hermit-alerts/spec");
    h.import_alerts();
    let before: Vec<String> = h.engine.alerts().state(&h.scope).unwrap().keys().cloned().collect();
    // 2026-09-14T22:30:00Z is already the 15th in Berlin: a new day, so the digest goes out.
    let out = h.tick(
        &json!({ "firing": [{ "key": "checklist:checkdis", "text": "disk 91%" }] }),
        1_789_425_000_000,
    );
    assert_eq!(
        out["notifications"],
        json!(["Suppressed alert digest: disk 91% (8x, since 2026-09-11)"])
    );
    let state = h.engine.alerts().state(&h.scope).unwrap();
    let after: Vec<String> = state.keys().cloned().collect();
    assert_eq!(after, before, "no key moved, none lost");
    assert_eq!(state["last_stale_wake_at"], "2026-09-14T09:00:00.004Z");
    assert_eq!(state["last_micro_corrupt_wake_at"], "2026-09-14T08:30:00.120Z");
    assert_eq!(state["operator_note"], "kept as written: a key no upstream writer owns");
    assert_eq!(state["last_digest_date"], "2026-09-15");
    assert_eq!(state["alerts"]["checklist:checkdis"]["last_seen"], "2026-09-15");
    let micro = &state["alerts"]["micro-proposal-pending:MP-20260914-0"];
    assert_eq!(micro["consecutive_clean"], 1, "its queue entry is gone from the store");
    h.engine.alerts().count_tick(&h.call(2)).unwrap();
    assert_eq!(h.engine.alerts().state(&h.scope).unwrap()["total_ticks"], 362);
    h.engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn structured_keys_follow_the_proposals_of_the_same_scope() {
    let h = Hermit::new("hermit");
    let files = read_hermit_files(&h.dir).unwrap();
    h.engine.proposals().import(&h.call(1), files).unwrap();
    h.tick(&json!({ "firing": [] }), NOV_29_2150);
    let state = h.engine.alerts().state(&h.scope).unwrap();
    let keys: Vec<&String> = state["alerts"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["micro-proposal-pending:MP-20261129-3", "proposal-pending:PROP-002"]);
    let resolve = ResolveInput {
        id: "MP-20261129-3".into(),
        action: "answered".into(),
        answer: Some("1".into()),
        channel: None,
    };
    h.engine.proposals().micro_resolve(&h.call(NOV_29_2150), &resolve).unwrap();
    h.tick(&json!({ "firing": [] }), NOV_29_2150);
    let out = h.tick(&json!({ "firing": [] }), NOV_29_2150);
    let resolved =
        "[16:50] Heartbeat: resolved — micro-proposal 'MP-20261129-3' awaiting operator \
                    input — Pin node to 20.x in CI? [1: yes, pin 20.x, 2: no, track latest LTS, 3: \
                    ask again next week]";
    assert_eq!(out["monitoring_lines"][0], resolved);
    // A payload can disown a source the store holds: its prefix freezes.
    let frozen =
        h.engine.alerts().state(&h.scope).unwrap()["alerts"]["proposal-pending:PROP-002"].clone();
    let out = h.tick(&json!({ "firing": [], "unreadable": ["proposals/"] }), NOV_29_2150);
    assert_eq!(out["heartbeat_result"], "ALERT");
    let state = h.engine.alerts().state(&h.scope).unwrap();
    assert_eq!(state["alerts"]["proposal-pending:PROP-002"], frozen);
    assert_eq!(state["last_clean_eval_at"], Value::Null);
    h.engine.ops().verify(Default::default()).unwrap();
}

/// The end of a mirrored alerts call writes `alert-state.json` only over bytes the call saw:
/// precheck (unmigrated, no lock) stamping the file during the call keeps its write, which the
/// next mirrored call adopts. Both on a first mirrored call and on a later one.
#[test]
fn a_mirror_never_overwrites_an_alert_state_written_during_the_call() {
    for earlier in [false, true] {
        let h = Hermit::new("hermit");
        let file = h.dir.join("state").join(ALERT_STATE_FILE);
        let cycle = |now: u64, during: &dyn Fn()| {
            let call = h.call(now);
            let input = parse_tick_input("{\"firing\":[]}").unwrap();
            let outcome = h.engine.mirrored(&call, &Layout::Hermit, &h.dir, |engine| {
                during();
                engine.alerts().tick(&call, &input)
            });
            assert!(outcome.unwrap().mirror.unwrap().conflicts.is_empty());
        };
        if earlier {
            cycle(1, &|| {});
        }
        cycle(NOV_29_2150, &|| {});
        let mut theirs: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        theirs["total_ticks"] = json!(999);
        let theirs = serde_json::to_string_pretty(&theirs).unwrap() + "\n";
        cycle(NOV_29_2150 + 1000, &|| std::fs::write(&file, &theirs).unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), theirs, "earlier call {earlier}");
        cycle(NOV_29_2150 + 2000, &|| {});
        let state = h.engine.alerts().state(&h.scope).unwrap();
        assert_eq!(state["total_ticks"], 999, "adopted by the next call (earlier {earlier})");
        let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(written, Value::Object(state), "and mirrored again");
    }
}
