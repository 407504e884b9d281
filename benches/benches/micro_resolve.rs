//! Per-call latency of `hookstate --format verdict proposals micro resolve` beside `bun` running
//! an equivalent TypeScript script (`benches/legacy/micro-resolve.ts`: read, splice, rewrite the
//! queue file, append the ledger line), and beside `/bin/true`, interleaved in one run on the same
//! queue of entries.
//!
//! Does not pass or fail; it prints. Skips the bun column when `bun` is not on PATH.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hookstate_benches::{
    locate_hookstate, ms, ratio, scale, scratch_dir, timed, utc_now, BenchResult, Sample,
};

/// Entries queued, and so resolve calls per tool, at `BENCH_SCALE=1`.
const ENTRIES: usize = 100;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/legacy/micro-resolve.ts");
const DATE: &str = "20261129";

/// Writes a hermit state dir holding `entries` pending entries and their ledger lines.
fn seed(dir: &Path, entries: usize) -> BenchResult<()> {
    std::fs::create_dir_all(dir.join("state"))?;
    std::fs::write(dir.join("config.json"), "{\"timezone\":\"UTC\"}\n")?;
    let mut pending = Vec::with_capacity(entries);
    let mut ledger = String::new();
    for i in 0..entries {
        let id = format!("MP-{DATE}-{i}");
        let question = format!("Bench question {i}?");
        pending.push(serde_json::json!({
            "id": id, "tier": 1, "status": "pending", "follow_up_count": 0,
            "ts": "2026-11-29T21:50:45Z", "question": question,
        }));
        let line = serde_json::json!({
            "ts": "2026-11-29T21:50:45Z", "type": "micro-queued", "micro_id": id, "tier": 1,
            "question": question,
        });
        writeln!(ledger, "{line}")?;
    }
    let queue = serde_json::to_string_pretty(&serde_json::json!({ "pending": pending }))? + "\n";
    std::fs::write(dir.join("state/micro-proposals.json"), queue)?;
    std::fs::write(dir.join("state/proposal-metrics.jsonl"), ledger)?;
    Ok(())
}

fn expect_line(output: &std::process::Output, expected: &str, who: &str) -> BenchResult<()> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || stdout.trim() != expected {
        return Err(format!(
            "{who} printed {stdout:?} (stderr {:?}), expected {expected}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

fn row(label: &str, sample: &Sample) {
    println!("| {label:<44} | {:>7.2} | {:>7.2} |", ms(sample.p50()), ms(sample.p99()));
}

fn main() -> BenchResult<()> {
    let entries = ENTRIES * scale()?;
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "micro-resolve-")?;
    println!("hookstate `micro_resolve` bench — {}", utc_now());
    let hookstate = match locate_hookstate() {
        Ok(located) => located,
        Err(looked) => {
            println!(
                "hookstate binary: NOT FOUND ({looked}); run `cargo build --release -p hookstate`"
            );
            return Ok(());
        }
    };
    println!("hookstate binary: {} ({})", hookstate.path.display(), hookstate.how);
    let bun = Command::new("bun").arg("--version").output().ok().filter(|o| o.status.success());
    match &bun {
        Some(out) => println!("bun {}", String::from_utf8_lossy(&out.stdout).trim()),
        None => println!("bun: not on PATH (`npm i -g bun`); its column is skipped"),
    }
    let (hs_dir, bun_dir) = (scratch.path().join("hs"), scratch.path().join("bun"));
    seed(&hs_dir, entries)?;
    seed(&bun_dir, entries)?;
    let db = scratch.path().join("state.redb");
    let import = Command::new(&hookstate.path)
        .arg("--db")
        .arg(&db)
        .args(["import", "--layout", "hermit-proposals", "--from"])
        .arg(&hs_dir)
        .output()?;
    if !import.status.success() {
        return Err(format!("import failed: {}", String::from_utf8_lossy(&import.stderr)).into());
    }
    let (mut hs, mut js, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..entries {
        let id = format!("MP-{DATE}-{i}");
        let expected = format!("RESOLVED|{id}|approved");
        let run_hookstate = || -> BenchResult<Duration> {
            let (out, took) = timed(
                Command::new(&hookstate.path)
                    .arg("--db")
                    .arg(&db)
                    .args(["--format", "verdict", "proposals", "--dir"])
                    .arg(&hs_dir)
                    .args(["micro", "resolve", &id, "--action", "approved"]),
            )?;
            expect_line(&out, &expected, "hookstate")?;
            Ok(took)
        };
        let run_bun = || -> BenchResult<Option<Duration>> {
            if bun.is_none() {
                return Ok(None);
            }
            let (out, took) = timed(Command::new("bun").arg(SCRIPT).arg(&bun_dir).args([
                id.as_str(),
                "--action",
                "approved",
            ]))?;
            expect_line(&out, &expected, "bun")?;
            Ok(Some(took))
        };
        // Alternate which tool goes first so neither always runs on a warmer cache.
        if i % 2 == 0 {
            hs.push(run_hookstate()?);
            js.extend(run_bun()?);
        } else {
            js.extend(run_bun()?);
            hs.push(run_hookstate()?);
        }
        floor.push(timed(&mut Command::new("true"))?.1);
    }
    let (hs, js, floor) = (Sample::new(hs), Sample::new(js), Sample::new(floor));
    println!();
    println!("{entries} resolve calls per tool, interleaved, one process per call");
    println!("| {:<44} | {:>7} | {:>7} |", "call", "p50 ms", "p99 ms");
    println!("|{:-<46}|{:->9}|{:->9}|", "", "", "");
    row("/bin/true (process start)", &floor);
    row("hookstate proposals micro resolve (durable)", &hs);
    if !js.is_empty() {
        row("bun micro-resolve.ts (rename, no fsync)", &js);
        println!("bun p50 / hookstate p50 = {:.2}x", ratio(ms(js.p50()), ms(hs.p50())));
    }
    Ok(())
}
