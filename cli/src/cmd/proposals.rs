//! The `proposals` verbs: drop-ins for `proposal.ts queue-micro`, `proposal.ts micro
//! resolve | nudge | brief-cycle`, `create` and `index`, PROP status moves, and reads of the
//! queue and the ledger.
//!
//! With `--format verdict` a call prints upstream's one line; a refusal that upstream reports
//! with exit 0 (`DUPLICATE`, `NONE|no-match`) exits 0 there too. Does not decide anything.

use std::path::{Path, PathBuf};

use hookstate_engine::proposals::layout::{read_timezone, Mirror};
use hookstate_engine::proposals::props::{parse_create, CreateInput, Move, MoveInput, PatchInput};
use hookstate_engine::proposals::{
    hermit_scope, parse_micro_input, MicroInput, ResolveInput, SCOPE_PREFIX,
};
use hookstate_engine::stdin::parse_patch_stdin;
use hookstate_engine::{Engine, Outcome};
use serde_json::{json, Value};

use crate::args::{Cli, Format, MicroVerb, MoveArgs, ProposalsArgs, ProposalsVerb};
use crate::cmd::{call_in, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::{print, print_raw};

/// Refusals of ours that upstream has no verdict for: they exit 1 in verdict mode too. Every
/// other refusal is a verdict line upstream prints with exit 0.
const VERDICT_FAILING_REFUSALS: [&str; 2] = ["ambiguous_answer", "unknown_answer"];

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
            "hermit verbs need --dir DIR or --scope hermit:<abs state dir>".into(),
        )),
    }
}

fn required(what: &str, value: Option<&String>) -> Result<String, CliError> {
    value.cloned().ok_or_else(|| CliError::Invalid(format!("missing {what}")))
}

/// The store opened for a mutation and, with `--mirror`, the mirror lock and what it adopted.
pub(crate) struct Writer {
    pub(crate) engine: Engine,
    pub(crate) mirror: Option<Mirror>,
}

/// With `--mirror DIR`, DIR (normally the state directory itself) holds the legacy files kept
/// current.
pub(crate) fn writer(cli: &Cli, scope: &str) -> Result<Writer, CliError> {
    let engine = open(cli, Access::Write)?;
    let mirror = match &cli.mirror {
        Some(dir) => {
            let call = call_in(cli, "proposals-mirror-adopt", scope);
            let wait = std::time::Duration::from_millis(cli.wait_ms);
            Some(engine.proposals().mirror_begin(&call, dir, wait)?.0)
        }
        None => None,
    };
    Ok(Writer { engine, mirror })
}

pub(crate) fn run(cli: &Cli, args: &ProposalsArgs) -> Result<(), CliError> {
    let (scope, dir) = hermit_target(cli, args.dir.as_deref())?;
    // Stdin is read and checked before the store is opened, so bad input leaves it untouched.
    let Some((micro_input, create_input)) = read_inputs(cli, &args.verb)? else {
        return Ok(());
    };
    let verb = match &args.verb {
        ProposalsVerb::Queue => return print_queue(cli, &scope),
        ProposalsVerb::List => return print_list(cli, &scope),
        ProposalsVerb::Ledger => return print_ledger(cli, &scope),
        ProposalsVerb::Index => return print_index(cli, &scope),
        ProposalsVerb::ResolveId { input } => return print_resolve_id(cli, &scope, input),
        verb => verb,
    };
    let writer = writer(cli, &scope)?;
    let outcome = match verb {
        ProposalsVerb::QueueMicro => {
            let input = micro_input.ok_or_else(|| CliError::Usage("no payload".into()))?;
            let timezone = read_timezone(&dir)?;
            let call = call_in(cli, "proposals-queue-micro", &scope);
            writer.engine.proposals().queue_micro(&call, &timezone, &input)?
        }
        ProposalsVerb::Micro(MicroVerb::Resolve { id, action, answer, channel }) => {
            let input = ResolveInput {
                id: required("<MP-id>", id.as_ref())?,
                action: required("--action", action.as_ref())?,
                answer: answer.clone(),
                channel: channel.clone(),
            };
            let call = call_in(cli, "proposals-micro-resolve", &scope);
            writer.engine.proposals().micro_resolve(&call, &input)?
        }
        ProposalsVerb::Micro(MicroVerb::Nudge { id }) => {
            let id = required("<MP-id>", id.as_ref())?;
            let call = call_in(cli, "proposals-micro-nudge", &scope);
            writer.engine.proposals().micro_nudge(&call, &id)?
        }
        ProposalsVerb::Micro(MicroVerb::BriefCycle) => {
            let call = call_in(cli, "proposals-micro-brief-cycle", &scope);
            writer.engine.proposals().brief_cycle(&call)?
        }
        ProposalsVerb::Create => {
            let input = create_input.ok_or_else(|| CliError::Usage("no payload".into()))?;
            let timezone = read_timezone(&dir)?;
            let call = call_in(cli, "proposals-create", &scope);
            writer.engine.proposals().create(&call, &timezone, &input)?
        }
        ProposalsVerb::Patch { file, sets, expect, stdin } => {
            let (mut sets, mut decision) = (sets.clone(), None);
            if *stdin {
                let (more, line) = parse_patch_stdin(&read_stdin()?);
                sets.extend(more);
                decision = line;
            }
            let input = PatchInput { file: file.clone(), sets, decision, expect: expect.clone() };
            let timezone = read_timezone(&dir)?;
            let call = call_in(cli, "proposals-patch", &scope);
            writer.engine.proposals().patch(&call, &timezone, &input)?
        }
        ProposalsVerb::Event { kind, id, action } => {
            let call = call_in(cli, "proposals-event", &scope);
            writer.engine.proposals().event(&call, kind, id.as_deref(), action.as_deref())?
        }
        ProposalsVerb::Accept(a) => status_move(cli, &writer, &scope, &dir, Move::Accept, a)?,
        ProposalsVerb::Defer(a) => status_move(cli, &writer, &scope, &dir, Move::Defer, a)?,
        ProposalsVerb::Dismiss(a) => status_move(cli, &writer, &scope, &dir, Move::Dismiss, a)?,
        ProposalsVerb::Resolve(a) => status_move(cli, &writer, &scope, &dir, Move::Resolve, a)?,
        ProposalsVerb::Queue
        | ProposalsVerb::List
        | ProposalsVerb::Ledger
        | ProposalsVerb::Index
        | ProposalsVerb::ResolveId { .. } => return Err(CliError::Usage("not a mutation".into())),
    };
    if let Some(mirror) = writer.mirror {
        writer.engine.proposals().mirror_end(mirror, &scope)?;
    }
    finish(cli, &outcome)
}

/// The stdin payloads of `queue-micro` and `create`; `None` when a create error was already
/// printed as upstream's verdict.
type Inputs = Option<(Option<MicroInput>, Option<CreateInput>)>;

fn read_inputs(cli: &Cli, verb: &ProposalsVerb) -> Result<Inputs, CliError> {
    Ok(match verb {
        ProposalsVerb::QueueMicro => Some((Some(parse_micro_input(&read_stdin()?)?), None)),
        ProposalsVerb::Create => match parse_create(&read_stdin()?) {
            Ok(input) => Some((None, Some(input))),
            Err(token) if cli.format == Format::Verdict => {
                print_raw(&format!("ERROR|{token}"))?;
                None
            }
            Err(token) => return Err(CliError::Invalid(format!("create: {token}"))),
        },
        _ => Some((None, None)),
    })
}

fn print_queue(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let queue = open(cli, Access::Read)?.proposals().queue(scope)?;
    let pending: Vec<Value> =
        queue.entries.iter().filter_map(|t| serde_json::from_str(t).ok()).collect();
    print(cli.format, &json!({ "ok": true, "pending": pending }))
}

fn print_list(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let engine = open(cli, Access::Read)?;
    let queue = engine.proposals().queue(scope)?;
    let pending: Vec<Value> =
        queue.entries.iter().filter_map(|t| serde_json::from_str(t).ok()).collect();
    let index = engine.proposals().index(scope)?;
    print(cli.format, &json!({ "ok": true, "micro": pending, "proposals": index }))
}

fn print_ledger(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let lines = open(cli, Access::Read)?.proposals().ledger(scope)?;
    let rows: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l).unwrap_or(json!(l))).collect();
    print(cli.format, &json!({ "ok": true, "ledger": rows }))
}

fn print_index(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let index = open(cli, Access::Read)?.proposals().index(scope)?;
    if cli.format == Format::Verdict {
        return print_raw(&format!("OK|{} proposals", index["count"]));
    }
    print(cli.format, &index)
}

fn print_resolve_id(cli: &Cli, scope: &str, input: &str) -> Result<(), CliError> {
    let verdict = open(cli, Access::Read)?.proposals().resolve_id(scope, input)?;
    if cli.format == Format::Verdict {
        return print_raw(&crate::output::one_line(&verdict));
    }
    print(cli.format, &json!({ "ok": true, "verdict": verdict }))
}

fn status_move(
    cli: &Cli,
    writer: &Writer,
    scope: &str,
    dir: &Path,
    action: Move,
    args: &MoveArgs,
) -> Result<Outcome, CliError> {
    let input = MoveInput {
        id: args.id.clone(),
        action,
        expect: args.expect.clone(),
        decision: args.decision.clone(),
        session: args.in_session.clone(),
    };
    let timezone = read_timezone(dir)?;
    let call = call_in(cli, "proposals-move", scope);
    Ok(writer.engine.proposals().move_status(&call, &timezone, &input)?)
}

/// Prints the outcome; a refusal exits 1, except in verdict mode, where upstream prints its
/// verdict line (`DUPLICATE`, `NONE|no-match`, `ERROR|…`) with exit 0.
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
            if cli.format != Format::Verdict
                || VERDICT_FAILING_REFUSALS.contains(&refusal.reason) =>
        {
            Err(CliError::Refused(refusal.message.clone()))
        }
        _ => Ok(()),
    }
}
