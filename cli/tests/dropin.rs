//! Issue 19: hookstate as a drop-in for upstream's `proposal.ts`, `heartbeat.ts alert-state` and
//! the moonshine listener's tick. Each test pins one difference a new user saw between the two
//! (upstream's behaviour at the revision the issue names), through the real binary.
//!
//! Does not run upstream's scripts: their lines and file effects are pinned from the issue and
//! the spec.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};

use super::{Run, Store};

/// 2026-09-14T08:15:02.118Z.
const NOW_MS: u64 = 1_789_373_702_118;

/// The head of upstream's `templates/PROPOSAL.md.template` (create needs one to exist).
const TEMPLATE: &str = "---\nid:\ntitle:\nstatus: proposed\n---\n\n# Proposal: PROP-NNN — Title\n";

/// A store and a hermit state directory holding its config, template and SHELL.md (UTC).
struct Hermit {
    store: Store,
    dir: PathBuf,
    _home: tempfile::TempDir,
}

impl Hermit {
    fn new() -> Hermit {
        let store = Store::new();
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join(".claude-code-hermit");
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::write(dir.join("config.json"), "{\"timezone\":\"UTC\"}\n").unwrap();
        std::fs::create_dir_all(dir.join("templates")).unwrap();
        std::fs::write(dir.join("templates/PROPOSAL.md.template"), TEMPLATE).unwrap();
        std::fs::create_dir_all(dir.join("sessions")).unwrap();
        std::fs::write(dir.join("sessions/SHELL.md"), SHELL).unwrap();
        Hermit { store, dir, _home: home }
    }

    fn d(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// `hookstate --now-ms N --format verdict <domain> --dir DIR <args>`.
    fn verdict(&self, now: u64, domain: &str, args: &[&str], stdin: Option<&str>) -> Run {
        let now = now.to_string();
        let mut full = vec!["--now-ms", &now, "--format", "verdict", domain, "--dir", self.d()];
        full.extend_from_slice(args);
        self.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    }

    fn proposal(&self, args: &[&str], stdin: Option<&str>) -> Run {
        self.verdict(NOW_MS, "proposals", args, stdin)
    }
}

fn line(run: Run, expected: &str) -> Run {
    let run = run.expect(0);
    assert_eq!(run.stdout, format!("{expected}\n"), "{run:?}");
    run
}

fn ledger(h: &Hermit) -> Vec<Value> {
    let run = h.store.run(&["proposals", "--dir", h.d(), "ledger"]).expect(0);
    run.json()["ledger"].as_array().cloned().unwrap_or_default()
}

#[test]
fn proposal_micro_resolve_records_a_free_text_answer_on_an_entry_without_options() {
    let h = Hermit::new();
    let queued = h.proposal(&["queue-micro"], Some("{\"tier\":1,\"question\":\"Which colour?\"}"));
    let id = queued.expect(0).stdout.trim().strip_prefix("QUEUED|").unwrap().to_owned();
    let args = ["micro", "resolve", &id, "--action", "answered", "--answer", "the blue one"];
    line(h.proposal(&args, None), &format!("RESOLVED|{id}|answered"));
    let resolved: Vec<Value> =
        ledger(&h).into_iter().filter(|row| row["type"] == "micro-resolved").collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["answer"], "the blue one", "{resolved:?}");
    // Yes and no still read as the words they are.
    let queued = h.proposal(&["queue-micro"], Some("{\"tier\":1,\"question\":\"Ship?\"}"));
    let id = queued.expect(0).stdout.trim().strip_prefix("QUEUED|").unwrap().to_owned();
    let args = ["micro", "resolve", &id, "--action", "answered", "--answer", "Yes"];
    line(h.proposal(&args, None), &format!("RESOLVED|{id}|answered"));
    let last = ledger(&h).into_iter().rev().find(|row| row["type"] == "micro-resolved").unwrap();
    assert_eq!(last["answer"], "yes");
}

#[test]
fn proposal_next_task_prints_ok_and_refuses_empty_content_with_exit_0() {
    let h = Hermit::new();
    let before = h.store.snapshot();
    line(
        h.verdict(NOW_MS, "alerts", &["next-task", "queue"], Some(" \n\t\n")),
        "ERROR|empty-content",
    );
    line(h.verdict(NOW_MS, "alerts", &["next-task", "queue"], Some("")), "ERROR|empty-content");
    assert_eq!(h.store.snapshot(), before, "an empty next task leaves the store unchanged");
    line(h.verdict(NOW_MS, "alerts", &["next-task", "queue"], Some("Do X next.\n")), "OK");
    let again = h.verdict(NOW_MS, "alerts", &["next-task", "queue"], Some("Do Y.\n"));
    line(again, "ERROR|next-task-exists");
}

#[test]
fn proposal_index_skips_without_a_proposals_dir_or_a_state_dir() {
    let h = Hermit::new();
    line(h.proposal(&["index"], None), "SKIP|no proposals dir");
    let gone = h.dir.with_file_name("never-made");
    let now = NOW_MS.to_string();
    let args =
        ["--now-ms", &now, "--format", "verdict", "proposals", "--dir", gone.to_str().unwrap()];
    line(h.store.run(&[&args[..], &["index"]].concat()), "SKIP|no state dir");
    assert!(!gone.exists());
    // A proposal in the store (or a proposals/ directory) is indexed as before.
    let created = h.proposal(&["create"], Some("Title: Try it\n---\nBody.\n")).expect(0);
    assert!(created.stdout.starts_with("PROP-001-try-it-"), "{created:?}");
    line(h.proposal(&["index"], None), "OK|1 proposals");
    let other = Hermit::new();
    std::fs::create_dir_all(other.dir.join("proposals")).unwrap();
    line(other.proposal(&["index"], None), "OK|0 proposals");
}

fn prop_text(h: &Hermit, id: &str) -> String {
    let out = h.dir.with_file_name("export");
    let scope = format!("hermit:{}", std::fs::canonicalize(&h.dir).unwrap().display());
    let to = out.to_str().unwrap();
    h.store
        .run(&["--scope", &scope, "export", "--layout", "hermit-proposals", "--to", to])
        .expect(0);
    let text = std::fs::read_to_string(out.join("proposals").join(format!("{id}.md"))).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    text
}

#[test]
fn proposal_patch_reads_at_now_as_a_wildcard_and_takes_an_empty_stdin() {
    let h = Hermit::new();
    let created = h.proposal(&["create"], Some("Title: Try it\n---\nBody.\n")).expect(0);
    let id = created.stdout.trim().to_owned();
    let decision = "Decision: Accepted on @now.\n";
    let args = ["patch", &id, "--set", "status=accepted", "--stdin"];
    line(h.verdict(NOW_MS, "proposals", &args, Some(decision)), &format!("OK|{id}"));
    // The skill's retry a minute later: the same line with a fresh @now is already recorded.
    let retry = h.verdict(NOW_MS + 60_000, "proposals", &["patch", &id, "--stdin"], Some(decision));
    line(retry, &format!("OK|{id}"));
    let text = prop_text(&h, &id);
    assert_eq!(text.matches("Accepted on ").count(), 1, "{text}");
    assert!(text.contains("Accepted on 2026-09-14T08:15:02+00:00."), "{text}");
    // A different decision is appended.
    let other = "Decision: Resolved on @now.\n";
    let args = ["patch", &id, "--set", "status=resolved", "--stdin"];
    line(h.verdict(NOW_MS + 120_000, "proposals", &args, Some(other)), &format!("OK|{id}"));
    assert!(prop_text(&h, &id).contains("Resolved on 2026-09-14T08:17:02+00:00."));
    // An empty stdin (defer or dismiss without a note) is not an error.
    let args = ["patch", &id, "--set", "reviewed=true", "--stdin"];
    line(h.verdict(NOW_MS, "proposals", &args, Some("")), &format!("OK|{id}"));
    assert!(prop_text(&h, &id).contains("reviewed: true"));
}

// ---- the one-line shim: `hookstate hermit proposal "$@"` -----------------------------------

impl Hermit {
    /// `hookstate --now-ms N hermit <script> <words>`: what the shim runs, in a project whose
    /// state directory this is (`AGENT_DIR`, the pin's one override).
    fn shim(&self, script: &str, words: &[&str], stdin: Option<&str>) -> Run {
        shim_on(&self.store.db(), &[("AGENT_DIR", self.d())], None, script, words, stdin)
    }
}

/// The shim on the store `db`, with these variables set (`AGENT_DIR` and `CLAUDE_PROJECT_DIR`
/// cleared unless given), from `cwd`.
fn shim_on(
    db: &Path,
    vars: &[(&str, &str)],
    cwd: Option<&Path>,
    script: &str,
    words: &[&str],
    stdin: Option<&str>,
) -> Run {
    use std::io::Write;
    let now = NOW_MS.to_string();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookstate"));
    command.arg("--db").arg(db).args(["--now-ms", &now, "hermit", script]);
    command.args(words).env_remove("HOOKSTATE_SESSION");
    command.env_remove("AGENT_DIR").env_remove("CLAUDE_PROJECT_DIR").envs(vars.iter().copied());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let piped = if stdin.is_some() { Stdio::piped() } else { Stdio::null() };
    let mut child =
        command.stdin(piped).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if let Some(text) = stdin {
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn the_shim_takes_upstreams_words_and_keeps_the_directory_current() {
    let h = Hermit::new();
    let d = h.d();
    let queued = line(
        h.shim("proposal", &["queue-micro", d], Some("{\"tier\":1,\"question\":\"Colour?\"}")),
        "QUEUED|MP-20260914-0",
    );
    assert!(queued.stderr.is_empty());
    let resolve =
        ["micro", d, "resolve", "MP-20260914-0", "--action", "answered", "--answer", "blue"];
    line(h.shim("proposal", &resolve, None), "RESOLVED|MP-20260914-0|answered");
    let created = h.shim("proposal", &["create", d], Some("Title: Try it\n---\nBody.\n")).expect(0);
    let id = created.stdout.trim().to_owned();
    let file = h.dir.join("proposals").join(format!("{id}.md"));
    assert!(file.is_file(), "the mirror wrote {}", file.display());
    let patch = ["patch", d, &id, "--set", "status=accepted"];
    line(h.shim("proposal", &patch, Some("Decision: Accepted on @now.\n")), &format!("OK|{id}"));
    line(
        h.shim("proposal", &["patch", d, &id, "--set", "reviewed=true"], None),
        &format!("OK|{id}"),
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("status: accepted") && text.contains("reviewed: true"), "{text}");
    let event = ["event", d, "responded", &format!("--id={id}"), "--action=accept"];
    line(h.shim("proposal", &event, None), "OK");
    line(h.shim("proposal", &["resolve-id", d, "PROP-1"], None), &format!("MATCH|{id}.md"));
    line(h.shim("proposal", &["index", d], None), "OK|1 proposals");
    line(h.shim("proposal", &["next-task", d], Some("Do X.\n")), "OK");
    assert_eq!(std::fs::read_to_string(h.dir.join("sessions/NEXT-TASK.md")).unwrap(), "Do X.\n");
    let ledger = std::fs::read_to_string(h.dir.join("state/proposal-metrics.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 4, "queued, resolved, created, responded: {ledger}");
    // heartbeat.ts alert-state <state file>: the directory is the file's grandparent.
    let state_file = h.dir.join("state/alert-state.json");
    let tick = h.shim(
        "heartbeat",
        &["alert-state", state_file.to_str().unwrap()],
        Some("{\"firing\":[]}"),
    );
    let out: Value = serde_json::from_str(&tick.expect(0).stdout).unwrap();
    assert_eq!(out["heartbeat_result"], "OK", "{out}");
    assert!(state_file.is_file(), "the mirror wrote alert-state.json");
}

#[test]
fn proposal_create_defaults_session_to_runtime_json() {
    let h = Hermit::new();
    let runtime = "{\n  \"version\": 1,\n  \"session_state\": \"in_progress\",\n  \"session_id\": \
                   \"S-007\"\n}\n";
    std::fs::write(h.dir.join("state/runtime.json"), runtime).unwrap();
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    let id = created.expect(0).stdout.trim().to_owned();
    let text = std::fs::read_to_string(h.dir.join("proposals").join(format!("{id}.md"))).unwrap();
    assert!(text.contains("\nsession: S-007\n"), "{text}");
    // A `Session:` header still wins; a bare one falls back to the runtime's.
    let named = h.shim("proposal", &["create", h.d()], Some("Title: B\nSession: S-001\n---\nB.\n"));
    let id = named.expect(0).stdout.trim().to_owned();
    let text = std::fs::read_to_string(h.dir.join("proposals").join(format!("{id}.md"))).unwrap();
    assert!(text.contains("\nsession: S-001\n"), "{text}");
}

#[test]
fn proposal_patch_of_a_file_without_its_closing_frontmatter_line_says_so() {
    let h = Hermit::new();
    std::fs::create_dir_all(h.dir.join("proposals")).unwrap();
    let text =
        "---\nid: PROP-001-x-000000\nstatus: proposed\n\n# Proposal\n\n## Operator Decision\n";
    std::fs::write(h.dir.join("proposals/PROP-001-x-000000.md"), text).unwrap();
    let patch = ["patch", h.d(), "PROP-001-x-000000", "--set", "status=accepted"];
    line(h.shim("proposal", &patch, None), "ERROR|frontmatter-terminator-missing");
    assert_eq!(
        std::fs::read_to_string(h.dir.join("proposals/PROP-001-x-000000.md")).unwrap(),
        text
    );
}

#[test]
fn proposal_brief_cycle_prunes_a_hand_edited_null_entry() {
    let h = Hermit::new();
    let queue = "{\n  \"pending\": [\n    null,\n    {\n      \"id\": \"MP-20260914-0\",\n      \
                 \"tier\": 1,\n      \"status\": \"pending\",\n      \"follow_up_count\": 0,\n      \
                 \"ts\": \"2026-09-14T08:00:00Z\",\n      \"question\": \"Ship?\"\n    }\n  ]\n}\n";
    std::fs::write(h.dir.join("state/micro-proposals.json"), queue).unwrap();
    // Other verbs read the queue and never match the null.
    line(h.shim("proposal", &["micro", h.d(), "nudge", "MP-20260914-9"], None), "NONE|no-match");
    let cycle = h.shim("proposal", &["micro", h.d(), "brief-cycle"], None).expect(0);
    let out: Value = serde_json::from_str(&cycle.stdout).unwrap();
    assert_eq!(out["dropped"], json!([null]), "{out}");
    assert_eq!(out["new"][0]["id"], "MP-20260914-0", "{out}");
    let file = std::fs::read_to_string(h.dir.join("state/micro-proposals.json")).unwrap();
    let kept: Value = serde_json::from_str(&file).unwrap();
    assert_eq!(kept["pending"].as_array().map(Vec::len), Some(1), "{file}");
    assert_eq!(kept["pending"][0]["follow_up_count"], 1, "{file}");
    // Any other non-object entry is still a corrupt file, refused whole.
    std::fs::write(h.dir.join("state/micro-proposals.json"), "{\"pending\":[7]}\n").unwrap();
    let refused = h.shim("proposal", &["micro", h.d(), "brief-cycle"], None);
    assert_ne!(refused.code, 0, "{refused:?}");
}

#[test]
fn the_shim_answers_a_bad_call_as_upstream_does() {
    let h = Hermit::new();
    let before = h.store.snapshot();
    // An unknown verb: a verdict line, exit 0.
    let unknown = h.shim("proposal", &["frob", h.d()], None);
    assert_eq!(
        (unknown.code, unknown.stdout.as_str(), unknown.stderr.as_str()),
        (0, "ERROR|unknown-verb\n", "")
    );
    // No verb or no directory: upstream's usage line on stderr, exit 1, nothing on stdout.
    for words in [&[][..], &["create"][..]] {
        let run = h.shim("proposal", words, None);
        assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{run:?}");
        assert!(run.stderr.starts_with("Usage: bun proposal.ts "), "{run:?}");
    }
    // A verb hookstate cannot parse (an unknown micro verb): exit 1, the usage line first.
    let run = h.shim("proposal", &["micro", h.d(), "frob"], None);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{run:?}");
    assert!(run.stderr.starts_with("Usage: bun proposal.ts "), "{run:?}");
    assert_eq!(run.stderr.lines().count(), 2, "{run:?}");
    let run = h.shim("heartbeat", &["alert-state"], None);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{run:?}");
    assert!(run.stderr.starts_with("Usage: bun heartbeat.ts alert-state "), "{run:?}");
    // An upstream verb hookstate does not build says so (exit 3), never a fake verdict.
    let gate = h.shim("proposal", &["gate", h.d(), "--gate", "triage"], Some("Title: x\n"));
    assert_eq!((gate.code, gate.stdout.as_str()), (3, ""), "{gate:?}");
    assert!(gate.stderr.contains("proposal.ts gate is not built"), "{gate:?}");
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    assert_eq!(std::fs::read_dir(h.dir.join("state")).unwrap().count(), 0);
}

/// SHELL.md with the sections upstream's template has.
const SHELL: &str = "# Active Session\n\n## Progress Log\n\n## Findings\n\n## Monitoring\n";

#[test]
fn proposal_create_appends_the_findings_line_to_shell_md() {
    let h = Hermit::new();
    let stdin = "Title: Cache the CI install\nFindings: CI spends 4 min installing\n---\nBody.\n";
    let created = h.shim("proposal", &["create", h.d()], Some(stdin)).expect(0);
    let id = created.stdout.trim().to_owned();
    assert!(created.stderr.is_empty(), "{created:?}");
    let shell = std::fs::read_to_string(h.dir.join("sessions/SHELL.md")).unwrap();
    let expected = format!(
        "# Active Session\n\n## Progress Log\n\n## Findings\n- {id}: CI spends 4 min \
         installing\n\n## Monitoring\n"
    );
    assert_eq!(shell, expected);
    // Without a Findings: header the title is the summary, appended after the first line.
    let second = h.shim("proposal", &["create", h.d()], Some("Title: Second\n---\nB.\n"));
    let second = second.expect(0).stdout.trim().to_owned();
    let shell = std::fs::read_to_string(h.dir.join("sessions/SHELL.md")).unwrap();
    assert!(
        shell.contains(&format!("installing\n- {second}: Second\n\n## Monitoring\n")),
        "{shell}"
    );
}

#[test]
fn proposal_create_without_shell_md_warns_and_keeps_the_proposal() {
    let h = Hermit::new();
    std::fs::remove_file(h.dir.join("sessions/SHELL.md")).unwrap();
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    assert_eq!(created.code, 0, "{created:?}");
    assert_eq!(created.stderr, "WARN: findings append: SHELL.md unreadable\n", "{created:?}");
    let id = created.stdout.trim();
    assert!(h.dir.join("proposals").join(format!("{id}.md")).is_file());
    assert!(!h.dir.join("sessions/SHELL.md").exists(), "no SHELL.md is made up");
}

#[test]
fn proposal_create_without_its_template_writes_nothing() {
    let h = Hermit::new();
    std::fs::remove_file(h.dir.join("templates/PROPOSAL.md.template")).unwrap();
    let before = h.store.snapshot();
    let stdin = Some("Title: Try it\n---\nBody.\n");
    line(h.shim("proposal", &["create", h.d()], stdin), "ERROR|template-missing");
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    assert!(!h.dir.join("proposals").exists());
    std::fs::write(h.dir.join("templates/PROPOSAL.md.template"), "# no frontmatter\n").unwrap();
    line(h.shim("proposal", &["create", h.d()], stdin), "ERROR|template-malformed");
    std::fs::write(h.dir.join("templates/PROPOSAL.md.template"), "---\nid:\n").unwrap();
    line(h.shim("proposal", &["create", h.d()], stdin), "ERROR|template-malformed");
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    // Bad stdin is still refused first, as upstream parses it before it looks at the template.
    line(h.shim("proposal", &["create", h.d()], Some("Title: x\n")), "ERROR|missing-separator");
}

#[test]
fn proposal_patch_request_compact_writes_the_compact_marker() {
    let h = Hermit::new();
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    let id = created.expect(0).stdout.trim().to_owned();
    let marker = h.dir.join("state/compact-requested.json");
    // A patch that does not land writes no marker.
    let missing = ["patch", h.d(), "PROP-009-nope-000000", "--request-compact"];
    line(h.shim("proposal", &missing, None), "ERROR|no-such-proposal");
    assert!(!marker.exists());
    let patch = ["patch", h.d(), &id, "--set", "status=accepted", "--request-compact"];
    line(h.shim("proposal", &patch, Some("Decision: Accepted on @now.\n")), &format!("OK|{id}"));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "{\"requested_at\":\"2026-09-14T08:15:02+00:00\",\"reason\":\"proposal-resolve\"}\n"
    );
    let text = prop_text(&h, &id);
    assert!(text.contains("status: accepted"), "{text}");
}

#[test]
fn proposal_metrics_reports_survival_and_acceptance_per_source() {
    let h = Hermit::new();
    line(h.shim("proposal", &["metrics", h.d()], None), "No proposal metrics yet.");
    line(
        h.shim("proposal", &["metrics", h.d(), "--source=reflect"], None),
        "reflect: no proposal metrics yet",
    );
    let stdin = "Title: Cache it\nSource: auto-detected\n---\nBody.\n";
    let id = h.shim("proposal", &["create", h.d()], Some(stdin)).expect(0).stdout.trim().to_owned();
    let event = ["event", h.d(), "responded", &format!("--id={id}"), "--action=accept"];
    line(h.shim("proposal", &event, None), "OK");
    // The triage agents' verdicts, appended by upstream's gate; the next mirrored call adopts them.
    let ledger = h.dir.join("state/proposal-metrics.jsonl");
    let mut text = std::fs::read_to_string(&ledger).unwrap();
    for verdict in ["CREATE", "CREATE", "DROP", "DROP", "DROP", "DROP", "DROP", "DROP"] {
        text.push_str(&format!(
            "{{\"ts\":\"2026-09-14T08:00:00Z\",\"type\":\"triage-verdict\",\"caller\":\"reflect\",\
             \"verdict\":\"{verdict}\"}}\n"
        ));
    }
    std::fs::write(&ledger, text).unwrap();
    h.shim("proposal", &["queue-micro", h.d()], Some("{\"question\":\"Adopt?\"}")).expect(0);
    line(
        h.shim("proposal", &["metrics", h.d(), "--source=reflect"], None),
        "reflect: triage-survival 25% (2/8), acceptance 100% (1/1), sample 8 — OK",
    );
    let table = h.shim("proposal", &["metrics", h.d()], None).expect(0);
    assert_eq!(
        table.stdout,
        "### Proposal acceptance by source\n\n| Source | Survival (CREATE/total) | Acceptance \
         (accepted/created) | n | Gate |\n|---|---|---|---|---|\n| reflect | 25% (2/8) | 100% \
         (1/1) | 8 | - |\n| capability-brainstorm | - | - | 0 | n<8 |\n| procedure-capture | - | \
         - | 0 | n<8 |\n| scheduled-check | - | n/a | 0 | n<8 |\n"
    );
}

#[test]
fn proposal_success_signal_validates_and_evaluates_over_the_session_reports() {
    let h = Hermit::new();
    let validate =
        |predicate: &str| h.shim("proposal", &["success-signal", "--validate", predicate], None);
    line(validate("avg_session_cost_usd <= 1.5 over 3 sessions"), "OK");
    let bad = validate("avg_session_cost_usd == 2 over 3 sessions");
    assert_eq!(
        (bad.code, bad.stdout.as_str(), bad.stderr.as_str()),
        (
            1,
            "invalid grammar; expected: avg_session_cost_usd <OP> <NUMBER> over <N> sessions (OP: \
             < <= > >=)\n",
            ""
        )
    );
    let report = |n: u32, date: &str, cost: &str| {
        let text = format!(
            "---\nid: S-{n:03}\nstatus: completed\ndate: {date}\ncost_usd: {cost}\n---\n\n# \
             Session Report: S-{n:03}\n"
        );
        std::fs::write(h.dir.join(format!("sessions/S-{n:03}-REPORT.md")), text).unwrap();
    };
    report(1, "2026-09-01T09:00:00+00:00", "4.00");
    report(2, "2026-09-10T09:00:00+00:00", "1.20");
    report(3, "2026-09-11T09:00:00+00:00", "0.00");
    report(4, "2026-09-12T09:00:00+00:00", "1.60");
    // A mirrored call adopts the reports.
    h.shim("proposal", &["queue-micro", h.d()], Some("{\"question\":\"Adopt?\"}")).expect(0);
    let eval = |session: &str, window: &str| {
        let predicate = format!("avg_session_cost_usd < 1.5 over {window} sessions");
        let words = ["success-signal", h.d(), "2026-09-05T00:00:00Z", session, &predicate];
        let run = h.shim("proposal", &words, None).expect(0);
        serde_json::from_str::<Value>(&run.stdout).unwrap()
    };
    // S-001 is before acceptance and S-003 recorded no cost: S-002 and S-004 average 1.4.
    assert_eq!(
        eval("null", "2"),
        json!({ "verdict": "MET", "metric": "avg_session_cost_usd", "op": "<", "threshold": 1.5,
                "window": 2, "observed": 1.4, "sessions_counted": 2 })
    );
    assert_eq!(eval("S-002", "2")["verdict"], "INSUFFICIENT_DATA");
    assert_eq!(eval("S-002", "1")["observed"], 1.6);
    assert_eq!(eval("S-002", "1")["verdict"], "UNMET");
    // Too few words: the usage line, then INSUFFICIENT_DATA, exit 0.
    let short = h.shim("proposal", &["success-signal", h.d()], None).expect(0);
    assert!(short.stdout.starts_with("usage: proposal.ts success-signal <stateDir> "), "{short:?}");
    assert!(
        short.stdout.ends_with(
            "{\"verdict\":\"INSUFFICIENT_DATA\",\"metric\":null,\"op\":null,\
                                    \"threshold\":null,\"window\":null,\"observed\":null,\
                                    \"sessions_counted\":0}\n"
        ),
        "{short:?}"
    );
}

#[test]
fn proposal_refuses_another_projects_state_dir_as_the_forks_pin_does() {
    let h = Hermit::new();
    let before = h.store.snapshot();
    let elsewhere = tempfile::tempdir().unwrap();
    let stdin = Some("Title: Try it\n---\nBody.\n");
    // From an unrelated directory, with no AGENT_DIR: refused on stderr, exit 1, nothing run.
    let refused =
        shim_on(&h.store.db(), &[], Some(elsewhere.path()), "proposal", &["create", h.d()], stdin);
    let pinned = elsewhere.path().join(".claude-code-hermit");
    assert_eq!((refused.code, refused.stdout.as_str()), (1, ""), "{refused:?}");
    assert_eq!(
        refused.stderr,
        format!(
            "proposal.ts: state dir must be this project's ({}); got {}\n",
            pinned.display(),
            h.d()
        )
    );
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    assert!(!h.dir.join("proposals").exists());
    // CLAUDE_PROJECT_DIR names the project whose directory it is; from a subdirectory of the
    // project the walk up finds it too.
    let project = h.dir.parent().unwrap();
    let named = [("CLAUDE_PROJECT_DIR", project.to_str().unwrap())];
    let ok = shim_on(
        &h.store.db(),
        &named,
        Some(elsewhere.path()),
        "proposal",
        &["create", h.d()],
        stdin,
    );
    assert!(ok.stdout.starts_with("PROP-001-try-it-"), "{ok:?}");
    std::fs::create_dir_all(project.join("src/deep")).unwrap();
    let deep = project.join("src/deep");
    let walked = shim_on(&h.store.db(), &[], Some(&deep), "proposal", &["index", h.d()], None);
    line(walked, "OK|1 proposals");
}

// ---- heartbeat.ts alert-state (`alerts tick`) ------------------------------------------------

#[test]
fn alert_state_prints_upstream_keys_and_lays_self_eval_updates_over_self_eval() {
    let h = Hermit::new();
    let tick = |payload: &str| {
        let run = h.verdict(NOW_MS, "alerts", &["tick"], Some(payload)).expect(0);
        let out: Value = serde_json::from_str(&run.stdout).unwrap();
        let keys: Vec<String> = out.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["monitoring_lines", "notifications", "heartbeat_result"], "{out}");
    };
    tick(
        r#"{"firing":[],"self_eval_updates":{"checklist:ci":{"clean_ticks":3},"checklist:db":{"clean_ticks":1}}}"#,
    );
    let state = || h.store.run(&["alerts", "--dir", h.d(), "list"]).expect(0).json();
    assert_eq!(state()["self_eval"]["checklist:ci"], json!({ "clean_ticks": 3 }));
    // Entry by entry, as an object spread: an update replaces its entry whole, the rest stay.
    tick(r#"{"firing":[],"self_eval_updates":{"checklist:ci":{"weight":2}}}"#);
    let self_eval = state()["self_eval"].clone();
    assert_eq!(self_eval["checklist:ci"], json!({ "weight": 2 }), "{self_eval}");
    assert_eq!(self_eval["checklist:db"], json!({ "clean_ticks": 1 }), "{self_eval}");
    // Any other shape is ignored, as upstream ignores it.
    tick(r#"{"firing":[],"self_eval_updates":["checklist:ci"]}"#);
    assert_eq!(state()["self_eval"], self_eval);
}

#[test]
fn alert_state_that_is_a_directory_skips_the_tick_with_exit_0() {
    let h = Hermit::new();
    let state_file = h.dir.join("state/alert-state.json");
    std::fs::create_dir_all(&state_file).unwrap();
    let before = h.store.snapshot();
    let run = h.shim(
        "heartbeat",
        &["alert-state", state_file.to_str().unwrap()],
        Some("{\"firing\":[]}"),
    );
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, "", "update-alert-state: read failed (EISDIR); skipping write\n")
    );
    assert_eq!(h.store.snapshot(), before, "nothing was written");
    assert!(state_file.is_dir());
}

impl Hermit {
    /// `hermit heartbeat alert-state <dir>/state/alert-state.json` with an empty firing set:
    /// upstream's line, parsed.
    fn alert_state(&self) -> Value {
        let file = self.dir.join("state/alert-state.json");
        let run = self.shim("heartbeat", &["alert-state", file.to_str().unwrap()], Some(EMPTY));
        let run = run.expect(0);
        assert!(run.stderr.is_empty(), "{run:?}");
        serde_json::from_str(&run.stdout).unwrap()
    }

    fn alerts(&self) -> Value {
        self.store.run(&["alerts", "--dir", self.d(), "list"]).expect(0).json()["alerts"].clone()
    }
}

const EMPTY: &str = "{\"firing\":[]}";

#[test]
fn alert_state_derives_the_stale_session_alert_from_runtime_and_the_progress_log() {
    let h = Hermit::new();
    std::fs::create_dir_all(h.dir.join("sessions")).unwrap();
    let shell = "# Active Session\n\n## Progress Log\n[05:10] Started\n[05:40] Did X\n\n\
                 ## Findings\n- [08:00] not a progress entry\n\n## Monitoring\n";
    std::fs::write(h.dir.join("sessions/SHELL.md"), shell).unwrap();
    // Idle: nothing fires, however old the log.
    std::fs::write(h.dir.join("state/runtime.json"), "{\"session_state\":\"idle\"}\n").unwrap();
    assert_eq!(h.alert_state()["heartbeat_result"], "OK");
    // In progress and quiet for 2 h 35 min, past the default 2 h.
    let runtime = "{\"session_state\":\"in_progress\",\"session_id\":\"S-004\"}\n";
    std::fs::write(h.dir.join("state/runtime.json"), runtime).unwrap();
    let text = "session marked in-progress but quiet — no Progress Log entry since [05:40] (~2.6h)";
    assert_eq!(
        h.alert_state(),
        json!({
            "monitoring_lines": [format!("[08:15] Heartbeat: {text}")],
            "notifications": [text],
            "heartbeat_result": "ALERT",
        })
    );
    assert_eq!(h.alerts()["stale-session"]["text"], text);
    // A longer `heartbeat.stale_threshold` keeps it quiet: the alert ages toward resolution.
    let config = "{\"timezone\":\"UTC\",\"heartbeat\":{\"stale_threshold\":\"3h\"}}\n";
    std::fs::write(h.dir.join("config.json"), config).unwrap();
    assert_eq!(h.alert_state()["heartbeat_result"], "OK");
    assert_eq!(h.alerts()["stale-session"]["consecutive_clean"], 1);
}

#[test]
fn alert_state_freezes_pending_decisions_while_their_files_are_unreadable() {
    let h = Hermit::new();
    let queued =
        h.shim("proposal", &["queue-micro", h.d()], Some("{\"tier\":1,\"question\":\"Ship?\"}"));
    let key = format!(
        "micro-proposal-pending:{}",
        queued.expect(0).stdout.trim().strip_prefix("QUEUED|").unwrap()
    );
    assert_eq!(h.alert_state()["heartbeat_result"], "ALERT");
    assert_eq!(h.alerts()[&key]["count"], 1);
    // A hand edit breaks the queue file: the alert is frozen, the operator told once a day, the
    // parse detail in the monitoring line, and the file left as it is.
    let queue = h.dir.join("state/micro-proposals.json");
    std::fs::write(&queue, "{\"pending\": [\n").unwrap();
    let tick = h.alert_state();
    let lines = tick["monitoring_lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{tick}");
    let line = lines[0].as_str().unwrap();
    assert!(
        line.starts_with(
            "[08:15] Heartbeat: structured read failure (micro-proposals.json) — \
             micro-proposals.json is unparseable ("
        ) && line.ends_with("). Pending-decision alerts frozen."),
        "{line}"
    );
    assert_eq!(
        tick["notifications"],
        json!(["I can't read the record of decisions waiting on you — some may be pending \
                without showing up. It needs a repair before I can see them again."])
    );
    assert_eq!(tick["heartbeat_result"], "ALERT");
    // The same day: no second notice, and the frozen alert does not age out (two clean ticks
    // would resolve it).
    let again = h.alert_state();
    assert_eq!(
        (again["notifications"].clone(), again["monitoring_lines"].clone()),
        (json!([]), json!([]))
    );
    assert_eq!(h.alerts()[&key]["count"], 1);
    assert_eq!(h.alerts()[&key]["consecutive_clean"], 0);
    assert_eq!(std::fs::read_to_string(&queue).unwrap(), "{\"pending\": [\n");
    // A PROP file that cannot be read freezes the proposal alerts the same way (no detail).
    let h = Hermit::new();
    std::fs::create_dir_all(h.dir.join("proposals/PROP-001-broken-000000.md")).unwrap();
    let tick = h.alert_state();
    assert_eq!(
        tick["monitoring_lines"][0],
        "[08:15] Heartbeat: structured read failure (proposals/). Pending-decision alerts frozen."
    );
}

// ---- the moonshine listener's tick, step by step -------------------------------------------

const PROJECT: &str = "essay";

fn fb(store: &Store, now: u64, session: Option<&str>, args: &[&str]) -> Run {
    let now = now.to_string();
    let mut all = vec!["--now-ms", &now];
    if let Some(session) = session {
        all.extend(["--session", session]);
    }
    all.extend(["feedback", "--project", PROJECT]);
    all.extend_from_slice(args);
    store.run(&all)
}

fn add_comment(store: &Store, now: u64, text: &str) {
    let target = r#"{"kind":"block","path":"a.md","range":[0,4],"excerpt":"Some"}"#;
    fb(store, now, None, &["add", "--target", target, text]).expect(0);
}

fn heartbeat(store: &Store) -> Value {
    fb(store, NOW_MS, None, &["list"]).expect(0).json()["heartbeat"].clone()
}

fn mirror_files(home: &Path) -> Vec<String> {
    let dir = home.join(PROJECT).join(".feedback");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The re-surface window of step 4: a comment delivered longer ago than this is drained again.
const RESURFACE_MS: u64 = 300_000;

#[test]
fn tick_step_1_writes_a_missing_adapter_manifest_and_keeps_an_existing_one() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    let home = tempfile::tempdir().unwrap();
    let mirror = home.path().to_str().unwrap();
    let tick = |now: u64| {
        let now = now.to_string();
        store.run(&["--now-ms", &now, "feedback", "--mirror", mirror, "tick"]).expect(0);
    };
    tick(NOW_MS);
    let manifest = home.path().join(PROJECT).join(".feedback").join("adapter.json");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    assert_eq!(
        (&written["harness"], &written["version"]),
        (&json!("claude-code"), &json!("adapter")),
        "{written}"
    );
    assert!(written["installedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{written}");
    // A manifest already there before the listener's first tick (another install's) is kept.
    let other = Store::new();
    add_comment(&other, NOW_MS, "One.");
    let second = tempfile::tempdir().unwrap();
    let dir = second.path().join(PROJECT).join(".feedback");
    std::fs::create_dir_all(&dir).unwrap();
    let theirs =
        "{\"harness\":\"other\",\"version\":\"9\",\"installedAt\":\"2020-01-01T00:00:00Z\"}";
    std::fs::write(dir.join("adapter.json"), theirs).unwrap();
    let now = NOW_MS.to_string();
    let mirror = second.path().to_str().unwrap();
    other.run(&["--now-ms", &now, "feedback", "--mirror", mirror, "tick"]).expect(0);
    // Its values are kept (the mirror re-renders the adopted file in its own layout).
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter.json")).unwrap()).unwrap();
    assert_eq!(kept, serde_json::from_str::<Value>(theirs).unwrap());
}

#[test]
fn tick_step_4_drains_pending_and_stale_delivered_comments_only_in_listen_mode() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    fb(&store, NOW_MS, None, &["control", "paused"]).expect(0);
    // Paused: the heartbeat only.
    let paused = fb(&store, NOW_MS, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(paused["claimed"], json!([]), "{paused}");
    assert_eq!(paused["projects"][0]["heartbeat"]["mode"], "paused", "{paused}");
    fb(&store, NOW_MS, None, &["control", "listen"]).expect(0);
    let first = fb(&store, NOW_MS, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(first["claimed"][0]["comment"], "One.", "{first}");
    // Delivered and never addressed: not again within the window, re-surfaced after it.
    let soon = fb(&store, NOW_MS + RESURFACE_MS - 1_000, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(soon["claimed"], json!([]), "{soon}");
    let later = fb(&store, NOW_MS + RESURFACE_MS + 1_000, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(later["claimed"][0]["comment"], "One.", "{later}");
}

#[test]
fn tick_step_3_skips_a_project_another_session_is_requested_for_entirely() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    fb(&store, NOW_MS, None, &["control", "listen", "--for-session", "A"]).expect(0);
    let tick = fb(&store, NOW_MS, Some("B"), &["tick"]).expect(0).json();
    let project = &tick["projects"][0];
    assert_eq!(project["skipped"], "another session is requested", "{tick}");
    assert_eq!((&project["heartbeat"], &tick["claimed"]), (&Value::Null, &json!([])), "{tick}");
    assert_eq!(heartbeat(&store), Value::Null, "no heartbeat for a project this session skips");
    // Through the mirror: no heartbeat.json appears in the directory either.
    let home = tempfile::tempdir().unwrap();
    let mirror = home.path().to_str().unwrap();
    let now = NOW_MS.to_string();
    let args = ["--now-ms", &now, "--session", "B", "feedback", "--mirror", mirror, "tick"];
    store.run(&args).expect(0);
    let files = mirror_files(home.path());
    assert!(!files.iter().any(|f| f == "heartbeat.json"), "{files:?}");
    // The requested session drains and writes its heartbeat.
    let own = fb(&store, NOW_MS, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(own["claimed"][0]["comment"], "One.", "{own}");
    assert_eq!(heartbeat(&store)["mode"], "listen");
}

#[test]
fn tick_step_3_skips_a_named_request_when_the_session_id_is_missing_and_says_so() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    fb(&store, NOW_MS, None, &["control", "listen", "--for-session", "A"]).expect(0);
    let tick = fb(&store, NOW_MS, None, &["tick"]).expect(0).json();
    let project = &tick["projects"][0];
    assert_eq!(project["skipped"], "a session is requested and this session's id is unknown");
    assert_eq!(project["heartbeat"], Value::Null, "{tick}");
    assert_eq!(heartbeat(&store), Value::Null);
    // A request that names nobody is this session's, known or not.
    fb(&store, NOW_MS, None, &["control", "listen"]).expect(0);
    let open = fb(&store, NOW_MS, None, &["tick"]).expect(0).json();
    assert_eq!(open["projects"][0]["skipped"], Value::Null, "{open}");
    assert_eq!(open["claimed"][0]["comment"], "One.", "{open}");
}

#[test]
fn tick_step_2_writes_the_stopped_heartbeat_after_an_address_drain() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    add_comment(&store, NOW_MS, "Two.");
    fb(&store, NOW_MS, None, &["control", "stopped"]).expect(0);
    fb(&store, NOW_MS, None, &["address"]).expect(0);
    let tick = fb(&store, NOW_MS, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(tick["claimed"].as_array().map(Vec::len), Some(2), "{tick}");
    let beat = &tick["projects"][0]["heartbeat"];
    assert_eq!((&beat["mode"], &beat["pending"]), (&json!("stopped"), &json!(0)), "{tick}");
    assert_eq!(heartbeat(&store)["pending"], 0);
    assert_eq!(tick["continue"], false);
    // Stopped without a request: the final heartbeat counts what is still pending.
    add_comment(&store, NOW_MS, "Three.");
    let idle = fb(&store, NOW_MS + 1_000, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(idle["projects"][0]["heartbeat"]["pending"], 1, "{idle}");
    assert_eq!(idle["claimed"], json!([]));
}

#[test]
fn tick_step_3_in_listen_mode_counts_pending_before_the_drain() {
    let store = Store::new();
    add_comment(&store, NOW_MS, "One.");
    fb(&store, NOW_MS, None, &["control", "listen"]).expect(0);
    let tick = fb(&store, NOW_MS, Some("A"), &["tick"]).expect(0).json();
    assert_eq!(tick["claimed"].as_array().map(Vec::len), Some(1), "{tick}");
    assert_eq!(tick["projects"][0]["heartbeat"]["pending"], 1, "step 3 precedes step 4");
}

/// `state/alert-state.json` as upstream's heartbeat writes it: two alerts firing, one suppressed.
const ALERT_STATE: &str = r#"{
  "alerts": {
    "custom:ci-red": {
      "count": 2,
      "consecutive_clean": 0,
      "suppressed": false,
      "first_seen": "2026-09-13",
      "last_seen": "2026-09-14",
      "text": "CI is red"
    },
    "custom:disk": {
      "count": 7,
      "consecutive_clean": 0,
      "suppressed": true,
      "first_seen": "2026-09-10",
      "last_seen": "2026-09-14",
      "text": "disk above 90%"
    },
    "custom:flaky": {
      "count": 1,
      "consecutive_clean": 1,
      "suppressed": false,
      "first_seen": "2026-09-14",
      "last_seen": "2026-09-14",
      "text": "a flaky test"
    }
  },
  "last_digest_date": null,
  "self_eval": {},
  "total_ticks": 3
}
"#;

/// A hermit with an initialised alert state and a reflection state (which no layout holds).
fn summary_hermit(reflection: &str) -> Hermit {
    let h = Hermit::new();
    std::fs::write(h.dir.join("state/alert-state.json"), ALERT_STATE).unwrap();
    std::fs::write(h.dir.join("state/reflection-state.json"), reflection).unwrap();
    h
}

fn summary(h: &Hermit) -> String {
    std::fs::read_to_string(h.dir.join("state/state-summary.md")).unwrap()
}

/// What upstream's generate-summary.ts `run()` writes, read from its code: the frontmatter's
/// rates are `(rate / 100).toFixed(2)` (`null` without data), the body's `${rate}%` (`no data`).
fn expected_summary(
    created: (u32, u32, u32),
    responded: u32,
    rates: [(&str, &str); 3],
    pending: u32,
    question: &str,
    approval: (&str, &str),
    reflection: (&str, &str),
) -> String {
    let (all, auto, manual) = created;
    let [(rr, rr_text), (ar, ar_text), (mr, mr_text)] = rates;
    format!(
        "---\nupdated: 2026-09-14T08:15:02.118Z\nactive_alerts: 2\nsuppressed_alerts: 1\n\
         proposals_created: {all}\nproposals_responded: {responded}\nproposals_resolved: 0\n\
         response_rate: {rr}\nauto_detect_accept_rate: {ar}\nmanual_accept_rate: {mr}\n\
         micro_pending: {pending}\nmicro_approval_rate: {}\nlast_reflection: {}\n---\n\
         # Agent State\n\n## Alerts\nActive: 2\nSuppressed: 1\n\n## Proposals\n\
         Created: {all} (auto-detected: {auto}, manual: {manual})\nResponded: {responded}\n\
         Resolved: 0\nResponse rate: {rr_text}\nAuto-detected accept rate: {ar_text}\n\
         Manual accept rate: {mr_text}\n\n## Micro-Proposals\nPending: {pending}\n\
         Question: {question}\nApproval rate: {}\nBridged asks answered: 0\n\n## Reflection\n\
         Last: {}\n",
        approval.0, reflection.0, approval.1, reflection.1
    )
}

#[test]
fn proposal_create_regenerates_state_summary_md_as_upstream_writes_it() {
    let h = summary_hermit("{\"last_reflection\":\"2026-09-13T22:05:00.000Z\"}\n");
    let d = h.d();
    let queue = |question: &str| {
        let stdin = format!("{{\"tier\":1,\"question\":\"{question}\"}}");
        h.shim("proposal", &["queue-micro", d], Some(&stdin)).expect(0).stdout.trim().to_owned()
    };
    assert_eq!(queue("Pin node to 20.x?"), "QUEUED|MP-20260914-0");
    assert_eq!(queue("Delete merged branches?"), "QUEUED|MP-20260914-1");
    let approve = ["micro", d, "resolve", "MP-20260914-1", "--action", "approved"];
    h.shim("proposal", &approve, None).expect(0);
    assert!(!h.dir.join("state/state-summary.md").exists(), "only create regenerates it");

    let stdin = "Title: Cache the CI install\nSource: auto-detected\n---\nBody.\n";
    let created = h.shim("proposal", &["create", d], Some(stdin)).expect(0);
    assert!(created.stderr.is_empty(), "{created:?}");
    let id = created.stdout.trim().to_owned();
    let reflection = ("2026-09-13T22:05:00.000Z", "2026-09-13 22:05");
    assert_eq!(
        summary(&h),
        expected_summary(
            (1, 1, 0),
            0,
            [("0.00", "0%"), ("0.00", "0%"), ("null", "no data")],
            1,
            "Pin node to 20.x?",
            ("0.50", "50%"),
            reflection,
        )
    );

    let event = ["event", d, "responded", &format!("--id={id}"), "--action=accept"];
    line(h.shim("proposal", &event, None), "OK");
    let second = h.shim("proposal", &["create", d], Some("Title: Second\n---\nB.\n")).expect(0);
    assert!(second.stderr.is_empty(), "{second:?}");
    assert_eq!(
        summary(&h),
        expected_summary(
            (2, 1, 1),
            1,
            [("0.50", "50%"), ("1.00", "100%"), ("0.00", "0%")],
            1,
            "Pin node to 20.x?",
            ("0.50", "50%"),
            reflection,
        )
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(h.dir.join("state/state-summary.md")).unwrap();
        let umask_mode = 0o666 & !0o022;
        assert_eq!(meta.permissions().mode() & 0o777, umask_mode, "writeFileSync's mode");
    }
}

#[test]
fn proposal_create_summary_follows_upstream_on_missing_and_unreadable_inputs() {
    // No alert-state.json: the hermit is not initialised and upstream writes nothing.
    let h = Hermit::new();
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    assert!(created.expect(0).stderr.is_empty());
    assert!(!h.dir.join("state/state-summary.md").exists());

    // An unparseable reflection state and no queue: `never`, `null`, no question, no data.
    let h = summary_hermit("{not json\n");
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    assert!(created.expect(0).stderr.is_empty());
    let expected = expected_summary(
        (1, 0, 1),
        0,
        [("0.00", "0%"), ("null", "no data"), ("0.00", "0%")],
        0,
        "none",
        ("null", "no data"),
        ("null", "never"),
    );
    assert_eq!(summary(&h), expected);

    // A refused create writes no summary (nor replaces the one there).
    let h = summary_hermit("{}\n");
    line(h.shim("proposal", &["create", h.d()], Some("Title: x\n")), "ERROR|missing-separator");
    line(h.shim("proposal", &["create", h.d()], Some("---\nBody.\n")), "ERROR|missing-title");
    assert!(!h.dir.join("state/state-summary.md").exists());

    // A last_reflection no Date reads makes upstream's toISOString throw: create's tail warns,
    // writes no summary, and the PROP stands.
    let h = summary_hermit("{\"last_reflection\":\"last tuesday\"}\n");
    let created = h.shim("proposal", &["create", h.d()], Some("Title: Try it\n---\nBody.\n"));
    assert_eq!(created.code, 0, "{created:?}");
    assert_eq!(created.stderr, "WARN: summary regen failed: Invalid Date\n", "{created:?}");
    assert!(h.dir.join("proposals").join(format!("{}.md", created.stdout.trim())).is_file());
    assert!(!h.dir.join("state/state-summary.md").exists());
}

/// The first calls after the shim replaces the script are often reads: they answer the
/// directory as the script did, its files adopted first (they answered from a store that had
/// adopted nothing: `OK|0 proposals` beside two, `NONE|no-match` for one of them).
#[test]
fn the_shims_first_reads_answer_from_the_directorys_files() {
    let h = Hermit::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/legacy/hermit");
    hookstate_testkit::copy_dir(&fixture.join("proposals"), &h.dir.join("proposals"));
    let d = h.d();
    let id = "PROP-001-cache-dependency-install-step-ci-165046.md";
    line(h.shim("proposal", &["resolve-id", d, "PROP-001"], None), &format!("MATCH|{id}"));
    line(h.shim("proposal", &["index", d], None), "OK|2 proposals");
    assert!(h.dir.join(".hookstate-mirror").is_dir(), "the read was mirrored");
    // Without the mirror a read opens nothing for writing: the store stays as it was.
    let before = h.store.snapshot();
    let direct = ["--format", "verdict", "proposals", "--dir", d, "index"];
    h.store.run(&direct).expect(0);
    assert_eq!(h.store.snapshot(), before);
}

/// The mirror's baselines are of one store: a second store on a directory another store
/// mirrored adopts the whole directory as a first sight. It found every file equal to its
/// baseline, adopted nothing, and wrote its own emptier state over the files: the ledger cut
/// to its one line, a pending question replaced under the same id.
#[test]
fn a_second_store_on_a_mirrored_directory_adopts_it_and_loses_nothing() {
    let h = Hermit::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/legacy/hermit");
    hookstate_testkit::copy_dir(&fixture, &h.dir);
    let d = h.d();
    let ledger = || std::fs::read_to_string(h.dir.join("state/proposal-metrics.jsonl")).unwrap();
    let before = ledger();
    line(h.shim("proposal", &["index", d], None), "OK|2 proposals");
    let other = tempfile::tempdir().unwrap();
    let second = other.path().join("second.redb");
    let in_second = |words: &[&str], stdin: Option<&str>| {
        shim_on(&second, &[("AGENT_DIR", d)], None, "proposal", words, stdin)
    };
    let queued = in_second(&["queue-micro", d], Some("{\"tier\":1,\"question\":\"Second?\"}"));
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    let after = ledger();
    assert!(after.starts_with(&before), "the second store cut the ledger:\n{after}");
    assert_eq!(after.lines().count(), before.lines().count() + 1, "{after}");
    line(in_second(&["index", d], None), "OK|2 proposals");
    // Back to the first store: the second's line stays.
    line(h.shim("proposal", &["index", d], None), "OK|2 proposals");
    assert_eq!(ledger(), after);
}
