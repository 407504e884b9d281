//! The one exit-code table: each error's code, and the table printed by `--help` and the README.
//!
//! Does not print; `main` does.

use hookstate_engine::Error as EngineError;

/// Done.
pub(crate) const OK: u8 = 0;
/// Refused: CAS lost, item held by another, illegal move, stale token, the store's state.
pub(crate) const CONFLICT: u8 = 1;
/// Usage error: bad arguments. sysexits' `EX_USAGE`, never 2: Claude Code reads a hook's exit 2 as
/// "block the tool call or the stop and feed stderr to the model".
pub(crate) const USAGE: u8 = 64;
/// Invalid input: schema, limit, bad id.
pub(crate) const INVALID: u8 = 3;
/// Busy: the store stayed locked past `--wait-ms`.
pub(crate) const BUSY: u8 = 4;
/// Corrupt: chain broken, undecodable record, unknown format, damaged file or row, an anchor
/// that disagrees with the log, internal error.
pub(crate) const CORRUPT: u8 = 5;
/// IO: disk, permission, space, no store, unsafe path.
pub(crate) const IO: u8 = 6;

/// Whether `code` is one of the table's codes.
pub(crate) fn is_documented(code: u8) -> bool {
    [OK, CONFLICT, INVALID, BUSY, CORRUPT, IO, USAGE].contains(&code)
}

/// The table as `--help` prints it.
pub(crate) const TABLE: &str = "\
Exit codes:
  code name      meaning                                            a hook script should
  0    OK        done                                               continue
  1    CONFLICT  refused: CAS lost, held by another, stale token,   skip or retry later
                 or the store's state (compact before a checkpoint,
                 dump of a compacted log)
  3    INVALID   input rejected: schema, limit, bad id, bad stdin   fix the caller
  4    BUSY      store still locked after --wait-ms                 retry
  5    CORRUPT   chain broken, undecodable record, unknown format,  stop; run `hookstate verify`
                 damaged file or row, a head anchor that disagrees
                 with the log (writes refused), or an internal error
  6    IO        disk, permission, space, unsafe path, no store     stop
                 (to verify, rebuild or export; reads see an empty one)
  64   USAGE     bad arguments (sysexits EX_USAGE)                  fix the call
hookstate never exits 2, which Claude Code reads as a blocking error (the tool call or the stop
is refused and stderr goes to the model). Every code above but 0 is a non-blocking error for
Claude Code: it shows stderr to the user and carries on. A hook verb blocks only through its
JSON output ({\"decision\":\"block\",...}) when that is its job.
With --format verdict (the proposals and alerts verbs), every error but a usage error exits 1,
as upstream's scripts do.";

/// Why the CLI could not finish a call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Arguments were wrong in a way clap does not see.
    #[error("{0}")]
    Usage(String),
    /// Stdin or an argument value was invalid.
    #[error("{0}")]
    Invalid(String),
    /// A definite refusal; the result was already printed on stdout.
    #[error("refused: {0}")]
    Refused(String),
    /// A check failed (verify, demo): the report was already printed.
    #[error("{0}")]
    Failed(String),
    /// The verdict was printed as upstream prints it (its stderr line included): exit with this
    /// code and print nothing more.
    #[error("exit {0}")]
    Quiet(u8),
    /// Writing output or running a child failed.
    #[error("{op}: {source}")]
    Io {
        /// What was attempted.
        op: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The exit code for an error.
pub(crate) fn code_for(err: &CliError) -> u8 {
    match err {
        CliError::Engine(err) => engine_code(err),
        CliError::Usage(_) => USAGE,
        CliError::Invalid(_) => INVALID,
        CliError::Refused(_) => CONFLICT,
        CliError::Failed(_) => CORRUPT,
        CliError::Quiet(code) => *code,
        CliError::Io { .. } => IO,
    }
}

fn engine_code(err: &EngineError) -> u8 {
    match err {
        EngineError::Invalid(_)
        | EngineError::EventTooLarge { .. }
        | EngineError::OutOfRange { .. }
        | EngineError::TooLarge { .. }
        | EngineError::TooMany { .. }
        | EngineError::Empty { .. }
        | EngineError::NotOneOf { .. }
        | EngineError::BadInput { .. }
        | EngineError::LegacyFile { .. }
        | EngineError::BadTimeZone { .. }
        | EngineError::TimeOutOfRange { .. }
        | EngineError::NotFound { .. }
        | EngineError::Upstream { .. }
        | EngineError::BadId(_)
        | EngineError::IdemKeyReused { .. } => INVALID,
        EngineError::Refused { .. } => CONFLICT,
        EngineError::Busy { .. }
        | EngineError::ServerRunning { .. }
        | EngineError::TxnConflict(_) => BUSY,
        EngineError::NotAStore { .. }
        | EngineError::FormatTooNew { .. }
        | EngineError::SchemaTooNew { .. }
        | EngineError::SchemaUpgradeRequired { .. }
        | EngineError::ChainBroken { .. }
        | EngineError::AnchorMismatch { .. }
        | EngineError::AnchorMissing { .. }
        | EngineError::UpgradeRequired { .. }
        | EngineError::ViewMismatch { .. }
        | EngineError::Corrupt(_)
        | EngineError::StoreCorrupt(_) => CORRUPT,
        EngineError::NoStore { .. }
        | EngineError::NoDirectory { .. }
        | EngineError::UnsafePath { .. }
        | EngineError::StoreIo(_)
        | EngineError::StoreReplaced { .. }
        | EngineError::Store(_)
        | EngineError::Io { .. }
        | EngineError::Poisoned
        | EngineError::ReadOnly => IO,
    }
}
