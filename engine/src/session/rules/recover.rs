//! `session-archive.ts recover`: the branch table for a `runtime.json` left mid-transition
//! (re-archive, markers cleared without SHELL.md, SHELL.md reset), keyed on `transition`,
//! `transition_mode` and whether the target report exists.
//!
//! Does not read files or the store.

use hookstate_schema::session::SessionEvent;
use serde_json::{json, Map, Value};

use super::archive::{decide_archive, failed, next_session_id, post_archive_markers};
use super::archive::{
    resolve_session_id, shell_reset, Hermit, Steps, LEGACY_NOTE, RECOVER_BLOCKER,
};
use super::markers::RuntimeRead;
use super::report;
use super::runtime::{ArchiveMode, Move};
use super::verdict::{Decided, Verdict};
use crate::kernel::error::Result;
use crate::legacy::json as legacy_json;

fn said(events: Vec<SessionEvent>, value: &Value) -> Decided {
    Decided { events, verdict: Verdict::json(value) }
}

fn with(mut object: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        object.extend(extra);
    }
    Value::Object(object)
}

/// `recover`: finishes an interrupted archive. `read` is how `runtime.json` read;
/// `target_text` the report named by [`super::archive::recover_target`], when it exists.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time; refusals are verdicts.
pub(crate) fn decide_recover(
    h: &Hermit<'_>,
    read: &RuntimeRead<'_>,
    target_text: Option<&str>,
    now_ms: u64,
) -> Result<Decided> {
    let runtime = match read {
        RuntimeRead::Corrupt => {
            let event = SessionEvent::FileQuarantined {
                file: "state/runtime.json".into(),
                reason: "not a JSON object".into(),
            };
            let value =
                json!({ "ok": true, "recovered": false, "reason": "runtime-corrupt-quarantined" });
            return Ok(said(vec![event], &value));
        }
        RuntimeRead::Missing => None,
        RuntimeRead::Ok(doc) => Some(*doc),
    };
    let transition =
        runtime.and_then(|r| legacy_json::str_field(r, "transition")).filter(|t| !t.is_empty());
    let Some(transition) = transition else {
        let value =
            json!({ "ok": true, "recovered": false, "reason": "no-interrupted-transition" });
        return Ok(said(Vec::new(), &value));
    };
    let stored_mode = runtime.and_then(|r| legacy_json::str_field(r, "transition_mode"));
    let parsed = stored_mode.as_deref().and_then(ArchiveMode::parse);
    let mode = parsed.unwrap_or(ArchiveMode::Close);
    let legacy = parsed.is_none();
    let h = Hermit { runtime, ..h.clone() };
    if transition == "archiving" && target_text.is_none() {
        return re_archive(&h, mode, legacy, now_ms);
    }
    let mut steps = Steps { runtime: runtime.cloned(), events: Vec::new(), now_ms };
    let Some(shell_text) = h.shell else {
        steps.step(&Move::RecoverClear, h.timezone)?.ok();
        let markers = post_archive_markers(&h, mode, true, &mut steps)?;
        let path = "markers-cleared-no-shell";
        let value = json!({ "ok": true, "recovered": true, "recovery_path": path,
            "legacy": legacy, "markers": markers });
        return Ok(said(steps.events, &value));
    };
    let session_id = resolve_session_id(runtime, h.reports);
    let already = mode == ArchiveMode::Idle && shell_text.contains(&format!("**{session_id}**"));
    if !already {
        let cost = target_text.map_or(0.0, report::report_cost);
        let reset = shell_reset(&h, mode, &session_id, "", cost, now_ms)?;
        steps.events.push(SessionEvent::ShellReset { reset });
    }
    let end =
        Move::ArchiveEnd { mode, next_session_id: next_session_id(h.reports), recovering: true };
    if let Err(reason) = steps.step(&end, h.timezone)? {
        return Ok(failed(&reason));
    }
    let markers = post_archive_markers(&h, mode, true, &mut steps)?;
    let value = json!({ "ok": true, "recovered": true, "recovery_path": "shell-reset",
        "mode_used": mode.name(), "legacy": legacy, "markers": markers });
    Ok(said(steps.events, &value))
}

fn re_archive(h: &Hermit<'_>, mode: ArchiveMode, legacy: bool, now_ms: u64) -> Result<Decided> {
    let mut blockers = RECOVER_BLOCKER.to_owned();
    if legacy {
        blockers = format!("{blockers}\n{LEGACY_NOTE}");
    }
    let payload = format!("Status: partial\nBlockers: {blockers}\nClosed Via: recovered\n");
    let result = decide_archive(h, Some(mode.name()), &payload, true, now_ms)?;
    let value: Value = serde_json::from_str(&result.verdict.lines[0]).unwrap_or(Value::Null);
    if value["ok"] == true {
        let Value::Object(object) = value else { return Ok(result) };
        let merged = with(object, json!({ "recovered": true, "recovery_path": "re-archive" }));
        return Ok(said(result.events, &merged));
    }
    let mut steps = Steps { runtime: h.runtime.cloned(), events: Vec::new(), now_ms };
    steps.step(&Move::RecoverClear, h.timezone)?.ok();
    let reason = value["reason"].clone();
    let path = "re-archive-failed";
    let failed =
        json!({ "ok": false, "recovered": false, "reason": reason, "recovery_path": path });
    Ok(said(steps.events, &failed))
}

#[cfg(test)]
mod tests {
    use super::super::archive::tests::hermit;
    use super::*;

    const NOW: u64 = 1_789_373_702_118;

    fn runtime(transition: &str, mode: &str) -> hookstate_schema::session::JsonDoc {
        let text = format!("{{\n  \"session_state\": \"in_progress\",\n  \"session_id\": \"S-045\",\n  \"transition\": \"{transition}\",\n  \"transition_target\": \"S-045-REPORT.md\",\n  \"transition_mode\": {mode}\n}}\n");
        crate::legacy::json::parse_doc("runtime.json", text.as_bytes()).unwrap()
    }

    fn verdict(d: &Decided) -> Value {
        serde_json::from_str(&d.verdict.lines[0]).unwrap()
    }

    #[test]
    fn recover_takes_upstreams_branches() {
        let reports = vec!["S-044-REPORT.md".to_owned()];
        let base = hermit(&reports);
        let archiving = runtime("archiving", "\"idle\"");
        let d = decide_recover(&base, &RuntimeRead::Ok(&archiving), None, NOW).unwrap();
        let v = verdict(&d);
        assert_eq!(
            (v["recovery_path"].as_str(), v["archived"].as_bool()),
            (Some("re-archive"), Some(true))
        );
        assert_eq!(v["markers"]["compact_requested"], "skipped");
        let cleaning = runtime("cleaning", "null");
        let d = decide_recover(
            &base,
            &RuntimeRead::Ok(&cleaning),
            Some("---\ncost_usd: 1.5\n---\n"),
            NOW,
        )
        .unwrap();
        let v = verdict(&d);
        assert_eq!(
            (v["recovery_path"].as_str(), v["mode_used"].as_str(), v["legacy"].as_bool()),
            (Some("shell-reset"), Some("close"), Some(true))
        );
        let no_shell = Hermit { shell: None, ..base.clone() };
        let d = decide_recover(&no_shell, &RuntimeRead::Ok(&cleaning), None, NOW).unwrap();
        assert_eq!(verdict(&d)["recovery_path"], "markers-cleared-no-shell");
        let d = decide_recover(&no_shell, &RuntimeRead::Ok(&archiving), None, NOW).unwrap();
        assert_eq!(verdict(&d)["recovery_path"], "re-archive-failed");
        assert_eq!(d.events.len(), 1);
        let idle = crate::legacy::json::parse_doc("r", b"{\"transition\":null}\n").unwrap();
        assert_eq!(
            verdict(&decide_recover(&base, &RuntimeRead::Ok(&idle), None, NOW).unwrap())["reason"],
            "no-interrupted-transition"
        );
        assert_eq!(
            verdict(&decide_recover(&base, &RuntimeRead::Corrupt, None, NOW).unwrap())["reason"],
            "runtime-corrupt-quarantined"
        );
    }
}
