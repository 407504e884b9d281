//! Fuzz target `legacy_import`: every legacy file parser an import runs (loopd store, observer
//! state, moonshine comment/control/address/heartbeat/adapter, hermit queue, ledger, index,
//! PROP frontmatter, config.json, alert-state.json, heartbeat files), picked by the first byte; never a panic, and an accepted
//! file's write-back parses to the same records and writes back unchanged.
//!
//! The check is `check_legacy_import` in `tests/tests/corpus_checks.rs`, which `cargo test` also
//! runs over `fuzz/corpus/legacy_import/` and `fuzz/artifacts-regressions/legacy_import/`.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/tests/corpus_checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_legacy_import(data));
