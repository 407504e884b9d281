//! The `hermit-session` legacy codec on the spec-written fixtures: every file kind parses and
//! renders back byte for byte, every hostile file is refused with its path in the message, and
//! the parsed documents feed the session rules (phase 1 of issue 16: no store yet).

use std::path::{Path, PathBuf};

use hookstate_engine::session::layout::{self, Content, SessionFile};
use hookstate_engine::session::rules::{conversations, hypotheses, task_doc, tasks};
use hookstate_schema::session::{Ledger, TaskDoc};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy");

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
            let kind = layout::kind_of(&rel)
                .unwrap_or_else(|| panic!("{case}/{rel} is not a layout file"));
            (rel, kind, std::fs::read(path).unwrap())
        })
        .collect()
}

#[test]
fn every_fixture_file_round_trips_byte_for_byte() {
    let found = fixture("hermit-session");
    let kinds: std::collections::BTreeSet<String> = found
        .iter()
        .map(|(_, k, _)| format!("{k:?}").split([' ', '(', '{']).next().unwrap().to_owned())
        .collect();
    assert_eq!(kinds.len(), 8, "every kind is covered: {kinds:?}");
    for (rel, kind, bytes) in &found {
        let content = layout::parse(kind, bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(layout::render(&content).as_bytes(), bytes.as_slice(), "{rel}");
        assert_eq!(layout::path_of(kind), *rel);
    }
}

#[test]
fn every_hostile_file_is_refused_with_its_path() {
    let found = fixture("hermit-session-hostile");
    assert!(found.len() >= 10);
    for (rel, kind, bytes) in &found {
        let message = layout::parse(kind, bytes)
            .err()
            .unwrap_or_else(|| panic!("{rel} was adopted"))
            .to_string();
        let name = rel.rsplit('/').next().unwrap();
        assert!(message.contains(name), "{rel}: {message}");
    }
}

fn content(case: &str, rel: &str) -> Content {
    let found = fixture(case);
    let (_, kind, bytes) = found.iter().find(|(r, _, _)| r == rel).unwrap();
    layout::parse(kind, bytes).unwrap()
}

#[test]
fn parsed_fixtures_feed_the_rules() {
    let mut records: Vec<TaskDoc> = fixture("hermit-session")
        .into_iter()
        .filter_map(|(_, kind, bytes)| match layout::parse(&kind, &bytes).unwrap() {
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
        layout::kind_of("state/observations.jsonl"),
        Some(SessionFile::Ledger(Ledger::Observations))
    ));
}
