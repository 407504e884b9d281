//! The markers' writers and readers against upstream's branch tables.

use super::*;

const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z
const TZ: &str = "UTC";

fn parse(text: &str) -> JsonDoc {
    crate::legacy::json::parse_doc("marker.json", text.as_bytes()).unwrap()
}

fn markers(events: &[SessionEvent]) -> Vec<(Marker, bool)> {
    events
        .iter()
        .map(|e| match e {
            SessionEvent::MarkerWritten { marker, .. } => (*marker, true),
            SessionEvent::MarkerRemoved { marker } => (*marker, false),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn operator_activity_writes_the_clock_and_the_open_turn() {
    let both = [(Marker::LastOperatorAction, true), (Marker::OperatorTurnOpen, true)];
    assert_eq!(
        markers(&record_operator_action(Some("fix the build"), false, true, NOW).events),
        both
    );
    assert_eq!(markers(&record_operator_action(None, true, true, NOW).events), both);
    assert!(record_operator_action(None, false, true, NOW).events.is_empty());
    assert_eq!(
        markers(&record_operator_action(None, false, false, NOW).events),
        [(Marker::LastOperatorAction, true)]
    );
    for routine in [
        "[hermit-routine:brief] go",
        " <channel source=\"discord\">hi",
        "HEARTBEAT_EVALUATE\n",
        "HEARTBEAT_ERROR: precheck failed",
        "/clear",
        "/compact now",
        "/model opus",
        "/claude-code-hermit:heartbeat run",
        "<task-notification>",
    ] {
        assert!(
            record_operator_action(Some(routine), false, true, NOW).events.is_empty(),
            "{routine}"
        );
    }
    assert!(!is_routine_prompt(" [hermit-routine:x"));
    let SessionEvent::MarkerWritten { doc, .. } =
        &record_operator_action(None, true, true, NOW).events[0]
    else {
        panic!()
    };
    assert_eq!(crate::legacy::json::render(doc), "{\"at\":\"2026-09-14T08:15:02.118Z\"}\n");
}

#[test]
fn an_open_turn_expires_after_its_ttl() {
    let marker = parse("{\"at\":\"2026-09-14T08:00:00.000Z\"}\n");
    assert!(turn_open(Some(&marker), NOW));
    assert!(!turn_open(Some(&marker), NOW + 3_600_000));
    assert!(!turn_open(Some(&parse("{\"at\":\"2026-09-15T00:00:00.000Z\"}\n")), NOW));
    assert!(!turn_open(None, NOW));
}

fn decision(runtime: &RuntimeRead<'_>, action: Option<&str>, pending: bool) -> (String, usize) {
    let action = action.map(parse);
    let decided = auto_close_decision(runtime, action.as_ref(), pending, NOW, TZ).unwrap();
    (decided.verdict.lines[0].clone(), decided.events.len())
}

#[test]
fn the_daily_close_follows_upstreams_branch_table() {
    let busy = parse("{\n  \"session_state\": \"in_progress\",\n  \"session_id\": \"S-001\"\n}\n");
    let resting = parse("{\n  \"session_state\": \"idle\",\n  \"session_id\": null\n}\n");
    let waiting = parse("{\n  \"session_state\": \"waiting\"\n}\n");
    let recent = Some("{\"at\":\"2026-09-14T08:10:00.000Z\"}\n");
    let old = Some("{\"at\":\"2026-09-14T07:00:00.000Z\"}\n");
    let cases = [
        (decision(&RuntimeRead::Corrupt, recent, true), "{\"ok\":true,\"decision\":\"noop\",\"reason\":\"runtime unreadable (corrupt)\"}", 0),
        (decision(&RuntimeRead::Missing, recent, true), "{\"ok\":true,\"decision\":\"noop\",\"resting\":false,\"reason\":\"session_state=missing; stale pending-close deleted\"}", 1),
        (decision(&RuntimeRead::Ok(&waiting), recent, false), "{\"ok\":true,\"decision\":\"noop\",\"resting\":false,\"reason\":\"session_state=waiting\"}", 0),
        (decision(&RuntimeRead::Ok(&resting), recent, false), "{\"ok\":true,\"decision\":\"noop\",\"resting\":true,\"reason\":\"idle, no active session\"}", 0),
        (decision(&RuntimeRead::Ok(&busy), None, false), "{\"ok\":true,\"decision\":\"close-now\",\"reason\":\"last-operator-action missing/invalid\"}", 0),
        (decision(&RuntimeRead::Ok(&busy), Some("{\"at\":\"2027-01-01T00:00:00.000Z\"}\n"), false), "{\"ok\":true,\"decision\":\"close-now\",\"reason\":\"last-operator-action is in the future (clock skew)\"}", 0),
        (decision(&RuntimeRead::Ok(&busy), old, false), "{\"ok\":true,\"decision\":\"close-now\",\"reason\":\"lull 75min\"}", 0),
        (decision(&RuntimeRead::Ok(&busy), recent, false), "{\"ok\":true,\"decision\":\"queued\",\"reason\":\"operator active 5min ago\"}", 1),
    ];
    for ((line, events), want_line, want_events) in cases {
        assert_eq!((line.as_str(), events), (want_line, want_events));
    }
}

#[test]
fn the_drain_waits_for_a_lull_and_its_cooldown() {
    let pending = parse("{\n  \"queued_at\": \"2026-09-14T08:00:00+0000\",\n  \"queued_by\": \"daily-auto-close\"\n}\n");
    let busy = parse("{\n  \"session_state\": \"in_progress\"\n}\n");
    let recent = parse("{\"at\":\"2026-09-14T08:10:00.000Z\"}\n");
    assert!(!pending_close_drain_due(Some(&pending), Some(&busy), Some(&recent), NOW));
    assert!(pending_close_drain_due(Some(&pending), Some(&busy), Some(&recent), NOW + 600_000));
    assert!(pending_close_drain_due(Some(&pending), Some(&busy), None, NOW));
    assert!(!pending_close_drain_due(Some(&pending), None, None, NOW));
    let SessionEvent::MarkerWritten { doc, .. } = stamp_drain(NOW) else { panic!() };
    assert!(!drain_cooldown_expired(Some(&doc), NOW + 60_000, DRAIN_COOLDOWN_MINUTES));
    assert!(drain_cooldown_expired(Some(&doc), NOW + 31 * 60_000, DRAIN_COOLDOWN_MINUTES));
    assert!((precheck_cooldown_minutes(40.0) - 20.0).abs() < f64::EPSILON);
    assert!((precheck_cooldown_minutes(10.0) - 30.0).abs() < f64::EPSILON);
}

#[test]
fn pauses_take_precedence_and_expire_on_read() {
    let watchdog = set_pause("watchdog", "hermit-watchdog", None, None, NOW);
    let SessionEvent::MarkerWritten { doc: auto, .. } = &watchdog[0] else { panic!() };
    assert_eq!(
        crate::legacy::json::render(auto),
        "{\n  \"paused\": true,\n  \"paused_until\": null,\n  \"reason\": \"watchdog\",\n  \"by\": \"hermit-watchdog\",\n  \"ts\": \"2026-09-14T08:15:02.118Z\"\n}\n"
    );
    assert!(set_pause("budget", "cost-tracker", None, Some(auto), NOW).is_empty());
    let operator = set_pause("operator", "discord:1", Some("2026-09-14T09:00:00.000Z"), None, NOW);
    let SessionEvent::MarkerWritten { doc: op, marker } = &operator[0] else { panic!() };
    assert_eq!(*marker, Marker::OperatorPause);
    assert_eq!(
        paused(Some(op), Some(auto), None, NOW).map(|p| p.marker),
        Some(Marker::OperatorPause)
    );
    assert_eq!(
        paused(Some(op), Some(auto), None, NOW + 3_600_000).map(|p| p.marker),
        Some(Marker::AutoPause)
    );
    assert_eq!(paused(None, None, None, NOW), None);
    assert_eq!(parse_snooze("30m"), Some(1_800_000));
    assert_eq!(parse_snooze("1.5 H"), Some(5_400_000));
    for bad in ["0m", "-1m", "5", "m", "4000d", "1.m"] {
        assert_eq!(parse_snooze(bad), None, "{bad}");
    }
}
