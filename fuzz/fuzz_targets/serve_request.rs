//! Fuzz target `serve_request`: the request decoder and the framing of `hookstate serve` on
//! arbitrary bytes never panic, and an accepted request keeps its bounds and round-trips.
//!
//! The check is `check_serve_request` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/serve_request/` and `fuzz/artifacts-regressions/serve_request/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_serve_request(data));
