//! `session-archive archive|open` end to end over the pure steps.

use super::*;
use crate::session::rules::shell::tests_support::SHELL;

const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z
const RUNTIME: &str = "{\n  \"session_state\": \"in_progress\",\n  \"session_id\": \"S-045\",\n  \"transition\": null,\n  \"opened_at\": \"2026-09-14T10:15:00+0200\"\n}\n";
const CHANGED: [(&str, &str); 1] = [("src/tls.rs", "modified")];

pub(crate) fn hermit(reports: &[String]) -> Hermit<'_> {
    static CHANGED_FILES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let changed = CHANGED_FILES
        .get_or_init(|| CHANGED.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect());
    Hermit {
        runtime: None,
        shell: Some(SHELL),
        reports,
        template: None,
        pending_close: true,
        sessions_dir: "/srv/hermit/.claude-code-hermit/sessions",
        timezone: "Europe/Berlin",
        escalation: None,
        compact: Compact::default(),
        measured_cost: None,
        operator_turns: 0.0,
        changed_files: changed,
    }
}

fn runtime_doc() -> JsonDoc {
    legacy_json::parse_doc("runtime.json", RUNTIME.as_bytes()).unwrap()
}

const REPORT: &str = "---\nid: S-045\nstatus: completed\ndate: 2026-09-14T10:15:02+02:00\nduration: 0m\ncost_usd: 1234.5\ntokens: 1526890\ntags: [infra, certs]\nproposals_created: []\ntask: \"Rotate the staging TLS cert\"\nartifacts: []\nblockers: []\nlessons: [\"keep the CSR\"]\nnext_start: \"\"\nescalation: balanced\noperator_turns: 0\nclosed_via: operator\n---\n\n# Session Report: S-045\n\n## Overview\nRotate the staging TLS cert\n\n## Completed\n<!-- What was accomplished (narrative). Durable outputs must also be listed under ## Artifacts. -->\n\n## Changed\n- `src/tls.rs` (modified)\n\n## Artifacts\n<!-- Links to durable outputs written to compiled/ (cite as [[compiled/<type>-<slug>-<date>]]) -->\n\n## Blockers\n<!-- What couldn't be resolved -->\n\n## Lessons\n- keep the CSR\n\n## Proposals Created\n<!-- Links to any proposals generated during this session -->\n";

#[test]
fn an_idle_archive_makes_every_step_in_one_decision() {
    let reports = vec!["S-044-REPORT.md".to_owned()];
    let doc = runtime_doc();
    let h = Hermit { runtime: Some(&doc), ..hermit(&reports) };
    let stdin = "Status: Completed\nLessons: - keep the CSR\nCost: $1,234.50 (1,526,890 tokens)\n";
    let decided = decide_archive(&h, Some("idle"), stdin, false, NOW).unwrap();
    assert_eq!(
        decided.verdict.lines[0],
        "{\"ok\":true,\"archived\":true,\"session_id\":\"S-045\",\"report_path\":\"/srv/hermit/.claude-code-hermit/sessions/S-045-REPORT.md\",\"mode\":\"idle\",\"markers\":{\"compact_requested\":\"written\"}}"
    );
    let kinds: Vec<&str> = decided.events.iter().map(SessionEvent::kind).collect();
    assert_eq!(
        kinds,
        [
            "runtime_changed",
            "report_written",
            "runtime_changed",
            "shell_reset",
            "runtime_changed",
            "marker_written"
        ]
    );
    let SessionEvent::ReportWritten { text, .. } = &decided.events[1] else { panic!() };
    assert_eq!(text, REPORT);
    let mut runtime = Some(doc.clone());
    for event in &decided.events {
        runtime::apply(&mut runtime, event);
    }
    let runtime = runtime.unwrap();
    assert_eq!(runtime.raw("session_id"), Some("\"S-046\""));
    assert_eq!(runtime.raw("session_state"), Some("\"idle\""));
    assert_eq!(runtime.raw("transition"), Some("null"));
    assert_eq!(runtime.raw("transition_mode"), Some("null"));
}

#[test]
fn an_archive_is_refused_with_upstreams_reasons() {
    let reports: Vec<String> = Vec::new();
    let reason = |d: Decided| {
        serde_json::from_str::<Value>(&d.verdict.lines[0]).unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let h = hermit(&reports);
    assert_eq!(
        reason(decide_archive(&h, None, "Status: x", false, NOW).unwrap()),
        "archive requires --mode=idle|close|auto, got: (none)"
    );
    assert_eq!(
        reason(decide_archive(&h, Some("true"), "Status: x", false, NOW).unwrap()),
        "archive requires --mode=idle|close|auto, got: true"
    );
    let no_shell = Hermit { shell: None, ..hermit(&reports) };
    assert_eq!(
        reason(decide_archive(&no_shell, Some("close"), "Status: x", false, NOW).unwrap()),
        "shell-missing"
    );
    assert_eq!(
        reason(decide_archive(&h, Some("close"), "hello\n", false, NOW).unwrap()),
        "payload-unparseable"
    );
    let busy = legacy_json::parse_doc("r", b"{\"transition\":\"archiving\"}\n").unwrap();
    let held = Hermit { runtime: Some(&busy), ..hermit(&reports) };
    let refused = decide_archive(&held, Some("close"), "Status: x", false, NOW).unwrap();
    assert!(refused.events.is_empty());
    assert_eq!(reason(refused), "transition-in-progress");
    // A hand-edited id that names no report of the layout (one outside the state directory, an
    // absolute path, a name the mirror has no file for) is refused with nothing decided.
    for id in ["../../outside/pwn", "/tmp/abs", "evil", "S-", "S-12a", "S-045/x"] {
        let text = format!("{{\"session_id\":{}}}\n", serde_json::to_string(id).unwrap());
        let edited = legacy_json::parse_doc("r", text.as_bytes()).unwrap();
        let h = Hermit { runtime: Some(&edited), ..hermit(&reports) };
        let refused = decide_archive(&h, Some("idle"), "Status: x", false, NOW).unwrap();
        assert!(refused.events.is_empty(), "{id}");
        assert_eq!(reason(refused), "invalid-session-id", "{id}");
    }
}

#[test]
fn a_close_archive_reaps_the_queued_close_and_nulls_the_id() {
    let reports: Vec<String> = Vec::new();
    let doc = runtime_doc();
    let h = Hermit { runtime: Some(&doc), ..hermit(&reports) };
    let decided = decide_archive(
        &h,
        Some("auto"),
        "Status: partial\nNext Start Point: renew prod\n",
        false,
        NOW,
    )
    .unwrap();
    let v: Value = serde_json::from_str(&decided.verdict.lines[0]).unwrap();
    assert_eq!(v["markers"], json!({ "pending_close": "deleted", "clear_requested": "written" }));
    let SessionEvent::ReportWritten { text, .. } = &decided.events[1] else { panic!() };
    assert!(text.contains("next_start: \"renew prod\"\n"), "{text}");
    assert!(text.contains("closed_via: auto\n"), "{text}");
    assert!(text.ends_with("## Next Start Point\nrenew prod\n"), "{text}");
}

#[test]
fn open_fills_the_template_and_starts_the_arc() {
    let reports = vec!["S-007-REPORT.md".to_owned()];
    let template = "# Active Session\n\n## Session Info\n- **ID:** S-NNN (assigned on close)\n- **Started:** YYYY-MM-DD HH:MM\n\n## Task\n\n## Progress Log\n";
    let h = Hermit { shell: None, template: Some(template), ..hermit(&reports) };
    let decided = decide_open(&h, "Task: Renew the cert\n", NOW).unwrap();
    assert_eq!(decided.verdict.lines[0], "{\"ok\":true,\"session_id\":\"S-008\"}");
    let SessionEvent::ShellWritten { text, .. } = &decided.events[0] else { panic!() };
    assert_eq!(text, "# Active Session\n\n## Session Info\n- **ID:** S-008\n- **Started:** 2026-09-14 10:15\n\n## Task\nRenew the cert\n\n\n## Progress Log\n");
    let none = Hermit { shell: None, template: None, ..hermit(&reports) };
    assert_eq!(
        decide_open(&none, "", NOW).unwrap().verdict.lines[0],
        "{\"ok\":false,\"reason\":\"shell-template-missing\"}"
    );
    assert_eq!(next_session_id(&["S-1000-REPORT.md".into(), "x.md".into()]), "S-1001");
    let (verb, flags) = parse_args(&[
        "archive".into(),
        "--mode=idle".into(),
        "--state-dir=.h".into(),
        "--x".into(),
    ]);
    assert_eq!(
        (verb.as_str(), flags["mode"].as_str(), flags["x"].as_bool()),
        ("archive", Some("idle"), Some(true))
    );
}
