//! The `observer` verbs: append rows, count turns, sweep (begin, commit), pending take and
//! compare-and-clear, and the state.
//!
//! Parses arguments and stdin into one engine call per verb. Does not call a model or read the
//! inbox; the caller does and passes what it read.

use hookstate_engine::SweepRead;
use hookstate_engine::{parse_findings, parse_rows};
use serde_json::json;

use crate::args::{Cli, Layout, ObserverVerb, PendingVerb};
use crate::cmd::{call, finish, mutate, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print;

pub(crate) fn run(cli: &Cli, verb: &ObserverVerb) -> Result<(), CliError> {
    match verb {
        ObserverVerb::State => {
            let doc = open(cli, Access::Read)?.observer().doc(&cli.scope)?;
            return print(cli.format, &json!({ "ok": true, "state": doc.state }));
        }
        ObserverVerb::Pending(PendingVerb::Take) => {
            let doc = open(cli, Access::Read)?.observer().doc(&cli.scope)?;
            let value = json!({
                "ok": true, "pending": doc.state.pending, "version": doc.pending_version,
            });
            return print(cli.format, &value);
        }
        _ => {}
    }
    // Stdin is read and checked before the store is opened, so bad input leaves it untouched.
    let (rows, findings) = match verb {
        ObserverVerb::Append => (parse_rows(&read_stdin()?).map_err(CliError::Invalid)?, vec![]),
        ObserverVerb::SweepCommit { .. } => {
            (vec![], parse_findings(&read_stdin()?).map_err(CliError::Invalid)?)
        }
        _ => (vec![], vec![]),
    };
    let call = call(cli, hook_name(verb));
    let engine = open(cli, Access::Write)?;
    let outcome = mutate(cli, &engine, &call, Layout::Observer, |engine| {
        let observer = engine.observer();
        match verb {
            ObserverVerb::Append => observer.append(&call, &rows),
            ObserverVerb::SweepBegin { inbox_len } => observer.sweep_begin(&call, *inbox_len),
            ObserverVerb::SweepCommit { read_turns, read_follow_ups, inbox_offset } => {
                let read = SweepRead {
                    turns: *read_turns,
                    follow_ups: *read_follow_ups,
                    inbox_offset: *inbox_offset,
                };
                observer.sweep_commit(&call, read, &findings)
            }
            ObserverVerb::Pending(PendingVerb::Clear { version }) => {
                observer.pending_clear(&call, *version)
            }
            ObserverVerb::Turn { agent_id } => observer.turn(&call, agent_id.as_deref()),
            ObserverVerb::State | ObserverVerb::Pending(PendingVerb::Take) => {
                Err(hookstate_engine::Error::Invalid("not a mutation".into()))
            }
        }
    })?;
    finish(cli, &outcome)
}

fn hook_name(verb: &ObserverVerb) -> &'static str {
    match verb {
        ObserverVerb::Append => "observer-append",
        ObserverVerb::SweepBegin { .. } => "observer-sweep-begin",
        ObserverVerb::SweepCommit { .. } => "observer-sweep-commit",
        ObserverVerb::Pending(_) => "observer-pending-clear",
        _ => "observer-turn",
    }
}
