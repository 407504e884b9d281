//! `task.ts` end to end over the pure decisions, events applied as a projection will apply them.

use hookstate_schema::session::{JsonDoc, Marker, SessionEvent, TaskDoc};
use serde_json::Value;

use super::decide_change;
use crate::session::rules::task_doc::apply_edit;
use crate::session::rules::tasks::{decide_open, parse_args, TurnInputs};
use crate::session::rules::verdict::Decision;

const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z

struct Hermit {
    tasks: Vec<TaskDoc>,
    held: Vec<String>,
    turn: TurnInputs,
}

impl Hermit {
    fn new() -> Hermit {
        Hermit { tasks: Vec::new(), held: Vec::new(), turn: TurnInputs::default() }
    }

    fn apply(&mut self, decision: Decision) -> Result<Value, String> {
        let decided = decision.map_err(|r| r.token)?;
        for event in &decided.events {
            match event {
                SessionEvent::TaskOpened { task, .. } => self.tasks.push((**task).clone()),
                SessionEvent::TaskChanged { id, at, edits, .. } => {
                    let task = self.tasks.iter_mut().find(|t| &t.id == id).unwrap();
                    for edit in edits {
                        apply_edit(task, at, edit);
                    }
                }
                SessionEvent::MarkerWritten { marker: Marker::TaskTurn, doc } => {
                    self.turn.binding = Some(doc.clone())
                }
                other => panic!("{other:?}"),
            }
        }
        Ok(serde_json::from_str(&decided.verdict.lines[0]).unwrap())
    }

    fn run(&mut self, verb: &str, args: &[&str], stdin: &str, now: u64) -> Result<Value, String> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let call = parse_args(verb, &args).map_err(|r| r.token)?;
        let decision = if verb == "open" {
            decide_open(&self.tasks, &call, &self.turn, now)
        } else {
            let held = self.held.clone();
            decide_change(
                &self.tasks,
                &call,
                stdin,
                &|c| held.iter().any(|h| h == c),
                &self.turn,
                now,
            )
        };
        self.apply(decision)
    }
}

fn open(h: &mut Hermit, title: &str, extra: &[&str], now: u64) -> Value {
    let mut args =
        vec!["--title", title, "--requester", "discord:90210", "--done", "served and > 60 days"];
    args.extend_from_slice(extra);
    h.run("open", &args, "", now).unwrap()
}

#[test]
fn open_allocates_ids_and_handles_and_dedupes() {
    let mut h = Hermit::new();
    let first = open(&mut h, "Rotate the TLS cert", &["--dedupe-key", "duty:heartbeat:tls"], NOW);
    assert_eq!(first.to_string(), "{\"id\":\"T-20260914-081502\",\"handle\":\"rotate-the-tls-cert\",\"created\":true,\"open_count\":1,\"queued\":false}");
    let second = open(&mut h, "Rotate the TLS cert", &[], NOW);
    assert_eq!(
        (second["id"].as_str(), second["handle"].as_str(), second["queued"].as_bool()),
        (Some("T-20260914-081502-0"), Some("rotate-the-tls-cert-2"), Some(true))
    );
    let again = open(&mut h, "Other", &["--dedupe-key", "duty:heartbeat:tls"], NOW);
    assert_eq!(
        (again["id"].as_str(), again["created"].as_bool(), again["open_count"].as_u64()),
        (Some("T-20260914-081502"), Some(false), Some(2))
    );
    assert_eq!(h.tasks.len(), 2);
    let body = &h.tasks[0].body;
    assert!(body.starts_with("## Progress\n- 2026-09-14T08:15:02.118Z discord:90210: Opened: served and > 60 days\n\n## Decisions"), "{body}");
    for (args, token) in [
        (&["--title", "t", "--requester", "nobody", "--done", "d"][..], "invalid-requester"),
        (&["--title", " ", "--requester", "operator", "--done", "d"], "missing-title"),
        (&["--title", "t", "--requester", "operator"], "missing-done"),
        (
            &[
                "--title",
                "t",
                "--requester",
                "operator",
                "--done",
                "d",
                "--due",
                "2026-09-15T16:00",
            ],
            "invalid-due",
        ),
        (
            &["--title", "t", "--requester", "operator", "--done", "d", "--owner", "helper:x"],
            "invalid-owner",
        ),
        (
            &[
                "--title",
                "t",
                "--requester",
                "operator",
                "--done",
                "d",
                "--owner",
                "helper:d:1",
                "--card",
                "{}",
            ],
            "card-on-helper-task",
        ),
        (
            &[
                "--title",
                "t",
                "--requester",
                "operator",
                "--done",
                "d",
                "--card",
                "{\"chat_id\":\"1\"}",
            ],
            "invalid-card",
        ),
        (&["--title", "t", "--requester", "operator", "--done", ""], "invalid-record"),
    ] {
        assert_eq!(h.run("open", args, "", NOW), Err(token.to_owned()), "{args:?}");
    }
}

#[test]
fn a_confirmed_close_is_an_optimistic_check_on_result_rev() {
    let mut h = Hermit::new();
    let id = open(&mut h, "Rotate", &["--approver", "discord:1"], NOW)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let blocked = h.run("block", &[&id, "--result-stdin"], " rotated\n", NOW).unwrap();
    assert_eq!(blocked.to_string(), format!("{{\"id\":\"{id}\",\"listing\":\"unconfirmed\",\"result_rev\":1,\"waiting_on\":\"discord:1\"}}"));
    let close = |actor: &str, rev: &str| {
        vec![
            "--by".to_owned(),
            "confirmed".into(),
            "--actor".into(),
            actor.into(),
            "--result-rev".into(),
            rev.into(),
            "--reason-stdin".into(),
        ]
    };
    fn as_refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let mut args = vec![id.as_str()];
    let wrong = close("discord:2", "1");
    args.extend(as_refs(&wrong));
    assert_eq!(h.run("close", &args, "ok", NOW), Err("approver-required".into()));
    let first = close("discord:1", "1");
    let call_a = parse_args("close", &[vec![id.clone()], first.clone()].concat()).unwrap();
    let call_b = call_a.clone();
    let held = |_: &str| false;
    let a = decide_change(&h.tasks, &call_a, "confirmed", &held, &h.turn, NOW);
    let done = h.apply(a).unwrap();
    assert_eq!(done["closed_by"], "confirmed");
    let b = decide_change(&h.tasks, &call_b, "confirmed", &held, &h.turn, NOW);
    assert_eq!(b.unwrap_err().token, "not-open");
    let mut h2 = Hermit::new();
    let id2 = open(&mut h2, "Again", &[], NOW)["id"].as_str().unwrap().to_owned();
    h2.run("block", &[&id2, "--result-stdin"], "first", NOW).unwrap();
    h2.run("note", &[&id2, "--actor", "discord:90210", "--done", "new done"], "", NOW).unwrap();
    let stale = [vec![id2.clone()], close("discord:90210", "1")].concat();
    assert_eq!(h2.run("close", &as_refs(&stale), "ok", NOW), Err("stale-result".into()));
}

#[test]
fn notes_stalls_checks_and_cancels_edit_in_upstreams_order() {
    let mut h = Hermit::new();
    let id = open(&mut h, "Warm", &["--dedupe-key", "duty:heartbeat:warm", "--claim", "u-1"], NOW)
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let noted = h
        .run(
            "note",
            &[
                &id,
                "--decision",
                "--approval",
                "discord:1: go ahead",
                "--due",
                "2026-09-15T18:00:00+02:00",
            ],
            "use the cron\n",
            NOW,
        )
        .unwrap();
    assert_eq!(noted.to_string(), format!("{{\"id\":\"{id}\",\"result_rev\":0}}"));
    let t = &h.tasks[0];
    assert_eq!(t.due.as_deref(), Some("2026-09-15T16:00:00.000Z"));
    assert!(t.body.contains("## Decisions\n- 2026-09-14T08:15:02.118Z hermit: use the cron\n\n## Approvals\n- 2026-09-14T08:15:02.118Z discord:1: go ahead\n\n## Lessons"), "{}", t.body);
    assert_eq!(h.run("note", &[&id], " ", NOW), Err("empty".into()));
    assert_eq!(
        h.run("note", &[&id, "--approval", "nocolon"], "", NOW),
        Err("invalid-approval".into())
    );
    assert_eq!(h.run("note", &[&id, "--done", "x"], "", NOW), Err("missing-actor".into()));
    assert_eq!(
        h.run("block", &[&id, "--status-line", "waiting"], "", NOW),
        Err("stall-needs-status-and-next".into())
    );
    let stall = h
        .run(
            "block",
            &[
                &id,
                "--waiting-on",
                "operator",
                "--status-line",
                "DNS pending",
                "--next",
                "recheck at 9",
            ],
            "",
            NOW,
        )
        .unwrap();
    assert_eq!(
        stall["post_to"].to_string(),
        "{\"conversation\":null,\"requester\":\"discord:90210\"}"
    );
    assert!(h.tasks[0].body.contains(": DNS pending; next: recheck at 9\n"));
    assert_eq!(
        h.run("close", &[&id, "--by", "check", "--actor", "hermit", "--claim", "u-1"], "", NOW),
        Err("check-needs-evidence".into())
    );
    h.held.push("u-1".into());
    let checked = h
        .run("close", &[&id, "--by", "check", "--actor", "hermit", "--claim", "u-1"], "", NOW)
        .unwrap();
    assert_eq!(checked["closed_by"], "check");
    assert_eq!(h.tasks[0].closed_reason.as_deref(), Some("later:u-1:held"));
    assert_eq!(h.tasks[0].waiting_on, None);
    let other = open(&mut h, "Duty", &["--dedupe-key", "duty:heartbeat:disk"], NOW + 1000)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let duty =
        h.run("close", &[&other, "--by", "check", "--actor", "duty:heartbeat"], "", NOW).unwrap();
    assert_eq!(duty["next_queued"], Value::Null);
    let third = open(&mut h, "Third", &[], NOW + 2000)["id"].as_str().unwrap().to_owned();
    assert_eq!(
        h.run("cancel", &[&third, "--actor", "operator"], "", NOW),
        Err("empty-reason".into())
    );
    let cancelled = h
        .run("cancel", &[&third, "--actor", "operator", "--reason-stdin"], "not needed", NOW)
        .unwrap();
    assert_eq!(
        cancelled.to_string(),
        format!("{{\"id\":\"{third}\",\"closed_by\":\"cancelled\",\"next_queued\":null}}")
    );
    assert_eq!(h.run("note", &[&third], "x", NOW), Err("not-open".into()));
    assert_eq!(h.run("note", &["T-20260101-000000"], "x", NOW), Err("not-found".into()));
}

#[test]
fn progress_binds_the_turn_of_the_executing_session() {
    let mut h = Hermit::new();
    let execution = "{\"state\":\"in_flight\",\"turn_id\":\"turn-1\",\"at\":\"2026-09-14T08:15:00.000Z\",\"source\":\"s\",\"cc_session_id\":\"cc-1\",\"reason\":null}\n";
    h.turn.execution =
        Some(crate::legacy::json::parse_doc("execution.json", execution.as_bytes()).unwrap());
    let a = open(&mut h, "A", &[], NOW)["id"].as_str().unwrap().to_owned();
    let b = open(&mut h, "B", &[], NOW + 1000)["id"].as_str().unwrap().to_owned();
    let binding: &JsonDoc = h.turn.binding.as_ref().unwrap();
    assert_eq!(crate::legacy::json::render(binding), format!("{{\"cc_session_id\":\"cc-1\",\"task_ids\":[\"{a}\",\"{b}\"],\"at\":\"2026-09-14T08:15:02.118Z\",\"turn_id\":\"turn-1\"}}\n"));
    h.turn.last_observed_at = Some("2026-09-14T08:20:00.000Z".into());
    h.run("note", &[&b, "--decision"], "", NOW + 2000).unwrap();
    assert!(
        crate::legacy::json::render(h.turn.binding.as_ref().unwrap())
            .contains(&format!("[\"{a}\",\"{b}\"]")),
        "a metadata-only note binds nothing"
    );
    h.run("note", &[&b], "progress", NOW + 3000).unwrap();
    assert!(crate::legacy::json::render(h.turn.binding.as_ref().unwrap())
        .contains(&format!("\"task_ids\":[\"{b}\"]")));
}
