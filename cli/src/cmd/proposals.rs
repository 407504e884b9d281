//! The `proposals` verbs: drop-ins for `proposal.ts queue-micro` and `proposal.ts micro
//! resolve | nudge | brief-cycle`, plus reads of the queue and the ledger.
//!
//! With `--format verdict` a call prints upstream's one line; a refusal that upstream reports
//! with exit 0 (`DUPLICATE`, `NONE|no-match`) exits 0 there too. Does not decide anything.

use std::path::{Path, PathBuf};

use hookstate_engine::legacy::hermit::read_timezone;
use hookstate_engine::proposals::{hermit_scope, parse_micro_input, ResolveInput, SCOPE_PREFIX};
use hookstate_engine::Outcome;
use serde_json::{json, Value};

use crate::args::{Cli, Format, MicroVerb, ProposalsArgs, ProposalsVerb};
use crate::cmd::{call_in, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::{print, print_raw};

/// Refusals upstream reports as an ordinary verdict with exit 0.
const VERDICT_OK_REFUSALS: [&str; 2] = ["duplicate", "no_match"];

/// The scope and the state directory: `--dir` (made absolute, symlinks resolved when it
/// exists), else `--scope hermit:<dir>`.
pub(crate) fn hermit_target(cli: &Cli, dir: Option<&Path>) -> Result<(String, PathBuf), CliError> {
    if let Some(dir) = dir {
        let abs = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .map_err(|source| CliError::Io { op: format!("resolve {}", dir.display()), source })?;
        let text = abs
            .to_str()
            .ok_or_else(|| CliError::Invalid(format!("{} is not UTF-8", abs.display())))?;
        return Ok((hermit_scope(text), abs.clone()));
    }
    match cli.scope.strip_prefix(SCOPE_PREFIX) {
        Some(dir) if dir.starts_with('/') => Ok((cli.scope.clone(), PathBuf::from(dir))),
        _ => Err(CliError::Usage(
            "proposals verbs need --dir DIR or --scope hermit:<abs state dir>".into(),
        )),
    }
}

fn required(what: &str, value: Option<&String>) -> Result<String, CliError> {
    value.cloned().ok_or_else(|| CliError::Invalid(format!("missing {what}")))
}

pub(crate) fn run(cli: &Cli, args: &ProposalsArgs) -> Result<(), CliError> {
    let (scope, dir) = hermit_target(cli, args.dir.as_deref())?;
    let outcome = match &args.verb {
        ProposalsVerb::Queue => {
            let queue = open(cli, Access::Read)?.proposals_queue(&scope)?;
            let pending: Vec<Value> =
                queue.entries.iter().filter_map(|t| serde_json::from_str(t).ok()).collect();
            return print(cli.format, &json!({ "ok": true, "pending": pending }));
        }
        ProposalsVerb::Ledger => {
            let lines = open(cli, Access::Read)?.proposals_ledger(&scope)?;
            let rows: Vec<Value> =
                lines.iter().map(|l| serde_json::from_str(l).unwrap_or(json!(l))).collect();
            return print(cli.format, &json!({ "ok": true, "ledger": rows }));
        }
        ProposalsVerb::QueueMicro => {
            let input = parse_micro_input(&read_stdin()?)?;
            let timezone = read_timezone(&dir)?;
            let call = call_in(cli, "proposals-queue-micro", &scope);
            open(cli, Access::Write)?.proposals_queue_micro(&call, &timezone, &input)?
        }
        ProposalsVerb::Micro(MicroVerb::Resolve { id, action, answer, channel }) => {
            let input = ResolveInput {
                id: required("<MP-id>", id.as_ref())?,
                action: required("--action", action.as_ref())?,
                answer: answer.clone(),
                channel: channel.clone(),
            };
            let call = call_in(cli, "proposals-micro-resolve", &scope);
            open(cli, Access::Write)?.proposals_micro_resolve(&call, &input)?
        }
        ProposalsVerb::Micro(MicroVerb::Nudge { id }) => {
            let id = required("<MP-id>", id.as_ref())?;
            let call = call_in(cli, "proposals-micro-nudge", &scope);
            open(cli, Access::Write)?.proposals_micro_nudge(&call, &id)?
        }
        ProposalsVerb::Micro(MicroVerb::BriefCycle) => {
            let call = call_in(cli, "proposals-micro-brief-cycle", &scope);
            open(cli, Access::Write)?.proposals_brief_cycle(&call)?
        }
    };
    finish(cli, &outcome)
}

/// Prints the outcome; a refusal exits 1, except the ones upstream's verdicts report with 0.
fn finish(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    let value = outcome.to_json();
    if cli.format == Format::Verdict {
        print_raw(&crate::output::one_line(
            value["verdict"].as_str().unwrap_or("ERROR|unexpected"),
        ))?;
    } else {
        print(cli.format, &value)?;
    }
    match &outcome.refusal {
        Some(refusal)
            if !(cli.format == Format::Verdict
                && VERDICT_OK_REFUSALS.contains(&refusal.reason)) =>
        {
            Err(CliError::Refused(refusal.message.clone()))
        }
        _ => Ok(()),
    }
}
