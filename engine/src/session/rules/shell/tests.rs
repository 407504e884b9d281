//! SHELL.md's appends and resets, byte for byte.

use super::*;

pub(crate) const SHELL: &str = "# Active Session\n\n## Session Info\n- **ID:** S-045\n- **Started:** 2026-09-14 10:15\n- **Tags:** infra, certs\n- **Tasks Completed:** 2\n- **Session Mode:** interactive\n\n## Task\nRotate the staging TLS cert\n\n## Progress Log\n[10:20] Generated the CSR — ok\n\n## Blockers\n- waiting on DNS\n\n## Findings\n\n## Changed\n\n## Monitoring\n[10:30] Heartbeat: disk 91%\n\n## Session Summary\n";

fn after(shell: &str, event: &SessionEvent) -> String {
    let mut file = Some(shell.to_owned());
    apply(&mut file, event);
    file.unwrap()
}

#[test]
fn appends_land_at_the_section_end_as_upstream() {
    let findings = after(SHELL, &findings_line("PROP-031", "", "Warm the cache"));
    assert!(
        findings.contains("## Findings\n- PROP-031: Warm the cache\n\n## Changed\n"),
        "{findings}"
    );
    let summary = after(
        SHELL,
        &SessionEvent::ShellAppended { section: "Session Summary".into(), line: "x".into() },
    );
    assert!(summary.ends_with("## Session Summary\nx\n"), "{summary}");
    let progress = decide_append(Some(SHELL), Some("progress"), " [10:40] Renewed\n").unwrap();
    let text = after(SHELL, &progress.events[0]);
    assert!(
        text.contains("[10:20] Generated the CSR — ok\n[10:40] Renewed\n\n## Blockers"),
        "{text}"
    );
    assert!(find_section("### Task\n## Tasks\n", "Task").is_none());
    assert_eq!(find_section("x\r\n## Task \t\r\nbody", "Task"), Some((12, 18)));
    assert_eq!(extract_section("x\r\n## Task \t\r\nbody", "Task").as_deref(), Some("body"));
}

#[test]
fn shell_append_refuses_with_upstreams_tokens() {
    let token = |d: Decision| d.unwrap_err().verdict.lines[0].clone();
    assert_eq!(token(decide_append(Some(SHELL), Some("bogus"), "x")), "ERROR|unknown-section");
    assert_eq!(token(decide_append(Some(SHELL), None, "x")), "ERROR|unknown-section");
    assert_eq!(token(decide_append(Some(SHELL), Some("findings"), " \n")), "ERROR|empty-line");
    assert_eq!(token(decide_append(None, Some("findings"), "x")), "ERROR|shell-unreadable");
    assert_eq!(
        token(decide_append(Some("# none\n"), Some("findings"), "x")),
        "ERROR|shell-append-failed"
    );
    let lines = vec!["[10:45] Heartbeat: ok".to_owned()];
    assert_eq!(monitoring_lines(Some(SHELL), &lines).1, 1);
    assert_eq!(monitoring_lines(None, &lines).2.as_deref(), Some("SHELL.md unreadable"));
    assert_eq!(
        monitoring_lines(Some("# x\n"), &lines).2.as_deref(),
        Some("SHELL.md has no ## Monitoring section: no ## Monitoring section")
    );
}

#[test]
fn compaction_rolls_up_and_merges_earlier_lines() {
    let body = "[09:00] Heartbeat: disk alert\n[09:10] Heartbeat: self-eval clean\n<!-- c -->\n[09:20] did x\n[09:30] did y\n[09:40] did z";
    assert_eq!(
        compact_section(body, 3, 2),
        "[Earlier] 1 alerts, 1 self-evals, 1 entries (09:00 — 09:20)\n[09:30] did y\n[09:40] did z"
    );
    assert_eq!(compact_section(body, 5, 2), body);
    let merged =
        "[Earlier] 2 alerts, 3 entries (08:00 — 08:50)\n[09:00] a\n[09:10] b\n[09:20] c\n[09:30] d";
    assert_eq!(
        compact_section(merged, 3, 2),
        "[Earlier] 2 alerts, 5 entries (08:00 — 09:10)\n[09:20] c\n[09:30] d"
    );
    assert_eq!(compact_section("[Earlier] 4 entries\na\nb", 1, 5), "[Earlier] 4 entries\na\nb");
}

#[test]
fn an_idle_reset_empties_the_work_and_adds_the_summary_line() {
    let reset = ShellReset::Idle {
        session_id: "S-045".into(),
        date: "2026-09-14".into(),
        status: "partial".into(),
        cost: "0.42".into(),
        monitoring_threshold: 30,
        monitoring_keep: 20,
        summary_threshold: 30,
        summary_keep: 15,
    };
    let expected = "# Active Session\n\n## Session Info\n- **ID:** S-045\n- **Started:** 2026-09-14 10:15\n- **Tags:** infra, certs\n- **Tasks Completed:** 3\n- **Session Mode:** interactive\n\n## Task\n<!-- Awaiting next task -->\n\n\n## Progress Log\n<!-- Primary record of work -->\n<!-- Format: [HH:MM] Did X — result/outcome -->\n\n\n## Blockers\n<!-- What's preventing progress? Include enough context for the next session. -->\n\n\n## Findings\n<!-- Anything unexpected found during work. Proposal-worthy items get their own file. -->\n\n\n## Changed\n<!-- Populated by session-diff hook, or list files manually -->\n\n\n## Monitoring\n[10:30] Heartbeat: disk 91%\n\n## Session Summary\n**S-045** (2026-09-14): Rotate the staging TLS cert — partial ($0.42)\n\n";
    assert_eq!(after(SHELL, &SessionEvent::ShellReset { reset }), expected);
}

#[test]
fn a_close_reset_keeps_the_blockers() {
    let text =
        after(SHELL, &SessionEvent::ShellReset { reset: ShellReset::Close { template: None } });
    assert!(text
        .starts_with("# Active Session\n\n## Session Info\n- **ID:** S-NNN (assigned on close)\n"));
    assert!(text.contains("## Blockers\n- waiting on DNS\n\n\n## Findings\n"), "{text}");
    assert_eq!(close_reset("## Task\n", Some("## Blockers\n")), "## Blockers\n");
    assert_eq!(strip_placeholders(" <!-- a\nb --> x <!-- c --> "), "x");
    assert_eq!(first_content_line("\n <!-- p -->\n  first line \nnext", 5), "first");
}
