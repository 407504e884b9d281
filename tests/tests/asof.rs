//! Model test of as-of reads (issue 18): random core commands run against a real store; after
//! every step the live answer of every core read is recorded, and at the end the store as of
//! each step's seq must answer every read exactly as the live store did then.
//!
//! Also pins that an as-of store refuses writes and a seq past the head. Does not test the CLI.

use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Command, Engine, Error, Expect, OpenOptions, Query};
use hookstate_testkit::Rng;
use serde_json::Value;

/// Steps per run: enough for items to be claimed, released, parked and redriven.
const STEPS: usize = 120;
/// Seeds run: each a different interleaving.
const SEEDS: [u64; 3] = [1, 18, 4242];
const START_MS: u64 = 1_700_000_000_000;

fn call(now_ms: u64, session: &str) -> Call {
    Call {
        scope: "asof".into(),
        actor: Actor { session: Some(session.into()), ..Actor::default() },
        idem_key: None,
        fingerprint: None,
        now_ms,
    }
}

fn command(rng: &mut Rng, tokens: &[(String, u64)]) -> Command {
    let item = |rng: &mut Rng| format!("i{}", rng.below(4));
    match rng.below(9) {
        0 => Command::KvPut {
            key: format!("k{}", rng.below(2)),
            value: format!("{{\"n\":{}}}", rng.below(100)),
            expect: Expect::Any,
        },
        1 | 2 => Command::QueuePush {
            queue: "q".into(),
            item: item(rng),
            payload: format!("{{\"p\":{}}}", rng.below(10)),
            for_session: None,
            max_deliveries: 2,
        },
        3 | 4 => Command::QueueClaim {
            queue: "q".into(),
            item: None,
            holder: format!("h{}", rng.below(3)),
            lease_ms: 50,
        },
        5 => match tokens.get(usize::try_from(rng.below(tokens.len().max(1) as u64)).unwrap()) {
            Some((item, token)) => {
                Command::QueueAck { queue: "q".into(), item: item.clone(), token: *token }
            }
            None => Command::QueueRedrive { queue: "q".into(), item: None },
        },
        6 => Command::CounterAdd {
            name: "c".into(),
            delta: i64::try_from(rng.below(7)).unwrap() - 3,
        },
        7 => Command::SetAdd { set: "s".into(), member: format!("m{}", rng.below(3)) },
        _ => Command::ListAppend { list: "l".into(), row: format!("{}", rng.below(50)), cap: 3 },
    }
}

fn reads() -> Vec<Query> {
    vec![
        Query::KvGet { key: "k0".into() },
        Query::KvGet { key: "k1".into() },
        Query::QueueList { queue: "q".into() },
        Query::CounterGet { name: "c".into() },
        Query::SetHas { set: "s".into(), member: "m1".into() },
        Query::ListGet { list: "l".into() },
    ]
}

fn answers(engine: &Engine, now_ms: u64) -> Vec<Value> {
    reads().iter().map(|q| engine.query("asof", q, now_ms).unwrap()).collect()
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default()).unwrap();
    let mut rng = Rng(seed);
    let mut now = START_MS;
    let mut tokens = Vec::new();
    let mut recorded = vec![(0u64, now, answers(&engine, now))];
    for _ in 0..STEPS {
        now += rng.below(30);
        let command = command(&mut rng, &tokens);
        let outcome = engine.execute(&call(now, "s1"), &command).unwrap();
        if let (Some(item), Some(token)) = (outcome.result.get("item"), outcome.result.get("token"))
        {
            if let (Some(item), Some(token)) = (item.as_str(), token.as_u64()) {
                tokens.push((item.to_owned(), token));
            }
        }
        recorded.push((outcome.head.seq, now, answers(&engine, now)));
    }
    assert!(engine.head().unwrap().seq > STEPS as u64 / 2, "most steps appended");
    for (seq, at, live) in &recorded {
        let past = engine.ops().at_seq(*seq).unwrap();
        assert_eq!(past.head().unwrap().seq, *seq);
        assert_eq!(&answers(&past, *at), live, "seed {seed}: reads as of seq {seq}");
    }
}

#[test]
fn as_of_reads_answer_as_the_live_reads_did_at_each_step() {
    for seed in SEEDS {
        run(seed);
    }
}

#[test]
fn an_as_of_store_refuses_writes_and_a_seq_past_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default()).unwrap();
    let put = Command::KvPut { key: "k".into(), value: "1".into(), expect: Expect::Any };
    engine.execute(&call(START_MS, "s"), &put).unwrap();
    let past = engine.ops().at_seq(1).unwrap();
    assert!(matches!(past.execute(&call(START_MS, "s"), &put), Err(Error::ReadOnly)));
    assert!(matches!(engine.ops().at_seq(2), Err(Error::OutOfRange { value: 2, max: 1, .. })));
    assert_eq!(engine.ops().seq_as_of(START_MS - 1).unwrap(), 0);
    assert_eq!(engine.ops().seq_as_of(START_MS).unwrap(), 1);
    assert!(past.ops().verify(Default::default()).is_ok(), "the as-of store verifies");
}
