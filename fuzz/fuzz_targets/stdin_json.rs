//! Fuzz target `stdin_json`: validate_json on arbitrary UTF-8; accepted JSON validates again to
//! itself.
//!
//! The check is `check_stdin_json` in `tests/tests/corpus_checks.rs`, which `cargo test` also runs
//! over `fuzz/corpus/stdin_json/` and `fuzz/artifacts-regressions/stdin_json/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_stdin_json(data));
