//! The operator's verbs over a whole store, behind the handle [`Ops`] (`engine.ops()`): verify
//! and rebuild, stats, copy, as-of reads, checkpoint, dump and backup, metrics, group commit; and the three that
//! do not fit a shared handle, as functions: [`compact`] (it needs the engine to itself),
//! [`doctor`] and [`restore`] (they act on a path, without an engine). Also events rendered whole
//! for `log` and the names its filters accept.
//!
//! Part of the engine's top: it may use the domains' projection table through `engine.rs`, the
//! kernel and the stores. Does not print; the CLI does.

pub(crate) mod api;
pub(crate) mod asof;
pub(crate) mod checkpoint;
pub(crate) mod doctor;
pub(crate) mod dump;
pub(crate) mod group;
pub(crate) mod kinds;
pub(crate) mod metrics;
pub(crate) mod render;
pub(crate) mod snapshot;

pub use api::Ops;
pub use checkpoint::compact;
pub use doctor::doctor;
pub use dump::restore;
pub use group::GROUP_CALLS_MAX;

/// A string field of an event that `log` and `dump` print whole: anything that came in on stdin
/// fits, so by default nothing is cut; `log --field-bytes-max` cuts shorter.
pub const LOG_FIELD_BYTES_DEFAULT: usize = crate::kernel::limits::STDIN_BYTES_MAX;
/// The shortest cut `log --field-bytes-max` takes: enough to recognise a value.
pub const LOG_FIELD_BYTES_MIN: usize = 16;
/// The dump format this build writes and reads.
pub const DUMP_VERSION: u64 = 1;
/// One line of a dump: an event's record as hex (two bytes per byte) and its rendering, with
/// room; a longer line is refused before it is parsed.
pub const DUMP_LINE_BYTES_MAX: usize = 8 * crate::kernel::limits::STDIN_BYTES_MAX;
/// Events between two progress reports of a dump.
pub(crate) const DUMP_PROGRESS_EVENTS: u64 = 10_000;

const _: () = assert!(LOG_FIELD_BYTES_MIN <= LOG_FIELD_BYTES_DEFAULT);
const _: () = assert!(
    DUMP_LINE_BYTES_MAX
        >= 2 * (crate::kernel::limits::EVENT_BYTES_MAX
            + crate::kernel::limits::STORED_RESULT_BYTES_MAX)
            + 2 * LOG_FIELD_BYTES_DEFAULT
);
