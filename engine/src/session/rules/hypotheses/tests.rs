//! `later.ts` verbs over a ledger, through the same apply a projection uses.

use super::*;

const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn run(file: &mut LineFile, decision: Decision) -> Result<Vec<String>, String> {
    let decided = decision.map_err(|r| r.verdict.lines.join("\n"))?;
    for event in &decided.events {
        match event {
            SessionEvent::LineAppended { line, .. } => {
                super::super::observations::append(file, line)
            }
            SessionEvent::HypothesisPatched { id, sets } => apply_patch(file, id, sets),
            other => panic!("{other:?}"),
        }
    }
    Ok(decided.verdict.lines)
}

fn add(file: &mut LineFile, extra: &[&str], uuid: &str) -> Result<Vec<String>, String> {
    let mut list = vec![
        "--claim",
        "cache warm by 9",
        "--due",
        "2026-09-14T09:00:00+02:00",
        "--origin",
        "hermit",
    ];
    list.extend_from_slice(extra);
    let list = args(&list);
    run(file, decide_add(&AddInput { args: &list, uuid, next_fire: None }, NOW))
}

#[test]
fn add_list_check_and_verdict_follow_upstream() {
    let mut file = LineFile::default();
    assert_eq!(
        add(&mut file, &["--cmd", "true", "--chat", "discord:1", "--timeout-s", "0x10"], "u-1")
            .unwrap(),
        ["OK|u-1|next_fire=none"]
    );
    assert_eq!(
        file.lines[0],
        "{\"id\":\"u-1\",\"claim\":\"cache warm by 9\",\"cmd\":\"true\",\"due\":\"2026-09-14T07:00:00.000Z\",\"origin\":\"hermit\",\"session\":null,\"created_at\":\"2026-09-14T08:15:02.118Z\",\"state\":\"pending\",\"chat\":\"discord:1\",\"timeout_s\":16}"
    );
    add(&mut file, &[], "u-2").unwrap();
    assert_eq!(due(&file, &[], NOW).lines, ["WAKE"]);
    let ran = CheckOutcome::Ran { exit: Some(0), output: "ok".into(), timed_out: false };
    let check = decide_settle("check", &file, &args(&["u-1"]), Some(&ran), "", false, NOW);
    let shown = run(&mut file, check).unwrap();
    assert!(
        shown[0].ends_with(",\"exit\":0,\"output\":\"ok\",\"timed_out\":false,\"late\":false}"),
        "{shown:?}"
    );
    let verdict = decide_settle(
        "verdict",
        &file,
        &args(&["u-1", "held", "--reason-stdin"]),
        None,
        " warm\r\nmore",
        false,
        NOW,
    );
    assert_eq!(run(&mut file, verdict).unwrap(), ["OK|u-1|held"]);
    assert!(held(&file, "u-1"));
    let again = decide_settle("cancel", &file, &args(&["u-1"]), None, "", false, NOW);
    assert_eq!(run(&mut file, again).unwrap(), ["NOOP|held"]);
    let listed = list(&file, &args(&["--chat", "discord:1"])).unwrap().verdict.lines;
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].contains("\"cmd\"") && !listed[0].contains("\"output\""), "{listed:?}");
    assert!(listed[0].contains("\"reason\":\"warm\""), "{listed:?}");
}

#[test]
fn bad_calls_get_upstreams_messages() {
    let mut file = LineFile::default();
    let message = |r: Result<Vec<String>, String>| r.unwrap_err();
    assert_eq!(
        message(run(
            &mut file,
            decide_add(
                &AddInput {
                    args: &args(&["--claim", "x", "--due", "soon", "--origin", "hermit"]),
                    uuid: "u",
                    next_fire: None
                },
                NOW
            )
        )),
        "invalid add arguments"
    );
    assert_eq!(
        message(add(&mut file, &["--timeout-s", "301"], "u")),
        "--timeout-s must be an integer between 1 and 300"
    );
    assert_eq!(message(add(&mut file, &["--chat"], "u")), "invalid-key");
    assert_eq!(
        message(run(
            &mut file,
            decide_settle("cancel", &LineFile::default(), &args(&["nope"]), None, "", false, NOW)
        )),
        "unknown id"
    );
    assert_eq!(
        message(run(
            &mut file,
            decide_settle("frob", &LineFile::default(), &[], None, "", false, NOW)
        )),
        "unknown verb"
    );
    add(&mut file, &[], "u-3").unwrap();
    let bad = decide_settle("verdict", &file, &args(&["u-3", "held"]), None, "x", false, NOW);
    assert_eq!(message(run(&mut file, bad)), "invalid verdict arguments");
    let empty = decide_settle(
        "verdict",
        &file,
        &args(&["u-3", "held", "--reason-stdin"]),
        None,
        " \n",
        false,
        NOW,
    );
    assert_eq!(message(run(&mut file, empty)), "reason required");
}

#[test]
fn numbers_and_lateness_read_as_javascript() {
    for (text, want) in [("", 0.0), (" 5 ", 5.0), ("1e2", 100.0), ("0b11", 3.0), (".5", 0.5)] {
        assert!((js_number(text) - want).abs() < f64::EPSILON, "{text}");
    }
    for text in ["abc", "5px", "inf", "--5", "0xZ"] {
        assert!(js_number(text).is_nan(), "{text}");
    }
    assert!(is_late("2026-09-13T08:00:00.000Z", NOW, None));
    assert!(!is_late("2026-09-14T08:00:00.000Z", NOW, None));
    assert!(is_late("2026-09-14T08:00:00.000Z", NOW, Some(NOW)));
}
