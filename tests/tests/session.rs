//! The `hermit-session` legacy codec on the spec-written fixtures: every file kind parses and
//! renders back byte for byte, and every hostile file is refused with its path in the message
//! (the rules over the parsed fixtures are the engine's `session::fixture_tests`).

use std::path::{Path, PathBuf};

use hookstate_engine::SessionFile;

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
            let kind = hookstate_engine::session_file_kind(&rel)
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
        let content = hookstate_engine::parse_session_file(kind, bytes)
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(
            hookstate_engine::render_session_file(&content).as_bytes(),
            bytes.as_slice(),
            "{rel}"
        );
        assert_eq!(hookstate_engine::session_file_path(kind), *rel);
    }
}

#[test]
fn every_hostile_file_is_refused_with_its_path() {
    let found = fixture("hermit-session-hostile");
    assert!(found.len() >= 10);
    for (rel, kind, bytes) in &found {
        let message = hookstate_engine::parse_session_file(kind, bytes)
            .err()
            .unwrap_or_else(|| panic!("{rel} was adopted"))
            .to_string();
        let name = rel.rsplit('/').next().unwrap();
        assert!(message.contains(name), "{rel}: {message}");
    }
}
