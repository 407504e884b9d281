//! The import bench: `import --layout moonshine` of a large generated home (200 projects × 500
//! comments, and 10 projects × 10,000 comments: moonshine's per-project limit), in the same run
//! and on the same home: the old path (one commit per project) against the batched path (many
//! small projects per commit, within the engine's named bounds), both in-process on fresh stores,
//! then the release binary end to end. Prints events/s, commits and the same-run ratio; never
//! passes or fails on timing.
//!
//! `HOOKSTATE_IMPORT_SHAPES` (default `200x500,10x10000`) picks the homes (projects × comments).
//! `HOOKSTATE_IMPORT_HOMES=<dir>` only writes the homes under `<dir>` (kept, for profiling the
//! binary by hand) and stops.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hookstate_benches::{
    locate_hookstate, machine, now_ms, per_second, ratio, scratch_dir, timed, utc_now, BenchResult,
    CLEARED_ENV,
};
use hookstate_engine::{Call, Engine, ImportBatch, MoonshineImport, OpenOptions};

/// The homes unless `HOOKSTATE_IMPORT_SHAPES` says: many small projects (where batching pays),
/// and a few projects at the per-project comment limit (where it cannot: a project is one commit).
const SHAPES_DEFAULT: [(usize, usize); 2] = [(200, 500), (10, 10_000)];
const SHAPES_VAR: &str = "HOOKSTATE_IMPORT_SHAPES";
const HOMES_VAR: &str = "HOOKSTATE_IMPORT_HOMES";
/// Rounds of each path per home, alternating, so that neither always runs on a warmer cache.
const ROUNDS: usize = 2;

fn main() -> BenchResult<()> {
    let shapes = shapes()?;
    if let Some(dir) = std::env::var_os(HOMES_VAR) {
        for (projects, comments) in shapes {
            let home = Path::new(&dir).join(format!("{projects}x{comments}"));
            let events = hookstate_testkit::moonshine_home(&home, projects, comments)?;
            println!("{}: {events} files", home.display());
        }
        return Ok(());
    }
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "import-")?;
    let dir = scratch.path();
    println!("hookstate `import` bench — {}", utc_now());
    println!("machine: {}", machine(dir));
    let bin = locate_hookstate().ok();
    match &bin {
        Some(located) => println!("hookstate binary: {} ({})", located.path.display(), located.how),
        None => println!("hookstate binary: none built (the end-to-end row is left out)"),
    }
    let batch = ImportBatch::default();
    println!(
        "batched bounds: {} events, {} bytes per transaction; {ROUNDS} rounds per path",
        batch.events_max, batch.bytes_max
    );
    println!();
    let mut rows = Vec::new();
    for (projects, comments) in shapes {
        let home = dir.join(format!("{projects}x{comments}"));
        let events = hookstate_testkit::moonshine_home(&home, projects, comments)?;
        let label = format!("{projects} × {comments}");
        let mut old = Vec::new();
        let mut new = Vec::new();
        for round in 0..ROUNDS {
            let first_old = round % 2 == 0;
            for path in [first_old, !first_old] {
                let bounds = if path { ImportBatch::PER_PROJECT } else { batch };
                let name =
                    format!("{projects}x{comments}-{round}-{}", if path { "old" } else { "new" });
                let run = in_process(&home, &dir.join(format!("{name}.redb")), bounds)?;
                if path {
                    old.push(run)
                } else {
                    new.push(run)
                }
            }
        }
        let cli = match &bin {
            Some(located) => Some(end_to_end(
                &located.path,
                &home,
                &dir.join(format!("{projects}x{comments}-cli.redb")),
            )?),
            None => None,
        };
        rows.push(Row { label, events, old: best(&old), new: best(&new), cli });
    }
    summary(&rows);
    Ok(())
}

fn shapes() -> BenchResult<Vec<(usize, usize)>> {
    let Ok(text) = std::env::var(SHAPES_VAR) else {
        return Ok(SHAPES_DEFAULT.to_vec());
    };
    text.split(',')
        .map(|shape| {
            let bad = || format!("{SHAPES_VAR}: {shape:?} is not <projects>x<comments>");
            let (p, c) = shape.trim().split_once('x').ok_or_else(bad)?;
            Ok((p.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?))
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(Into::into)
}

/// One import's figures.
#[derive(Clone, Copy)]
struct Run {
    took: Duration,
    commits: usize,
    appended: usize,
}

/// Reads the home and imports it into a fresh store at `db` within `bounds`; the time covers
/// both, as the verb's does.
fn in_process(home: &Path, db: &Path, bounds: ImportBatch) -> BenchResult<Run> {
    let engine = Engine::open(db, OpenOptions::default())?;
    let call = Call::at("bench", now_ms());
    let start = Instant::now();
    let import = MoonshineImport::read(home, None)?;
    let imported = engine.feedback().import_batched(&call, import, bounds, &mut |_| {})?;
    let took = start.elapsed();
    if !imported.ok {
        return Err(format!("the import was refused: {:?}", imported.refused).into());
    }
    let appended = imported.imported.iter().flatten().map(|p| p.events).sum();
    Ok(Run { took, commits: imported.commits, appended })
}

/// `hookstate import` of the home into a fresh store, stderr not a terminal (no progress line).
fn end_to_end(bin: &Path, home: &Path, db: &Path) -> BenchResult<Run> {
    let mut command = Command::new(bin);
    for var in CLEARED_ENV {
        command.env_remove(var);
    }
    command.arg("--db").arg(db).args(["import", "--layout", "moonshine", "--from"]).arg(home);
    let (output, took) = timed(&mut command)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("hookstate import failed: {stderr}").into());
    }
    let out: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let projects = out["imported"].as_array().map(Vec::as_slice).unwrap_or_default();
    let appended = projects.iter().filter_map(|p| p["events"].as_u64()).sum::<u64>();
    Ok(Run { took, commits: 0, appended: usize::try_from(appended)? })
}

/// The fastest of a path's rounds.
fn best(runs: &[Run]) -> Run {
    let mut runs = runs.to_vec();
    runs.sort_by_key(|r| r.took);
    runs[0]
}

struct Row {
    label: String,
    events: usize,
    old: Run,
    new: Run,
    cli: Option<Run>,
}

fn summary(rows: &[Row]) {
    println!(
        "{:<14} {:>8} | {:>9} {:>8} {:>8} | {:>9} {:>8} {:>8} | {:>7} | {:>9} {:>8}",
        "home",
        "events",
        "old ev/s",
        "µs/ev",
        "commits",
        "new ev/s",
        "µs/ev",
        "commits",
        "new/old",
        "cli ev/s",
        "cli s"
    );
    for row in rows {
        let rate = |run: &Run| per_second(run.appended, run.took);
        let us = |run: &Run| run.took.as_secs_f64() * 1e6 / run.appended.max(1) as f64;
        let cli = row.cli.as_ref().map_or_else(
            || format!("{:>9} {:>8}", "-", "-"),
            |c| format!("{:>9.0} {:>8.2}", rate(c), c.took.as_secs_f64()),
        );
        println!(
            "{:<14} {:>8} | {:>9.0} {:>8.1} {:>8} | {:>9.0} {:>8.1} {:>8} | {:>6.2}× | {cli}",
            row.label,
            row.events,
            rate(&row.old),
            us(&row.old),
            row.old.commits,
            rate(&row.new),
            us(&row.new),
            row.new.commits,
            ratio(rate(&row.new), rate(&row.old)),
        );
    }
}
