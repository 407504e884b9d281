//! doctor and metrics: a store's health with a hint per finding, and its numbers as JSON or
//! Prometheus text.
//!
//! Does not repair anything; a finding's hint names the verb that does.

use std::fmt::Write as _;

use hookstate_engine::schema::format::to_hex;
use hookstate_engine::{DoctorOptions, Level, Metrics};
use serde_json::{json, Value};

use crate::args::{Cli, Format};
use crate::cmd::{db_path, now_ms, open, Access};
use crate::exit::CliError;
use crate::output::{print, print_raw};

pub(crate) fn doctor(cli: &Cli) -> Result<(), CliError> {
    if cli.at_seq.is_some() || cli.as_of.is_some() {
        let why = "doctor examines the store as it is; --at-seq and --as-of are for reads";
        return Err(CliError::Usage(why.into()));
    }
    let options = DoctorOptions {
        mirror: cli.mirror.clone(),
        anchor_dir: cli.anchor_dir.clone(),
        now_ms: cli.now_ms.unwrap_or_else(now_ms),
    };
    let path = db_path(cli)?;
    if let Some(address) = hookstate_engine::remote_address(&path) {
        // Its checks are of a file and what lies beside it; on a database they would judge the
        // address as a path (and print it whole).
        return Err(CliError::Usage(format!(
            "doctor checks a store file (permissions, anchor, temporary files, lock holders), \
             not the PostgreSQL store {address}: run hookstate verify and hookstate metrics there"
        )));
    }
    // No store is not a damaged one (exit 5 sent a new user to `verify`, which says no store):
    // it exits 6 as `verify` does.
    if std::fs::symlink_metadata(&path).is_err() {
        return Err(hookstate_engine::Error::NoStore { path }.into());
    }
    let findings = hookstate_engine::doctor(&path, &options);
    let problems = findings.iter().filter(|f| f.level == Level::Problem).count();
    let list: Vec<Value> = findings
        .iter()
        .map(|f| json!({ "check": f.check, "level": f.level.as_str(), "what": f.what, "hint": f.hint }))
        .collect();
    if cli.format == Format::Text {
        for f in &findings {
            let hint = f.hint.as_ref().map(|h| format!(" (hint: {h})")).unwrap_or_default();
            print_raw(&crate::output::one_line(&format!(
                "{:<8} {:<12} {}{hint}",
                f.level.as_str(),
                f.check,
                f.what
            )))?;
        }
    } else {
        print(
            cli.format,
            &json!({ "ok": problems == 0, "path": path, "problems": problems, "findings": list }),
        )?;
    }
    match problems {
        0 => Ok(()),
        n => Err(CliError::Failed(format!("doctor found {n} problem(s); see the hints"))),
    }
}

pub(crate) fn metrics(cli: &Cli, prometheus: bool) -> Result<(), CliError> {
    let engine = open(cli, Access::Read)?;
    let metrics = engine.ops().metrics(cli.now_ms.unwrap_or_else(now_ms))?;
    if prometheus {
        return print_raw(prometheus_text(&metrics).trim_end());
    }
    let per_domain = metrics.events_per_domain.as_ref().map(|counts| {
        counts.iter().map(|(d, n)| (d.clone(), json!(n))).collect::<serde_json::Map<_, _>>()
    });
    let queues: Vec<Value> = metrics
        .queues
        .iter()
        .map(|q| {
            json!({
                "scope": q.scope, "queue": q.queue, "ready": q.ready, "claimed": q.claimed,
                "parked": q.parked, "acked": q.acked, "oldest_ready_age_ms": q.oldest_ready_age_ms,
            })
        })
        .collect();
    print(
        cli.format,
        &json!({
            "ok": true, "head": { "seq": metrics.head.seq, "hash": to_hex(&metrics.head.hash) },
            "file_bytes": metrics.file_bytes, "events_per_domain": per_domain, "queues": queues,
        }),
    )
}

/// A label value in Prometheus text: backslash, quote and newline escaped.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn prometheus_text(m: &Metrics) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family("hookstate_head_seq", "gauge", "The log's last seq.", vec![(String::new(), m.head.seq)]);
    family(
        "hookstate_file_bytes",
        "gauge",
        "Size of the store file.",
        vec![(String::new(), m.file_bytes)],
    );
    if let Some(counts) = &m.events_per_domain {
        let samples =
            counts.iter().map(|(d, n)| (format!("{{domain=\"{}\"}}", label(d)), *n)).collect();
        family(
            "hookstate_events_total",
            "counter",
            "Events appended per domain since genesis.",
            samples,
        );
    }
    let queue = |q: &hookstate_engine::QueueMetrics| {
        format!("scope=\"{}\",queue=\"{}\"", label(&q.scope), label(&q.queue))
    };
    for (name, help, pick) in [
        (
            "hookstate_queue_ready",
            "Items ready to claim.",
            (|q: &hookstate_engine::QueueMetrics| q.ready)
                as fn(&hookstate_engine::QueueMetrics) -> u64,
        ),
        ("hookstate_queue_claimed", "Items leased.", |q| q.claimed),
        ("hookstate_queue_parked", "Items parked (dead letters).", |q| q.parked),
    ] {
        let samples = m.queues.iter().map(|q| (format!("{{{}}}", queue(q)), pick(q))).collect();
        family(name, "gauge", help, samples);
    }
    let samples = m.queues.iter().map(|q| (format!("{{{}}}", queue(q)), q.acked)).collect();
    family("hookstate_queue_acked_total", "counter", "Items acked over the queue's life.", samples);
    let samples = m
        .queues
        .iter()
        .filter_map(|q| q.oldest_ready_age_ms.map(|age| (format!("{{{}}}", queue(q)), age)))
        .collect();
    family(
        "hookstate_queue_oldest_ready_age_ms",
        "gauge",
        "Age of the oldest ready item.",
        samples,
    );
    out
}
