//! hookstate-benches: bench binaries live in `benches/`; the helpers they share live here: the
//! `BENCH_SCALE` multiplier, latency samples and their percentiles, a scratch directory on the
//! workspace's disk, locating the `hookstate` binary, and timing one child process.
//!
//! Does not ship anything, and does not judge figures: benches print, they never pass or fail.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The error type of a bench's `main`.
pub type BenchError = Box<dyn Error + Send + Sync>;

/// The result type of a bench's `main`.
pub type BenchResult<T> = Result<T, BenchError>;

/// Environment variable that multiplies every iteration count.
pub const SCALE_VAR: &str = "BENCH_SCALE";

/// Environment variable naming the `hookstate` binary to run.
pub const BIN_VAR: &str = "HOOKSTATE_BIN";

/// Percentile of the median, in permille.
pub const P50: usize = 500;

/// Percentile of the tail that benches quote, in permille.
pub const P99: usize = 990;

const PERMILLE: usize = 1000;

/// Reads `BENCH_SCALE`: a positive integer, 1 when unset.
///
/// # Errors
/// When the variable is set but is not a positive integer.
pub fn scale() -> BenchResult<usize> {
    match std::env::var(SCALE_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(1),
        Err(err) => Err(format!("{SCALE_VAR}: {err}").into()),
        Ok(text) => match text.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{SCALE_VAR} must be a positive integer, not {text:?}").into()),
        },
    }
}

/// Latencies of one measured operation.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    sorted: Vec<Duration>,
}

impl Sample {
    /// A sample of the given latencies (in any order).
    #[must_use]
    pub fn new(mut latencies: Vec<Duration>) -> Sample {
        latencies.sort_unstable();
        Sample { sorted: latencies }
    }

    /// How many latencies the sample holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether the sample is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The nearest-rank percentile at `permille`/1000 (zero for an empty sample).
    #[must_use]
    pub fn percentile(&self, permille: usize) -> Duration {
        let rank = (self.sorted.len() * permille.min(PERMILLE)).div_ceil(PERMILLE);
        self.sorted.get(rank.saturating_sub(1)).copied().unwrap_or_default()
    }

    /// The sum of the latencies.
    #[must_use]
    pub fn total(&self) -> Duration {
        self.sorted.iter().sum()
    }

    /// The median.
    #[must_use]
    pub fn p50(&self) -> Duration {
        self.percentile(P50)
    }

    /// The 99th percentile.
    #[must_use]
    pub fn p99(&self) -> Duration {
        self.percentile(P99)
    }
}

/// A duration in milliseconds.
#[must_use]
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Operations per second (zero when no time passed).
#[must_use]
pub fn per_second(count: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// `a / b`, or zero when `b` is zero.
#[must_use]
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// A new scratch directory under `base`, removed when dropped. Benches pass cargo's
/// `CARGO_TARGET_TMPDIR`, which is on the workspace's disk, so that fdatasync means what it means
/// there even when `/tmp` is a tmpfs.
///
/// # Errors
/// When the directory cannot be created.
pub fn scratch_dir(base: &Path, prefix: &str) -> BenchResult<tempfile::TempDir> {
    std::fs::create_dir_all(base)?;
    Ok(tempfile::Builder::new().prefix(prefix).tempdir_in(base)?)
}

/// The workspace target directory: `CARGO_TARGET_DIR`, else the one the running bench was
/// built in (`<target>/<profile>/deps/<bench>`), else `<workspace>/target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let from_exe =
        std::env::current_exe().ok().and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf));
    from_exe.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Where the `hookstate` binary was found, and how.
#[derive(Debug, Clone)]
pub struct Located {
    /// The binary.
    pub path: PathBuf,
    /// Which rule found it.
    pub how: &'static str,
}

/// Finds the `hookstate` binary: `HOOKSTATE_BIN`, else `<target>/release/hookstate`, else
/// `<target>/debug/hookstate`. `Err` lists the places looked at.
///
/// # Errors
/// When none of them is a file.
pub fn locate_hookstate() -> Result<Located, String> {
    let target = target_dir();
    let mut candidates = Vec::new();
    if let Some(bin) = std::env::var_os(BIN_VAR).filter(|b| !b.is_empty()) {
        candidates.push((PathBuf::from(bin), "from HOOKSTATE_BIN"));
    }
    candidates.push((target.join("release/hookstate"), "release build"));
    candidates.push((target.join("debug/hookstate"), "DEBUG build: slower than release"));
    let looked: Vec<String> =
        candidates.iter().map(|(path, _)| path.display().to_string()).collect();
    candidates
        .into_iter()
        .find(|(path, _)| path.is_file())
        .map(|(path, how)| Located { path, how })
        .ok_or_else(|| format!("looked at {}", looked.join(", ")))
}

/// Runs `command` with stdin closed and stdout/stderr captured, and times it from spawn to exit.
///
/// # Errors
/// When the process cannot be started.
pub fn timed(command: &mut Command) -> std::io::Result<(Output, Duration)> {
    let start = Instant::now();
    let output = command.stdin(Stdio::null()).output()?;
    Ok((output, start.elapsed()))
}

/// The UTC date and time: `date -u`, else seconds since the Unix epoch.
#[must_use]
pub fn utc_now() -> String {
    let date = Command::new("date")
        .arg("-u")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|text| !text.is_empty());
    date.unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        format!("{secs} s since the Unix epoch (UTC)")
    })
}

/// One line naming the machine: OS, architecture, cores, and the filesystem of `dir`.
#[must_use]
pub fn machine(dir: &Path) -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let fs = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |out| String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        );
    format!(
        "{} {}, {cores} cores, scratch filesystem {fs}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// What the legacy hooks do per claim, one `bash` process per call: find the first pending
/// `<id>.json`, rename it to `<id>.json.claiming.$$`, check that it is still pending, rewrite the
/// status with sed, rename it back. No fsync anywhere: not durable.
pub const LEGACY_CLAIM: &str = r#"
dir=$1
f=$(grep -l '"status":"pending"' "$dir"/*.json 2>/dev/null | head -n 1)
if [ -z "$f" ]; then echo '{"claimed":false}'; exit 0; fi
id=${f##*/}; id=${id%.json}
c="$f.claiming.$$"
mv "$f" "$c" 2>/dev/null || { echo '{"claimed":false,"lost":true}'; exit 0; }
if grep -q '"status":"pending"' "$c"; then
  sed -i 's/"status":"pending"/"status":"delivered"/' "$c"
  mv "$c" "$f"
  echo "{\"claimed\":true,\"item\":\"$id\"}"
else
  mv "$c" "$f"
  echo '{"claimed":false,"lost":true}'
fi
"#;

/// Environment variables of the `hookstate` binary that would change what a bench's call does
/// (its store, scope, wait, output format, identity, clock or anchor directory): every bench clears
/// them for the processes it starts.
pub const CLEARED_ENV: [&str; 8] = [
    "HOOKSTATE_DB",
    "HOOKSTATE_SCOPE",
    "HOOKSTATE_WAIT_MS",
    "HOOKSTATE_FORMAT",
    "HOOKSTATE_SESSION",
    "HOOKSTATE_AGENT",
    "HOOKSTATE_NOW_MS",
    "HOOKSTATE_ANCHOR_DIR",
];

/// Now, in UTC ms, for the calls a bench makes in process (0 if the clock is before 1970).
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: &[u64]) -> Sample {
        Sample::new(ms.iter().map(|n| Duration::from_millis(*n)).collect())
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = sample(&[5, 1, 4, 2, 3]);
        assert_eq!(s.p50(), Duration::from_millis(3));
        assert_eq!(s.p99(), Duration::from_millis(5));
        assert_eq!(s.percentile(0), Duration::from_millis(1));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(sample(&hundred).p99(), Duration::from_millis(99));
        assert_eq!(sample(&hundred).p50(), Duration::from_millis(50));
    }

    #[test]
    fn empty_sample_and_zero_time_give_zero() {
        assert_eq!(Sample::default().p50(), Duration::ZERO);
        assert!(per_second(10, Duration::ZERO).abs() < f64::EPSILON);
        assert!(ratio(1.0, 0.0).abs() < f64::EPSILON);
    }
}
