//! hookstate-tests: integration tests across the schema and engine crates live in `tests/`; this
//! library holds what they share: where a test store lives, on redb or on PostgreSQL (the backend
//! matrix).
//!
//! With `HOOKSTATE_TEST_PG_URL` set to a PostgreSQL database (a throw-away one: every store gets
//! a schema of its own in it, which is left there), the suites that open their stores through
//! [`store`] run against PostgreSQL instead of redb files. Does not run any test itself.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hookstate_engine::OpenOptions;

/// The variable naming the PostgreSQL database of the second run of the suites.
pub const PG_URL_ENV: &str = "HOOKSTATE_TEST_PG_URL";

/// The PostgreSQL database the suites run against, when `HOOKSTATE_TEST_PG_URL` names one.
#[must_use]
pub fn pg_url() -> Option<String> {
    std::env::var(PG_URL_ENV).ok().filter(|url| !url.is_empty())
}

/// Schemas this process made, so each is made once.
static MADE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The store for a test that would use the redb file `path`: that path, or, on the PostgreSQL
/// run, the address of a schema named after it (the same path gives the same store, so a test
/// can reopen it), made on first use.
///
/// # Panics
/// When the database cannot be reached or the schema not made: the run is broken.
#[must_use]
pub fn store(path: &Path) -> PathBuf {
    match pg_url() {
        Some(base) => PathBuf::from(schema_address(&base, &schema_name(path))),
        None => path.to_path_buf(),
    }
}

/// The options a test opens its store with: the defaults, but with the caller's clock, since
/// the tests inject time through their calls.
#[must_use]
pub fn options() -> OpenOptions {
    OpenOptions { server_clock: false, ..OpenOptions::default() }
}

/// A schema name for a path: `hs_` and a hash of it.
#[must_use]
pub fn schema_name(path: &Path) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    format!("hs_{:016x}", hasher.finish())
}

/// The address of `schema` in the database `base` (made when this process has not made it):
/// `base` with `options=-c search_path=<schema>`.
///
/// # Panics
/// When the database cannot be reached or the schema not made.
#[must_use]
pub fn schema_address(base: &str, schema: &str) -> String {
    let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !made.contains(schema) {
        let mut client = postgres::Client::connect(base, postgres::NoTls)
            .unwrap_or_else(|e| panic!("{PG_URL_ENV}: cannot connect: {e}"));
        client
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .unwrap_or_else(|e| panic!("cannot create schema {schema}: {e}"));
        made.insert(schema.to_owned());
    }
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-c%20search_path%3D{schema}")
}
