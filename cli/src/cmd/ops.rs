//! Operator verbs: init, log, verify, rebuild, stats.
//!
//! rebuild and copy's source open with redb's integrity check; verify runs it itself, beside its
//! replay. Does not change events.

use hookstate_engine::schema::format::to_hex;
use hookstate_engine::schema::Event;
use hookstate_engine::{
    render_event, Engine, LogFilter, VerifyOptions, LOG_FIELD_BYTES_DEFAULT, LOG_FIELD_BYTES_MIN,
};
use serde_json::json;

use crate::args::{Cli, CopyArgs, Format, LogArgs};
use crate::cmd::{open, open_at, options, Access};
use crate::exit::CliError;
use crate::output::{one_line, print};

pub(crate) fn init(cli: &Cli) -> Result<(), CliError> {
    let engine = open(cli, Access::Init)?;
    let head = engine.head()?;
    let path = engine.location()?.path;
    print(
        cli.format,
        &json!({ "ok": true, "path": path, "seq": head.seq, "hash": to_hex(&head.hash) }),
    )
}

/// The engine as of `--at-seq` or `--as-of`.
pub(crate) fn as_of(cli: &Cli, engine: &Engine) -> Result<Engine, CliError> {
    let seq = match (cli.at_seq, parse_time("as-of", cli.as_of.as_ref())?) {
        (Some(seq), _) => seq,
        (None, Some(at_ms)) => engine.ops().seq_as_of(at_ms)?,
        (None, None) => return Err(CliError::Usage("no --at-seq or --as-of".into())),
    };
    Ok(engine.ops().at_seq(seq)?)
}

fn parse_time(what: &str, text: Option<&String>) -> Result<Option<u64>, CliError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let time = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| {
        CliError::Invalid(format!("--{what} {text:?} is not an RFC 3339 time: {e}"))
    })?;
    Ok(Some(u64::try_from(time.timestamp_millis()).unwrap_or(0)))
}

pub(crate) fn log(cli: &Cli, args: &LogArgs) -> Result<(), CliError> {
    if let Some(session) = &args.of_session {
        hookstate_engine::schema::validate_id("--of-session", session)
            .map_err(|e| CliError::Invalid(e.to_string()))?;
    }
    let filter = LogFilter {
        scope: args.this_scope.then(|| cli.scope.clone()),
        domain: args.domain.clone(),
        kind: args.kind.clone(),
        session: args.of_session.clone(),
        from_seq: args.from_seq,
        to_seq: args.to_seq,
        since_ms: parse_time("since", args.since.as_ref())?,
        until_ms: parse_time("until", args.until.as_ref())?,
        limit: args.tail.or(args.limit),
        tail: args.tail.is_some(),
    };
    let field_bytes_max = args.field_bytes_max.unwrap_or(LOG_FIELD_BYTES_DEFAULT);
    if !(LOG_FIELD_BYTES_MIN..=LOG_FIELD_BYTES_DEFAULT).contains(&field_bytes_max) {
        return Err(CliError::Invalid(format!(
            "--field-bytes-max {field_bytes_max} is outside \
             {LOG_FIELD_BYTES_MIN}..={LOG_FIELD_BYTES_DEFAULT}"
        )));
    }
    if args.follow {
        return crate::cmd::follow::follow(cli, filter, field_bytes_max);
    }
    let engine = open(cli, Access::Read)?;
    let events = engine.log(&filter)?;
    print_events(cli, &events, field_bytes_max)
}

/// Prints events, one line each, and flushes.
pub(crate) fn print_events(
    cli: &Cli,
    events: &[Event],
    field_bytes_max: usize,
) -> Result<(), CliError> {
    crate::output::warn_if_marked()?;
    let mut out = String::new();
    for event in events {
        let value = render_event(event, field_bytes_max);
        out.push_str(&match cli.format {
            Format::Json | Format::Verdict => value.to_string(),
            Format::Text => log_line(&value),
        });
        out.push('\n');
    }
    use std::io::Write;
    let mut stdout = crate::output::stdout();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

pub(crate) fn verify(cli: &Cli, accept_missing_anchor: bool) -> Result<(), CliError> {
    let engine = open(cli, Access::Verify)?;
    match engine.ops().verify(VerifyOptions { accept_missing_anchor }) {
        Ok(report) => print(
            cli.format,
            &json!({
                "ok": true, "events": report.events, "seq": report.head.seq,
                "hash": to_hex(&report.head.hash), "anchor_seq": report.anchor_seq,
                "second_anchor_seq": report.second_anchor_seq, "views": report.views,
                "lookups": report.lookups, "re_anchored": report.re_anchored,
                "from_checkpoint": report.from_checkpoint,
            }),
        ),
        Err(err) => {
            let first_bad_seq = match &err {
                hookstate_engine::Error::ChainBroken { seq, .. } => Some(*seq),
                _ => None,
            };
            print(
                cli.format,
                &json!({ "ok": false, "first_bad_seq": first_bad_seq, "error": err.to_string() }),
            )?;
            Err(err.into())
        }
    }
}

pub(crate) fn rebuild(cli: &Cli) -> Result<(), CliError> {
    let engine = open(cli, Access::Rebuild)?;
    let report = engine.ops().rebuild()?;
    print(
        cli.format,
        &json!({
            "ok": true, "events": report.events, "views": report.views,
            "rows_written": report.written, "rows_removed": report.removed,
            "stale_temps_removed": report.stale_temps_removed,
            "upgraded_to_format": report.upgraded_to,
        }),
    )
}

pub(crate) fn stats(cli: &Cli) -> Result<(), CliError> {
    let engine = open(cli, Access::Read)?;
    let stats = engine.ops().stats()?;
    let at = engine.location()?;
    // An absent store has no hash of its own: its stand-in's genesis is not the store's.
    let hash = at.exists.then(|| to_hex(&stats.head.hash));
    print(
        cli.format,
        &json!({
            "ok": true, "path": at.path, "exists": at.exists,
            "events": stats.head.seq - stats.log_starts_after,
            "log_starts_after": stats.log_starts_after,
            "head": { "seq": stats.head.seq, "hash": hash },
            "file_bytes": stats.file_bytes, "scopes": stats.scopes, "views": stats.views,
            "queues": stats.queues, "anchor": { "path": at.anchor_path, "seq": stats.anchor_seq },
            "anchor_write_failures": stats.anchor_write_failures,
        }),
    )
}

pub(crate) fn copy(cli: &Cli, args: &CopyArgs) -> Result<(), CliError> {
    let source = open_at(cli, Access::CopySource, &args.from)?;
    let report = source.ops().copy_to(&args.to, options(cli, Access::Write, &args.to)?)?;
    print(
        cli.format,
        &json!({
            "ok": true, "from": source.location()?.path, "to": report.to, "events": report.events,
            "seq": report.head.seq, "hash": to_hex(&report.head.hash), "views": report.views,
        }),
    )
}

/// One readable line per event: seq, local time, scope, domain/kind, session, body.
fn log_line(event: &serde_json::Value) -> String {
    let at = event["at_ms"]
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S%.3f %:z").to_string())
        .unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_owned();
    one_line(&format!(
        "#{} {at} {} {}/{} {} {}",
        event["seq"],
        text(&event["scope"]),
        text(&event["domain"]),
        text(&event["kind"]),
        text(&event["actor"]["session"]),
        event["body"]
    ))
}
