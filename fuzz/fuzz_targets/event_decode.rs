//! Fuzz target `event_decode`: format::decode_event on arbitrary bytes; a decoded event re-encodes
//! canonically.
//!
//! The check is `check_event_decode` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/event_decode/` and `fuzz/artifacts-regressions/event_decode/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_event_decode(data));
