//! The engine's one error enum: what went wrong, named for what happened.
//!
//! Expected outcomes (a lost compare-and-swap, a stale token) are values, not errors. Does not
//! pick exit codes; the CLI maps each variant to one.

use std::path::PathBuf;

/// Why an engine call could not be done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input from outside broke a rule or a limit; nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// One encoded event is over the event limit; nothing was written.
    #[error("event is {len} bytes, limit is {max}")]
    EventTooLarge {
        /// The encoded size.
        len: usize,
        /// [`crate::kernel::limits::EVENT_BYTES_MAX`].
        max: usize,
    },
    /// A number from outside is outside its bounds; nothing was written.
    #[error("{what} of {value}{unit} is outside {min}..={max}")]
    OutOfRange {
        /// What the number is.
        what: &'static str,
        /// The number given.
        value: u64,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
        /// Its unit with a leading space (` ms`, ` s`), or empty.
        unit: &'static str,
    },
    /// A write was asked of a store opened only for reading.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The write transaction stayed taken by another process past the deadline.
    #[error("store is busy: another process held the write lock for {waited_ms} ms")]
    Busy {
        /// How long this call waited.
        waited_ms: u64,
    },
    /// There is no store at the path and this call does not create one.
    #[error("no store at {path}")]
    NoStore {
        /// The path looked at.
        path: PathBuf,
    },
    /// The path holds something that is not a hookstate store.
    #[error("not a hookstate store at {path}: {why}")]
    NotAStore {
        /// The path looked at.
        path: PathBuf,
        /// What was found.
        why: String,
    },
    /// The store's path or directory is unsafe to use (a symlink, or writable by others).
    #[error("unsafe store path {path}: {why}")]
    UnsafePath {
        /// The path looked at.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The store was written by a newer format.
    #[error("store format {found} is newer than this build ({supported})")]
    FormatTooNew {
        /// Version found.
        found: u16,
        /// Version this build understands.
        supported: u16,
    },
    /// The log does not verify: a bad link, hash, record or gap at `seq`.
    #[error("chain broken at seq {seq}: {why}")]
    ChainBroken {
        /// The first bad seq.
        seq: u64,
        /// What is wrong with it.
        why: String,
    },
    /// The anchor outside the store is ahead of or disagrees with the log (rollback, truncation
    /// or a swapped file).
    #[error("head anchor mismatch: {why}")]
    AnchorMismatch {
        /// What disagrees.
        why: String,
    },
    /// A stored view differs from the view rebuilt from the log.
    #[error("view {key} differs from a rebuild of the log")]
    ViewMismatch {
        /// The first differing key, printable.
        key: String,
    },
    /// Store bytes (meta, views) could not be decoded.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The storage reported a damaged file.
    #[error("damaged store file")]
    StoreCorrupt(#[source] Cause),
    /// The storage reported an IO failure.
    #[error("store IO failed")]
    StoreIo(#[source] Cause),
    /// Any other storage failure.
    #[error("storage failure")]
    Store(#[source] Cause),
    /// A file-system call failed.
    #[error("{op} {path}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A mirrored legacy file was changed outside at a key the store also changed since the
    /// mirror last wrote it; nothing was adopted.
    #[error(
        "mirror {path} changed key {key:?}, which the store changed after the last mirror \
             write; export or import to settle it"
    )]
    MirrorConflict {
        /// The mirrored file.
        path: PathBuf,
        /// The first conflicting key.
        key: String,
    },
    /// A commit failed earlier in this process; the engine refuses further writes until reopened.
    #[error("engine refused the write: an earlier commit failed")]
    Poisoned,
}

/// The storage's own error, kept as the cause.
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync>;

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }
}

impl From<hookstate_schema::IdError> for Error {
    fn from(err: hookstate_schema::IdError) -> Self {
        Error::Invalid(err.to_string())
    }
}
