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
    /// A value from outside is over its size limit; nothing was written.
    #[error("{what} is {len} bytes, limit is {max}")]
    TooLarge {
        /// What the value is (`stdin`, `comment`, a file's path).
        what: String,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More items than a bound allows; nothing was written.
    #[error("{what}: {count} of at most {max}")]
    TooMany {
        /// What is counted (`rows`, `comments in the project`).
        what: &'static str,
        /// How many there are or would be.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A value that must hold something is empty; nothing was written.
    #[error("{what} is empty")]
    Empty {
        /// What is empty.
        what: String,
    },
    /// A value outside its fixed set; nothing was written.
    #[error("{what} {value:?} is not one of {}", .allowed.join(", "))]
    NotOneOf {
        /// What the value is.
        what: &'static str,
        /// The value given.
        value: String,
        /// The values allowed.
        allowed: &'static [&'static str],
    },
    /// Input from outside that does not parse or breaks a shape rule; nothing was written.
    #[error("{what} {why}")]
    BadInput {
        /// What was read (`stdin`, `target`, `row`).
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store's state refuses the operation, whatever the input (a compaction before any
    /// checkpoint or within `--keep`, a dump or an as-of read of a compacted log): nothing was
    /// written; the same call may pass once the state changes. The class the CLI exits 1 for.
    #[error("{what} {why}")]
    Refused {
        /// The operation refused (`compact`, `dump`).
        what: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A legacy file that does not parse or breaks its layout's rules; nothing was changed.
    #[error("legacy file {file}: {why}")]
    LegacyFile {
        /// The file (its path or name).
        file: String,
        /// What is wrong with it.
        why: String,
    },
    /// A time zone name that is not an IANA zone; nothing was written.
    #[error("time zone {zone:?} is not an IANA zone name")]
    BadTimeZone {
        /// The name given.
        zone: String,
    },
    /// A time beyond what the stamps can spell; nothing was written.
    #[error("time {ms} ms is out of range")]
    TimeOutOfRange {
        /// The time given, in UTC ms.
        ms: u64,
    },
    /// The named record does not exist (for verbs where that is an error, not a refusal).
    #[error("no {what} {id}")]
    NotFound {
        /// What was looked for.
        what: &'static str,
        /// Its id, and where it was looked for.
        id: String,
    },
    /// Input an upstream script refuses, with that script's own message, kept verbatim because
    /// callers match it (`Error: "question" is required`); nothing was written.
    #[error("{message}")]
    Upstream {
        /// Upstream's message.
        message: String,
    },
    /// An id broke the id rules; nothing was written.
    #[error(transparent)]
    BadId(#[from] hookstate_schema::IdError),
    /// A write was asked of a store opened only for reading.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The write transaction stayed taken by another process past the deadline.
    #[error("store is busy: another process held the write lock for {waited_ms} ms")]
    Busy {
        /// How long this call waited.
        waited_ms: u64,
    },
    /// A database server aborted the write transaction for a serialization failure or a deadlock;
    /// the write path retries it ([`crate::limits::TXN_ATTEMPTS_MAX`] attempts), then reports
    /// [`Error::Busy`].
    #[error("the database aborted the transaction for a conflict with another writer")]
    TxnConflict(#[source] Cause),
    /// The database's tables were made by a newer build (a PostgreSQL store).
    #[error("the store's schema version {found} is newer than this build's ({supported})")]
    SchemaTooNew {
        /// Version found.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// The database's tables were made by an older build; `hookstate init` upgrades them.
    #[error(
        "the store's schema version {found} is older than this build's ({supported}): run \
         `hookstate init` once to upgrade the tables"
    )]
    SchemaUpgradeRequired {
        /// Version found.
        found: u32,
        /// Version this build writes.
        supported: u32,
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
    /// A path the call would use (the store's, its directory, a mirror's or an import's) is
    /// unsafe to use: a symlink, or writable by others.
    #[error("unsafe path {path}: {why}")]
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
    /// The store holds events but its anchor file is absent: a rollback or a swapped file cannot
    /// be ruled out, so writes are refused until an operator re-anchors it.
    #[error(
        "head anchor missing: {path} is absent but the store holds {seq} events, so a rollback \
         cannot be ruled out; once the store is trusted run `hookstate verify \
         --accept-missing-anchor`"
    )]
    AnchorMissing {
        /// Where the anchor should be.
        path: PathBuf,
        /// The log's head seq.
        seq: u64,
    },
    /// An idempotency key was used again for another request: nothing was done.
    #[error(
        "idempotency key {key:?} was first used for `{verb}` with other arguments or stdin; a \
         key names one request, use a new key"
    )]
    IdemKeyReused {
        /// The key.
        key: String,
        /// The verb of the first request.
        verb: String,
    },
    /// The store was written by an older format that this build reads only to upgrade it.
    #[error(
        "store format {found} is older than this build's ({supported}): run `hookstate rebuild` \
         once to upgrade it (it recomputes the views from the log; the log is unchanged)"
    )]
    UpgradeRequired {
        /// Version found.
        found: u16,
        /// Version this build writes.
        supported: u16,
    },
    /// A directory named by the caller (an import's source, a mirror) does not exist.
    #[error("no directory at {path}")]
    NoDirectory {
        /// The path looked at.
        path: PathBuf,
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
    /// The store file was replaced or removed while this handle held it open (a restore or a
    /// backup moved over it): nothing was committed to the old file.
    #[error(
        "the store file {path} was replaced or removed while this process held it open; nothing \
         was written to the old file"
    )]
    StoreReplaced {
        /// The store's path.
        path: PathBuf,
    },
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
    /// A commit failed earlier in this process; the engine refuses further writes until reopened.
    #[error("engine refused the write: an earlier commit failed")]
    Poisoned,
    /// Another `hookstate serve` holds the store's server lock.
    #[error("another server already serves {db}{}", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    ServerRunning {
        /// The store.
        db: PathBuf,
        /// The holder's process id, as its lock file says.
        pid: Option<u32>,
    },
}

/// The storage's own error, kept as the cause.
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync>;

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is bad input from outside (a rule or a limit broken, nothing written): the
    /// class the CLI exits 3 for.
    #[must_use]
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            Error::Invalid(_)
                | Error::EventTooLarge { .. }
                | Error::OutOfRange { .. }
                | Error::TooLarge { .. }
                | Error::TooMany { .. }
                | Error::Empty { .. }
                | Error::NotOneOf { .. }
                | Error::BadInput { .. }
                | Error::LegacyFile { .. }
                | Error::BadTimeZone { .. }
                | Error::TimeOutOfRange { .. }
                | Error::NotFound { .. }
                | Error::Upstream { .. }
                | Error::BadId(_)
                | Error::IdemKeyReused { .. }
        )
    }

    pub(crate) fn bad(what: impl Into<String>, why: impl Into<String>) -> Self {
        Error::BadInput { what: what.into(), why: why.into() }
    }

    pub(crate) fn refused(what: impl Into<String>, why: impl Into<String>) -> Self {
        Error::Refused { what: what.into(), why: why.into() }
    }

    pub(crate) fn upstream(message: impl Into<String>) -> Self {
        Error::Upstream { message: message.into() }
    }

    pub(crate) fn legacy(file: impl Into<String>, why: impl Into<String>) -> Self {
        Error::LegacyFile { file: file.into(), why: why.into() }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }
}
