//! Generic hook verbs for any plugin: `hook claim` (a Stop hook that hands the session the next
//! queued task by blocking the stop) and `hook once` (a SessionStart dedup that prints its text
//! only the first time a session is seen). Each reads the hook's JSON payload on stdin and
//! prints only what Claude Code acts on, or nothing.
//!
//! Never exits 2: a refusal or an empty queue prints nothing and exits 0, errors keep their
//! non-blocking codes. Does not hold queue or set rules; the engine's core commands do.

use hookstate_engine::Command;
use hookstate_engine::{parse_hook_payload, parse_stop_payload};
use serde_json::{json, Value};

use crate::args::{Cli, HookVerb};
use crate::cmd::{call, command_for_model, db_path, open, shell_quote, store_exists, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::print_raw;

pub(crate) fn run(cli: &Cli, verb: &HookVerb) -> Result<(), CliError> {
    match verb {
        HookVerb::Claim { queue, lease_ms } => claim(cli, queue, *lease_ms),
        HookVerb::Once { set, say } => once(cli, set, say.as_deref()),
        _ => Err(CliError::Usage("not a generic hook verb".into())),
    }
}

/// The Stop hook: claims the next eligible item of `queue` for the payload's session and blocks
/// the stop with it, naming the ack and release commands (with the store and scope they need).
/// Nothing when the stop is already a continuation (`stop_hook_active`), the session is unknown,
/// the store does not exist yet, or nothing is eligible.
fn claim(cli: &Cli, queue: &str, lease_ms: u64) -> Result<(), CliError> {
    let payload = parse_stop_payload(&read_stdin()?).map_err(CliError::Invalid)?;
    let Some(session) = payload.session_id.filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    // No store (or no default one, with HOME unset) holds no work: allow the stop.
    let Ok(db) = db_path(cli) else {
        return Ok(());
    };
    if payload.stop_hook_active || !store_exists(cli, &db)? {
        return Ok(());
    }
    let mut call = call(cli, "hook-claim");
    call.actor.session = Some(session.clone());
    let command =
        Command::QueueClaim { queue: queue.to_owned(), item: None, holder: session, lease_ms };
    hookstate_engine::check(&call, &command)?;
    let outcome = idle_or_execute(cli, &call, &command)?;
    let result = Value::Object(outcome.result);
    if outcome.refusal.is_some() || result["claimed"] != true {
        return Ok(());
    }
    let item = result["item"].as_str().unwrap_or_default();
    let token = &result["token"];
    let mut prefix = command_for_model(cli);
    if cli.scope != "default" {
        prefix.push_str(&format!(" --scope {}", shell_quote(&cli.scope)));
    }
    let reason = format!(
        "Work from the hookstate queue {queue}: item {item} (delivery {}), payload {}.\nDo it, \
         then record it as done with: {prefix} queue ack {queue} {item} --token {token}\nor, if \
         you cannot do it now, give it back with: {prefix} queue release {queue} {item} --token \
         {token}",
        result["delivery"], result["payload"],
    );
    print_raw(&json!({ "decision": "block", "reason": reason }).to_string())
}

/// Adds the payload's session to `set`; the first time only, prints `say` (a SessionStart hook's
/// stdout becomes context for the session). A repeated event of the same session (resume,
/// compact) prints nothing.
fn once(cli: &Cli, set: &str, say: Option<&str>) -> Result<(), CliError> {
    let payload = parse_hook_payload(&read_stdin()?).map_err(CliError::Invalid)?;
    if payload.session_id.is_empty() {
        return Ok(());
    }
    let call = call(cli, "hook-once");
    let command = Command::SetAdd { set: set.to_owned(), member: payload.session_id };
    hookstate_engine::check(&call, &command)?;
    let outcome = idle_or_execute(cli, &call, &command)?;
    match (outcome.result.get("added"), say) {
        (Some(Value::Bool(true)), Some(text)) => print_raw(text),
        _ => Ok(()),
    }
}

/// The answer of a hook's call: from a read-only store when it appends nothing there (an empty
/// queue, a session already seen, the usual case of these hooks), which costs no fdatasync; else
/// run under the write lock, which decides again.
fn idle_or_execute(
    cli: &Cli,
    call: &hookstate_engine::Call,
    command: &Command,
) -> Result<hookstate_engine::Outcome, CliError> {
    let idle = open(cli, Access::Read)?.ops().answer_if_idle(call, command)?;
    match idle {
        Some(outcome) => Ok(outcome),
        None => Ok(open(cli, Access::Write)?.execute(call, command)?),
    }
}
