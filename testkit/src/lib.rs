//! hookstate-testkit: the helpers the test suites (tests/, cli/tests/) and the benches share,
//! written once: a seeded generator ([`Rng`]), a directory copy ([`copy_dir`]), and the hermit
//! fixture harness ([`Hermit`]): a state directory copied from a fixture beside a fresh store.
//!
//! Test support only: it panics on any IO failure, as a test should. Does not run any test.
#![allow(clippy::unwrap_used, reason = "test support fails loudly on any unexpected error")]

use std::path::{Path, PathBuf};

use hookstate_engine::schema::hermit::scope_of;
use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Engine, OpenOptions};

/// splitmix64: a tiny seeded generator, so the tests need no crate for randomness and every run
/// of one seed draws the same numbers.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[expect(clippy::should_implement_trait, reason = "an endless generator, not an iterator")]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// Ids the id rules refuse (DESIGN.md §10): empty, `.`/`..`, path separators and traversals,
/// drive and UNC prefixes, control and escape characters, a combining mark, a trailing dot or
/// space, a non-ASCII letter, and ids of 256 and 4,097 bytes. A leading `-` needs `--` on a
/// command line, so the CLI suites add those two themselves.
#[must_use]
pub fn bad_ids() -> Vec<String> {
    let fixed = [
        "",
        ".",
        "..",
        "../x",
        "a/../../x",
        "/etc/passwd",
        "C:\\x",
        "\\\\server\\share",
        "a\nb",
        "a\tb",
        "\u{1b}[31m",
        "a\u{301}",
        "x.",
        "x ",
        "é",
    ];
    let mut ids: Vec<String> = fixed.iter().map(|s| (*s).to_owned()).collect();
    ids.push("a".repeat(256));
    ids.push("a".repeat(4097));
    ids
}

/// Copies the tree `from` to `to` (created), files and directories.
///
/// # Panics
/// On any IO failure.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A hermit state directory (`<tmp>/h`, copied from a fixture or empty) and a fresh store
/// beside it, with the directory's scope.
#[derive(Debug)]
pub struct Hermit {
    /// Holds the temporary directory for the harness's life.
    pub tmp: tempfile::TempDir,
    /// The state directory.
    pub dir: PathBuf,
    /// The store.
    pub engine: Engine,
    /// `hermit:<dir>`.
    pub scope: String,
}

impl Hermit {
    /// A state directory copied from `fixtures/<fixture>` (empty for `None`) and a new store.
    ///
    /// # Panics
    /// On any IO or store failure.
    #[must_use]
    pub fn new(fixtures: &Path, fixture: Option<&str>) -> Hermit {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("h");
        match fixture {
            Some(name) => copy_dir(&fixtures.join(name), &dir),
            None => std::fs::create_dir_all(&dir).unwrap(),
        }
        let engine = Engine::open(&tmp.path().join("state.redb"), OpenOptions::default()).unwrap();
        let scope = scope_of(dir.to_str().unwrap());
        Hermit { tmp, dir, engine, scope }
    }

    /// A call in the directory's scope at `now_ms`.
    #[must_use]
    pub fn call(&self, now_ms: u64) -> Call {
        Call {
            scope: self.scope.clone(),
            actor: Actor::default(),
            idem_key: None,
            fingerprint: None,
            now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_splitmix64() {
        // The first outputs of splitmix64 seeded with 0.
        let mut rng = Rng(0);
        assert_eq!(rng.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next(), 0x6e78_9e6a_a1b9_65f4);
        assert!(Rng(7).below(10) < 10);
    }
}
