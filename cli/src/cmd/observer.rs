//! The `observer` verbs: append rows, count turns, sweep (begin, commit), pending take and
//! compare-and-clear, and the state.
//!
//! Does not call a model or read the inbox; the caller does and passes what it read.

use hookstate_engine::observer::{Finding, RowInput, SweepRead};
use hookstate_engine::stdin::{parse_findings, parse_rows};
use serde_json::json;

use crate::args::{Cli, Layout, ObserverVerb, PendingVerb};
use crate::cmd::{call, mirror, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print;

fn rows_from_stdin() -> Result<Vec<RowInput>, CliError> {
    parse_rows(&read_stdin()?).map_err(CliError::Invalid)
}

fn findings_from_stdin() -> Result<Vec<Finding>, CliError> {
    parse_findings(&read_stdin()?).map_err(CliError::Invalid)
}

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
        ObserverVerb::Turn { agent_id: Some(_) } => {
            return print(cli.format, &json!({ "ok": true, "skipped": "subagent turn" }));
        }
        _ => {}
    }
    let call = call(cli, hook_name(verb));
    let engine = open(cli, Access::Write)?;
    mirror(cli, &engine, &call, Layout::Observer)?;
    let outcome = match verb {
        ObserverVerb::Append => engine.observer().append(&call, &rows_from_stdin()?)?,
        ObserverVerb::SweepBegin { inbox_len } => {
            engine.observer().sweep_begin(&call, *inbox_len)?
        }
        ObserverVerb::SweepCommit { read_turns, read_follow_ups, inbox_offset } => {
            let findings = findings_from_stdin()?;
            let read = SweepRead {
                turns: *read_turns,
                follow_ups: *read_follow_ups,
                inbox_offset: *inbox_offset,
            };
            engine.observer().sweep_commit(&call, read, &findings)?
        }
        ObserverVerb::Pending(PendingVerb::Clear { version }) => {
            engine.observer().pending_clear(&call, *version)?
        }
        _ => engine.observer().turn(&call)?,
    };
    mirror(cli, &engine, &call, Layout::Observer)?;
    print(cli.format, &outcome.to_json())?;
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
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
