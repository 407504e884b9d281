//! The signals domain and loopd's legacy surfaces: bundle resolution cases, the send rules
//! through the engine (cap per PM registration), history kept per turn, and byte-faithful
//! plugin-store round trips on fixtures written from the spec, plus hostile files.
//!
//! Does not spawn processes; `cli/tests` races real ones.

use std::path::{Path, PathBuf};

use hookstate_engine::{bundle_scope, TurnInput};
use hookstate_engine::{lexical_join, resolve_bundle};
use hookstate_engine::{Call, Engine, Error, LogFilter};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/loopd");

fn call(scope: &str, now_ms: u64) -> Call {
    Call::at(scope, now_ms)
}

fn engine(dir: &Path) -> Engine {
    Engine::open(
        &hookstate_testkit::store(&dir.join("db/state.redb")),
        hookstate_testkit::options(),
    )
    .unwrap()
}

/// A bundle, a main clone and a linked worktree, laid out as loopd expects.
struct Layout {
    dir: tempfile::TempDir,
}

impl Layout {
    fn new() -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in ["bundles/shop", "repo/.git/worktrees/task", "wt/task"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join("bundles/shop/instance.config.json"), "{}").unwrap();
        std::fs::write(p.join("wt/task/.git"), "gitdir: ../../repo/.git/worktrees/task\n").unwrap();
        std::fs::write(p.join("repo/.git/worktrees/task/commondir"), "../..\n").unwrap();
        let bundle = p.join("bundles/shop");
        std::fs::write(p.join("repo/.git/loopd-bundle"), format!("{}\n", bundle.display()))
            .unwrap();
        Layout { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

#[test]
fn bundle_resolution_cases() {
    let layout = Layout::new();
    let bundle = layout.path("bundles/shop");
    assert_eq!(
        resolve_bundle(&layout.path("wt/task")),
        Some(bundle.clone()),
        "relative gitdir with .."
    );
    assert_eq!(resolve_bundle(&layout.path("repo")), None, "a main clone's .git is a directory");
    assert_eq!(resolve_bundle(Path::new("wt/task")), None, "a relative cwd");
    std::fs::write(layout.path("repo/.git/loopd-bundle"), "/nowhere/at/all\n").unwrap();
    assert_eq!(resolve_bundle(&layout.path("wt/task")), None, "a marker naming nothing");
    std::fs::remove_file(layout.path("repo/.git/loopd-bundle")).unwrap();
    assert_eq!(resolve_bundle(&layout.path("wt/task")), None, "a missing marker");
    std::fs::write(layout.path("wt/task/.git"), "not a pointer\n").unwrap();
    assert_eq!(resolve_bundle(&layout.path("wt/task")), None, "a .git file without gitdir");
    assert_eq!(lexical_join(Path::new("/a/b"), "../../../x"), PathBuf::from("/x"));
}

#[test]
fn bundle_resolution_writes_nothing_and_never_blocks_on_a_fifo() {
    let layout = Layout::new();
    std::fs::remove_file(layout.path("repo/.git/loopd-bundle")).unwrap();
    let fifo = layout.path("repo/.git/loopd-bundle");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert_eq!(resolve_bundle(&layout.path("wt/task")), None);
}

fn turn(session: &str, bundle: &str) -> TurnInput {
    TurnInput {
        session: session.into(),
        bundle: bundle.into(),
        cwd: "/w/task".into(),
        duration_ms: 10,
        reason: "answer".into(),
        aborted: false,
    }
}

fn sends_to(engine: &Engine, scope: &str, session: &str, bundle: &str) -> Option<String> {
    let outcome = engine.signals().turn(&call(scope, 1), &turn(session, bundle)).unwrap();
    outcome.result["send"]["to"].as_str().map(str::to_owned)
}

#[test]
fn failed_sends_cap_per_pm_and_a_newer_pm_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let bundle = "/b/shop";
    let scope = bundle_scope(bundle);
    assert_eq!(sends_to(&engine, &scope, "r1", bundle), None, "no PM: nothing to send");
    engine.signals().register_pm(&call(&scope, 1), bundle, "pm-old").unwrap();
    for _ in 0..2 {
        assert_eq!(sends_to(&engine, &scope, "r1", bundle).as_deref(), Some("pm-old"));
        let seq = engine.head().unwrap().seq;
        engine.signals().delivered(&call(&scope, 2), bundle, "r1", seq, false).unwrap();
    }
    assert_eq!(sends_to(&engine, &scope, "r1", bundle), None, "two failures: silent");
    assert_eq!(sends_to(&engine, &scope, "r2", bundle).as_deref(), Some("pm-old"), "per session");
    engine.signals().register_pm(&call(&scope, 3), bundle, "pm-new").unwrap();
    assert_eq!(sends_to(&engine, &scope, "r1", bundle).as_deref(), Some("pm-new"), "recovered");
    let pm = engine.signals().pm(&scope).unwrap().unwrap();
    assert_eq!(pm.current.session, "pm-new");
    assert_eq!(pm.history.iter().map(|e| e.session.as_str()).collect::<Vec<_>>(), ["pm-old"]);
    engine.ops().verify(Default::default()).unwrap();
}

/// Issue 13, item 8: a delivery report must name a turn the session signalled in the bundle (not
/// the PM's registration, not another session's turn, not a session that never signalled), the
/// bundle must be absolute, and one failed turn reported twice (a retried report) counts once, so
/// a single retry cannot silence a role agent.
#[test]
fn delivery_reports_name_a_real_turn_and_a_retried_failure_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let bundle = "/b/shop";
    let scope = bundle_scope(bundle);
    let pm_seq = engine.signals().register_pm(&call(&scope, 1), bundle, "pm").unwrap().head.seq;
    let other = engine.signals().turn(&call(&scope, 1), &turn("r2", bundle)).unwrap().head.seq;
    let delivered = |session: &str, seq: u64| {
        engine.signals().delivered(&call(&scope, 2), bundle, session, seq, false)
    };
    let never = delivered("r1", other).unwrap_err();
    assert!(matches!(never, hookstate_engine::Error::NotFound { .. }), "{never}");
    assert_eq!(sends_to(&engine, &scope, "r1", bundle).as_deref(), Some("pm"));
    let seq = engine.head().unwrap().seq;
    for wrong in [pm_seq, other, seq + 5] {
        let err = delivered("r1", wrong).unwrap_err();
        assert!(matches!(err, hookstate_engine::Error::BadInput { .. }), "{wrong}: {err}");
    }
    let relative = engine.signals().delivered(&call(&scope, 2), "b/shop", "r1", seq, false);
    assert!(relative.unwrap_err().is_invalid());
    delivered("r1", seq).unwrap();
    delivered("r1", seq).unwrap();
    assert_eq!(
        sends_to(&engine, &scope, "r1", bundle).as_deref(),
        Some("pm"),
        "one failed turn reported twice is one failure"
    );
    engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn every_turn_is_kept_as_history_and_the_latest_is_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let scope = bundle_scope("/b/shop");
    for _ in 0..5 {
        engine.signals().turn(&call(&scope, 1), &turn("r1", "/b/shop")).unwrap();
    }
    let latest = engine.signals().latest(&scope).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].1.turns, 5);
    assert_eq!(latest[0].1.delivered, None);
    let filter = LogFilter { kind: Some("turn_signaled".into()), ..LogFilter::default() };
    assert_eq!(engine.log(&filter).unwrap().len(), 5, "no turn overwritten");
}

fn import_export(fixture: &str) -> (Vec<u8>, Vec<u8>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("from");
    std::fs::create_dir(&from).unwrap();
    let original = std::fs::read(Path::new(FIXTURES).join(fixture)).unwrap();
    std::fs::write(from.join("store.json"), &original).unwrap();
    let engine = engine(dir.path());
    let outcome = engine.signals().import(&call("import", 1), &from, "store.json").unwrap();
    let to = dir.path().join("to");
    engine.signals().export(&to, "store.json").unwrap();
    engine.ops().verify(Default::default()).unwrap();
    let exported = std::fs::read(to.join("store.json")).unwrap();
    (original, exported, outcome.to_json())
}

#[test]
fn plugin_store_round_trips_byte_for_byte_compact_and_pretty() {
    for fixture in ["compact.json", "pretty.json"] {
        let (original, exported, outcome) = import_export(fixture);
        assert_eq!(
            String::from_utf8_lossy(&exported),
            String::from_utf8_lossy(&original),
            "{fixture}"
        );
        assert_eq!(outcome["round_trip"], true, "{fixture}");
        assert_eq!(outcome["keys"], 4, "{fixture}");
    }
}

#[test]
fn a_hand_formatted_store_imports_and_says_it_will_not_round_trip() {
    let (original, exported, outcome) = import_export("spec-example.json");
    assert_eq!(outcome["round_trip"], false);
    let a: serde_json::Value = serde_json::from_slice(&original).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&exported).unwrap();
    assert_eq!(a, b, "the same keys and values");
}

#[test]
fn export_then_import_reproduces_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let first = engine(&dir.path().join("one"));
    let scope = bundle_scope("/b/shop");
    first.signals().register_pm(&call(&scope, 1_000), "/b/shop", "pm").unwrap();
    first.signals().turn(&call(&scope, 2_000), &turn("r1", "/b/shop")).unwrap();
    first.signals().delivered(&call(&scope, 3_000), "/b/shop", "r1", 2, true).unwrap();
    let out = dir.path().join("out");
    first.signals().export(&out, "s.json").unwrap();
    let second = engine(&dir.path().join("two"));
    second.signals().import(&call("import", 4_000), &out, "s.json").unwrap();
    let out2 = dir.path().join("out2");
    second.signals().export(&out2, "s.json").unwrap();
    assert_eq!(
        std::fs::read(out.join("s.json")).unwrap(),
        std::fs::read(out2.join("s.json")).unwrap()
    );
    let visible = |engine: &Engine| -> Vec<(String, String, u64, String, Option<bool>)> {
        let latest = engine.signals().latest(&scope).unwrap();
        latest.into_iter().map(|(s, d)| (s, d.cwd, d.turns, d.at, d.delivered)).collect()
    };
    assert_eq!(visible(&second), visible(&first), "the same legacy-visible records");
    assert_eq!(visible(&first)[0].4, Some(true));
}

#[test]
fn hostile_plugin_stores_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let from = dir.path().join("from");
    std::fs::create_dir(&from).unwrap();
    let cases: [(&str, Vec<u8>); 7] = [
        ("invalid", b"{\"a\":".to_vec()),
        ("not-object", b"[1]".to_vec()),
        ("wrong-type", br#"{"loopd.pm./b":{"sessionId":7,"at":"x"}}"#.to_vec()),
        ("unknown-field", br#"{"loopd.pm./b":{"sessionId":"s","at":"x","extra":1}}"#.to_vec()),
        ("bad-session", br#"{"loopd.pm./b":{"sessionId":"../x","at":"x"}}"#.to_vec()),
        ("not-utf8", b"{\"\xff\":1}".to_vec()),
        ("oversized", vec![b' '; 4 * 1024 * 1024 + 1]),
    ];
    for (name, bytes) in &cases {
        std::fs::write(from.join(name), bytes).unwrap();
        let result = engine.signals().import(&call("import", 1), &from, name);
        assert!(result.as_ref().is_err_and(Error::is_invalid), "{name}: {result:?}");
    }
    let linked = dir.path().join("linked");
    std::os::unix::fs::symlink(&from, &linked).unwrap();
    let result = engine.signals().import(&call("import", 1), &linked, "invalid");
    assert!(matches!(result, Err(Error::UnsafePath { .. })), "{result:?}");
    assert_eq!(engine.head().unwrap().seq, 0, "nothing was appended");
    let once = std::fs::read(Path::new(FIXTURES).join("compact.json")).unwrap();
    std::fs::write(from.join("good"), once).unwrap();
    engine.signals().import(&call("import", 1), &from, "good").unwrap();
    let again = engine.signals().import(&call("import", 1), &from, "good").unwrap();
    assert_eq!(again.refusal.map(|r| r.reason), Some("already_imported"));
}
