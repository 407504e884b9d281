//! hookstate-engine: one store holding an append-only, blake3-chained event log and the views
//! projected from it, with the core primitives and one handle per domain.
//!
//! Start at [`Engine`]. This file is the table of contents: every module is private, and what
//! callers may use is the list below. Does not print, read arguments or exit; the `hookstate`
//! binary does.
//!
//! A plugin's work queue from its own code: push, claim with a lease and a fencing token, and
//! finish with the token; a second claimer meanwhile gets nothing, and a stale token is refused.
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use hookstate_engine::{Call, Command, Engine, OpenOptions, Query};
//! let dir = tempfile::tempdir()?;
//! let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default())?;
//! let call = Call::new("my-plugin");
//! let push = Command::QueuePush {
//!     queue: "todo".into(),
//!     item: "review-42".into(),
//!     payload: r#"{"pr":42}"#.into(),
//!     for_session: None,
//!     max_deliveries: hookstate_engine::limits::DELIVERIES_DEFAULT,
//! };
//! engine.execute(&call, &push)?;
//! let claim = |holder: &str| Command::QueueClaim {
//!     queue: "todo".into(),
//!     item: None,
//!     holder: holder.into(),
//!     lease_ms: 60_000,
//! };
//! let mine = engine.execute(&call, &claim("hook-a"))?;
//! assert_eq!(mine.result["item"], "review-42");
//! let token = mine.result["token"].as_u64().ok_or("a claim has a token")?;
//! // The lease holds: another hook finds nothing to claim.
//! assert_eq!(engine.execute(&call, &claim("hook-b"))?.result["claimed"], false);
//! // Only the claim's own token finishes the item.
//! let ack = |token| Command::QueueAck { queue: "todo".into(), item: "review-42".into(), token };
//! let stale = engine.execute(&call, &ack(token + 1))?;
//! assert_eq!(stale.refusal.map(|r| r.reason), Some("stale_token"));
//! assert!(engine.execute(&call, &ack(token))?.refusal.is_none());
//! let left = engine.query("my-plugin", &Query::QueueList { queue: "todo".into() }, call.now_ms)?;
//! assert_eq!((left["ready"].as_u64(), left["acked"].as_u64()), (Some(0), Some(1)));
//! // Every change is an event of one hash-chained log, and the views equal its replay.
//! assert_eq!(engine.ops().verify(Default::default())?.head, engine.head()?);
//! # Ok(())
//! # }
//! ```
//! From another language, the same calls go through `hookstate serve`'s socket
//! (`docs/protocol.md`) or the `hookstate` binary.

mod alerts;
mod audit;
mod copy;
mod core;
mod dropin;
mod engine;
mod feedback;
mod kernel;
mod legacy;
mod observer;
mod ops;
mod proposals;
mod query;
mod serve;
mod session;
mod signals;
mod store;

// Claude-code-hermit heartbeat state: `engine.alerts()`.
pub use crate::alerts::{
    alert_state_read_failure, check_budget, check_hash, check_liveness_wait, check_next_task,
    check_stamp, check_time, monitor_command, monitor_setup, next_task_refused, parse_runtime_set,
    parse_tick_input, period_key, read_heartbeat_files, read_hermit_alerts, tick_line, AlertFile,
    Alerts, BudgetInput, HeartbeatConfig, HeartbeatFiles, InjectionRead, LivenessRead, MonitorArgs,
    MonitorSetup, MonitorStatus, Rejection, TickInput, TokenRead, ALERT_STATE_FILE,
    FILE_BYTES_MAX as HEARTBEAT_FILE_BYTES_MAX, LIVENESS_WAIT_MS_MAX, NEXT_TASK_FILE,
    STATE_FILES as HEARTBEAT_STATE_FILES,
};
// The moonshine inbox: `engine.feedback()`.
pub use crate::feedback::{
    check as check_feedback, check_comment_id, enabled as moonshine_enabled, moonshine_home,
    project_of, scope_for, ClaimAsk, Claimed, CommentView, DrainAsk, Drained, Exported, Feedback,
    ImportBatch, ImportProgress, Imported, ImportedProject, Input as FeedbackInput, Listing,
    MoonshineImport, Pass, ReplyVia, Stop, StopAsk, Tick, TickAsk, TickClaim, TickOff,
    COMMENTS_MAX, COMMENT_BYTES_MAX, HEARTBEAT_INTERVAL_S_DEFAULT, IMPORT_TXN_BYTES_MAX,
    IMPORT_TXN_EVENTS_MAX, INTERVAL_S_MAX, KILL_SWITCH_OFF, MODES, MOONSHINE_HOME_DEFAULT,
    REPLY_BYTES_MAX, STALE_DELIVERED_MS_DEFAULT, STALE_MS_MAX, TARGET_KINDS,
};
// Claude-management's observer: `engine.observer()`.
pub use crate::observer::{
    parse_findings, parse_rows, Finding, Observer, RowInput, SweepRead,
    STATE_FILE_DEFAULT as OBSERVER_FILE_DEFAULT,
};
// Claude-code-hermit proposals: `engine.proposals()`.
pub use crate::proposals::{
    decision_sources_unreadable, parse_create, parse_micro_input, parse_patch_stdin,
    read_hermit_files, template_refused, CreateInput, CreateRefused, HermitFiles, IndexRead,
    LedgerRead, ListRead, MetricsRead, MicroInput, Move, MoveInput, PatchInput, Proposals,
    QueueRead, ResolveIdRead, ResolveInput, SourcesUnreadable, INDEX_FILE, LEDGER_FILE, QUEUE_FILE,
};
// The drop-in's calls across the hermit domains (upstream's create, patch, alert-state).
pub use crate::dropin::{
    hermit_alert_state, hermit_create, hermit_patch, hermit_state_dir, hermit_summary, pin_refusal,
    Composed, PinEnv,
};
// Claude-code-hermit session state: `engine.session()`, and the `hermit-session` codec.
pub use crate::session::{
    conversation_reads_stdin, hermit_scope, kind_of as session_file_kind,
    parse_file as parse_session_file, path_of as session_file_path,
    render_file as render_session_file, scope_dir as hermit_dir, task_reads_stdin,
    Answer as SessionAnswer, CheckResult, Content as SessionContent, Exit as SessionExit,
    PauseInput, RuntimeWrite, Session, SessionFile, SignalAnswer, Stream as VerdictStream,
    Verdict as SessionVerdict, PAUSE_REASONS,
};
// Loopd's signals: `engine.signals()`.
pub use crate::audit::{panic_is_caught, RebuildReport, VerifyOptions, VerifyReport};
pub use crate::copy::CopyReport;
pub use crate::core::query::Query;
pub use crate::core::{Command, Expect};
#[cfg(any(test, feature = "testing"))]
pub use crate::engine::append_unchecked;
#[cfg(feature = "testing")]
pub use crate::engine::open_on_backend;
pub use crate::engine::{check, parse_legacy, Engine, Layout, LegacyFile, LegacyParse, Location};
pub use crate::engine::{event_to_json, render_event};
pub use crate::kernel::call::{
    now_ms, Call, Conflict, Fingerprint, MirrorReport, Outcome, Refusal,
};
pub use crate::kernel::compat::js_trim;
pub use crate::kernel::error::{Error, Result};
// Files with no name until they are whole (`O_TMPFILE`), for the CLI's `dump --to`.
pub use crate::kernel::fsio::{create_unnamed, link_unnamed};
pub use crate::kernel::limits;
pub use crate::kernel::value::validate_json;
pub use crate::kernel::walk::{check_name as check_legacy_file_name, check_source_dir};
#[cfg(feature = "testing")]
pub use crate::legacy::durable;
pub use crate::ops::checkpoint::{CheckpointReport, CompactReport};
// The operator's verbs: `engine.ops()`, and the three that take no shared engine.
pub use crate::ops::doctor::{DoctorFinding, DoctorOptions, Level};
pub use crate::ops::dump::{DumpReport, RestoreReport};
pub use crate::ops::metrics::{Metrics, QueueMetrics};
pub use crate::ops::{compact, doctor, restore, Ops};
pub use crate::ops::{
    DUMP_LINE_BYTES_MAX, DUMP_VERSION, GROUP_CALLS_MAX, LOG_FIELD_BYTES_DEFAULT,
    LOG_FIELD_BYTES_MIN,
};
pub use crate::signals::{
    bundle_scope, is_bundle_root, lexical_join, resolve_bundle, turn_line, Signals, TurnInput,
    STORE_FILE_DEFAULT as LOOPD_FILE_DEFAULT,
};

pub use crate::kernel::hook::{parse_hook_payload, parse_stop_payload, HookPayload, StopPayload};
pub use crate::query::{LogFilter, Stats};
// `hookstate serve`: the socket protocol, the server and its client.
pub use crate::serve::{
    decode_request, encode as encode_frame, read_frame, serve, socket_path, write_frame, Answer,
    Client, ClientFrame, ErrorCode, FrameError, Handler, Job, Prepared, Reply, Run, ServeOptions,
    ServeReport, ServerFrame, Serving, Stats as ServeStats, StdinSource, ARGS_BYTES_MAX,
    ARGS_COUNT_MAX, BATCH_BYTES_MAX, BATCH_CALLS_MAX, CONNECTIONS_MAX, CONNECTION_IDLE_MS,
    ENV_COUNT_MAX, HELLO_WAIT_MS, LINGER_US_MAX, PROTOCOL_VERSION,
    REPLY_BYTES_MAX as SERVE_REPLY_BYTES_MAX, REQUEST_BYTES_MAX, REQUEST_READ_MS, STDIN_WAIT_MS,
};
#[cfg(feature = "testing")]
pub use crate::store::Backend;
pub use crate::store::{creation_is_atomic, remote_address, OpenOptions};
pub use hookstate_schema as schema;

#[cfg(feature = "bugdrill")]
pub use crate::kernel::drill;

#[cfg(test)]
mod tests;
