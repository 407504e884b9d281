//! The CLI's side of the seeded-bug drills (`bugdrill` feature only): with
//! `HOOKSTATE_DRILL=ack-before-commit`, the acknowledgement is printed from the engine's
//! before-commit hook, so a kill during the commit loses an acknowledged event.
//!
//! Does not exist in a build without the `bugdrill` feature.

use hookstate_engine::drill::{self, Drill};

use crate::args::Format;
use crate::output::print;

/// Arms the early acknowledgement when the drill is set; returns whether it is armed, in which
/// case a call that appended events has already printed its result.
pub(crate) fn install(format: Format) -> bool {
    if !drill::is(Drill::AckBeforeCommit) {
        return false;
    }
    drill::set_before_commit(Box::new(move |outcome| {
        let _ = print(format, &outcome.to_json());
    }));
    true
}
