//! Per-call latency of two session verbs (issue 16) beside `/bin/true`, interleaved in one run:
//! `hookstate --format verdict hermit task open` (a task record, its index rows and the open
//! count) and `hookstate --format verdict hermit observations observe` (one ledger line), each
//! one process per call on a state directory that grows as the run goes on. The first and last
//! quarter of each verb's calls are printed apart, so a cost that grows with the history shows.
//! `hookstate queue push` (the smallest durable write) runs beside them as the write path's floor.
//!
//! Both binaries are copied into one scratch directory first (a binary run from `target/` was
//! measured slower per call than the same bytes elsewhere). Does not pass or fail; it prints.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hookstate_benches::{
    locate_hookstate, machine, ms, ratio, scale, scratch_dir, utc_now, BenchResult, Sample,
};

/// Calls per verb at `BENCH_SCALE=1` (and as many `/bin/true` runs).
const CALLS: usize = 200;
/// 2026-09-14T08:15:02.118Z, the first call's clock; each call is a second later (a task id is
/// `T-YYYYMMDD-HHMMSS[-x]`, so a clock that stood still would run out of suffixes).
const NOW_MS: u64 = 1_789_373_702_118;
const STEP_MS: u64 = 1_000;

/// Runs `command` with `stdin` written to it, stdout/stderr captured, timed from spawn to exit.
fn timed_with(command: &mut Command, stdin: &str) -> BenchResult<(Output, Duration)> {
    let start = Instant::now();
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    Ok((output, start.elapsed()))
}

fn expect(output: &Output, wanted: &str, who: &str) -> BenchResult<()> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !stdout.contains(wanted) {
        return Err(format!(
            "{who} printed {stdout:?} (stderr {:?}, {}), expected {wanted:?}",
            String::from_utf8_lossy(&output.stderr),
            output.status
        )
        .into());
    }
    Ok(())
}

fn row(label: &str, sample: &Sample, floor: &Sample) {
    println!(
        "| {label:<46} | {:>7.2} | {:>7.2} | {:>6.2}x |",
        ms(sample.p50()),
        ms(sample.p99()),
        ratio(ms(sample.p50()), ms(floor.p50()))
    );
}

/// Copies `from` into `dir` under `name`, executable.
fn copy_bin(from: &Path, dir: &Path, name: &str) -> BenchResult<PathBuf> {
    let to = dir.join(name);
    std::fs::copy(from, &to)?;
    Ok(to)
}

fn quarters(all: &[Duration]) -> (Sample, Sample) {
    let quarter = (all.len() / 4).max(1);
    let first = all.iter().take(quarter).copied().collect();
    let last = all.iter().rev().take(quarter).copied().collect();
    (Sample::new(first), Sample::new(last))
}

fn main() -> BenchResult<()> {
    let calls = CALLS * scale()?;
    let scratch = scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "session-calls-")?;
    println!("hookstate `session_calls` bench — {}", utc_now());
    println!("{}", machine(scratch.path()));
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
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin)?;
    let hs = copy_bin(&hookstate.path, &bin, "hookstate")?;
    let true_bin = copy_bin(Path::new("/bin/true"), &bin, "true")?;
    let dir = scratch.path().join(".claude-code-hermit");
    std::fs::create_dir_all(dir.join("state"))?;
    let db = scratch.path().join("state.redb");
    let base = |command: &mut Command, i: usize| {
        let now = NOW_MS + STEP_MS * u64::try_from(i).unwrap_or(u64::MAX / 2);
        command
            .arg("--db")
            .arg(&db)
            .args(["--format", "verdict", "hermit"])
            .env("HOOKSTATE_NOW_MS", now.to_string())
            .env_remove("HOOKSTATE_SESSION")
            .env_remove("HOOKSTATE_SCOPE");
    };
    let push_db = scratch.path().join("push.redb");
    let (mut open, mut observe, mut push, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..calls {
        let title = format!("Bench task {i}");
        let run_open = || -> BenchResult<Duration> {
            let mut command = Command::new(&hs);
            base(&mut command, i);
            command.args(["task", "open"]).arg(&dir).args([
                "--title",
                title.as_str(),
                "--requester",
                "operator",
                "--done",
                "bench done",
            ]);
            let (out, took) = timed_with(&mut command, "")?;
            expect(&out, "\"created\":true", "task open")?;
            Ok(took)
        };
        let run_observe = || -> BenchResult<Duration> {
            let mut command = Command::new(&hs);
            base(&mut command, i);
            command.args(["observations", "observe"]).arg(&dir).arg("quick-deferral");
            let (out, took) = timed_with(&mut command, &format!("bench pattern {i}"))?;
            expect(&out, "OK", "observations observe")?;
            Ok(took)
        };
        // Alternate the order so neither verb always runs on a warmer cache.
        if i % 2 == 0 {
            open.push(run_open()?);
            observe.push(run_observe()?);
        } else {
            observe.push(run_observe()?);
            open.push(run_open()?);
        }
        let mut command = Command::new(&hs);
        command.arg("--db").arg(&push_db).args(["queue", "push", "bench", &format!("item-{i}")]);
        let (out, took) = timed_with(&mut command, "")?;
        expect(&out, "\"ok\":true", "queue push")?;
        push.push(took);
        floor.push(timed_with(&mut Command::new(&true_bin), "")?.1);
    }
    let ((open_first, open_last), (observe_first, observe_last)) =
        (quarters(&open), quarters(&observe));
    let (push_first, push_last) = quarters(&push);
    let (open, observe) = (Sample::new(open), Sample::new(observe));
    let (push, floor) = (Sample::new(push), Sample::new(floor));
    println!();
    println!("{calls} calls per verb, interleaved with /bin/true, one process per call (durable)");
    println!("| {:<46} | {:>7} | {:>7} | {:>7} |", "call", "p50 ms", "p99 ms", "p50/true");
    println!("|{:-<48}|{:->9}|{:->9}|{:->9}|", "", "", "", "");
    row("/bin/true (process start)", &floor, &floor);
    row("hookstate queue push (the write path's floor)", &push, &floor);
    row("hermit task open", &open, &floor);
    row("hermit task open, first quarter", &open_first, &floor);
    row("hermit task open, last quarter", &open_last, &floor);
    row("hermit observations observe", &observe, &floor);
    row("hermit observations observe, first quarter", &observe_first, &floor);
    row("hermit observations observe, last quarter", &observe_last, &floor);
    println!(
        "p50 / queue push p50: task open {:.2}x, observe {:.2}x",
        ratio(ms(open.p50()), ms(push.p50())),
        ratio(ms(observe.p50()), ms(push.p50()))
    );
    // The machine's load drifts over a run: each quarter is read over queue push's same quarter.
    let growth = |first: &Sample, last: &Sample| {
        ratio(
            ratio(ms(last.p50()), ms(push_last.p50())),
            ratio(ms(first.p50()), ms(push_first.p50())),
        )
    };
    println!(
        "last/first quarter p50 over queue push's: task open {:.2}x, observe {:.2}x \
         (queue push itself {:.2}x; history {calls} tasks, {calls} lines)",
        growth(&open_first, &open_last),
        growth(&observe_first, &observe_last),
        ratio(ms(push_last.p50()), ms(push_first.p50())),
    );
    Ok(())
}
