//! Fuzz corpus replay: every seed in `fuzz/corpus/<target>/` and every saved crash in
//! `fuzz/artifacts-regressions/<target>/` goes through the same check the fuzz target runs, so
//! `cargo test` guards them on stable without libFuzzer.
//!
//! The checks live in `corpus_checks.rs`, shared with `fuzz/fuzz_targets/`. Does not fuzz.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

#[path = "corpus_checks.rs"]
mod checks;

/// The files of one directory, sorted, without dotfiles (`.gitkeep`).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("read a corpus directory entry").path())
        .filter(|path| path.is_file())
        .filter(|path| {
            !path.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Replays the seeds and regressions of `target` through `check`; the seeds must exist.
fn replay(target: &str, check: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let seeds = inputs(&fuzz.join("corpus").join(target));
    assert!(
        !seeds.is_empty(),
        "fuzz/corpus/{target}/ is empty or missing: the replay would pass vacuously"
    );
    let regressions = inputs(&fuzz.join("artifacts-regressions").join(target));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&regressions) {
        let data = fs::read(path).expect("read a corpus file");
        if panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    println!("corpus {target}: files={}", seeds.len() + regressions.len());
    assert!(failed.is_empty(), "{target}: checks failed on {failed:#?}");
}

#[test]
fn corpus_event_decode() {
    replay("event_decode", checks::check_event_decode);
}

#[test]
fn corpus_view_key_decode() {
    replay("view_key_decode", checks::check_view_key_decode);
}

#[test]
fn corpus_stdin_json() {
    replay("stdin_json", checks::check_stdin_json);
}

#[test]
fn corpus_id_validate() {
    replay("id_validate", checks::check_id_validate);
}

#[test]
fn corpus_anchor_parse() {
    replay("anchor_parse", checks::check_anchor_parse);
}

#[test]
fn corpus_db_file_bytes() {
    replay("db_file_bytes", checks::check_db_file_bytes);
}

#[test]
fn corpus_verb_stdin() {
    replay("verb_stdin", checks::check_verb_stdin);
}

#[test]
fn corpus_legacy_import() {
    replay("legacy_import", checks::check_legacy_import);
}

/// The legacy seeds are real fixture files: every kind must have one the parser accepts, so the
/// replay reaches each kind's write-back check and not only its error paths.
#[test]
fn legacy_import_seeds_reach_every_parser() {
    use hookstate_engine::{parse_legacy, LegacyFile};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/legacy_import");
    let mut accepted = vec![0_usize; LegacyFile::ALL.len()];
    for path in inputs(&dir) {
        let data = fs::read(&path).expect("read a seed");
        let Some((&selector, file)) = data.split_first() else { continue };
        let index = usize::from(selector) % LegacyFile::ALL.len();
        if parse_legacy(LegacyFile::ALL[index], file).is_ok() {
            accepted[index] += 1;
        }
    }
    println!("legacy_import seeds accepted per kind: {accepted:?}");
    let missing: Vec<_> = LegacyFile::ALL
        .iter()
        .zip(&accepted)
        .filter(|(_, n)| **n == 0)
        .map(|(kind, _)| *kind)
        .collect();
    assert!(missing.is_empty(), "no accepted seed for {missing:?}");
}

/// Every verb of `verb_stdin` has a seed it accepts, so the replay reaches each verb's checks of
/// accepted input and not only its refusals.
#[test]
fn verb_stdin_seeds_reach_every_verb() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/verb_stdin");
    let mut accepted = vec![0_usize; checks::STDIN_VERBS.len()];
    for path in inputs(&dir) {
        let data = fs::read(&path).expect("read a seed");
        if let Some((index, true)) = checks::verb_stdin_verdict(&data) {
            accepted[index] += 1;
        }
    }
    println!("verb_stdin seeds accepted per verb: {accepted:?}");
    let missing: Vec<_> = checks::STDIN_VERBS
        .iter()
        .zip(&accepted)
        .filter(|(_, n)| **n == 0)
        .map(|(verb, _)| *verb)
        .collect();
    assert!(missing.is_empty(), "no accepted seed for {missing:?}");
}

#[test]
fn corpus_serve_request() {
    replay("serve_request", checks::check_serve_request);
}
