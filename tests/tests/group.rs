//! Group commit for an embedding program (`engine.ops().execute_batch`): many calls, one durable
//! commit, each call answered as it would be alone. The store sits on the power-loss simulator's
//! in-memory disk, which counts its syncs, so "one commit" is measured, not assumed.

use std::sync::{Arc, Mutex};

use crate::powerloss::{Disk, SimBackend};

use hookstate_engine::{Call, Command, Engine, Error, Expect, OpenOptions, Query, GROUP_CALLS_MAX};
use serde_json::Value;

/// Items each test pushes and then claims.
const ITEMS: usize = 64;
/// The queue every test uses.
const QUEUE: &str = "jobs";
/// The scope every call acts in.
const SCOPE: &str = "group";
/// Far longer than a test: a claim never expires while it runs.
const LEASE_MS: u64 = 3_600_000;

struct Store {
    _dir: tempfile::TempDir,
    engine: Engine,
    disk: Arc<Mutex<Disk>>,
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(Mutex::new(Disk::default()));
        let engine = hookstate_engine::open_on_backend(
            &dir.path().join("group.redb"),
            SimBackend(Arc::clone(&disk)),
            OpenOptions::default(),
        )
        .unwrap();
        Store { _dir: dir, engine, disk }
    }

    fn syncs(&self) -> u64 {
        self.disk.lock().unwrap().syncs
    }

    fn head_seq(&self) -> u64 {
        self.engine.head().unwrap().seq
    }
}

fn call(idem_key: Option<&str>) -> Call {
    let call = Call::at(SCOPE, 1_700_000_000_000);
    match idem_key {
        Some(key) => call.with_idem_key(key),
        None => call,
    }
}

fn push(n: usize) -> Command {
    Command::QueuePush {
        queue: QUEUE.into(),
        item: format!("item-{n:03}"),
        payload: format!("{{\"n\":{n}}}"),
        for_session: None,
        max_deliveries: 3,
    }
}

fn claim() -> Command {
    Command::QueueClaim { queue: QUEUE.into(), item: None, holder: "h".into(), lease_ms: LEASE_MS }
}

fn counter(delta: i64) -> Command {
    Command::CounterAdd { name: "c".into(), delta }
}

fn counter_value(store: &Store) -> Value {
    let value = store.engine.query(SCOPE, &Query::CounterGet { name: "c".into() }, 0).unwrap();
    value["value"].clone()
}

#[test]
fn a_batch_of_claims_flushes_like_one_commit_and_claims_each_item_once() {
    let store = Store::new();
    // The pushes one call each: a durable commit apiece.
    let before = store.syncs();
    for n in 0..ITEMS {
        store.engine.execute(&call(None), &push(n)).unwrap();
    }
    let one_by_one = store.syncs() - before;
    assert!(one_by_one >= ITEMS as u64, "every call flushed at least once: {one_by_one}");
    assert_eq!(store.head_seq(), ITEMS as u64, "every push appended its event");

    let claims: Vec<(Call, Command)> = (0..ITEMS).map(|_| (call(None), claim())).collect();
    let before = store.syncs();
    let answers = store.engine.ops().execute_batch(&claims).unwrap();
    let batched = store.syncs() - before;
    assert!(
        batched >= 1 && batched * (ITEMS as u64 / 4) <= one_by_one,
        "64 claims in one batch flushed {batched} times, 64 pushes one by one {one_by_one}"
    );
    let mut items: Vec<String> = Vec::new();
    let mut tokens: Vec<u64> = Vec::new();
    for answer in answers {
        let result = answer.unwrap().result;
        assert_eq!(result["claimed"], Value::Bool(true), "{result:?}");
        items.push(result["item"].as_str().unwrap().to_owned());
        tokens.push(result["token"].as_u64().unwrap());
    }
    let claimed = items.len();
    items.sort();
    items.dedup();
    assert_eq!(items.len(), claimed, "each claim of the batch saw the claims before it");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "fencing tokens rise in call order");
    let next = store.engine.execute(&call(None), &claim()).unwrap();
    assert_eq!(next.result["claimed"], Value::Bool(false), "the queue is drained");
}

#[test]
fn a_bad_call_in_a_batch_answers_alone_and_the_others_commit() {
    let store = Store::new();
    let bad = Command::QueuePush {
        queue: QUEUE.into(),
        item: "no spaces allowed".into(),
        payload: "{}".into(),
        for_session: None,
        max_deliveries: 3,
    };
    let put_twice = Command::KvPut { key: "k".into(), value: "1".into(), expect: Expect::Create };
    let calls = vec![
        (call(None), push(1)),
        (call(None), bad),
        (call(None), put_twice.clone()),
        (call(None), put_twice),
        (call(None), push(2)),
    ];
    let answers = store.engine.ops().execute_batch(&calls).unwrap();
    assert!(answers[0].is_ok());
    assert!(matches!(answers[1], Err(Error::BadId(_))), "{:?}", answers[1]);
    assert!(answers[2].as_ref().unwrap().refusal.is_none());
    let refusal = answers[3].as_ref().unwrap().refusal.as_ref();
    assert!(refusal.is_some(), "the second create sees the first one's write in the batch");
    assert!(answers[4].is_ok());
    let listed = store.engine.query(SCOPE, &Query::QueueList { queue: QUEUE.into() }, 0).unwrap();
    let text = listed.to_string();
    assert!(text.contains("item-001") && text.contains("item-002"), "{text}");
    assert_eq!(store.head_seq(), 3, "two pushes and one put appended");
}

#[test]
fn an_idempotency_key_replays_inside_a_batch_and_across_batches() {
    let store = Store::new();
    let calls = vec![(call(Some("add-5")), counter(5)), (call(Some("add-5")), counter(5))];
    let answers = store.engine.ops().execute_batch(&calls).unwrap();
    let first = answers[0].as_ref().unwrap();
    let second = answers[1].as_ref().unwrap();
    assert_eq!(first.result, second.result, "the repeat answers what the first call answered");
    assert_eq!(counter_value(&store), Value::from(5), "the repeat added nothing");
    let again = store.engine.ops().execute_batch(&calls[..1]).unwrap();
    assert_eq!(again[0].as_ref().unwrap().result, first.result);
    assert_eq!(counter_value(&store), Value::from(5));
    assert_eq!(store.head_seq(), 1);
}

#[test]
fn a_batch_over_its_bound_is_refused_whole_and_changes_nothing() {
    let store = Store::new();
    let calls: Vec<(Call, Command)> =
        (0..=GROUP_CALLS_MAX).map(|_| (call(None), counter(1))).collect();
    let before = store.syncs();
    let refused = store.engine.ops().execute_batch(&calls);
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    assert_eq!(store.syncs(), before, "nothing was written");
    assert_eq!(store.head_seq(), 0);
    let empty = store.engine.ops().execute_batch(&[]).unwrap();
    assert!(empty.is_empty());
    let at_bound = store.engine.ops().execute_batch(&calls[..GROUP_CALLS_MAX]).unwrap();
    assert_eq!(at_bound.len(), GROUP_CALLS_MAX);
    assert_eq!(counter_value(&store), Value::from(GROUP_CALLS_MAX as i64));
}

/// `answer_if_idle`: a call that appends nothing is answered from a read snapshot, with the
/// answer the write path gives, no sync and no event; a call that would append, or that carries
/// an idempotency key, is left to the write path.
#[test]
fn an_idle_call_is_answered_from_a_snapshot_and_a_writing_one_is_not() {
    let store = Store::new();
    let ops = store.engine.ops();
    let (syncs, head) = (store.syncs(), store.head_seq());
    let empty = ops.answer_if_idle(&call(None), &claim()).unwrap().expect("an empty queue is idle");
    assert_eq!(empty.result["claimed"], false, "{:?}", empty.result);
    assert_eq!((store.syncs(), store.head_seq()), (syncs, head), "an idle answer wrote");
    // The write path's answer to the same call is the same.
    let written = store.engine.execute(&call(None), &claim()).unwrap();
    assert_eq!(written.result, empty.result);

    let member = Command::SetAdd { set: "seen".into(), member: "s-1".into() };
    assert!(ops.answer_if_idle(&call(None), &member).unwrap().is_none(), "a new member appends");
    assert_eq!(store.engine.execute(&call(None), &member).unwrap().result["added"], true);
    let (syncs, head) = (store.syncs(), store.head_seq());
    let again = ops.answer_if_idle(&call(None), &member).unwrap().expect("a known member is idle");
    assert_eq!(again.result["added"], false, "{:?}", again.result);
    assert_eq!((store.syncs(), store.head_seq()), (syncs, head));

    store.engine.execute(&call(None), &push(0)).unwrap();
    assert!(ops.answer_if_idle(&call(None), &claim()).unwrap().is_none(), "an item to claim");
    assert!(ops.answer_if_idle(&call(Some("k-1")), &member).unwrap().is_none(), "a keyed call");
    let bad = Command::SetAdd { set: "no spaces allowed".into(), member: "m".into() };
    assert!(matches!(ops.answer_if_idle(&call(None), &bad), Err(Error::BadId(_))));
}
