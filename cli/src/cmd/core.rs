//! The core-primitive verbs: kv, queue, counter, set, list.
//!
//! Each builds an engine command or query from its arguments, runs it, and prints the result.
//! A refusal prints its JSON result and exits 1. Does not hold rules.

use hookstate_engine::{Command, Expect, Outcome, Query};

use crate::args::{Cli, CounterVerb, KvVerb, ListVerb, QueueVerb, SetVerb, ValueSource};
use crate::cmd::{call, now_ms, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print;

fn value_from(
    arg: Option<&String>,
    source: &ValueSource,
    default: Option<&str>,
) -> Result<String, CliError> {
    match (arg, source.stdin) {
        (Some(_), true) => {
            Err(CliError::Usage("give the value as an argument or --stdin, not both".into()))
        }
        (Some(value), false) => bare_word_hint(value).map(|()| value.clone()),
        (None, true) => read_stdin(),
        (None, false) => default.map(str::to_owned).ok_or_else(|| {
            CliError::Usage("a JSON value is required (as an argument or --stdin)".into())
        }),
    }
}

/// Refuses an argument that is not JSON but reads as a bare word, with the fix: a string value
/// needs JSON quotes (`'"hello"'`). Any other invalid value is left to the engine's check.
fn bare_word_hint(value: &str) -> Result<(), CliError> {
    let word = value.trim();
    let bare = !word.is_empty()
        && serde_json::from_str::<serde::de::IgnoredAny>(word).is_err()
        && !word.starts_with(['{', '[', '"', '-'])
        && !word.starts_with(|c: char| c.is_ascii_digit());
    match bare {
        true => Err(CliError::Invalid(format!(
            "value {word:?} is not JSON; a string value needs JSON quotes: '\"{word}\"'"
        ))),
        false => Ok(()),
    }
}

fn execute(cli: &Cli, hook: &str, command: &Command) -> Result<(), CliError> {
    let call = call(cli, hook);
    hookstate_engine::check(&call, command)?;
    let engine = open(cli, Access::Write)?;
    #[cfg(feature = "bugdrill")]
    let drilled = crate::drill::install(cli.format);
    let outcome: Outcome = engine.execute(&call, command)?;
    #[cfg(feature = "bugdrill")]
    let printed = drilled && outcome.appended > 0;
    #[cfg(not(feature = "bugdrill"))]
    let printed = false;
    if !printed {
        print(cli.format, &outcome.to_json())?;
    }
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

fn query(cli: &Cli, query: &Query) -> Result<(), CliError> {
    query.check(&cli.scope)?;
    let engine = open(cli, Access::Read)?;
    // A test clock pins the time reads judge leases by too, as it pins the writes'.
    let mut result = engine.query(&cli.scope, query, cli.now_ms.unwrap_or_else(now_ms))?;
    if let Some(map) = result.as_object_mut() {
        map.insert("ok".into(), true.into());
    }
    print(cli.format, &result)
}

pub(crate) fn kv(cli: &Cli, verb: &KvVerb) -> Result<(), CliError> {
    match verb {
        KvVerb::Get { key } => query(cli, &Query::KvGet { key: key.clone() }),
        KvVerb::Put { key, value, expect_rev, create, source } => {
            let value = value_from(value.as_ref(), source, None)?;
            let expect = match (create, expect_rev) {
                (true, _) => Expect::Create,
                (false, Some(rev)) => Expect::Rev(*rev),
                (false, None) => Expect::Any,
            };
            execute(cli, "kv-put", &Command::KvPut { key: key.clone(), value, expect })
        }
    }
}

pub(crate) fn queue(cli: &Cli, verb: &QueueVerb) -> Result<(), CliError> {
    let command = match verb {
        QueueVerb::List { queue } => return query(cli, &Query::QueueList { queue: queue.clone() }),
        QueueVerb::Push { queue, item, payload, for_session, max_deliveries, source } => {
            Command::QueuePush {
                queue: queue.clone(),
                item: item.clone(),
                payload: value_from(payload.as_ref(), source, Some("null"))?,
                for_session: for_session.clone(),
                max_deliveries: *max_deliveries,
            }
        }
        QueueVerb::Claim { queue, item, holder, lease_ms } => Command::QueueClaim {
            queue: queue.clone(),
            item: item.clone(),
            holder: holder
                .clone()
                .or_else(|| cli.session.clone())
                .unwrap_or_else(|| format!("pid-{}", crate::served::pid())),
            lease_ms: *lease_ms,
        },
        QueueVerb::Ack(h) => {
            Command::QueueAck { queue: h.queue.clone(), item: h.item.clone(), token: h.token }
        }
        QueueVerb::Release(h) => {
            Command::QueueRelease { queue: h.queue.clone(), item: h.item.clone(), token: h.token }
        }
        QueueVerb::Extend { holder: h, lease_ms } => Command::QueueExtend {
            queue: h.queue.clone(),
            item: h.item.clone(),
            token: h.token,
            lease_ms: *lease_ms,
        },
        QueueVerb::Redrive { queue, item } => {
            Command::QueueRedrive { queue: queue.clone(), item: item.clone() }
        }
    };
    execute(cli, hook_name(verb), &command)
}

fn hook_name(verb: &QueueVerb) -> &'static str {
    match verb {
        QueueVerb::Push { .. } => "queue-push",
        QueueVerb::Claim { .. } => "queue-claim",
        QueueVerb::Ack(_) => "queue-ack",
        QueueVerb::Extend { .. } => "queue-extend",
        QueueVerb::Release(_) => "queue-release",
        QueueVerb::List { .. } => "queue-list",
        QueueVerb::Redrive { .. } => "queue-redrive",
    }
}

pub(crate) fn counter(cli: &Cli, verb: &CounterVerb) -> Result<(), CliError> {
    match verb {
        CounterVerb::Get { name } => query(cli, &Query::CounterGet { name: name.clone() }),
        CounterVerb::Add { name, delta } => {
            execute(cli, "counter-add", &Command::CounterAdd { name: name.clone(), delta: *delta })
        }
    }
}

pub(crate) fn set(cli: &Cli, verb: &SetVerb) -> Result<(), CliError> {
    match verb {
        SetVerb::Has { set, member } => {
            query(cli, &Query::SetHas { set: set.clone(), member: member.clone() })
        }
        SetVerb::Add { set, member } => {
            execute(cli, "set-add", &Command::SetAdd { set: set.clone(), member: member.clone() })
        }
    }
}

pub(crate) fn list(cli: &Cli, verb: &ListVerb) -> Result<(), CliError> {
    match verb {
        ListVerb::Get { list } => query(cli, &Query::ListGet { list: list.clone() }),
        ListVerb::Append { list, row, cap, source } => {
            let row = value_from(row.as_ref(), source, None)?;
            execute(cli, "list-append", &Command::ListAppend { list: list.clone(), row, cap: *cap })
        }
    }
}
