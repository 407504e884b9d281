//! The observer domain: its two upstream races (a lost buffer row, a pending text lost between
//! the re-read and the clear) and the counter reset during the model call, each reproduced
//! against a naive read-then-set store that loses the update and against hookstate, which
//! does not; and the state's byte-faithful round trip.
//!
//! Does not call a model; sweeps are driven by hand.

use std::path::Path;

use hookstate_engine::schema::observer::ObserverState;
use hookstate_engine::{Call, Engine};
use hookstate_engine::{Finding, RowInput, SweepRead};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/observer");
const SCOPE: &str = "observer:s1";

fn call() -> Call {
    Call::at(SCOPE, 1)
}

fn engine(dir: &Path) -> Engine {
    Engine::open(&hookstate_testkit::store(&dir.join("state.redb")), hookstate_testkit::options())
        .unwrap()
}

fn user(text: &str) -> RowInput {
    RowInput { kind: "user".into(), text: Some(text.into()), name: None, input: None }
}

fn finding(summary: &str) -> Finding {
    Finding {
        kind: "gotcha".into(),
        summary: summary.into(),
        evidence: "ev".into(),
        destination: None,
        skill: "remember".into(),
    }
}

/// The legacy way: the whole state as one JSON file, read, changed and set back.
struct Naive {
    file: std::path::PathBuf,
}

impl Naive {
    fn read(&self) -> ObserverState {
        serde_json::from_slice(&std::fs::read(&self.file).unwrap()).unwrap()
    }
    fn set(&self, state: &ObserverState) {
        std::fs::write(&self.file, serde_json::to_vec(state).unwrap()).unwrap();
    }
}

fn naive(dir: &Path) -> Naive {
    let naive = Naive { file: dir.join("naive.json") };
    naive.set(&ObserverState::default());
    naive
}

#[test]
fn race_1_concurrent_appends_lose_a_row_naively_but_not_here() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = naive(dir.path());
    let (mut a, mut b) = (legacy.read(), legacy.read());
    a.buffer.push(hookstate_engine::schema::observer::ObservedRow {
        turn: 0,
        kind: "user".into(),
        text: "a".into(),
    });
    b.buffer.push(hookstate_engine::schema::observer::ObservedRow {
        turn: 0,
        kind: "user".into(),
        text: "b".into(),
    });
    legacy.set(&a);
    legacy.set(&b);
    assert_eq!(legacy.read().buffer.len(), 1, "the naive interleaving loses a row");

    let engine = engine(dir.path());
    engine.observer().append(&call(), &[user("a")]).unwrap();
    engine.observer().append(&call(), &[user("b")]).unwrap();
    let texts: Vec<String> =
        engine.observer().doc(SCOPE).unwrap().state.buffer.into_iter().map(|r| r.text).collect();
    assert_eq!(texts, ["a", "b"]);
}

#[test]
fn race_2_a_sweep_between_injection_and_clear_loses_pending_naively_but_not_here() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = naive(dir.path());
    legacy.set(&ObserverState { pending: Some("P1".into()), ..ObserverState::default() });
    let injected = legacy.read().pending;
    let reread = legacy.read().pending;
    legacy.set(&ObserverState { pending: Some("P1\nP2".into()), ..ObserverState::default() });
    if reread == injected {
        legacy.set(&ObserverState { pending: None, ..ObserverState::default() });
    }
    assert_eq!(legacy.read().pending, None, "the naive clear wipes the sweep's findings");

    let engine = engine(dir.path());
    let read = SweepRead { turns: 0, follow_ups: 0, inbox_offset: 0 };
    engine.observer().sweep_commit(&call(), read, &[finding("first")]).unwrap();
    let taken = engine.observer().doc(SCOPE).unwrap();
    engine.observer().sweep_commit(&call(), read, &[finding("second")]).unwrap();
    let clear = engine.observer().pending_clear(&call(), taken.pending_version).unwrap();
    assert_eq!(clear.refusal.map(|r| r.reason), Some("pending_changed"));
    let pending = engine.observer().doc(SCOPE).unwrap().state.pending.unwrap();
    assert!(pending.contains("second") && pending.contains("first"), "{pending}");
    let now = engine.observer().doc(SCOPE).unwrap().pending_version;
    assert!(engine.observer().pending_clear(&call(), now).unwrap().refusal.is_none());
    assert_eq!(engine.observer().doc(SCOPE).unwrap().state.pending, None);
    engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn a_sweep_subtracts_what_it_read_so_turns_during_the_model_call_survive() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = naive(dir.path());
    legacy.set(&ObserverState { turns_since_sweep: 5, ..ObserverState::default() });
    let mut during = legacy.read();
    during.turns_since_sweep += 2;
    legacy.set(&during);
    let mut after = legacy.read();
    after.turns_since_sweep = 0;
    legacy.set(&after);
    assert_eq!(legacy.read().turns_since_sweep, 0, "the naive reset wipes two turns");

    let engine = engine(dir.path());
    for _ in 0..5 {
        engine.observer().turn(&call(), None).unwrap();
    }
    let begin = engine.observer().sweep_begin(&call(), 0).unwrap();
    let read_turns = begin.result["turnsSinceSweep"].as_u64().unwrap();
    engine.observer().turn(&call(), None).unwrap();
    engine.observer().turn(&call(), None).unwrap();
    let read = SweepRead { turns: read_turns, follow_ups: 0, inbox_offset: 0 };
    engine.observer().sweep_commit(&call(), read, &[]).unwrap();
    let state = engine.observer().doc(SCOPE).unwrap().state;
    assert_eq!((state.turn, state.turns_since_sweep), (7, 2));
}

#[test]
fn a_shrunk_inbox_resets_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let read = SweepRead { turns: 0, follow_ups: 0, inbox_offset: 500 };
    engine.observer().sweep_commit(&call(), read, &[]).unwrap();
    let begin = engine.observer().sweep_begin(&call(), 120).unwrap();
    assert_eq!(begin.result["inbox_reset"], true);
    assert_eq!(begin.result["due"], true, "the new 120 units are unread");
    assert_eq!(engine.observer().doc(SCOPE).unwrap().state.inbox_offset, 0);
}

#[test]
fn observer_state_round_trips_byte_for_byte() {
    for fixture in ["spec-example.json", "compact.json"] {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir(&from).unwrap();
        let original = std::fs::read(Path::new(FIXTURES).join(fixture)).unwrap();
        std::fs::write(from.join("cm.json"), &original).unwrap();
        let engine = engine(dir.path());
        let outcome = engine.observer().import(&call(), &from, "cm.json").unwrap();
        assert_eq!(outcome.result["round_trip"], true, "{fixture}");
        let to = dir.path().join("to");
        engine.observer().export(SCOPE, &to, "cm.json").unwrap();
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(to.join("cm.json")).unwrap()),
            String::from_utf8_lossy(&original),
            "{fixture}"
        );
        std::fs::write(from.join("bad.json"), br#"{"turn":"x"}"#).unwrap();
        assert!(engine.observer().import(&call(), &from, "bad.json").is_err());
        std::fs::write(from.join("unknown.json"), br#"{"turns":1}"#).unwrap();
        assert!(engine.observer().import(&call(), &from, "unknown.json").is_err());
        engine.ops().verify(Default::default()).unwrap();
    }
}

/// Every call that appends checks the ids its events carry, whichever domain decides it: the
/// observer's verbs once took a session, agent or idempotency key that the core verbs refuse.
#[test]
fn a_call_with_a_bad_session_agent_or_key_is_refused_and_appends_nothing() {
    use hookstate_engine::schema::Actor;
    use hookstate_engine::Error;
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    engine.observer().turn(&call(), None).unwrap();
    let head = engine.head().unwrap();
    let actor = |session: &str, agent: &str| Actor {
        session: Some(session.into()),
        agent: Some(agent.into()),
        ..Actor::default()
    };
    for bad in [
        call().by(actor("a b", "ok")),
        call().by(actor("a\nb\u{1}", "ok")),
        call().by(actor("ok", "bad agent")),
        call().by(actor("ok", "ok")).with_idem_key("bad key"),
    ] {
        let err = engine.observer().turn(&bad, None).unwrap_err();
        assert!(matches!(err, Error::BadId(_)), "{err:?}");
        let err = engine.observer().append(&bad, &[user("x")]).unwrap_err();
        assert!(matches!(err, Error::BadId(_)), "{err:?}");
    }
    assert_eq!(engine.head().unwrap(), head, "nothing appended");
    engine.observer().turn(&call().by(actor("s-1", "agent@1")), None).unwrap();
    assert_eq!(engine.head().unwrap().seq, head.seq + 1);
}
