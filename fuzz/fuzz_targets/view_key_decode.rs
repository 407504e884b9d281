//! Fuzz target `view_key_decode`: format::decode_view_key on arbitrary bytes; an accepted key re-
//! encodes to the input.
//!
//! The check is `check_view_key_decode` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/view_key_decode/` and `fuzz/artifacts-regressions/view_key_decode/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_view_key_decode(data));
