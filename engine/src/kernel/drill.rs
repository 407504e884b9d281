//! Seeded-bug drills (RELIABILITY.md A12): planted bugs that the reliability harness must catch.
//!
//! A drill is armed by the environment variable [`DRILL_ENV`], and only in a build with the
//! `bugdrill` cargo feature; without it this module does not exist and no drill code is compiled.
//! Does not decide anything itself: the write path and the store ask [`active`] at the one place
//! each bug is planted.

use std::sync::OnceLock;

use crate::kernel::call::Outcome;

/// The environment variable that names the armed drill.
pub const DRILL_ENV: &str = "HOOKSTATE_DRILL";

/// The planted bugs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drill {
    /// `ack-before-commit`: the acknowledgement is handed out before `commit()` returns
    /// (caught by the kill loop as a lost acked event).
    AckBeforeCommit,
    /// `cas-separate-read`: a decision reads its rows in a read transaction taken before the
    /// write transaction (caught by the concurrent claim race as a double claim, and by the
    /// linearizability check of claim histories).
    CasSeparateRead,
    /// `durability-none`: commits return without syncing (caught by the power-loss simulator).
    /// redb refuses `Durability::None` in `MultiWriter` mode, so the store's backend skips
    /// `sync_data` instead, which is what `Durability::None` would do.
    DurabilityNone,
    /// `naive-path-join`: legacy files are read and written at `root.join(name)` with no name
    /// check (`kernel::walk::check_name` passes every name) and no held directory handle
    /// (caught by the traversal test as an escape).
    NaivePathJoin,
    /// `non-atomic-create`: the store is created by redb directly at its final path instead of
    /// in a temporary file published by a link (caught by the first-use kill loop as a store
    /// that exists but does not open).
    NonAtomicCreate,
    /// `export-no-dir-fsync`: a legacy file replace returns without the directory fsync after
    /// its rename (caught by the export crash simulator as a write that returned and was lost).
    ExportNoDirFsync,
    /// `anchor-ignored`: the write path neither checks the anchors before it writes nor respects
    /// them after its commit, as writers did before issue 13 (caught by the rollback drill as a
    /// write acknowledged on a rolled-back store, and an anchor laundered).
    AnchorIgnored,
    /// `verify-scans-only`: `verify` compares a scan of the views with a rebuild and skips the
    /// point lookups (caught by the branch-damage test as a verify that passes while lookups
    /// miss rows).
    VerifyScansOnly,
    /// `mirror-blind-write`: the mirror writes a file back without checking that it still holds
    /// the bytes the call saw (caught by the mirror race test as an outside change lost).
    MirrorBlindWrite,
    /// `header-syncs-skipped`: the writer's backend skips every sync after which only the header
    /// changed, a commit's own included, not only the flag changes it may skip (caught by the
    /// power-loss simulator as an acknowledged commit lost).
    HeaderSyncsSkipped,
    /// `close-header-stale`: a writer's close writes back the last header it wrote, flag cleared,
    /// without checking that the file still holds it, so it overwrites a commit another process
    /// made since (caught by the kill loop as a lost acked event).
    CloseHeaderStale,
}

impl Drill {
    /// Every drill with its name in [`DRILL_ENV`].
    pub const ALL: [(Drill, &'static str); 11] = [
        (Drill::AckBeforeCommit, "ack-before-commit"),
        (Drill::CasSeparateRead, "cas-separate-read"),
        (Drill::DurabilityNone, "durability-none"),
        (Drill::NaivePathJoin, "naive-path-join"),
        (Drill::NonAtomicCreate, "non-atomic-create"),
        (Drill::ExportNoDirFsync, "export-no-dir-fsync"),
        (Drill::AnchorIgnored, "anchor-ignored"),
        (Drill::VerifyScansOnly, "verify-scans-only"),
        (Drill::MirrorBlindWrite, "mirror-blind-write"),
        (Drill::HeaderSyncsSkipped, "header-syncs-skipped"),
        (Drill::CloseHeaderStale, "close-header-stale"),
    ];
}

/// The drill armed in the environment, if any.
#[must_use]
pub fn active() -> Option<Drill> {
    let name = std::env::var(DRILL_ENV).ok()?;
    Drill::ALL.iter().find(|(_, n)| *n == name).map(|(drill, _)| *drill)
}

/// Whether `drill` is armed.
#[must_use]
pub fn is(drill: Drill) -> bool {
    active() == Some(drill)
}

type Hook = Box<dyn Fn(&Outcome) + Send + Sync>;

static BEFORE_COMMIT: OnceLock<Hook> = OnceLock::new();

/// Installs the hook the write path calls just before `commit()` while
/// [`Drill::AckBeforeCommit`] is armed (the CLI prints its acknowledgement there). Only the first
/// hook installed is kept.
pub fn set_before_commit(hook: Hook) {
    let _ = BEFORE_COMMIT.set(hook);
}

/// Called by the write path just before `commit()`.
pub(crate) fn before_commit(outcome: &Outcome) {
    if is(Drill::AckBeforeCommit) {
        if let Some(hook) = BEFORE_COMMIT.get() {
            hook(outcome);
        }
    }
}
