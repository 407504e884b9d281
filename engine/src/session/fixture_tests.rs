//! The session rules over the parsed `hermit-session` fixtures (tests/fixtures/legacy): task
//! listing labels, a held hypothesis, a bound conversation key refused.

use std::path::{Path, PathBuf};

use hookstate_schema::session::{Ledger, TaskDoc};

use super::layout::files::{kind_of, parse, Content, SessionFile};
use super::rules::{conversations, hypotheses, task_doc, tasks};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/legacy");

fn files(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, root, out);
        } else {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            if rel != "README.md" {
                out.push((rel, path));
            }
        }
    }
}

fn fixture(case: &str) -> Vec<(String, SessionFile, Vec<u8>)> {
    let root = Path::new(FIXTURES).join(case);
    let mut found = Vec::new();
    files(&root, &root, &mut found);
    found.sort();
    found
        .into_iter()
        .map(|(rel, path)| {
            let kind = kind_of(&rel).unwrap_or_else(|| panic!("{case}/{rel} is not a layout file"));
            (rel, kind, std::fs::read(path).unwrap())
        })
        .collect()
}

fn content(case: &str, rel: &str) -> Content {
    let found = fixture(case);
    let (_, kind, bytes) = found.iter().find(|(r, _, _)| r == rel).unwrap();
    parse(kind, bytes).unwrap()
}

#[test]
fn parsed_fixtures_feed_the_rules() {
    let mut records: Vec<TaskDoc> = fixture("hermit-session")
        .into_iter()
        .filter_map(|(_, kind, bytes)| match parse(&kind, &bytes).unwrap() {
            Content::Task(t) => Some(*t),
            _ => None,
        })
        .collect();
    task_doc::sort(&mut records);
    assert_eq!(records.len(), 2);
    let call = tasks::parse_args("list", &["--all".to_owned()]).unwrap();
    let listed =
        tasks::list(&records, &records, &call, &serde_json::Value::Null, 1_789_373_702_118);
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["rows"][0]["listing"], serde_json::json!(["closed"]));
    assert_eq!(listed["rows"][1]["listing"], serde_json::json!(["unconfirmed"]));
    let Content::Lines(ledger) = content("hermit-session", "state/hypotheses.jsonl") else {
        panic!()
    };
    assert!(hypotheses::held(&ledger, &records[0].claims[0]));
    let Content::Json(store) = content("hermit-session", "state/conversations.json") else {
        panic!()
    };
    let options = conversations::parse_options(
        &["--session-name", "n", "--session-id", "s", "--worktree", "/w"].map(str::to_owned),
    )
    .unwrap();
    let refused =
        conversations::decide_bind(&store, "discord:1187734401122", &options, 0).unwrap_err();
    assert_eq!(refused.verdict.lines, ["ERROR|already-bound"]);
    assert!(matches!(
        kind_of("state/observations.jsonl"),
        Some(SessionFile::Ledger(Ledger::Observations))
    ));
}
