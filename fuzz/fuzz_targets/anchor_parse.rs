//! Fuzz target `anchor_parse`: format::parse_anchor on arbitrary UTF-8, an accepted anchor formats
//! back to its canonical text; and anchor_file::decode_slot on arbitrary bytes, an accepted slot
//! encodes back to itself.
//!
//! The check is `check_anchor_parse` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/anchor_parse/` and `fuzz/artifacts-regressions/anchor_parse/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_anchor_parse(data));
