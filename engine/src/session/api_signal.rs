//! `proposal.ts success-signal` on the session handle: `--validate "<predicate>"` checks the
//! grammar; `<stateDir> <accepted_date> <accepted_in_session|null> <predicate>` evaluates it over
//! the session reports the store holds for that directory (rules/signal.rs).
//!
//! Reads only. Does not decide anything itself.

use std::path::Path;

use super::api::{hermit_scope, Session};
use super::rules::signal::EVALUATE_USAGE;
use super::rules::signal::{evaluate, insufficient_line, is_report, validate, SignalAnswer};
use super::views;
use crate::kernel::error::Result;

impl Session<'_> {
    /// `proposal.ts success-signal <args>` with upstream's arguments: its stdout and exit code
    /// (1 only for a failed `--validate`). Evaluate mode reads the `S-NNN-REPORT.md` rows of
    /// the directory's scope; a directory that cannot be named has no reports.
    ///
    /// # Errors
    /// Store errors.
    pub fn success_signal(&self, args: &[String]) -> Result<SignalAnswer> {
        if args.first().map(String::as_str) == Some("--validate") {
            return Ok(validate(&args[1..]));
        }
        let [dir, date, session, predicate @ ..] = args else {
            let stdout = format!("{EVALUATE_USAGE}{}", insufficient_line());
            return Ok(SignalAnswer { stdout, exit: 0 });
        };
        if predicate.is_empty() {
            let stdout = format!("{EVALUATE_USAGE}{}", insufficient_line());
            return Ok(SignalAnswer { stdout, exit: 0 });
        }
        let mut reports = Vec::new();
        if let Ok((scope, _)) = hermit_scope(Path::new(dir)) {
            let txn = self.k.begin_read()?;
            for name in views::report_names(&*txn, &scope)?.into_iter().filter(|n| is_report(n)) {
                if let Some(text) = views::report(&*txn, &scope, &name)? {
                    reports.push((name, text));
                }
            }
        }
        Ok(SignalAnswer { stdout: evaluate(date, session, predicate, &reports), exit: 0 })
    }
}
