//! hookstate-testkit: the helpers the test suites (tests/, cli/tests/) and the benches share,
//! written once: a seeded generator ([`Rng`]), a directory copy ([`copy_dir`]) and read
//! ([`read_tree`]), a large
//! moonshine home shaped like the real fixtures ([`moonshine_home`]), and the hermit
//! fixture harness ([`Hermit`]): a state directory copied from a fixture beside a fresh store,
//! and the backend matrix ([`store`]): with `HOOKSTATE_TEST_PG_URL` set to a throw-away
//! PostgreSQL database, every store a suite opens through [`store`] is a schema of its own in
//! that database (left there) instead of a redb file, so one suite runs on both backends.
//!
//! Test support only: it panics on any IO failure, as a test should. Does not run any test.
#![allow(clippy::unwrap_used, reason = "test support fails loudly on any unexpected error")]

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hookstate_engine::schema::hermit::scope_of;
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
    let failed = |what: &str, path: &Path, e: std::io::Error| -> ! {
        panic!("copy_dir: {what} {}: {e}", path.display())
    };
    std::fs::create_dir_all(to).unwrap_or_else(|e| failed("create", to, e));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| failed("read", from, e)) {
        let entry = entry.unwrap_or_else(|e| failed("read", from, e));
        let path = entry.path();
        if entry.file_type().unwrap_or_else(|e| failed("stat", &path, e)).is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name()))
                .unwrap_or_else(|e| failed("copy", &path, e));
        }
    }
}

/// Every file under `dir`, by its path relative to `dir`, with its bytes: what a test compares
/// when it says a tree came back byte for byte.
///
/// # Errors
/// The first IO error of the walk.
pub fn read_tree(dir: &Path) -> std::io::Result<std::collections::BTreeMap<String, Vec<u8>>> {
    type Tree = std::collections::BTreeMap<String, Vec<u8>>;
    fn walk(base: &Path, dir: &Path, out: &mut Tree) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(base, &path, out)?;
            } else {
                let rel = path.strip_prefix(base).unwrap_or(&path).display().to_string();
                out.insert(rel, std::fs::read(&path)?);
            }
        }
        Ok(())
    }
    let mut out = Tree::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// The comment statuses a generated home cycles through, as the web and the Stop hook leave them.
const STATUSES: [&str; 4] = ["pending", "delivered", "addressed", "dismissed"];

/// Writes a moonshine home under `home`: `projects` projects (`p0000`, `p0001`, ...), each with a
/// `.feedback/` inbox of `comments` comment files shaped like the real fixtures (the web's
/// two-space JSON, a block or figure target, every status), a `control.json` (accumulate, or
/// listen for every tenth project) and, for every other project, the adapter's `adapter.json`.
/// The same arguments write the same bytes. Returns the events an import appends (one per file).
/// A bench calls it too, so it returns IO errors rather than panicking.
///
/// # Errors
/// IO errors creating the directories or writing the files.
pub fn moonshine_home(home: &Path, projects: usize, comments: usize) -> std::io::Result<usize> {
    let mut rng = Rng(0x6d6f_6f6e);
    let mut files = 0;
    for p in 0..projects {
        let project = format!("p{p:04}");
        let inbox = home.join(&project).join(".feedback");
        std::fs::create_dir_all(&inbox)?;
        let mode = if p % 10 == 0 { "listen" } else { "accumulate" };
        let control = serde_json::json!({ "mode": mode, "updatedAt": "2026-11-29T21:50:52.772Z" });
        write_json(&inbox.join("control.json"), &control)?;
        files += 1;
        if p % 2 == 0 {
            let adapter = r#"{"harness":"claude-code","version":"adapter","installedAt":"2026-11-29T21:50:52Z"}"#;
            std::fs::write(inbox.join("adapter.json"), format!("{adapter}\n"))?;
            files += 1;
        }
        for c in 0..comments {
            let id = format!("fb_m{:07x}_{:06x}", p * comments + c, rng.below(1 << 24));
            let status = STATUSES[c % STATUSES.len()];
            let delivered = (status != "pending").then_some("2026-11-29T21:50:52Z");
            let addressed = (status == "addressed").then_some("2026-11-29T21:50:53Z");
            let reply = (status == "addressed").then_some("Named it in the first sentence.");
            let target = if c % 3 == 0 {
                serde_json::json!({
                    "kind": "figure",
                    "path": format!("series/{:02}-part.md", c % 40),
                    "figureId": "loss-landscape",
                    "excerpt": "<Figure id=\"loss-landscape\" />",
                    "anchorHash": format!("{:06x}", rng.below(1 << 24)),
                })
            } else {
                let start = rng.below(10_000);
                serde_json::json!({
                    "kind": "block",
                    "path": format!("series/{:02}-part.md", c % 40),
                    "range": [start, start + 1 + rng.below(400)],
                    "excerpt": "The learning rate η sets the step size.",
                    "anchorHash": format!("{:06x}", rng.below(1 << 24)),
                })
            };
            let comment = serde_json::json!({
                "id": id,
                "ts": "2026-11-29T21:50:52.772Z",
                "project": project,
                "status": status,
                "target": target,
                "comment": format!("Comment {c}: show what happens when η is too large."),
                "reply": reply,
                "deliveredAt": delivered,
                "addressedAt": addressed,
            });
            write_json(&inbox.join(format!("{id}.json")), &comment)?;
            files += 1;
        }
    }
    Ok(files)
}

/// Writes `value` as the web does: two-space JSON and a newline.
fn write_json(path: &Path, value: &serde_json::Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(path, format!("{text}\n"))
}

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
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("Hermit::new: tempdir: {e}"));
        let dir = tmp.path().join("h");
        match fixture {
            Some(name) => copy_dir(&fixtures.join(name), &dir),
            None => std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("Hermit::new: create {}: {e}", dir.display())),
        }
        let db = store(&tmp.path().join("state.redb"));
        let engine = Engine::open(&db, options())
            .unwrap_or_else(|e| panic!("Hermit::new: open {}: {e}", db.display()));
        let text = dir.to_str().unwrap_or_else(|| panic!("Hermit::new: {dir:?} is not UTF-8"));
        let scope = scope_of(text);
        Hermit { tmp, dir, engine, scope }
    }

    /// A call in the directory's scope at `now_ms`.
    #[must_use]
    pub fn call(&self, now_ms: u64) -> Call {
        Call::at(&self.scope, now_ms)
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
