//! `hookstate hook <event>`: reads a Claude Code hook payload on stdin and does that hook's job.
//! Hook verbs print only what the hook has to act on, or nothing: `turn-complete` prints the
//! PM's line as `{"to", "text", "turn_seq", ...}` (or the bare line with `--format text`).
//!
//! Does not send messages; the caller delivers the printed line and reports the result with
//! `signals delivered`.

use std::path::Path;

use hookstate_engine::{bundle_scope, TurnInput};
use hookstate_engine::{is_bundle_root, resolve_bundle};
use hookstate_engine::{parse_hook_payload, HookPayload};
use serde_json::json;

use crate::args::{Cli, Format, HookVerb, Layout};
use crate::cmd::{call_in, mutate, open, warn_conflicts, Access};
use crate::exit::CliError;
use crate::input::read_stdin;

fn payload() -> Result<HookPayload, CliError> {
    parse_hook_payload(&read_stdin()?).map_err(CliError::Invalid)
}

pub(crate) fn run(cli: &Cli, verb: &HookVerb) -> Result<(), CliError> {
    let payload = payload()?;
    if payload.session_id.is_empty() {
        return Ok(());
    }
    match verb {
        HookVerb::SessionStart => session_start(cli, &payload),
        HookVerb::TurnComplete => turn_complete(cli, &payload),
        // Dispatched to the feedback and generic hook verbs before the payload is read
        // (cmd/mod.rs).
        HookVerb::Stop { .. } | HookVerb::Claim { .. } | HookVerb::Once { .. } => Ok(()),
    }
}

fn session_start(cli: &Cli, payload: &HookPayload) -> Result<(), CliError> {
    let cwd = Path::new(&payload.cwd);
    if !is_bundle_root(cwd) {
        return Ok(());
    }
    let scope = bundle_scope(&payload.cwd);
    let call = call_in(cli, "session-start", &scope);
    let engine = open(cli, Access::Write)?;
    let outcome = mutate(cli, &engine, &call, Layout::Loopd, |engine| {
        engine.signals().register_pm(&call, &payload.cwd, &payload.session_id)
    })?;
    warn_conflicts(&outcome);
    Ok(())
}

fn turn_complete(cli: &Cli, payload: &HookPayload) -> Result<(), CliError> {
    if payload.agent_id.is_some() {
        return Ok(());
    }
    let Some(bundle) = resolve_bundle(Path::new(&payload.cwd)) else {
        return Ok(());
    };
    let bundle = bundle.to_string_lossy().into_owned();
    let turn = TurnInput {
        session: payload.session_id.clone(),
        bundle: bundle.clone(),
        cwd: payload.cwd.clone(),
        duration_ms: payload.duration_ms,
        reason: payload.reason.clone().unwrap_or_else(|| "unknown".into()),
        aborted: payload.is_aborted,
    };
    let mut call = call_in(cli, "turn-complete", &bundle_scope(&bundle));
    call.actor.session = Some(payload.session_id.clone());
    let engine = open(cli, Access::Write)?;
    let outcome =
        mutate(cli, &engine, &call, Layout::Loopd, |engine| engine.signals().turn(&call, &turn))?;
    warn_conflicts(&outcome);
    let Some(send) = outcome.result.get("send").filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let text = send["text"].as_str().unwrap_or_default();
    match cli.format {
        Format::Text => crate::output::print_raw(text),
        Format::Json | Format::Verdict => crate::output::print(
            cli.format,
            &json!({
                "to": send["to"], "text": text, "turn_seq": outcome.head.seq,
                "session": payload.session_id, "bundle": bundle,
            }),
        ),
    }
}
