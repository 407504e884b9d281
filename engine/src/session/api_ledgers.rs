//! `observations.ts observe`, `prune-observations`, `later.ts` and the `runtime.json` writers
//! (`updateRuntimeField`'s merge, `hermit-start`, `hermit-stop`, the waits) on the store.
//!
//! `later.ts check` records a result the caller produced: hookstate does not run the row's
//! command or scan it for injection (docs/session.md §5). Does not read legacy files.

use hookstate_schema::session::LineFile;
use serde_json::Value;

use super::api::{config, Answer, Session};
use super::rules::hypotheses::{self, flag_value, rows, AddInput, CheckOutcome};
use super::rules::observations::{self, decide_observe, decide_prune};
use super::rules::runtime::{self, Move};
use super::rules::verdict::{Decided, Verdict};
use super::views;
use crate::kernel::call::Call;
use crate::kernel::compat::stamp;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// The `later.ts check` options hookstate adds, for the result the caller produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckResult {
    /// The command's exit code (`None`: the row has no command, or it was killed).
    pub exit: Option<i64>,
    /// Its output (stdin).
    pub output: String,
    /// Killed at its timeout.
    pub timed_out: bool,
    /// The injection scan's class, when it flagged the row (the command did not run).
    pub injection: Option<String>,
}

/// A `runtime.json` write: a field merge, or a lifecycle move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeWrite {
    /// Fields set (compact JSON text) and deleted; refused if `expect_updated_at` is stale.
    Merge {
        /// `(field, JSON text)`.
        sets: Vec<(String, String)>,
        /// Fields deleted.
        unset: Vec<String>,
        /// The `updated_at` the caller read.
        expect_updated_at: Option<String>,
    },
    /// `hermit-start` on a missing file.
    Seed {
        /// `tmux` | `docker` | `interactive`.
        runtime_mode: String,
        /// The tmux session.
        tmux_session: Option<String>,
    },
    /// The next-task ack's park (`idle` → `waiting`).
    Wait,
    /// The tick's end of a wait past `heartbeat.waiting_timeout` (`<n> s|m|h`).
    WaitTimeout {
        /// The timeout as upstream spells it.
        timeout: String,
    },
    /// The operator answered a waiting session.
    Resume,
    /// An emergency halt.
    Halt,
    /// `hermit-stop` asked for a shutdown.
    ShutdownRequested,
    /// `hermit-stop` with no session.
    ShutdownCompleted,
}

impl RuntimeWrite {
    fn name(&self) -> &'static str {
        match self {
            RuntimeWrite::Merge { .. } => "runtime",
            RuntimeWrite::Seed { .. } => "seed",
            RuntimeWrite::Wait => "wait",
            RuntimeWrite::WaitTimeout { .. } => "wait-timeout",
            RuntimeWrite::Resume => "resume",
            RuntimeWrite::Halt => "halt",
            RuntimeWrite::ShutdownRequested => "shutdown-requested",
            RuntimeWrite::ShutdownCompleted => "shutdown-completed",
        }
    }

    fn to_move(&self) -> Result<Move> {
        Ok(match self {
            RuntimeWrite::Merge { sets, unset, .. } => {
                Move::Merge { sets: sets.clone(), unset: unset.clone() }
            }
            RuntimeWrite::Seed { runtime_mode, tmux_session } => Move::Seed {
                runtime_mode: runtime_mode.clone(),
                tmux_session: tmux_session.clone(),
            },
            RuntimeWrite::Wait => Move::Wait,
            RuntimeWrite::WaitTimeout { timeout } => {
                let timeout_ms = runtime::parse_duration(timeout).ok_or_else(|| {
                    Error::bad(format!("timeout {timeout:?}"), "is not <n> s|m|h")
                })?;
                Move::WaitTimeout { timeout_ms }
            }
            RuntimeWrite::Resume => Move::Resume,
            RuntimeWrite::Halt => Move::Halt,
            RuntimeWrite::ShutdownRequested => Move::ShutdownRequested,
            RuntimeWrite::ShutdownCompleted => Move::ShutdownCompleted,
        })
    }
}

/// A v4 UUID as `crypto.randomUUID()` spells it.
fn uuid() -> Result<String> {
    let mut b: [u8; 16] = crate::kernel::fsio::random_bytes()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]))
}

fn fire_ms(args: &[String], name: &str) -> Result<Option<u64>> {
    match flag_value(args, name) {
        None => Ok(None),
        Some(text) => stamp::date_parse(text)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Some)
            .ok_or_else(|| Error::bad(format!("{name} {text:?}"), "is not an ISO 8601 time")),
    }
}

/// Whether a `later.ts` row is late: `isLate` of its `due`, with the schedule's second fire.
fn late(file: &LineFile, args: &[String], second_fire: Option<u64>, now_ms: u64) -> bool {
    let id = args.first().map(String::as_str);
    let row = rows(file).into_iter().find(|r| r.get("id").and_then(Value::as_str) == id);
    let due = row.as_ref().and_then(|r| r.get("due")?.as_str().map(str::to_owned));
    due.is_some_and(|d| hypotheses::is_late(&d, now_ms, second_fire))
}

impl Session<'_> {
    /// `observations.ts observe <dir> <source> [--origin=…]` with the label on stdin; `args`
    /// are the words after the directory.
    ///
    /// # Errors
    /// Store errors; upstream's refusals (`ERROR|…`, exit 0; the usage on stderr) are answers.
    pub fn observe(&self, call: &Call, args: &[String], label: &str) -> Result<Answer> {
        let scope = call.scope.as_str();
        let Some(source) = args.first() else {
            return self.read(scope, |_| Ok(Err(observations::usage())));
        };
        let rest = args.get(1..).unwrap_or_default();
        self.decide(call, |txn| {
            let runtime = views::runtime(txn, scope)?;
            Ok(decide_observe(source, rest, label, runtime.as_ref(), call.now_ms))
        })
    }

    /// `prune-observations <dir>`: prints `pruned N, kept M`.
    ///
    /// # Errors
    /// Store errors.
    pub fn prune_observations(&self, call: &Call) -> Result<Answer> {
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let ledger = views::observations(txn, scope)?.unwrap_or_default();
            Ok(Ok(decide_prune(&ledger, call.now_ms)))
        })
    }

    /// `later.ts <verb> <dir> …`: `add` (`--next-fire ISO` gives the schedule's next fire),
    /// `list`, `due`, `cancel`, `check` (with the `result` the caller produced;
    /// `--second-fire ISO` the schedule's second fire after `due`) and `verdict` (stdin: the
    /// reason); `args` are the words after the directory.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a fire time that does not parse or a `check` without a result;
    /// store errors. Upstream's refusals (stderr, exit 1) are answers.
    pub fn later(
        &self,
        call: &Call,
        verb: &str,
        args: &[String],
        stdin: &str,
        result: Option<&CheckResult>,
    ) -> Result<Answer> {
        let scope = call.scope.as_str();
        let now = call.now_ms;
        let file = |txn: &dyn ReadTxn| -> Result<LineFile> {
            Ok(views::hypotheses(txn, scope)?.unwrap_or_default())
        };
        match verb {
            "add" => {
                let uuid = uuid()?;
                let next_fire = fire_ms(args, "--next-fire")?.map(stamp::stamp_ms);
                let input = AddInput { args, uuid: &uuid, next_fire };
                self.decide(call, |_| Ok(hypotheses::decide_add(&input, now)))
            }
            "list" => self.read(scope, |txn| Ok(hypotheses::list(&file(txn)?, args))),
            "due" => self.read(scope, |txn| {
                let open = views::open_tasks(txn, scope)?;
                let verdict = hypotheses::due(&file(txn)?, &open, now);
                Ok(Ok(Decided { events: Vec::new(), verdict }))
            }),
            _ => {
                let outcome = result.map(|r| match &r.injection {
                    Some(class) => CheckOutcome::Injection(class.clone()),
                    None => CheckOutcome::Ran {
                        exit: r.exit,
                        output: r.output.clone(),
                        timed_out: r.timed_out,
                    },
                });
                if verb == "check" && outcome.is_none() {
                    let why = "needs the command's result (--exit, --timed-out or --injection)";
                    return Err(Error::bad("later check", why));
                }
                let second = fire_ms(args, "--second-fire")?;
                self.decide(call, |txn| {
                    let file = file(txn)?;
                    let late = late(&file, args, second, now);
                    let settle = hypotheses::decide_settle;
                    Ok(settle(verb, &file, args, outcome.as_ref(), stdin, late, now))
                })
            }
        }
    }

    /// Writes `runtime.json` (`updateRuntimeField`'s merge, or a lifecycle move of the
    /// transition table); prints `OK|<write>`, or `{"ok":false,"reason":…}` for a refused move.
    ///
    /// # Errors
    /// [`Error::TooMany`], [`Error::BadInput`] for a bad merge or timeout, [`Error::BadTimeZone`];
    /// store errors.
    pub fn runtime(&self, call: &Call, write: &RuntimeWrite) -> Result<Answer> {
        let scope = call.scope.as_str();
        let mv = write.to_move()?;
        let timezone = config(scope)?.timezone;
        let expect = match write {
            RuntimeWrite::Merge { expect_updated_at, .. } => expect_updated_at.clone(),
            _ => None,
        };
        self.decide(call, |txn| {
            let doc = views::runtime(txn, scope)?;
            let decided =
                runtime::decide(doc.as_ref(), &mv, expect.as_deref(), call.now_ms, &timezone)?;
            Ok(decided.map(|event| Decided {
                events: vec![event],
                verdict: Verdict::line(format!("OK|{}", write.name())),
            }))
        })
    }

    /// `runtime.json` as stored (read-only): its fields as one JSON object, `null` when absent.
    ///
    /// # Errors
    /// Store errors.
    pub fn runtime_get(&self, scope: &str) -> Result<Answer> {
        self.read(scope, |txn| {
            let doc = views::runtime(txn, scope)?;
            let value = doc.map_or(Value::Null, |d| crate::legacy::json::to_value(&d));
            Ok(Ok(Decided { events: Vec::new(), verdict: Verdict::json(&value) }))
        })
    }
}
