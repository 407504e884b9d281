//! The moonshine verbs: `feedback …`, `hook stop`, and `import`/`export --layout moonshine`.
//!
//! Each turns its arguments into one engine call per project and prints the result; the Stop
//! hook prints exactly what the upstream hook prints. Does not hold inbox rules.

use std::io::Write;
use std::path::{Path, PathBuf};

use hookstate_engine::feedback::layout::anchor_matches;
use hookstate_engine::feedback::layout::MoonshineImport;
use hookstate_engine::feedback::{self, ClaimAsk, DrainAsk, Input, Pass};
use hookstate_engine::schema::validate_id;
use hookstate_engine::stdin::parse_stop_payload;
use hookstate_engine::{Call, Engine, Outcome, Refusal};
use serde_json::{json, Value};

use crate::args::{
    Cli, DrainArgs, ExportArgs, FeedbackArgs, FeedbackVerb, HookVerb, ImportArgs, Layout, ReplyVia,
};
use crate::cmd::{call, db_path, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print;

/// The values of `MOONSHINE_FEEDBACK` that switch the adapters off (the upstream kill switch).
const KILL_SWITCH_OFF: [&str; 7] = ["0", "off", "OFF", "false", "FALSE", "no", "NO"];
/// Where moonshine keeps its projects, under `$HOME`, when MOONSHINE_HOME is not set.
const MOONSHINE_HOME_DEFAULT: &str = ".agent/moonshine";

/// One engine mutation, run with the call once the store is open.
type Mutation<'a> = dyn Fn(&Engine, &Call) -> hookstate_engine::Result<Outcome> + 'a;

fn switched_off() -> bool {
    std::env::var("MOONSHINE_FEEDBACK").is_ok_and(|v| KILL_SWITCH_OFF.contains(&v.as_str()))
}

fn scope_of(cli: &Cli, project: Option<&String>) -> Option<String> {
    match project {
        Some(project) => Some(format!("moonshine:{project}")),
        None => cli.scope.starts_with("moonshine:").then(|| cli.scope.clone()),
    }
}

fn need_scope(cli: &Cli, project: Option<&String>) -> Result<String, CliError> {
    scope_of(cli, project).ok_or_else(|| {
        CliError::Usage("give --project P (or --scope moonshine:P) for this feedback verb".into())
    })
}

fn scoped_call(cli: &Cli, hook: &str, scope: &str) -> Call {
    Call { scope: scope.to_owned(), ..call(cli, hook) }
}

fn holder(cli: &Cli, drain: &DrainArgs, session: Option<&str>) -> String {
    drain
        .holder
        .clone()
        .or_else(|| session.map(str::to_owned))
        .or_else(|| cli.session.clone())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}

/// Keeps the mirror current after a call: writes what the store changed, leaving alone any file
/// a direct writer changed since `seen` was read (the next call adopts it).
fn mirror(
    engine: &Engine,
    to: Option<&PathBuf>,
    scope: &str,
    seen: Option<&MoonshineImport>,
) -> Result<(), CliError> {
    if let (Some(to), Some(project)) = (to, scope.strip_prefix("moonshine:")) {
        engine.feedback().export(to, Some(project), seen)?;
    }
    Ok(())
}

/// Adopts what programs writing the mirror directly changed, before the verb runs; returns what
/// the mirror held.
fn adopt(
    cli: &Cli,
    engine: &Engine,
    mirror: Option<&PathBuf>,
    scope: Option<&str>,
) -> Result<Option<MoonshineImport>, CliError> {
    let Some(mirror) = mirror else {
        return Ok(None);
    };
    let only = scope.and_then(|s| s.strip_prefix("moonshine:"));
    let found = MoonshineImport::read_mirror(mirror, only)?;
    let (mut result, refusal) = engine.feedback().adopt(&call(cli, "mirror-adopt"), &found)?;
    match refusal {
        None => Ok(Some(found)),
        Some(refusal) => refused(cli, &mut result, refusal).map(|()| None),
    }
}

/// Prints a multi-project result with its refusal, and exits 1 (`Refused`).
fn refused(cli: &Cli, result: &mut Value, refusal: Refusal) -> Result<(), CliError> {
    if let Some(map) = result.as_object_mut() {
        map.insert("ok".into(), false.into());
        map.insert("refused".into(), refusal.reason.into());
        map.extend(refusal.details);
    }
    print(cli.format, result)?;
    Err(CliError::Refused(refusal.message))
}

fn finish(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    print(cli.format, &outcome.to_json())?;
    match &outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message.clone())),
        None => Ok(()),
    }
}

pub(crate) fn run(cli: &Cli, args: &FeedbackArgs) -> Result<(), CliError> {
    let project = args.project.as_ref();
    if let FeedbackVerb::Tick { drain, interval_s, moonshine_home: home } = &args.verb {
        return tick(cli, args, drain, *interval_s, &moonshine_home(home.as_ref()));
    }
    let scope = need_scope(cli, project)?;
    let read = |f: &dyn Fn(&Engine) -> hookstate_engine::Result<Value>| -> Result<(), CliError> {
        let engine = open(cli, Access::Read)?;
        let mut value = f(&engine)?;
        if let Some(map) = value.as_object_mut() {
            map.insert("ok".into(), true.into());
        }
        print(cli.format, &value)
    };
    let claim_ask: ClaimAsk;
    let add_comment: String;
    let (hook, input, act): (&str, Input<'_>, Box<Mutation<'_>>) = match &args.verb {
        FeedbackVerb::List => return read(&|e| e.feedback().list(&scope)),
        FeedbackVerb::Show { id } => return read(&|e| e.feedback().show(&scope, id)),
        FeedbackVerb::Add { target, comment, source } => {
            add_comment = match (comment, source.stdin) {
                (Some(text), false) => text.clone(),
                (None, true) => read_stdin()?,
                _ => return Err(CliError::Usage("give the comment or --stdin, not both".into())),
            };
            let comment = &add_comment;
            let input = Input::Add { target, comment };
            ("feedback-add", input, Box::new(move |e, c| e.feedback().add(c, target, comment)))
        }
        FeedbackVerb::Claim { id, all, drain } => {
            claim_ask = ClaimAsk {
                holder: holder(cli, drain, None),
                id: id.clone(),
                all: *all,
                stale_ms: drain.stale_after_s.saturating_mul(1000),
            };
            let ask = &claim_ask;
            ("feedback-claim", Input::Claim(ask), Box::new(move |e, c| e.feedback().claim(c, ask)))
        }
        FeedbackVerb::Reply { id, token, reply } => {
            let input = Input::Reply { id, reply };
            (
                "feedback-reply",
                input,
                Box::new(move |e, c| e.feedback().reply(c, id, *token, reply)),
            )
        }
        FeedbackVerb::Dismiss { id } => (
            "feedback-dismiss",
            Input::Dismiss { id },
            Box::new(move |e, c| e.feedback().dismiss(c, id)),
        ),
        FeedbackVerb::Control { mode, for_session } => (
            "feedback-control",
            Input::Control { mode, session: for_session.as_deref() },
            Box::new(move |e, c| e.feedback().control(c, mode, for_session.as_deref())),
        ),
        FeedbackVerb::Address { for_session } => (
            "feedback-address",
            Input::Address { session: for_session.as_deref() },
            Box::new(move |e, c| e.feedback().address(c, for_session.as_deref())),
        ),
        FeedbackVerb::Heartbeat { mode, interval_s } => (
            "feedback-heartbeat",
            Input::Heartbeat { mode: mode.as_deref(), interval_s: *interval_s },
            Box::new(move |e, c| e.feedback().heartbeat(c, mode.as_deref(), *interval_s)),
        ),
        FeedbackVerb::Tick { .. } => return Ok(()),
    };
    let call = scoped_call(cli, hook, &scope);
    // Bad input is refused before the store is opened (or created).
    feedback::check(&call, &input)?;
    let engine = open(cli, Access::Write)?;
    let seen = adopt(cli, &engine, cli.mirror.as_ref(), Some(&scope))?;
    let outcome = act(&engine, &call)?;
    mirror(&engine, cli.mirror.as_ref(), &scope, seen.as_ref())?;
    finish(cli, &outcome)
}

/// Checks a drain's holder, session and window before the store is opened.
fn check_drain(ask: &DrainAsk, session: Option<&str>) -> Result<(), CliError> {
    let invalid = |e: hookstate_engine::schema::IdError| CliError::Invalid(e.to_string());
    validate_id("holder", &ask.holder).map_err(invalid)?;
    session.map_or(Ok(()), |s| validate_id("session", s)).map_err(invalid)?;
    if ask.interval_s == 0 || ask.interval_s > feedback::INTERVAL_S_MAX {
        let max = feedback::INTERVAL_S_MAX;
        return Err(CliError::Invalid(format!(
            "interval {} s is outside 1..={max}",
            ask.interval_s
        )));
    }
    if ask.stale_ms > feedback::STALE_MS_MAX {
        let max = feedback::STALE_MS_MAX;
        return Err(CliError::Invalid(format!("stale window {} ms is over {max}", ask.stale_ms)));
    }
    Ok(())
}

/// Drains every project (or one) as `pass`; returns each project's result.
fn drain_all(
    cli: &Cli,
    engine: &Engine,
    scope: Option<String>,
    ask: &DrainAsk,
    session: Option<&str>,
    mirror_to: Option<(&PathBuf, &MoonshineImport)>,
) -> Result<Vec<Value>, CliError> {
    let scopes = match scope {
        Some(scope) => vec![scope],
        None => {
            engine.feedback().projects()?.into_iter().map(|p| format!("moonshine:{p}")).collect()
        }
    };
    let hook = if ask.pass == Pass::Stop { "Stop" } else { "feedback-tick" };
    let mut results = Vec::new();
    for scope in scopes {
        let mut call = scoped_call(cli, hook, &scope);
        if let Some(session) = session {
            call.actor.session = Some(session.to_owned());
        }
        let outcome = engine.feedback().drain(&call, ask)?;
        if let Some((to, seen)) = mirror_to {
            mirror(engine, Some(to), &scope, Some(seen))?;
        }
        results.push(Value::Object(outcome.result));
    }
    Ok(results)
}

fn tick(
    cli: &Cli,
    args: &FeedbackArgs,
    drain: &DrainArgs,
    interval_s: u64,
    home: &Path,
) -> Result<(), CliError> {
    if switched_off() {
        return print(cli.format, &json!({ "ok": true, "disabled": true, "continue": false }));
    }
    let session = cli.session.as_deref();
    let ask = DrainAsk {
        pass: Pass::Tick,
        holder: holder(cli, drain, session),
        stale_ms: drain.stale_after_s.saturating_mul(1000),
        interval_s,
    };
    check_drain(&ask, session)?;
    let engine = open(cli, Access::Write)?;
    let scope = scope_of(cli, args.project.as_ref());
    let seen = adopt(cli, &engine, cli.mirror.as_ref(), scope.as_deref())?;
    let mirror_to = cli.mirror.as_ref().zip(seen.as_ref());
    let results = drain_all(cli, &engine, scope, &ask, session, mirror_to)?;
    let go_on = results.iter().any(|r| r["continue"].as_bool() == Some(true));
    let claimed: Vec<Value> = results
        .iter()
        .flat_map(|r| {
            let project = r["project"].clone();
            r["claimed"].as_array().cloned().unwrap_or_default().into_iter().map(move |mut c| {
                let name = project.as_str().unwrap_or_default();
                c["anchor_matches"] = anchor_matches(home, name, &c["target"]).into();
                c["project"] = project.clone();
                c
            })
        })
        .collect();
    print(
        cli.format,
        &json!({ "ok": true, "claimed": claimed, "projects": results, "continue": go_on }),
    )
}

fn moonshine_home(given: Option<&PathBuf>) -> PathBuf {
    given.cloned().unwrap_or_else(|| {
        let home = std::env::var_os("HOME").unwrap_or_default();
        Path::new(&home).join(MOONSHINE_HOME_DEFAULT)
    })
}

pub(crate) fn hook(cli: &Cli, verb: &HookVerb) -> Result<(), CliError> {
    let HookVerb::Stop { drain, moonshine_home: home, reply_via } = verb else {
        return Err(CliError::Usage("not the Stop hook".into()));
    };
    let mirror_to = &cli.mirror;
    if switched_off() {
        return Ok(());
    }
    let payload = parse_stop_payload(&read_stdin()?).map_err(CliError::Invalid)?;
    // With HOME unset and no --db there is no default store, so nothing to deliver: the hook
    // allows the stop (exit 0) rather than fail the stop with a usage error.
    let Ok(db) = db_path(cli) else {
        return Ok(());
    };
    if payload.stop_hook_active || !db.exists() {
        return Ok(());
    }
    let session = payload.session_id.as_deref().or(cli.session.as_deref());
    let ask = DrainAsk {
        pass: Pass::Stop,
        holder: holder(cli, drain, session),
        stale_ms: drain.stale_after_s.saturating_mul(1000),
        interval_s: feedback::HEARTBEAT_INTERVAL_S_DEFAULT,
    };
    check_drain(&ask, session)?;
    if mirror_to.is_none() {
        if let Some(results) = idle_stop(cli, &ask, session)? {
            return print_stop(cli, &results, home.as_ref(), *reply_via);
        }
    }
    let engine = open(cli, Access::Write)?;
    let seen = adopt(cli, &engine, mirror_to.as_ref(), None)?;
    let mirror_to = mirror_to.as_ref().zip(seen.as_ref());
    let results = drain_all(cli, &engine, None, &ask, session, mirror_to)?;
    print_stop(cli, &results, home.as_ref(), *reply_via)
}

/// Every project's Stop pass decided on a read-only open, when none of them has anything to
/// append (the common case); `None` when one has, and the store must be opened for writing.
fn idle_stop(
    cli: &Cli,
    ask: &DrainAsk,
    session: Option<&str>,
) -> Result<Option<Vec<Value>>, CliError> {
    let engine = open(cli, Access::Read)?;
    let mut results = Vec::new();
    for project in engine.feedback().projects()? {
        let mut call = scoped_call(cli, "Stop", &format!("moonshine:{project}"));
        call.actor.session = session.map(str::to_owned);
        match engine.feedback().drain_idle(&call, ask)? {
            Some(outcome) => results.push(Value::Object(outcome.result)),
            None => return Ok(None),
        }
    }
    Ok(Some(results))
}

/// Prints what the upstream Stop hook prints for these results: nothing, or the block object.
fn print_stop(
    cli: &Cli,
    results: &[Value],
    home: Option<&PathBuf>,
    reply_via: ReplyVia,
) -> Result<(), CliError> {
    let via = match reply_via {
        ReplyVia::Hookstate => feedback::ReplyVia::Hookstate,
        ReplyVia::Files => feedback::ReplyVia::Files,
    };
    let home = moonshine_home(home);
    let command = crate::cmd::command_for_model(cli);
    let home = home.display().to_string();
    let Some(text) = feedback::stop_reason(results, &home, via, &command) else {
        return Ok(());
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

pub(crate) fn import(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    debug_assert_eq!(args.layout, Layout::Moonshine);
    let call = call(cli, "import");
    // Every file is read and checked before the store is opened, so a bad file changes nothing.
    let import = MoonshineImport::read(&args.from, args.project.as_deref())?;
    if let Some((project, name)) = import.live_claim() {
        let result = json!({ "ok": false, "refused": "claim_in_progress", "project": project });
        print(cli.format, &result)?;
        return Err(CliError::Refused(format!(
            "{name} of project {project} is claimed by a live process; retry"
        )));
    }
    let engine = open(cli, Access::Write)?;
    let (mut result, refusal) = engine.feedback().import(&call, import)?;
    if let Some(refusal) = refusal {
        return refused(cli, &mut result, refusal);
    }
    if let Some(map) = result.as_object_mut() {
        map.insert("ok".into(), true.into());
    }
    print(cli.format, &result)
}

pub(crate) fn export(cli: &Cli, args: &ExportArgs) -> Result<(), CliError> {
    debug_assert_eq!(args.layout, Layout::Moonshine);
    let engine = open(cli, Access::Export)?;
    let mut result = engine.feedback().export(&args.to, args.project.as_deref(), None)?;
    if let Some(map) = result.as_object_mut() {
        map.insert("ok".into(), true.into());
    }
    print(cli.format, &result)
}
