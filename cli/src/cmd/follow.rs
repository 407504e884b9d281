//! `log --follow`: the matching events, then each new one as it commits, until SIGINT or
//! SIGTERM (exit 0) or a closed pipe (exit 0).
//!
//! Waking is a short bounded poll (poll(2) on stdout, which also tells of a closed pipe) of the
//! store file's and the anchor's metadata (no read of the store while nothing changed); a change
//! reopens the store read-only and prints what follows the last seq seen, so every event is
//! printed once, in order. Events a compaction dropped before they were printed are named in a
//! warning line on stderr. Does not write.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookstate_engine::LogFilter;

use crate::args::Cli;
use crate::cmd::ops::print_events;
use crate::cmd::{open, Access};
use crate::exit::CliError;

/// Pause between two looks at the store's metadata: short next to a hook's pace, long enough
/// that a follower idles at a few syscalls per poll.
const FOLLOW_POLL_MS: u64 = 50;
/// A store read even when no metadata moved (a change within one timestamp tick, or an anchor
/// that lags): bounds how late an event can be printed.
const FOLLOW_REFRESH_MS: u64 = 2_000;
/// Events printed per read, so memory stays bounded behind a fast writer.
const FOLLOW_PAGE_EVENTS: u64 = 1_000;

/// What the poll compares: modification time, length and inode of the store and its anchor.
type Stamp = Vec<Option<(std::time::SystemTime, u64, u64)>>;

fn stamp(paths: &[PathBuf]) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino())))
        })
        .collect()
}

pub(crate) fn follow(cli: &Cli, filter: LogFilter, field_bytes_max: usize) -> Result<(), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|source| CliError::Io { op: "set the signal handler".into(), source })?;
    }
    let mut next = filter.from_seq.unwrap_or(1).max(1);
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut seen = Stamp::new();
    let mut last_read = None::<Instant>;
    while !stop.load(Ordering::SeqCst) {
        let due = last_read.is_none_or(|t: Instant| t.elapsed() >= refresh());
        let now = stamp(&paths);
        if due || now != seen || paths.is_empty() {
            seen = now;
            last_read = Some(Instant::now());
            // The first read starts where `log` would; later ones where the last one ended.
            let followed = !paths.is_empty();
            let page = read_from(cli, &filter, next, field_bytes_max, followed)?;
            next = page.read_to + 1;
            if paths.is_empty() {
                paths = page.paths;
                seen = stamp(&paths);
            }
            if page.read_to < page.head {
                // The page ended at its bound: read on at once.
                last_read = None;
                continue;
            }
        }
        if reader_gone() {
            break;
        }
    }
    Ok(())
}

/// Waits [`FOLLOW_POLL_MS`] in poll(2) on stdout, which returns early when its reader closed
/// the pipe (or a signal came); says whether the reader is gone.
fn reader_gone() -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
    let pause =
        Timespec { tv_sec: 0, tv_nsec: i64::try_from(FOLLOW_POLL_MS * 1_000_000).unwrap_or(0) };
    match poll(&mut fds, Some(&pause)) {
        Ok(0) | Err(_) => false,
        Ok(_) => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
    }
}

fn refresh() -> Duration {
    Duration::from_millis(FOLLOW_REFRESH_MS)
}

/// What one read saw.
struct Page {
    /// The last seq read past (printed or not matching).
    read_to: u64,
    /// The head of the store when it was read.
    head: u64,
    /// The files whose metadata the poll watches.
    paths: Vec<PathBuf>,
}

/// Prints the matching events from `from` towards the head, at most a page of them.
fn read_from(
    cli: &Cli,
    filter: &LogFilter,
    from: u64,
    field_bytes_max: usize,
    followed: bool,
) -> Result<Page, CliError> {
    let engine = open(cli, Access::Read)?;
    let at = engine.location()?;
    let paths = vec![at.path.clone(), at.anchor_path.clone(), parent_of(&at.path)];
    let head = engine.head()?.seq;
    if head < from {
        return Ok(Page { read_to: from - 1, head, paths });
    }
    // A compaction between two reads dropped events this follower had not printed: say so, once,
    // rather than go on as if the log were whole.
    let dropped = match followed {
        true => engine.ops().first_kept(from)?.filter(|kept| *kept > from),
        false => None,
    };
    if let Some(kept) = dropped {
        let line = format!(
            "hookstate: warning: events {from} to {} were dropped by a compaction before they \
             were printed",
            kept - 1
        );
        let _ = writeln!(crate::output::stderr(), "{line}");
    }
    let to = head.min(from.saturating_add(FOLLOW_PAGE_EVENTS - 1));
    let page = LogFilter {
        from_seq: Some(from),
        to_seq: Some(to),
        limit: None,
        tail: false,
        ..filter.clone()
    };
    let events = engine.log(&page)?;
    print_events(cli, &events, field_bytes_max)?;
    Ok(Page { read_to: to, head, paths })
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}
