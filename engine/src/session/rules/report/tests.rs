//! The payload parser, the number spellings and the report's digest helpers.

use super::*;

#[test]
fn payloads_parse_as_upstream() {
    let p = parse_payload("Status: partial\nBlockers: a\n  b\nLessons: none\nCost:\r\nChanged: x\r\nmore\n## Plan\n| t |\n");
    assert_eq!(p.get("Status"), "partial");
    assert_eq!(p.get("Blockers"), "a\n  b");
    assert_eq!(p.get("Lessons"), "");
    assert_eq!(p.get("Cost"), "Changed: x\r\nmore");
    assert_eq!(p.plan.as_deref(), Some("| t |"));
    assert!(parse_payload("hello\nworld").is_empty());
    assert!(!parse_payload("## Plan\nx").is_empty());
    assert_eq!(normalise_status(" Blocked "), ("blocked".into(), None));
    assert_eq!(
        normalise_status("done").1.as_deref(),
        Some("Status normalized: original value `done` coerced to `partial`.")
    );
}

#[test]
fn numbers_spell_as_javascript() {
    for (x, want) in [
        (0.125, "0.13"),
        (0.42, "0.42"),
        (1.005, "1.00"),
        (-0.001, "0.00"),
        (2.0, "2.00"),
        (0.375, "0.38"),
    ] {
        assert_eq!(to_fixed_2(x), want, "{x}");
    }
    assert_eq!(js_string(f64::NAN), "NaN");
    assert_eq!(js_string(1234.5), "1234.5");
    let cost_of = |line: &str| cost(&parse_payload(&format!("Cost: {line}")), None);
    assert_eq!(cost_of("$1,234.50 (1,526,890 tokens)"), (1234.5, 1_526_890.0));
    assert_eq!(cost_of("about $3 or $0.123456 (12 token)"), (0.1235, 12.0));
    assert_eq!(cost_of("$5"), (0.0, 0.0));
    assert_eq!(cost(&Payload::default(), Some((2.5, 10.0))), (2.5, 10.0));
    assert_eq!(format_duration(90 * 60_000), "1h 30m");
    assert_eq!(format_duration(29_999), "0m");
    assert_eq!(format_duration(-5), "0m");
}

#[test]
fn digests_follow_upstream() {
    assert_eq!(
        yaml_array(&["infra".into(), "#urgent".into(), "a b".into()]),
        "[infra, \"#urgent\", \"a b\"]"
    );
    let long = "x".repeat(200);
    let lines = content_lines(&format!("- one\n<!-- c -->\n\n-two\n{long}"));
    assert_eq!(lines[..2], ["one".to_owned(), "-two".to_owned()]);
    assert_eq!(js::length(&lines[2]), DIGEST_UNITS_MAX);
    assert!(lines[2].ends_with('…'));
    assert_eq!(tags("- **Tags:** \n- **Tasks Completed:** 0\n"), ["- **Tasks Completed:** 0"]);
    assert_eq!(tags("- **Tags:** a, <!-- x -->, b\n"), ["a", "b"]);
    assert_eq!(
        proposal_ids("see PROP-031-x and prop-7, PROP-031-x again, PROP-"),
        ["PROP-031-x", "prop-7"]
    );
    assert_eq!(started("- **Started:** 2026-09-14 10:15\n"), Some("2026-09-14 10:15"));
    assert_eq!(started("- **Started:** YYYY-MM-DD HH:MM\n"), None);
    assert!(
        (report_cost("---\nid: S-1\ncost_usd: \"1.25\" # note\n---\n") - 1.25).abs() < f64::EPSILON
    );
    assert!(report_cost("---\ncost_usdx: 3\n---\n").abs() < f64::EPSILON);
}
