//! hookstate-engine: one store holding an append-only, blake3-chained event log and the views
//! projected from it, with the core primitives and one handle per domain.
//!
//! Start at [`Engine`]. This file is the table of contents: every module is private, and what
//! callers may use is the list below. Does not print, read arguments or exit; the `hookstate`
//! binary does.

pub mod alerts;
mod audit;
mod core;
mod engine;
pub mod feedback;
mod kernel;
mod legacy;
mod legacy_files;
pub mod observer;
pub mod proposals;
mod query;
pub mod session;
pub mod signals;
mod stdin;
mod store;

pub use crate::alerts::{
    check_budget, check_hash, check_liveness_wait, check_next_task, check_stamp, check_time,
    monitor_setup, parse_runtime_set, parse_tick_input, read_heartbeat_files, read_hermit_alerts,
    tick_line, tick_rejected, AlertFile, Alerts, BudgetInput, HeartbeatFiles, InjectionRead,
    LivenessRead, MonitorArgs, MonitorSetup, MonitorStatus, Rejection, TickInput, TickRejected,
    TokenRead,
};
pub use crate::audit::{RebuildReport, VerifyOptions, VerifyReport};
pub use crate::core::query::Query;
pub use crate::core::{Command, Expect};
pub use crate::engine::event_to_json;
pub use crate::engine::{Engine, Layout};
pub use crate::kernel::call::{Call, Conflict, Fingerprint, MirrorReport, Outcome, Refusal};
pub use crate::kernel::compat::js_trim;
pub use crate::kernel::error::{Error, Result};
pub use crate::kernel::limits;
pub use crate::kernel::value::validate_json;
#[cfg(feature = "testing")]
pub use crate::legacy::durable;
pub use crate::legacy_files::{parse_legacy, LegacyFile};
pub use crate::proposals::{
    parse_create, parse_micro_input, read_hermit_files, CreateInput, CreateRefused, HermitFiles,
    IndexRead, LedgerRead, ListRead, MicroInput, Move, MoveInput, PatchInput, Proposals, QueueRead,
    ResolveIdRead, ResolveInput,
};
pub use crate::query::{LogFilter, Stats};
pub use crate::stdin::{
    parse_findings, parse_hook_payload, parse_patch_stdin, parse_rows, parse_stop_payload,
    HookPayload,
};
#[cfg(feature = "testing")]
pub use crate::store::Backend;
pub use crate::store::{creation_is_atomic, OpenOptions};
pub use hookstate_schema as schema;

#[cfg(feature = "bugdrill")]
pub use crate::kernel::drill;
