//! Fuzz target `verb_stdin`: the stdin parser and check of every verb that reads stdin (hook
//! payloads, the Stop payload, observer rows and findings, patch lines, kv/queue/list values,
//! feedback add, micro and PROP create, alerts tick), picked by the first byte; never a panic,
//! and what is accepted is consistent.
//!
//! The check is `check_verb_stdin` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/verb_stdin/` and `fuzz/artifacts-regressions/verb_stdin/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_verb_stdin(data));
