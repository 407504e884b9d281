//! Model test of as-of reads (issue 18): random core commands run against a real store; after
//! every step the live answer of every core read is recorded, and at the end the store as of
//! each step's seq must answer every read exactly as the live store did then.
//!
//! Also pins that an as-of store refuses writes and a seq past the head, and that event times
//! follow log order (what `seq_as_of` counts on). Does not test the CLI.

use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Command, Engine, Error, Expect, LogFilter, OpenOptions, Query};
use hookstate_testkit::Rng;
use serde_json::Value;

/// Steps per run: enough for items to be claimed, released, parked and redriven.
const STEPS: usize = 120;
/// Seeds run: each a different interleaving.
const SEEDS: [u64; 3] = [1, 18, 4242];
const START_MS: u64 = 1_700_000_000_000;

fn call(now_ms: u64, session: &str) -> Call {
    Call::at("asof", now_ms).by(Actor { session: Some(session.into()), ..Actor::default() })
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

/// The time of each event in the log, in log order.
fn event_times(engine: &Engine) -> Vec<u64> {
    engine.log(&LogFilter::default()).unwrap().iter().map(|e| e.content.at_ms).collect()
}

/// A call that does not pin its time is timed by the store's clock once its transaction holds
/// the write lock: a call that read the clock and then waited for the lock (its `now_ms` older
/// than the event before it) logs no time before that event, so `--as-of`'s prefix holds every
/// event of its time. A pinned call keeps its own time.
#[test]
fn event_times_follow_log_order_unless_a_call_pins_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default()).unwrap();
    let put =
        |key: &str| Command::KvPut { key: key.into(), value: "1".into(), expect: Expect::Any };
    let unpinned = |now_ms| {
        let mut call = call(now_ms, "s");
        call.now_pinned = false;
        call
    };
    let before = hookstate_engine::now_ms();
    // The second call read the clock a minute before the first did, then waited for the lock.
    engine.execute(&unpinned(before), &put("a")).unwrap();
    engine.execute(&unpinned(before - 60_000), &put("b")).unwrap();
    // Two waiting calls committed by one group commit.
    let batch = [(unpinned(before - 30_000), put("c")), (unpinned(before - 90_000), put("d"))];
    for outcome in engine.ops().execute_batch(&batch).unwrap() {
        outcome.unwrap();
    }
    let after = hookstate_engine::now_ms();
    let times = event_times(&engine);
    assert_eq!(times.len(), 4);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times out of log order: {times:?}");
    assert!(
        times.iter().all(|t| (before..=after).contains(t)),
        "{times:?} not in {before}..={after}"
    );
    // As of each event's own time, the prefix holds that event (and every one before it).
    for (n, time) in times.iter().enumerate() {
        let seq = engine.ops().seq_as_of(*time).unwrap();
        assert!(seq > n as u64, "as of {time}, seq {seq}: event {} is left out", n + 1);
    }
    // A pinned call (a test clock) keeps its time, even one before the events already logged.
    engine.execute(&call(START_MS, "s"), &put("e")).unwrap();
    assert_eq!(event_times(&engine)[4], START_MS);
}

/// A host clock stepped back (here: the last event timed 50 s ahead of it, as if logged before
/// the step) is raised to the last event's time, for one call and a group commit alike, and a
/// claim's lease runs from the raised time. A last event further ahead than
/// `CLOCK_RAISE_MS_MAX` (a future time a test clock pinned) leaves the host's clock as it is,
/// so it cannot stop the store's clock.
#[test]
fn a_clock_behind_the_last_event_is_raised_to_it_within_a_bound() {
    use hookstate_engine::limits::{CLOCK_RAISE_MS_MAX, DELIVERIES_DEFAULT};
    const LEASE_MS: u64 = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default()).unwrap();
    let put =
        |key: &str| Command::KvPut { key: key.into(), value: "1".into(), expect: Expect::Any };
    let ahead = hookstate_engine::now_ms() + 50_000;
    engine.execute(&call(ahead, "s"), &put("a")).unwrap();
    engine.execute(&Call::new("asof"), &put("b")).unwrap();
    let batch = [(Call::new("asof"), put("c")), (Call::new("asof"), put("d"))];
    for outcome in engine.ops().execute_batch(&batch).unwrap() {
        outcome.unwrap();
    }
    let push = Command::QueuePush {
        queue: "q".into(),
        item: "i".into(),
        payload: "{}".into(),
        for_session: None,
        max_deliveries: DELIVERIES_DEFAULT,
    };
    engine.execute(&Call::new("asof"), &push).unwrap();
    let claim = Command::QueueClaim {
        queue: "q".into(),
        item: None,
        holder: "h".into(),
        lease_ms: LEASE_MS,
    };
    let claimed = engine.execute(&Call::new("asof"), &claim).unwrap();
    // Raised: never before the event logged ahead, and past it only once the host caught up.
    let latest = ahead.max(hookstate_engine::now_ms());
    let times = event_times(&engine);
    assert_eq!(times.len(), 6);
    assert!(
        times.iter().all(|t| (ahead..=latest).contains(t)),
        "{times:?} not in {ahead}..={latest}"
    );
    assert_eq!(claimed.result["lease_until_ms"], times[5] + LEASE_MS, "{:?}", claimed.result);
    // A last event beyond the bound does not hold the clock.
    let far = hookstate_engine::now_ms() + CLOCK_RAISE_MS_MAX + 60_000;
    engine.execute(&call(far, "s"), &put("e")).unwrap();
    let before = hookstate_engine::now_ms();
    engine.execute(&Call::new("asof"), &put("f")).unwrap();
    let after = hookstate_engine::now_ms();
    let last = event_times(&engine)[7];
    assert!((before..=after).contains(&last), "{last} not in {before}..={after}");
}
