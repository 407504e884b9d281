//! Model test of the moonshine comment lifecycle: random adds, claims (by three holders),
//! replies with current or stale tokens, dismissals and time steps run against a real store and
//! against a small model of the rules; every answer is compared, and the store must verify after
//! every step.
//!
//! Invariants pinned: a comment is handed out once per 300 s lease, tokens rise per claim, a
//! stale token never records a reply, a dismissal is never overwritten and a reply never lost.
//! Does not test legacy files or processes.

use hookstate_engine::schema::Actor;
use hookstate_engine::ClaimAsk;
use hookstate_engine::{Call, Engine, Outcome};
use proptest::prelude::*;

const HOLDERS: u8 = 3;
const SCOPE: &str = "moonshine:model";
const START_MS: u64 = 1_795_989_052_000;
const STALE_MS: u64 = 300_000;

#[derive(Debug, Clone)]
enum Op {
    Add,
    Claim { holder: u8 },
    Reply { comment: u8, stale: bool },
    Dismiss { comment: u8 },
    Advance { s: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Add),
        4 => (0..HOLDERS).prop_map(|holder| Op::Claim { holder }),
        3 => (0u8..6, any::<bool>()).prop_map(|(comment, stale)| Op::Reply { comment, stale }),
        2 => (0u8..6).prop_map(|comment| Op::Dismiss { comment }),
        2 => (1u64..=200).prop_map(|s| Op::Advance { s }),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Delivered,
    Addressed,
    Dismissed,
}

#[derive(Debug, Clone)]
struct Comment {
    id: String,
    status: Status,
    delivered_ms: u64,
    token: u64,
}

#[derive(Debug, Default)]
struct Model {
    now: u64,
    epoch: u64,
    comments: Vec<Comment>,
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Ok,
    Refused,
    Claimed(Option<(String, u64)>),
}

impl Model {
    fn claim(&mut self) -> Answer {
        let now = self.now;
        let next = self.comments.iter_mut().find(|c| {
            c.status == Status::Pending
                || (c.status == Status::Delivered && now - c.delivered_ms >= STALE_MS)
        });
        let Some(comment) = next else {
            return Answer::Claimed(None);
        };
        self.epoch += 1;
        comment.status = Status::Delivered;
        // `deliveredAt` has whole seconds, as the shell adapters write it.
        comment.delivered_ms = now / 1000 * 1000;
        comment.token = self.epoch;
        Answer::Claimed(Some((comment.id.clone(), self.epoch)))
    }

    fn reply(&mut self, index: usize, token: u64) -> Answer {
        match self.comments.get_mut(index) {
            Some(c) if c.status == Status::Delivered && c.token == token => {
                c.status = Status::Addressed;
                Answer::Ok
            }
            _ => Answer::Refused,
        }
    }

    fn dismiss(&mut self, index: usize) -> Answer {
        match self.comments.get_mut(index) {
            Some(c) if c.status == Status::Addressed => Answer::Refused,
            Some(c) => {
                c.status = Status::Dismissed;
                Answer::Ok
            }
            None => Answer::Refused,
        }
    }
}

fn answer(outcome: &Outcome) -> Answer {
    if outcome.refusal.is_some() {
        Answer::Refused
    } else {
        Answer::Ok
    }
}

fn call(now: u64, session: Option<String>) -> Call {
    Call::at(SCOPE, now).by(Actor { session, ..Actor::default() })
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        &hookstate_testkit::store(&dir.path().join("state.redb")),
        hookstate_testkit::options(),
    )
    .unwrap();
    let mut model = Model { now: START_MS, ..Model::default() };
    let target = r#"{"kind":"block","path":"a.md"}"#;
    for (step, op) in ops.iter().enumerate() {
        let now = model.now;
        let (got, want) = match op {
            Op::Add => {
                let out = engine.feedback().add(&call(now, None), target, "c").unwrap();
                let id = out.result["id"].as_str().unwrap().to_owned();
                model.comments.push(Comment {
                    id,
                    status: Status::Pending,
                    delivered_ms: 0,
                    token: 0,
                });
                (Answer::Ok, Answer::Ok)
            }
            Op::Claim { holder } => {
                let ask = ClaimAsk {
                    holder: Some(format!("h{holder}")),
                    id: None,
                    all: false,
                    stale_ms: STALE_MS,
                };
                let out =
                    engine.feedback().claim(&call(now, Some(format!("h{holder}"))), &ask).unwrap();
                let claimed =
                    out.result["claimed"].as_array().unwrap().first().map(|c| {
                        (c["id"].as_str().unwrap().to_owned(), c["token"].as_u64().unwrap())
                    });
                (Answer::Claimed(claimed), model.claim())
            }
            Op::Reply { comment, stale } => {
                let index = usize::from(*comment);
                let Some(c) = model.comments.get(index) else { continue };
                let token = if *stale { c.token.saturating_sub(1) } else { c.token };
                let id = c.id.clone();
                let out = engine.feedback().reply(&call(now, None), &id, token, "done").unwrap();
                (answer(&out), model.reply(index, token))
            }
            Op::Dismiss { comment } => {
                let index = usize::from(*comment);
                let Some(c) = model.comments.get(index) else { continue };
                let out = engine.feedback().dismiss(&call(now, None), &c.id.clone()).unwrap();
                (answer(&out), model.dismiss(index))
            }
            Op::Advance { s } => {
                model.now += s * 1000 + 137;
                continue;
            }
        };
        prop_assert_eq!(got, want, "step {} {:?}", step, op);
        let report = engine.ops().verify(Default::default());
        prop_assert!(report.is_ok(), "verify after step {step}: {report:?}");
    }
    let listed = engine.feedback().list(SCOPE).unwrap();
    let statuses: Vec<String> =
        listed.comments.iter().map(|c| c.record["status"].as_str().unwrap().to_owned()).collect();
    let expected: Vec<String> =
        model.comments.iter().map(|c| format!("{:?}", c.status).to_lowercase()).collect();
    prop_assert_eq!(statuses, expected);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn comment_lifecycle_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
