//! The moonshine verbs: `feedback …`, `hook stop`, and `import`/`export --layout moonshine`.
//!
//! Parses arguments and stdin into one engine call per verb and prints the result; the Stop
//! hook prints exactly what the upstream hook prints. Does not hold inbox rules, loop over
//! projects or touch the mirror; the engine's feedback handle does.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hookstate_engine::parse_stop_payload;
use hookstate_engine::Error as EngineError;
use hookstate_engine::{Call, Engine, MirrorReport, Outcome};
use hookstate_engine::{ClaimAsk, DrainAsk, FeedbackInput as Input, Pass, StopAsk, TickAsk};
use hookstate_engine::{ImportBatch, MoonshineImport, TickOff};
use serde::Serialize;

use crate::args::{Cli, DrainArgs, ExportArgs, FeedbackArgs, FeedbackVerb, HookVerb, ImportArgs};
use crate::args::{Layout, ReplyVia};
use crate::cmd::{
    call, call_in, command_for_model, db_path, finish, mutate, open, store_exists, warn_report,
    Access,
};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print;

/// The env var of the upstream kill switch.
const KILL_SWITCH_ENV: &str = "MOONSHINE_FEEDBACK";

fn kill_switch() -> Option<String> {
    crate::served::env_var(KILL_SWITCH_ENV).and_then(|v| v.into_string().ok())
}

fn home(given: Option<&PathBuf>) -> PathBuf {
    hookstate_engine::moonshine_home(
        given.map(PathBuf::as_path),
        super::home_dir(crate::served::env_var("HOME")).as_deref().map(std::path::Path::as_os_str),
    )
}

fn drain_ask(pass: Pass, drain: &DrainArgs, interval_s: u64) -> Result<DrainAsk, CliError> {
    Ok(DrainAsk { pass, holder: drain.holder.clone(), stale_ms: stale_ms(drain)?, interval_s })
}

/// `--stale-after-s` in ms, refused (exit 3) in the seconds it was given when past its bound.
fn stale_ms(drain: &DrainArgs) -> Result<u64, CliError> {
    const MAX_S: u64 = hookstate_engine::STALE_MS_MAX / 1000;
    let s = drain.stale_after_s;
    if s > MAX_S {
        let what = "--stale-after-s";
        return Err(
            EngineError::OutOfRange { what, value: s, min: 0, max: MAX_S, unit: " s" }.into()
        );
    }
    Ok(s * 1000)
}

/// Prints a read's result with `"ok": true` after its fields.
fn print_ok(cli: &Cli, result: &impl Serialize) -> Result<(), CliError> {
    let mut value = serde_json::to_value(result)
        .map_err(|e| CliError::Failed(format!("result does not serialise: {e}")))?;
    if let Some(map) = value.as_object_mut() {
        map.insert("ok".into(), true.into());
    }
    print(cli.format, &value)
}

fn print_json(cli: &Cli, result: &impl Serialize) -> Result<(), CliError> {
    let value = serde_json::to_value(result)
        .map_err(|e| CliError::Failed(format!("result does not serialise: {e}")))?;
    print(cli.format, &value)
}

pub(crate) fn run(cli: &Cli, args: &FeedbackArgs) -> Result<(), CliError> {
    if let FeedbackVerb::Tick { drain, interval_s, moonshine_home } = &args.verb {
        return tick(cli, args, drain, *interval_s, moonshine_home.as_ref());
    }
    let scope =
        hookstate_engine::scope_for(args.project.as_deref(), &cli.scope).ok_or_else(|| {
            CliError::Usage(
                "give --project P (or --scope moonshine:P) for this feedback verb".into(),
            )
        })?;
    match &args.verb {
        FeedbackVerb::List => {
            return print_ok(cli, &open(cli, Access::Read)?.feedback().list(&scope)?)
        }
        FeedbackVerb::Show { id } => {
            return print_ok(cli, &open(cli, Access::Read)?.feedback().show(&scope, id)?)
        }
        _ => {}
    }
    let comment = match &args.verb {
        FeedbackVerb::Add { comment, source, .. } => match (comment, source.stdin) {
            (Some(text), false) => text.clone(),
            (None, true) => read_stdin()?,
            _ => return Err(CliError::Usage("give the comment or --stdin, not both".into())),
        },
        _ => String::new(),
    };
    let claim = match &args.verb {
        FeedbackVerb::Claim { id, all, drain } => Some(ClaimAsk {
            holder: drain.holder.clone(),
            id: id.clone(),
            all: *all,
            stale_ms: stale_ms(drain)?,
        }),
        _ => None,
    };
    let call = call_in(cli, hook_name(&args.verb), &scope);
    // Bad input is refused before the store is opened (or created).
    let input = input(&args.verb, &comment, claim.as_ref())
        .ok_or_else(|| CliError::Usage("not a feedback mutation".into()))?;
    hookstate_engine::check_feedback(&call, &input)?;
    let engine = open(cli, Access::Write)?;
    let outcome = mutate(cli, &engine, &call, Layout::Moonshine, |engine| {
        mutation(engine, &call, &args.verb, &comment, claim.as_ref())
    })?;
    finish(cli, &outcome)
}

fn hook_name(verb: &FeedbackVerb) -> &'static str {
    match verb {
        FeedbackVerb::Add { .. } => "feedback-add",
        FeedbackVerb::Claim { .. } => "feedback-claim",
        FeedbackVerb::Reply { .. } => "feedback-reply",
        FeedbackVerb::Dismiss { .. } => "feedback-dismiss",
        FeedbackVerb::Control { .. } => "feedback-control",
        FeedbackVerb::Address { .. } => "feedback-address",
        FeedbackVerb::Heartbeat { .. } => "feedback-heartbeat",
        _ => "feedback-tick",
    }
}

/// The input [`hookstate_engine::check`] checks for a mutating verb; `None` for the others.
fn input<'a>(
    verb: &'a FeedbackVerb,
    comment: &'a str,
    claim: Option<&'a ClaimAsk>,
) -> Option<Input<'a>> {
    Some(match (verb, claim) {
        (FeedbackVerb::Add { target, .. }, _) => Input::Add { target, comment },
        (FeedbackVerb::Claim { .. }, Some(ask)) => Input::Claim(ask),
        (FeedbackVerb::Reply { id, reply, .. }, _) => Input::Reply { id, reply },
        (FeedbackVerb::Dismiss { id }, _) => Input::Dismiss { id },
        (FeedbackVerb::Control { mode, for_session }, _) => {
            Input::Control { mode, session: for_session.as_deref() }
        }
        (FeedbackVerb::Address { for_session }, _) => {
            Input::Address { session: for_session.as_deref() }
        }
        (FeedbackVerb::Heartbeat { mode, interval_s }, _) => {
            Input::Heartbeat { mode: mode.as_deref(), interval_s: *interval_s }
        }
        _ => return None,
    })
}

/// The engine call of a mutating verb.
fn mutation(
    engine: &Engine,
    call: &Call,
    verb: &FeedbackVerb,
    comment: &str,
    claim: Option<&ClaimAsk>,
) -> hookstate_engine::Result<Outcome> {
    let fb = engine.feedback();
    match (verb, claim) {
        (FeedbackVerb::Add { target, .. }, _) => fb.add(call, target, comment),
        (FeedbackVerb::Claim { .. }, Some(ask)) => fb.claim(call, ask),
        (FeedbackVerb::Reply { id, token, reply }, _) => fb.reply(call, id, *token, reply),
        (FeedbackVerb::Dismiss { id }, _) => fb.dismiss(call, id),
        (FeedbackVerb::Control { mode, for_session }, _) => {
            fb.control(call, mode, for_session.as_deref())
        }
        (FeedbackVerb::Address { for_session }, _) => fb.address(call, for_session.as_deref()),
        (FeedbackVerb::Heartbeat { mode, interval_s }, _) => {
            fb.heartbeat(call, mode.as_deref(), *interval_s)
        }
        _ => Err(hookstate_engine::Error::Invalid("not a feedback mutation".into())),
    }
}

fn tick(
    cli: &Cli,
    args: &FeedbackArgs,
    drain: &DrainArgs,
    interval_s: u64,
    moonshine_home: Option<&PathBuf>,
) -> Result<(), CliError> {
    if !hookstate_engine::moonshine_enabled(kill_switch().as_deref()) {
        return print_json(cli, &TickOff::ANSWER);
    }
    let ask = TickAsk {
        project: args.project.clone(),
        drain: drain_ask(Pass::Tick, drain, interval_s)?,
        home: home(moonshine_home),
    };
    let call = call(cli, "feedback-tick");
    hookstate_engine::check_feedback(&call, &Input::Drain(&ask.drain))?;
    // Over every project, with no mirror and no store, there is no project to pass over: the
    // tick runs on the empty store a read sees, and makes none.
    let access = match args.project.is_none() && cli.mirror.is_none() {
        true if !store_exists(cli, &db_path(cli)?)? => Access::Read,
        _ => Access::Write,
    };
    let tick = open(cli, access)?.feedback().tick(&call, &ask, cli.mirror.as_deref())?;
    print_json(cli, &tick)?;
    warn(tick.mirror.as_ref());
    Ok(())
}

fn warn(report: Option<&MirrorReport>) {
    if let Some(report) = report {
        warn_report(report);
    }
}

pub(crate) fn hook(cli: &Cli, verb: &HookVerb) -> Result<(), CliError> {
    let HookVerb::Stop { drain, moonshine_home, reply_via } = verb else {
        return Err(CliError::Usage("not the Stop hook".into()));
    };
    if !hookstate_engine::moonshine_enabled(kill_switch().as_deref()) {
        return Ok(());
    }
    let payload = parse_stop_payload(&read_stdin()?).map_err(CliError::Invalid)?;
    // With HOME unset and no --db there is no default store, so nothing to deliver: the hook
    // allows the stop (exit 0) rather than fail the stop with a usage error.
    let Ok(db) = db_path(cli) else {
        return Ok(());
    };
    if payload.stop_hook_active || !store_exists(cli, &db)? {
        return Ok(());
    }
    let mut call = call(cli, "Stop");
    call.actor.session = payload.session_id.clone().or_else(|| cli.session.clone());
    let via = match reply_via {
        ReplyVia::Hookstate => hookstate_engine::ReplyVia::Hookstate,
        ReplyVia::Files => hookstate_engine::ReplyVia::Files,
    };
    let ask = StopAsk {
        drain: drain_ask(Pass::Stop, drain, hookstate_engine::HEARTBEAT_INTERVAL_S_DEFAULT)?,
        home: home(moonshine_home.as_ref()),
        via,
        command: command_for_model(cli),
    };
    hookstate_engine::check_feedback(&call, &Input::Drain(&ask.drain))?;
    let idle = match &cli.mirror {
        None => open(cli, Access::Read)?.feedback().stop_idle(&call, &ask)?,
        Some(_) => None,
    };
    let stop = match idle {
        Some(stop) => stop,
        None => open(cli, Access::Write)?.feedback().stop(&call, &ask, cli.mirror.as_deref())?,
    };
    warn(stop.mirror.as_ref());
    let Some(text) = stop.output else {
        return Ok(());
    };
    let mut out = crate::output::stdout();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

pub(crate) fn import(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    // Every file is read and checked before the store is opened, so a bad file changes nothing.
    let import = MoonshineImport::read(&args.from, args.project.as_deref())?;
    let imported = match import.refused() {
        Some(refused) => refused,
        None => {
            let engine = open(cli, Access::Write)?;
            let call = call(cli, "import");
            let batch = ImportBatch::default();
            if crate::progress::stderr_is_terminal() {
                let interval = Duration::from_millis(crate::progress::PROGRESS_INTERVAL_MS);
                let mut line = crate::progress::Line::new(std::io::stderr(), interval);
                let imported = engine.feedback().import_batched(&call, import, batch, &mut |p| {
                    line.import(p, Instant::now());
                });
                line.finish();
                imported?
            } else {
                engine.feedback().import_batched(&call, import, batch, &mut |_| {})?
            }
        }
    };
    print_json(cli, &imported)?;
    match imported.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

pub(crate) fn export(cli: &Cli, args: &ExportArgs) -> Result<(), CliError> {
    let engine = open(cli, Access::Export)?;
    print_json(cli, &engine.feedback().export(&args.to, args.project.as_deref())?)
}
