//! Fuzz target `id_validate`: validate_id / validate_scope on arbitrary strings; accepted names are
//! no path, option or escape.
//!
//! The check is `check_id_validate` in `tests/tests/corpus_checks.rs`, which `cargo test` also runs
//! over `fuzz/corpus/id_validate/` and `fuzz/artifacts-regressions/id_validate/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_id_validate(data));
