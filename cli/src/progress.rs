//! The one updating progress line of a long verb (`import`): written on stderr only when stderr
//! is a terminal, at most every [`PROGRESS_INTERVAL_MS`], and ended with a newline. Hooks and
//! pipes see nothing of it: stdout and a non-terminal stderr stay as they were.
//!
//! Formats and throttles; does not decide when the work moves (the engine tells it).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use hookstate_engine::ImportProgress;

/// Fewest milliseconds between two updates of the line: ten a second reads as live and costs
/// nothing next to a commit, however fast the commits come.
pub(crate) const PROGRESS_INTERVAL_MS: u64 = 100;

/// Whether this call's stderr is a terminal (a served call's never is: it is captured).
pub(crate) fn stderr_is_terminal() -> bool {
    matches!(crate::output::stderr(), crate::served::Out::Stderr(_))
        && std::io::stderr().is_terminal()
}

/// Lets an update through at most every `interval`; the first and the last always pass.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Throttle {
        Throttle { interval, last: None }
    }

    /// Whether an update at `now` is written (`last`: the work is done, always written).
    pub(crate) fn due(&mut self, now: Instant, last: bool) -> bool {
        let due =
            last || self.last.is_none_or(|at| now.saturating_duration_since(at) >= self.interval);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// The line for `p`, `elapsed` after the start.
pub(crate) fn import_line(p: &ImportProgress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { p.events_done as f64 / secs } else { 0.0 };
    format!(
        "import: {}/{} projects, {}/{} events, {} commits, {rate:.0} events/s",
        p.projects_done, p.projects_total, p.events_done, p.events_total, p.commits
    )
}

/// The updating line on a writer (stderr): each update returns to the line's start and pads
/// over a longer earlier text; the last update ends the line.
pub(crate) struct Line<W: Write> {
    out: W,
    throttle: Throttle,
    start: Instant,
    width: usize,
}

impl<W: Write> Line<W> {
    pub(crate) fn new(out: W, interval: Duration) -> Line<W> {
        Line { out, throttle: Throttle::new(interval), start: Instant::now(), width: 0 }
    }

    /// Writes the import's progress when due. Write errors are ignored: progress is a courtesy,
    /// never the verb's failure.
    pub(crate) fn import(&mut self, p: &ImportProgress, now: Instant) {
        let last = p.projects_done == p.projects_total;
        if !self.throttle.due(now, last) {
            return;
        }
        let text = import_line(p, now.saturating_duration_since(self.start));
        let pad = self.width.saturating_sub(text.len());
        let end = if last { "\n" } else { "" };
        let _ = write!(self.out, "\r{text}{:pad$}{end}", "");
        let _ = self.out.flush();
        // An ended line is no longer open.
        self.width = if last { 0 } else { text.len() };
    }

    /// Ends a line an import left open (it was refused or failed before its last project).
    pub(crate) fn finish(&mut self) {
        if self.width > 0 {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.width = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn progress(done: usize, total: usize, events: usize) -> ImportProgress {
        ImportProgress {
            projects_done: done,
            projects_total: total,
            events_done: events,
            events_total: total * 10,
            commits: done / 2,
        }
    }

    #[test]
    fn the_import_help_states_the_engines_bounds() {
        let mut cli = crate::args::full_command();
        let help = cli.find_subcommand_mut("import").unwrap().render_long_help().to_string();
        let events = hookstate_engine::IMPORT_TXN_EVENTS_MAX;
        let mib = hookstate_engine::IMPORT_TXN_BYTES_MAX / (1024 * 1024);
        assert!(help.contains(&format!("{events} events and {mib} MiB")), "{help}");
    }

    #[test]
    fn the_line_names_projects_events_commits_and_rate() {
        let line = import_line(&progress(4, 10, 40), Duration::from_secs(2));
        assert_eq!(line, "import: 4/10 projects, 40/100 events, 2 commits, 20 events/s");
        let line = import_line(&progress(0, 10, 0), Duration::ZERO);
        assert_eq!(line, "import: 0/10 projects, 0/100 events, 0 commits, 0 events/s");
    }

    #[test]
    fn the_throttle_lets_one_update_through_per_interval_and_always_the_last() {
        let interval = Duration::from_millis(PROGRESS_INTERVAL_MS);
        let mut throttle = Throttle::new(interval);
        let t0 = Instant::now();
        assert!(throttle.due(t0, false), "the first update passes");
        assert!(!throttle.due(t0 + interval / 2, false));
        assert!(!throttle.due(t0 + interval - Duration::from_millis(1), false));
        assert!(throttle.due(t0 + interval, false));
        assert!(throttle.due(t0 + interval + Duration::from_millis(1), true), "the last passes");
        // A thousand updates a millisecond apart: one per interval gets through.
        let mut throttle = Throttle::new(interval);
        let passed =
            (0..1000u64).filter(|ms| throttle.due(t0 + Duration::from_millis(*ms), false)).count();
        assert_eq!(passed, usize::try_from(1000 / PROGRESS_INTERVAL_MS).unwrap());
    }

    #[test]
    fn updates_overwrite_one_line_and_the_last_ends_it() {
        let mut out = Vec::new();
        let t0 = Instant::now();
        {
            let mut line = Line::new(&mut out, Duration::from_millis(PROGRESS_INTERVAL_MS));
            line.start = t0;
            line.import(&progress(0, 100, 0), t0);
            // Too soon: not written.
            line.import(&progress(1, 100, 10), t0 + Duration::from_millis(1));
            line.import(&progress(100, 100, 1000), t0 + Duration::from_secs(1));
            // The last update ended the line: finishing adds nothing.
            line.finish();
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "\rimport: 0/100 projects, 0/1000 events, 0 commits, 0 events/s\
             \rimport: 100/100 projects, 1000/1000 events, 50 commits, 1000 events/s\n"
        );
        assert_eq!(text.matches('\n').count(), 1, "one line");
    }

    #[test]
    fn a_shorter_update_pads_over_the_longer_one_and_finish_ends_an_open_line() {
        let mut out = Vec::new();
        let t0 = Instant::now();
        {
            let mut line = Line::new(&mut out, Duration::ZERO);
            line.start = t0;
            let long = ImportProgress { events_done: 123_456, ..progress(5, 100, 0) };
            line.import(&long, t0 + Duration::from_secs(100_000));
            line.import(&progress(6, 100, 7), t0 + Duration::from_secs(1));
            line.finish();
        }
        let text = String::from_utf8(out).unwrap();
        let updates: Vec<&str> = text.trim_end_matches('\n').split('\r').skip(1).collect();
        assert_eq!(updates.len(), 2);
        assert_eq!(updates[0].len(), updates[1].len(), "{text:?}");
        assert!(text.ends_with(" \n"), "padded, then the line ended: {text:?}");
    }
}
