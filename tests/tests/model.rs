//! Model test of the core primitives: random command sequences run against a real store and
//! against a small in-memory model; every step compares outcomes, and after every step the
//! store must verify (chain intact, views equal a rebuild of the log).
//!
//! Invariants pinned: never two holders of one item, stale tokens refused, parked after N
//! deliveries, session-addressed items only handed to their session. Does not test processes.

use std::collections::BTreeMap;

use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Command, Engine, Expect, Outcome};
use proptest::prelude::*;

const ITEMS: u8 = 4;
const HOLDERS: u8 = 3;
const KEYS: u8 = 2;
const QUEUE: &str = "q";
const START_MS: u64 = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    Push { item: u8, for_session: Option<u8>, max: u32 },
    Claim { holder: u8, item: Option<u8>, lease: u64 },
    Ack { item: u8, stale: bool },
    Extend { item: u8, stale: bool, lease: u64 },
    Release { item: u8, stale: bool },
    Redrive { item: Option<u8> },
    Advance { ms: u64 },
    Put { key: u8, expect: u8 },
    Count { delta: i64 },
    SetAdd { member: u8 },
    Append { cap: u32 },
}

/// Weighted so that leases run out and items reach their delivery limit often.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..ITEMS, proptest::option::of(0..HOLDERS), 1u32..=3)
            .prop_map(|(item, for_session, max)| Op::Push { item, for_session, max }),
        5 => (0..HOLDERS, proptest::option::of(0..ITEMS), 1u64..=3)
            .prop_map(|(holder, item, lease)| Op::Claim { holder, item, lease: lease * 10 }),
        1 => (0..ITEMS, any::<bool>()).prop_map(|(item, stale)| Op::Ack { item, stale }),
        1 => (0..ITEMS, any::<bool>(), 1u64..=3)
            .prop_map(|(item, stale, lease)| Op::Extend { item, stale, lease: lease * 10 }),
        2 => (0..ITEMS, any::<bool>()).prop_map(|(item, stale)| Op::Release { item, stale }),
        1 => proptest::option::of(0..ITEMS).prop_map(|item| Op::Redrive { item }),
        4 => (1u64..=40).prop_map(|ms| Op::Advance { ms }),
        1 => (0..KEYS, 0u8..4).prop_map(|(key, expect)| Op::Put { key, expect }),
        1 => (-3i64..=3).prop_map(|delta| Op::Count { delta }),
        1 => (0u8..3).prop_map(|member| Op::SetAdd { member }),
        1 => (1u32..=3).prop_map(|cap| Op::Append { cap }),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Ready,
    Claimed,
    Parked,
}

#[derive(Debug, Clone)]
struct MItem {
    id: String,
    state: State,
    deliveries: u32,
    max: u32,
    token: u64,
    holder: Option<String>,
    lease_until: u64,
    for_session: Option<String>,
}

/// What the model expects a command to answer.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Ok,
    Claimed { item: String, token: u64 },
    Nothing,
    Refused(&'static str),
}

#[derive(Debug, Default)]
struct Model {
    now: u64,
    epoch: u64,
    items: Vec<MItem>,
    revs: BTreeMap<String, u64>,
    counter: i64,
    members: Vec<String>,
    /// Every token ever acknowledged as granted, with its holder: a token is never granted twice.
    granted: BTreeMap<u64, String>,
}

fn item_id(i: u8) -> String {
    format!("item-{i}")
}

fn session(h: u8) -> String {
    format!("s{h}")
}

impl Model {
    fn find(&mut self, id: &str) -> Option<&mut MItem> {
        self.items.iter_mut().find(|i| i.id == id)
    }

    fn claim(&mut self, holder: u8, named: Option<u8>, lease: u64) -> Answer {
        let now = self.now;
        let me = session(holder);
        let eligible = |i: &MItem| {
            i.state != State::Parked
                && !(i.state == State::Claimed && now < i.lease_until)
                && i.for_session.as_ref().is_none_or(|s| *s == me)
        };
        let exhausted = |i: &MItem| i.state == State::Claimed && i.deliveries >= i.max;
        let index = match named {
            Some(n) => {
                let id = item_id(n);
                let Some(index) = self.items.iter().position(|i| i.id == id) else {
                    return Answer::Refused("not_found");
                };
                let item = &mut self.items[index];
                if item.state == State::Parked {
                    return Answer::Refused("parked");
                }
                if item.for_session.as_ref().is_some_and(|s| *s != me) {
                    return Answer::Refused("other_session");
                }
                if item.state == State::Claimed && now < item.lease_until {
                    return Answer::Refused("held");
                }
                if exhausted(item) {
                    item.state = State::Parked;
                    return Answer::Refused("parked");
                }
                index
            }
            None => {
                let mut found = None;
                for (index, item) in self.items.iter_mut().enumerate() {
                    if !eligible(item) {
                        continue;
                    }
                    if exhausted(item) {
                        item.state = State::Parked;
                        continue;
                    }
                    found = Some(index);
                    break;
                }
                match found {
                    Some(index) => index,
                    None => return Answer::Nothing,
                }
            }
        };
        self.epoch += 1;
        let token = self.epoch;
        let item = &mut self.items[index];
        item.state = State::Claimed;
        item.deliveries += 1;
        item.token = token;
        item.holder = Some(me.clone());
        item.lease_until = now + lease;
        assert!(self.granted.insert(token, me).is_none(), "token {token} granted twice");
        Answer::Claimed { item: item.id.clone(), token }
    }

    /// The token a holder op presents: the current one, or a stale one.
    fn token_for(&self, item: u8, stale: bool) -> u64 {
        let current = self.items.iter().find(|i| i.id == item_id(item)).map_or(0, |i| i.token);
        if stale {
            current + 1000
        } else {
            current
        }
    }

    fn holder_op(&mut self, item: u8, token: u64, op: &Op) -> Answer {
        let now = self.now;
        let Some(index) = self.items.iter().position(|i| i.id == item_id(item)) else {
            return Answer::Refused("not_found");
        };
        let current = &mut self.items[index];
        if current.state != State::Claimed || current.token != token {
            return Answer::Refused("stale_token");
        }
        match op {
            Op::Ack { .. } => {
                self.items.remove(index);
            }
            Op::Extend { lease, .. } => current.lease_until = now + lease,
            _ => {
                current.state =
                    if current.deliveries >= current.max { State::Parked } else { State::Ready };
            }
        }
        Answer::Ok
    }

    fn apply(&mut self, op: &Op) -> Answer {
        match op {
            Op::Push { item, for_session, max } => {
                let id = item_id(*item);
                if self.find(&id).is_some() {
                    return Answer::Refused("exists");
                }
                self.items.push(MItem {
                    id,
                    state: State::Ready,
                    deliveries: 0,
                    max: *max,
                    token: 0,
                    holder: None,
                    lease_until: 0,
                    for_session: for_session.map(session),
                });
                Answer::Ok
            }
            Op::Claim { holder, item, lease } => self.claim(*holder, *item, *lease),
            Op::Ack { item, stale }
            | Op::Release { item, stale }
            | Op::Extend { item, stale, .. } => {
                let token = self.token_for(*item, *stale);
                self.holder_op(*item, token, op)
            }
            Op::Redrive { item } => self.redrive(*item),
            Op::Advance { ms } => {
                self.now += ms;
                Answer::Ok
            }
            Op::Put { key, expect } => self.put(*key, *expect),
            Op::Count { delta } => {
                self.counter += delta;
                Answer::Ok
            }
            Op::SetAdd { member } => {
                let m = format!("m{member}");
                if !self.members.contains(&m) {
                    self.members.push(m);
                }
                Answer::Ok
            }
            Op::Append { .. } => Answer::Ok,
        }
    }

    fn redrive(&mut self, item: Option<u8>) -> Answer {
        match item {
            Some(n) => match self.find(&item_id(n)) {
                None => Answer::Refused("not_found"),
                Some(i) if i.state != State::Parked => Answer::Refused("not_parked"),
                Some(i) => {
                    i.state = State::Ready;
                    i.deliveries = 0;
                    Answer::Ok
                }
            },
            None => {
                for i in self.items.iter_mut().filter(|i| i.state == State::Parked) {
                    i.state = State::Ready;
                    i.deliveries = 0;
                }
                Answer::Ok
            }
        }
    }

    fn put(&mut self, key: u8, expect: u8) -> Answer {
        let key = format!("k{key}");
        let rev = self.revs.get(&key).copied().unwrap_or(0);
        let ok = match expect {
            0 => true,
            1 => rev == 0,
            2 => true,
            _ => false,
        };
        if !ok {
            return Answer::Refused(if expect == 1 { "exists" } else { "rev_mismatch" });
        }
        self.revs.insert(key, rev + 1);
        Answer::Ok
    }

    fn expect_for(&self, key: u8, expect: u8) -> Expect {
        let rev = self.revs.get(&format!("k{key}")).copied().unwrap_or(0);
        match expect {
            0 => Expect::Any,
            1 => Expect::Create,
            2 => Expect::Rev(rev),
            _ => Expect::Rev(rev + 7),
        }
    }
}

fn command_for(model: &Model, op: &Op) -> Option<(Option<String>, Command)> {
    let q = || QUEUE.to_owned();
    Some(match op {
        Op::Push { item, for_session, max } => (
            None,
            Command::QueuePush {
                queue: q(),
                item: item_id(*item),
                payload: format!("{{\"i\":{item}}}"),
                for_session: for_session.map(session),
                max_deliveries: *max,
            },
        ),
        Op::Claim { holder, item, lease } => (
            Some(session(*holder)),
            Command::QueueClaim {
                queue: q(),
                item: item.map(item_id),
                holder: session(*holder),
                lease_ms: *lease,
            },
        ),
        Op::Ack { item, stale } => (
            None,
            Command::QueueAck {
                queue: q(),
                item: item_id(*item),
                token: model.token_for(*item, *stale),
            },
        ),
        Op::Extend { item, stale, lease } => (
            None,
            Command::QueueExtend {
                queue: q(),
                item: item_id(*item),
                token: model.token_for(*item, *stale),
                lease_ms: *lease,
            },
        ),
        Op::Release { item, stale } => (
            None,
            Command::QueueRelease {
                queue: q(),
                item: item_id(*item),
                token: model.token_for(*item, *stale),
            },
        ),
        Op::Redrive { item } => {
            (None, Command::QueueRedrive { queue: q(), item: item.map(item_id) })
        }
        Op::Advance { .. } => return None,
        Op::Put { key, expect } => (
            None,
            Command::KvPut {
                key: format!("k{key}"),
                value: format!("{{\"v\":{key}}}"),
                expect: model.expect_for(*key, *expect),
            },
        ),
        Op::Count { delta } => (None, Command::CounterAdd { name: "c".into(), delta: *delta }),
        Op::SetAdd { member } => {
            (None, Command::SetAdd { set: "s".into(), member: format!("m{member}") })
        }
        Op::Append { cap } => {
            (None, Command::ListAppend { list: "l".into(), row: "1".into(), cap: *cap })
        }
    })
}

fn answer_of(outcome: &Outcome) -> Answer {
    if let Some(refusal) = &outcome.refusal {
        return Answer::Refused(refusal.reason);
    }
    match outcome.result.get("claimed") {
        Some(serde_json::Value::Bool(true)) => Answer::Claimed {
            item: outcome.result["item"].as_str().unwrap_or_default().to_owned(),
            token: outcome.result["token"].as_u64().unwrap_or_default(),
        },
        Some(serde_json::Value::Bool(false)) => Answer::Nothing,
        _ => Answer::Ok,
    }
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        &hookstate_testkit::store(&dir.path().join("state.redb")),
        hookstate_testkit::options(),
    )
    .unwrap();
    let mut model = Model { now: START_MS, ..Model::default() };
    for (step, op) in ops.iter().enumerate() {
        let command = command_for(&model, op);
        let expected = model.apply(op);
        let Some((session, command)) = command else {
            continue;
        };
        let call = Call::at("model", model.now).by(Actor { session, ..Actor::default() });
        let outcome = engine.execute(&call, &command).unwrap();
        prop_assert_eq!(answer_of(&outcome), expected, "step {} {:?}", step, op);
        let report = engine.ops().verify(Default::default());
        prop_assert!(report.is_ok(), "verify after step {step}: {report:?}");
    }
    let counter = engine
        .query("model", &hookstate_engine::Query::CounterGet { name: "c".into() }, model.now)
        .unwrap();
    prop_assert_eq!(counter["value"].as_i64(), Some(model.counter));
    let listed = engine
        .query("model", &hookstate_engine::Query::QueueList { queue: QUEUE.into() }, model.now)
        .unwrap();
    let ids: Vec<&str> =
        listed["items"].as_array().unwrap().iter().map(|i| i["item"].as_str().unwrap()).collect();
    let model_ids: Vec<&str> = model.items.iter().map(|i| i.id.as_str()).collect();
    prop_assert_eq!(ids, model_ids);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn core_primitives_agree_with_the_model(ops in proptest::collection::vec(op(), 1..48)) {
        run(&ops)?;
    }
}

/// The model itself must catch a wrong engine: a planted divergence (a claim that ignores
/// session addressing) is detected by comparing answers.
#[test]
fn model_detects_a_claim_that_ignores_session_addressing() {
    let mut model = Model { now: START_MS, ..Model::default() };
    model.apply(&Op::Push { item: 0, for_session: Some(1), max: 3 });
    let expected = model.apply(&Op::Claim { holder: 0, item: None, lease: 10 });
    let wrong = Answer::Claimed { item: item_id(0), token: 1 };
    assert_eq!(expected, Answer::Nothing);
    assert_ne!(expected, wrong, "the model must tell a mis-addressed claim apart");
}
