//! The `runtime.json` transition table, cell by cell, and the merge that never loses a field.

use super::*;

const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z
const TZ: &str = "Europe/Berlin";

fn doc(fields: &[(&str, &str)]) -> JsonDoc {
    JsonDoc {
        fields: fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        style: Style::Pretty,
    }
}

fn moves() -> Vec<Move> {
    vec![
        Move::Seed { runtime_mode: "tmux".into(), tmux_session: Some("hermit-x".into()) },
        Move::Open { session_id: "S-001".into() },
        Move::ArchiveBegin {
            session_id: "S-001".into(),
            mode: ArchiveMode::Idle,
            recovering: false,
        },
        Move::ArchiveBegin {
            session_id: "S-001".into(),
            mode: ArchiveMode::Idle,
            recovering: true,
        },
        Move::ArchiveCleaning,
        Move::ArchiveEnd {
            mode: ArchiveMode::Close,
            next_session_id: "S-002".into(),
            recovering: false,
        },
        Move::ArchiveEnd {
            mode: ArchiveMode::Close,
            next_session_id: "S-002".into(),
            recovering: true,
        },
        Move::RecoverClear,
        Move::Wait,
        Move::WaitTimeout { timeout_ms: 60_000 },
        Move::Resume,
        Move::Halt,
        Move::ShutdownRequested,
        Move::ShutdownCompleted,
        Move::Merge { sets: vec![("last_error".into(), "null".into())], unset: vec![] },
        Move::Merge { sets: vec![], unset: vec!["transition".into()] },
    ]
}

/// Rows: the state; columns: the moves above (begin and end twice: plain, then recovering). `.` allowed, else the refusal: X runtime-exists,
/// T transition-in-progress, A not-archiving, C not-cleaning, N no-interrupted-transition,
/// I not-idle, W not-waiting, P not-in-progress, L lifecycle-field.
const TABLE: [(&str, &str); 16] = [
    ("absent", "...AACNNIWWP...L"),
    ("-/-", "X..AACNNIWWP...L"),
    ("-/archiving", "XTT..C..IWWP...L"),
    ("-/cleaning", "XTTAA...IWWP...L"),
    ("idle/-", "X..AACNN.WWP...L"),
    ("idle/archiving", "XTT..C..IWWP...L"),
    ("idle/cleaning", "XTTAA...IWWP...L"),
    ("in_progress/-", "X..AACNNIWW....L"),
    ("in_progress/archiving", "XTT..C..IWW....L"),
    ("in_progress/cleaning", "XTTAA...IWW....L"),
    ("waiting/-", "X..AACNNI..P...L"),
    ("waiting/archiving", "XTT..C..I..P...L"),
    ("waiting/cleaning", "XTTAA...I..P...L"),
    ("dead_process/-", "X..AACNNIWWP...L"),
    ("dead_process/archiving", "XTT..C..IWWP...L"),
    ("dead_process/cleaning", "XTTAA...IWWP...L"),
];

fn code(reason: &str) -> char {
    match reason {
        "runtime-exists" => 'X',
        "transition-in-progress" => 'T',
        "not-archiving" => 'A',
        "not-cleaning" => 'C',
        "no-interrupted-transition" => 'N',
        "not-idle" => 'I',
        "not-waiting" => 'W',
        "not-in-progress" => 'P',
        r if r.starts_with("lifecycle-field:") => 'L',
        other => panic!("unexpected refusal {other}"),
    }
}

fn state_doc(row: &str) -> Option<JsonDoc> {
    if row == "absent" {
        return None;
    }
    let (session, transition) = row.split_once('/').unwrap();
    let quoted = |s: &str| if s == "-" { "null".to_owned() } else { format!("\"{s}\"") };
    let (s, t) = (quoted(session), quoted(transition));
    Some(doc(&[
        ("session_state", &s),
        ("transition", &t),
        ("waiting_since", "\"2026-09-14T07:00:00.000Z\""),
        ("updated_at", "\"2026-09-14T09:00:00+0200\""),
    ]))
}

#[test]
fn every_cell_of_the_transition_table() {
    for (row, cells) in TABLE {
        let current = state_doc(row);
        for (mv, want) in moves().iter().zip(cells.chars()) {
            let got = match decide(current.as_ref(), mv, None, NOW, TZ).unwrap() {
                Ok(_) => '.',
                Err(refusal) => {
                    let value: Value = serde_json::from_str(&refusal.verdict.lines[0]).unwrap();
                    assert_eq!(value["ok"], false);
                    code(value["reason"].as_str().unwrap())
                }
            };
            assert_eq!(got, want, "state {row}, move {mv:?}");
        }
    }
}

#[test]
fn a_wait_ends_only_past_its_timeout() {
    let waiting = state_doc("waiting/-");
    let fresh = Move::WaitTimeout { timeout_ms: 2 * 3_600_000 };
    let refused = decide(waiting.as_ref(), &fresh, None, NOW, TZ).unwrap().unwrap_err();
    assert_eq!(refused.verdict.lines[0], "{\"ok\":false,\"reason\":\"not-timed-out\"}");
    let stale = Move::WaitTimeout { timeout_ms: 60_000 };
    let event = decide(waiting.as_ref(), &stale, None, NOW, TZ).unwrap().unwrap();
    let mut after = waiting.clone();
    apply(&mut after, &event);
    let after = after.unwrap();
    assert_eq!(after.raw("session_state"), Some("\"idle\""));
    assert_eq!(after.raw("waiting_since"), None);
    assert_eq!(parse_duration(" 30 M "), Some(1_800_000));
    assert_eq!(parse_duration("1.5h"), None);
    assert_eq!(parse_duration("h"), None);
}

#[test]
fn updated_at_is_a_compare_and_swap() {
    let current = state_doc("idle/-");
    let stale = decide(current.as_ref(), &Move::Wait, Some("2026-01-01T00:00:00+0000"), NOW, TZ);
    assert_eq!(stale.unwrap().unwrap_err().token, "changed");
    let fresh = decide(current.as_ref(), &Move::Wait, Some("2026-09-14T09:00:00+0200"), NOW, TZ);
    assert!(fresh.unwrap().is_ok());
}

#[test]
fn seed_writes_hermit_starts_document() {
    let mv =
        Move::Seed { runtime_mode: "tmux".into(), tmux_session: Some("hermit-webshop".into()) };
    let event = decide(None, &mv, None, NOW, TZ).unwrap().unwrap();
    let mut runtime = None;
    apply(&mut runtime, &event);
    let text = crate::legacy::json::render(runtime.as_ref().unwrap());
    assert_eq!(
        text,
        "{\n  \"version\": 1,\n  \"session_state\": \"idle\",\n  \"session_id\": null,\n  \
         \"created_at\": \"2026-09-14T10:15:02+0200\",\n  \"runtime_mode\": \"tmux\",\n  \
         \"tmux_session\": \"hermit-webshop\",\n  \"transition\": null,\n  \
         \"transition_target\": null,\n  \"transition_started_at\": null,\n  \
         \"shutdown_requested_at\": null,\n  \"shutdown_completed_at\": null,\n  \
         \"last_error\": null,\n  \"last_shell_snapshot_at\": null,\n  \
         \"updated_at\": \"2026-09-14T10:15:02+0200\"\n}\n"
    );
}

#[test]
fn two_writers_deciding_on_the_same_state_both_keep_their_field() {
    let base = state_doc("in_progress/-");
    let first = Move::Merge { sets: vec![("closed_at".into(), "\"x\"".into())], unset: vec![] };
    let second = Move::Merge { sets: vec![("last_error".into(), "\"y\"".into())], unset: vec![] };
    let a = decide(base.as_ref(), &first, None, NOW, TZ).unwrap().unwrap();
    let b = decide(base.as_ref(), &second, None, NOW, TZ).unwrap().unwrap();
    let mut runtime = base;
    apply(&mut runtime, &a);
    apply(&mut runtime, &b);
    let runtime = runtime.unwrap();
    assert_eq!(runtime.raw("closed_at"), Some("\"x\""));
    assert_eq!(runtime.raw("last_error"), Some("\"y\""));
}

#[test]
fn an_archive_close_stamps_shutdown_only_when_requested() {
    let mut runtime = Some(doc(&[
        ("session_state", "\"in_progress\""),
        ("transition", "\"cleaning\""),
        ("shutdown_requested_at", "\"2026-09-14T10:00:00+0200\""),
    ]));
    let end = Move::ArchiveEnd {
        mode: ArchiveMode::Close,
        next_session_id: "S-002".into(),
        recovering: false,
    };
    let event = decide(runtime.as_ref(), &end, None, NOW, TZ).unwrap().unwrap();
    apply(&mut runtime, &event);
    let runtime = runtime.unwrap();
    assert_eq!(runtime.raw("shutdown_completed_at"), Some("\"2026-09-14T10:15:02+0200\""));
    assert_eq!(runtime.raw("session_id"), Some("null"));
    assert_eq!(runtime.raw("transition_mode"), Some("null"));
}

proptest::proptest! {
    #[test]
    fn a_merge_never_loses_a_field_it_does_not_name(
        old in proptest::collection::btree_map("[a-z]{1,6}", 0u32..100, 0..12),
        new in proptest::collection::btree_map("[a-z]{1,6}", 0u32..100, 0..6),
        gone in proptest::collection::vec("[a-z]{1,6}", 0..3),
    ) {
        let fields: Vec<(String, String)> = old.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        let sets: Vec<(String, String)> = new.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        let mut runtime = Some(JsonDoc { fields, style: Style::Pretty });
        let mv = Move::Merge { sets, unset: gone.clone() };
        let event = decide(runtime.as_ref(), &mv, None, NOW, TZ).unwrap().unwrap();
        apply(&mut runtime, &event);
        let runtime = runtime.unwrap();
        for (key, value) in &old {
            if !gone.contains(key) && !new.contains_key(key) {
                proptest::prop_assert_eq!(runtime.raw(key).map(str::to_owned), Some(value.to_string()));
            }
        }
        for (key, value) in &new {
            if !gone.contains(key) {
                proptest::prop_assert_eq!(runtime.raw(key).map(str::to_owned), Some(value.to_string()));
            }
        }
    }
}

/// A write that would leave more keys than the legacy codec reads back is refused; an unset
/// makes room.
#[test]
fn runtime_keys_stay_within_what_the_codec_reads_back() {
    let max = legacy_json::OBJECT_KEYS_MAX;
    let fields = (0..max - 1).map(|n| (format!("k{n}"), "1".to_owned())).collect();
    let doc = JsonDoc { fields, style: Style::Pretty };
    let set = |key: &str| vec![(key.to_owned(), "2".to_owned())];
    assert!(check_keys(Some(&doc), &set("k0"), &[]).is_ok(), "updated_at makes max keys");
    let over = check_keys(Some(&doc), &set("new"), &[]);
    assert!(matches!(over, Err(Error::TooMany { .. })), "{over:?}");
    assert!(check_keys(Some(&doc), &set("new"), &["k1".to_owned()]).is_ok());
}
