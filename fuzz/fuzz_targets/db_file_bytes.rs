//! Fuzz target `db_file_bytes`: Engine::open (integrity check on, as verify and as rebuild open)
//! and verify on arbitrary bytes as a store file; never panics.
//!
//! The check is `check_db_file_bytes` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/db_file_bytes/` and `fuzz/artifacts-regressions/db_file_bytes/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_db_file_bytes(data));
