//! The `proposals` verbs: drop-ins for `proposal.ts queue-micro`, `proposal.ts micro
//! resolve | nudge | brief-cycle`, `create` and `index`, PROP status moves, and reads of the
//! queue and the ledger.
//!
//! Parses arguments and stdin into one engine call per verb; with `--mirror DIR` the call is
//! mirrored over the whole state directory. Does not decide anything: the engine sets each
//! verdict line, and which refusals upstream prints with exit 0.

use std::io::Write;

use hookstate_engine::{hermit_create, hermit_dir, hermit_patch, hermit_summary, template_refused};
use hookstate_engine::{parse_create, parse_micro_input, parse_patch_stdin};
use hookstate_engine::{CreateInput, MicroInput, Move, MoveInput, PatchInput, ResolveInput};
use hookstate_engine::{Engine, Outcome};

use crate::args::{Cli, Format, Layout, MicroVerb, MoveArgs, ProposalsArgs, ProposalsVerb};
use crate::cmd::hermit::hermit_scope;
use crate::cmd::{call_in, finish_script, mutate, open, print_read, Access};
use crate::exit::CliError;
use crate::input::{read_stdin, read_stdin_text};
use crate::output::{print, print_raw};

fn required(what: &str, value: Option<&String>) -> Result<String, CliError> {
    value.cloned().ok_or_else(|| CliError::Invalid(format!("missing {what}")))
}

pub(crate) fn run(cli: &Cli, args: &ProposalsArgs) -> Result<(), CliError> {
    // Its state directory, when it has one, is one of its words.
    if let ProposalsVerb::SuccessSignal { args } = &args.verb {
        let answer = read(cli)?.session().success_signal(args)?;
        return print_text(&answer.stdout, answer.exit);
    }
    let scope = hermit_scope(cli, args.dir.as_deref())?;
    let read = || read_dir(cli, &scope);
    match &args.verb {
        ProposalsVerb::Queue => return print_read(cli, &read()?.proposals().pending(&scope)?),
        ProposalsVerb::List => return print_read(cli, &read()?.proposals().list(&scope)?),
        ProposalsVerb::Ledger => {
            return print_read(cli, &read()?.proposals().ledger_rows(&scope)?);
        }
        ProposalsVerb::Index => {
            let index = read()?.proposals().index(&scope)?;
            if cli.format == Format::Verdict {
                return print_raw(&index.verdict);
            }
            return print(cli.format, &index.index);
        }
        ProposalsVerb::Metrics { source } => {
            let metrics = read()?.proposals().metrics(&scope, source.as_deref())?;
            if cli.format == Format::Verdict {
                return print_text(&metrics.verdict, crate::exit::OK);
            }
            return print_read(cli, &metrics);
        }
        ProposalsVerb::ResolveId { input } => {
            return print_read(cli, &read()?.proposals().resolve_id(&scope, input)?);
        }
        _ => {}
    }
    // Stdin is read and checked before the store is opened, so bad input leaves it untouched.
    let input = match read_input(cli, &scope, &args.verb)? {
        Some(input) => input,
        None => return Ok(()),
    };
    let call = call_in(cli, hook_name(&args.verb), &scope);
    let engine = open(cli, Access::Write)?;
    let mut warnings = Vec::new();
    let outcome = mutate(cli, &engine, &call, Layout::HermitProposals, |engine| {
        // Upstream's create and patch also write a session row (SHELL.md's Findings line, the
        // compact marker): one composed engine call, inside the same mirrored call.
        let composed = match (&args.verb, input) {
            (ProposalsVerb::Create { .. }, Input::Create(input)) if cli.mirror.is_some() => {
                hermit_create(engine, &call, &input)?
            }
            (ProposalsVerb::Patch { request_compact: true, .. }, Input::Patch(input)) => {
                hermit_patch(engine, &call, &input, true)?
            }
            (verb_, input) => return verb(engine, &call, verb_, input),
        };
        warnings = composed.warnings;
        Ok(composed.outcome)
    })?;
    for warning in &warnings {
        let _ = writeln!(std::io::stderr(), "WARN: {warning}");
    }
    // Upstream's create ends by regenerating state/state-summary.md, after its writes landed.
    if let (ProposalsVerb::Create { .. }, Some(dir), None) =
        (&args.verb, cli.mirror.as_deref(), &outcome.refusal)
    {
        for line in hermit_summary(dir, call.now_ms) {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
    finish_script(cli, &outcome)
}

/// `create --require-template`'s check of the scope's state directory, before anything is
/// opened.
fn template_refusal(
    scope: &str,
    require: bool,
) -> Result<Option<hookstate_engine::CreateRefused>, CliError> {
    if !require {
        return Ok(None);
    }
    Ok(template_refused(&hermit_dir(scope)?)?)
}

/// Prints upstream's whole stdout as it is and ends with its exit code.
fn print_text(text: &str, code: u8) -> Result<(), CliError> {
    std::io::Write::write_all(&mut crate::output::stdout(), text.as_bytes())
        .map_err(|source| CliError::Io { op: "write the verdict".into(), source })?;
    match code {
        crate::exit::OK => Ok(()),
        other => Err(CliError::Quiet(other)),
    }
}

fn read(cli: &Cli) -> Result<std::sync::Arc<Engine>, CliError> {
    open(cli, Access::Read)
}

/// The store a read of the state directory's proposals answers from. With `--mirror DIR` (the
/// drop-in's default) what was written into the directory since the last mirrored call is
/// adopted first, and the files brought up to date, as for a write: upstream's scripts read the
/// files, and the first reads after the shim answered from a store that had adopted none of
/// them (`index`: `OK|0 proposals` beside two proposals).
fn read_dir(cli: &Cli, scope: &str) -> Result<std::sync::Arc<Engine>, CliError> {
    if cli.mirror.is_none() {
        return read(cli);
    }
    let engine = open(cli, Access::Write)?;
    // A read binds no idempotency key: the adoption is not the call's answer.
    let mut call = call_in(cli, "proposals-read", scope);
    call.idem_key = None;
    call.fingerprint = None;
    let adopted = mutate(cli, &engine, &call, Layout::HermitProposals, |engine| {
        Ok(Outcome {
            result: serde_json::Map::new(),
            refusal: None,
            head: engine.head()?,
            appended: 0,
            replayed: false,
            mirror: None,
        })
    })?;
    crate::cmd::warn_conflicts(&adopted);
    Ok(engine)
}

/// A mutation's stdin and arguments, checked.
enum Input {
    None,
    Micro(MicroInput),
    Create(CreateInput),
    Resolve(ResolveInput),
    Id(String),
    Patch(PatchInput),
}

/// The checked input of a mutation; `None` when a create's refusal was already printed as
/// upstream's verdict.
fn read_input(cli: &Cli, scope: &str, verb: &ProposalsVerb) -> Result<Option<Input>, CliError> {
    Ok(Some(match verb {
        ProposalsVerb::QueueMicro => Input::Micro(parse_micro_input(&read_stdin()?)?),
        ProposalsVerb::Create { require_template } => match parse_create(&read_stdin()?) {
            Ok(input) => match template_refusal(scope, *require_template)? {
                Some(refused) if cli.format == Format::Verdict => {
                    print_raw(&refused.verdict())?;
                    return Ok(None);
                }
                Some(refused) => return Err(CliError::Invalid(refused.to_string())),
                None => Input::Create(input),
            },
            Err(refused) if cli.format == Format::Verdict => {
                print_raw(&refused.verdict())?;
                return Ok(None);
            }
            Err(refused) => return Err(CliError::Invalid(refused.to_string())),
        },
        ProposalsVerb::Micro(MicroVerb::Resolve { id, action, answer, channel }) => {
            Input::Resolve(ResolveInput {
                id: required("<MP-id>", id.as_ref())?,
                action: required("--action", action.as_ref())?,
                answer: answer.clone(),
                channel: channel.clone(),
            })
        }
        ProposalsVerb::Micro(MicroVerb::Nudge { id }) => {
            Input::Id(required("<MP-id>", id.as_ref())?)
        }
        ProposalsVerb::Patch { file, sets, expect, stdin, .. } => {
            let (mut sets, mut decision) = (sets.clone(), None);
            if *stdin {
                // Upstream's one stdin-optional verb: an empty stdin patches nothing more.
                let (more, line) = parse_patch_stdin(&read_stdin_text()?);
                sets.extend(more);
                decision = line;
            }
            Input::Patch(PatchInput { file: file.clone(), sets, decision, expect: expect.clone() })
        }
        _ => Input::None,
    }))
}

fn hook_name(verb: &ProposalsVerb) -> &'static str {
    match verb {
        ProposalsVerb::QueueMicro => "proposals-queue-micro",
        ProposalsVerb::Micro(MicroVerb::Resolve { .. }) => "proposals-micro-resolve",
        ProposalsVerb::Micro(MicroVerb::Nudge { .. }) => "proposals-micro-nudge",
        ProposalsVerb::Micro(MicroVerb::BriefCycle) => "proposals-micro-brief-cycle",
        ProposalsVerb::Create { .. } => "proposals-create",
        ProposalsVerb::Patch { .. } => "proposals-patch",
        ProposalsVerb::Event { .. } => "proposals-event",
        _ => "proposals-move",
    }
}

/// The one engine call of a mutation.
fn verb(
    engine: &Engine,
    call: &hookstate_engine::Call,
    verb: &ProposalsVerb,
    input: Input,
) -> hookstate_engine::Result<Outcome> {
    let proposals = engine.proposals();
    let status = |action: Move, args: &MoveArgs| {
        let input = MoveInput {
            id: args.id.clone(),
            action,
            expect: args.expect.clone(),
            decision: args.decision.clone(),
            session: args.in_session.clone(),
        };
        proposals.move_status(call, &input)
    };
    match (verb, input) {
        (ProposalsVerb::QueueMicro, Input::Micro(input)) => proposals.queue_micro(call, &input),
        (ProposalsVerb::Micro(MicroVerb::Resolve { .. }), Input::Resolve(input)) => {
            proposals.micro_resolve(call, &input)
        }
        (ProposalsVerb::Micro(MicroVerb::Nudge { .. }), Input::Id(id)) => {
            proposals.micro_nudge(call, &id)
        }
        (ProposalsVerb::Micro(MicroVerb::BriefCycle), _) => proposals.brief_cycle(call),
        (ProposalsVerb::Create { .. }, Input::Create(input)) => proposals.create(call, &input),
        (ProposalsVerb::Patch { .. }, Input::Patch(input)) => proposals.patch(call, &input),
        (ProposalsVerb::Event { kind, id, action }, _) => {
            proposals.event(call, kind, id.as_deref(), action.as_deref())
        }
        (ProposalsVerb::Accept(args), _) => status(Move::Accept, args),
        (ProposalsVerb::Defer(args), _) => status(Move::Defer, args),
        (ProposalsVerb::Dismiss(args), _) => status(Move::Dismiss, args),
        (ProposalsVerb::Resolve(args), _) => status(Move::Resolve, args),
        _ => Err(not_a_mutation()),
    }
}

fn not_a_mutation() -> hookstate_engine::Error {
    hookstate_engine::Error::BadInput { what: "the verb".into(), why: "is not a mutation".into() }
}
