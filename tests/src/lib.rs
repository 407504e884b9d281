//! hookstate-tests: integration tests across the schema and engine crates live in `tests/`.
//!
//! This library is empty on purpose. Does not ship anything.
