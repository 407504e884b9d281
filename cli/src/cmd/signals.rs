//! The `signals` verbs: the PM, the latest records, a session's history, delivery results.
//!
//! Does not resolve bundles; `--bundle` names the scope.

use hookstate_engine::bundle_scope;
use hookstate_engine::{event_to_json, LogFilter};
use serde_json::{json, Value};

use crate::args::{Cli, Layout, SignalsVerb};
use crate::cmd::{call_in, finish, mutate, open, Access};
use crate::exit::CliError;
use crate::output::print;

pub(crate) fn run(cli: &Cli, verb: &SignalsVerb) -> Result<(), CliError> {
    match verb {
        SignalsVerb::Pm { bundle } => {
            let pm = open(cli, Access::Read)?.signals().pm(&bundle_scope(bundle))?;
            print(cli.format, &json!({ "ok": true, "bundle": bundle, "pm": pm }))
        }
        SignalsVerb::List { bundle } => {
            let latest = open(cli, Access::Read)?.signals().latest(&bundle_scope(bundle))?;
            let sessions: Vec<Value> = latest
                .into_iter()
                .map(|(session, record)| json!({ "session": session, "record": record }))
                .collect();
            print(cli.format, &json!({ "ok": true, "bundle": bundle, "sessions": sessions }))
        }
        SignalsVerb::Show { session, bundle, history } => show(cli, session, bundle, *history),
        SignalsVerb::Delivered { session, bundle, turn_seq, failed } => {
            let scope = bundle_scope(bundle);
            let call = call_in(cli, "signals-delivered", &scope);
            let engine = open(cli, Access::Write)?;
            let outcome = mutate(cli, &engine, &call, Layout::Loopd, |engine| {
                engine.signals().delivered(&call, bundle, session, *turn_seq, !failed)
            })?;
            finish(cli, &outcome)
        }
    }
}

fn show(cli: &Cli, session: &str, bundle: &str, history: usize) -> Result<(), CliError> {
    hookstate_engine::schema::validate_id("session", session)
        .map_err(|e| CliError::Invalid(e.to_string()))?;
    let scope = bundle_scope(bundle);
    let engine = open(cli, Access::Read)?;
    let latest =
        engine.signals().latest(&scope)?.into_iter().find(|(s, _)| s == session).map(|(_, r)| r);
    let filter = LogFilter {
        scope: Some(scope),
        domain: Some("signals".into()),
        kind: Some("turn_signaled".into()),
        session: Some(session.to_owned()),
        limit: Some(history),
        tail: true,
        ..LogFilter::default()
    };
    let turns: Vec<Value> = engine.log(&filter)?.iter().map(event_to_json).collect();
    print(
        cli.format,
        &json!({ "ok": true, "session": session, "latest": latest, "history": turns }),
    )
}
