//! `import --layout moonshine` in batched transactions, on generated homes: a batched import
//! equals the one-commit-per-project import event for event (views, `verify`, export byte for
//! byte); a refused project in the middle leaves the projects before it and nothing of itself;
//! the bounds hold (a home larger than one batch commits in several, each of whole projects,
//! a project larger than the bounds alone and whole).
//!
//! Commits are watched from outside the import: the progress callback reads the store's head
//! after each one, and the head must sit exactly on a project boundary.

use std::path::Path;

use hookstate_engine::{
    Call, Engine, ImportBatch, ImportProgress, Imported, LogFilter, MoonshineImport,
};
use hookstate_testkit::{moonshine_home, options, read_tree, store};

/// 2026-11-29T21:50:52Z, when the real fixtures were written.
const NOW_MS: u64 = 1_795_989_052_000;

fn call() -> Call {
    Call::at("import", NOW_MS)
}

fn scope_of(project: &str) -> String {
    format!("moonshine:{project}")
}

fn open(dir: &Path, name: &str) -> Engine {
    Engine::open(&store(&dir.join(name)), options()).unwrap()
}

/// What one import did, seen from outside: its answer, and the head after each commit (read
/// by the progress callback, which the import calls after each commit).
struct Watched {
    imported: Imported,
    heads: Vec<u64>,
    last: Option<ImportProgress>,
}

fn import(engine: &Engine, home: &Path, only: Option<&str>, batch: ImportBatch) -> Watched {
    let parsed = MoonshineImport::read(home, only).unwrap();
    let mut heads = Vec::new();
    let mut last = None;
    let imported = engine
        .feedback()
        .import_batched(&call(), parsed, batch, &mut |p| {
            heads.push(engine.head().unwrap().seq);
            last = Some(*p);
        })
        .unwrap();
    heads.dedup();
    Watched { imported, heads, last }
}

/// The seqs where each project's events end, in import order (the only heads a commit of
/// whole projects can leave), from the import's answer.
fn boundaries(imported: &Imported) -> Vec<u64> {
    imported.imported.iter().flatten().map(|p| p.seq).collect()
}

fn projects_of(imported: &Imported) -> Vec<String> {
    imported.imported.iter().flatten().map(|p| p.project.clone()).collect()
}

#[test]
fn a_batched_import_equals_the_per_project_import_event_for_event() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let files = moonshine_home(&home, 30, 12).unwrap();
    let old_engine = open(tmp.path(), "old.redb");
    let new_engine = open(tmp.path(), "new.redb");
    let old = import(&old_engine, &home, None, ImportBatch::PER_PROJECT);
    let new = import(&new_engine, &home, None, ImportBatch::default());
    assert!(old.imported.ok && new.imported.ok);
    // The same answer (what stdout prints) and the same log, event for event.
    assert_eq!(
        serde_json::to_value(&old.imported).unwrap(),
        serde_json::to_value(&new.imported).unwrap()
    );
    let (old_log, new_log) = (
        old_engine.log(&LogFilter::default()).unwrap(),
        new_engine.log(&LogFilter::default()).unwrap(),
    );
    assert_eq!(old_log.len(), files);
    assert_eq!(old_log.len(), new_log.len());
    for (a, b) in old_log.iter().zip(&new_log) {
        assert_eq!((a.seq, &a.content), (b.seq, &b.content));
    }
    // The same views, proved by verify, and the same files back, byte for byte.
    for p in projects_of(&new.imported) {
        let scope = scope_of(&p);
        assert_eq!(
            old_engine.feedback().list(&scope).unwrap(),
            new_engine.feedback().list(&scope).unwrap()
        );
    }
    old_engine.ops().verify(Default::default()).unwrap();
    new_engine.ops().verify(Default::default()).unwrap();
    let out = tmp.path().join("out");
    new_engine.feedback().export(&out, None).unwrap();
    assert_eq!(
        read_tree(&out).unwrap(),
        read_tree(&home).unwrap(),
        "export(batched import(files)) == files"
    );
    // One commit per project before; the 30 small projects now share one.
    assert_eq!(old.imported.commits, 30);
    assert_eq!(old.heads[1..], boundaries(&old.imported)[..]);
    assert_eq!(new.imported.commits, 1);
    assert_eq!(new.heads, vec![0, u64::try_from(files).unwrap()]);
}

#[test]
fn a_refused_project_in_the_middle_leaves_the_projects_before_it_and_nothing_of_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    moonshine_home(&home, 12, 5).unwrap();
    let engine = open(tmp.path(), "state.redb");
    // p0007 is in the store already (imported alone, then changed there).
    let first = import(&engine, &home, Some("p0007"), ImportBatch::default());
    assert!(first.imported.ok);
    let scope = scope_of("p0007");
    let before_listing = engine.feedback().list(&scope).unwrap();
    let head_before = engine.head().unwrap().seq;
    // Every project fits one transaction: the refusal splits it.
    let run = import(&engine, &home, None, ImportBatch::default());
    let imported = &run.imported;
    assert!(!imported.ok);
    assert_eq!(imported.refused, Some("exists"));
    assert_eq!(imported.project.as_deref(), Some("p0007"));
    let before: Vec<String> = (0..7).map(|p| format!("p{p:04}")).collect();
    assert_eq!(projects_of(imported), before, "the projects before it are imported");
    // The seven went in together, in one commit, right after the earlier head.
    assert_eq!(imported.commits, 1);
    assert_eq!(run.heads, vec![head_before, *boundaries(imported).last().unwrap()]);
    // It is as it was, and nothing of the projects after it is in the store.
    assert_eq!(engine.feedback().list(&scope).unwrap(), before_listing);
    let log = engine.log(&LogFilter::default()).unwrap();
    for p in 8..12 {
        let scope = scope_of(&format!("p{p:04}"));
        assert!(log.iter().all(|e| e.content.scope != scope), "{scope} left events");
    }
    let in_seven = log.iter().filter(|e| e.content.scope == scope).count();
    assert_eq!(u64::try_from(in_seven).unwrap(), head_before, "p0007 has only its own import");
    engine.ops().verify(Default::default()).unwrap();
    // The rest comes in by name, as documented.
    for p in 8..12 {
        let rest = import(&engine, &home, Some(&format!("p{p:04}")), ImportBatch::default());
        assert!(rest.imported.ok);
    }
    engine.ops().verify(Default::default()).unwrap();
}

#[test]
fn the_bounds_hold_whole_projects_per_commit_within_events_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // 20 projects of 12 events (control, adapter for every other, 10 comments): 11 or 12 each.
    let files = moonshine_home(&home, 20, 10).unwrap();
    let engine = open(tmp.path(), "events.redb");
    let bounds = ImportBatch { events_max: 50, bytes_max: usize::MAX };
    let run = import(&engine, &home, None, bounds);
    assert!(run.imported.ok);
    let ends = boundaries(&run.imported);
    assert!(run.heads.len() > 2, "one home, several commits: {:?}", run.heads);
    assert_eq!(run.imported.commits, run.heads.len() - 1);
    assert_eq!(*run.heads.last().unwrap(), u64::try_from(files).unwrap());
    for pair in run.heads.windows(2) {
        assert!(pair[1] - pair[0] <= 50, "a commit of {} events", pair[1] - pair[0]);
        assert!(ends.contains(&pair[1]), "a commit ended inside a project: {}", pair[1]);
        // Full: the next project would not have fit.
        let next = ends.iter().find(|end| **end > pair[1]);
        if let Some(next) = next {
            let next_len = next - pair[1];
            assert!(pair[1] - pair[0] + next_len > 50, "{pair:?} left room for {next_len}");
        }
    }
    let progress = run.last.unwrap();
    assert_eq!((progress.projects_done, progress.projects_total), (20, 20));
    assert_eq!((progress.events_done, progress.events_total), (files, files));
    engine.ops().verify(Default::default()).unwrap();

    // The byte bound alone splits too: three projects' files per commit at most.
    let one_project: u64 =
        read_tree(&home.join("p0001")).unwrap().values().map(|b| b.len() as u64).sum();
    let bytes_max = usize::try_from(3 * one_project + one_project / 2).unwrap();
    let engine = open(tmp.path(), "bytes.redb");
    let run = import(&engine, &home, None, ImportBatch { events_max: usize::MAX, bytes_max });
    assert!(run.imported.ok);
    assert!((7..=10).contains(&run.imported.commits), "{} commits", run.imported.commits);
    let ends = boundaries(&run.imported);
    for pair in run.heads.windows(2) {
        assert!(ends.contains(&pair[1]), "a commit ended inside a project: {}", pair[1]);
    }

    // A project larger than the bound is one commit of its own, never split.
    let engine = open(tmp.path(), "small.redb");
    let run = import(&engine, &home, None, ImportBatch { events_max: 5, bytes_max: usize::MAX });
    assert_eq!(run.imported.commits, 20);
    assert_eq!(run.heads[1..], ends[..]);
}
