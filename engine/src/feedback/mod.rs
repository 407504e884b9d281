//! The `feedback` domain: the moonshine authorship-feedback inbox of one project per scope
//! (`moonshine:<project>`), with comments, claims with fencing tokens, replies, dismissals, the
//! control mode, address requests, the heartbeat and the adapter manifest as events.
//!
//! Inputs are checked before a store is opened (`input.rs`); decisions are pure functions over
//! the project's rows (`rules.rs`); what a mirror adopts from outside writers is decided by the
//! same rules (`outside.rs`). Does not touch legacy files
//! outside `layout.rs`.

pub(crate) mod api;
pub(crate) mod hook;
pub(crate) mod index;
pub(crate) mod input;
pub(crate) mod layout;
pub(crate) mod outside;
pub(crate) mod project;
pub(crate) mod rules;

pub use api::{CommentView, Feedback, Listing, Stop, StopAsk, Tick, TickAsk, TickClaim, TickOff};
pub use hook::ReplyVia;
pub use input::{check, check_comment_id, enabled, moonshine_home, project_of, scope_for};
pub use input::{ClaimAsk, DrainAsk, Input, KILL_SWITCH_OFF, MOONSHINE_HOME_DEFAULT};
pub use layout::{
    Exported, ImportBatch, ImportProgress, Imported, ImportedProject, MoonshineImport,
};
pub use layout::{IMPORT_TXN_BYTES_MAX, IMPORT_TXN_EVENTS_MAX};
pub use rules::{Claimed, Drained, Pass};
pub use rules::{COMMENTS_MAX, COMMENT_BYTES_MAX, HEARTBEAT_INTERVAL_S_DEFAULT, INTERVAL_S_MAX};
pub use rules::{MODES, REPLY_BYTES_MAX, STALE_DELIVERED_MS_DEFAULT, STALE_MS_MAX, TARGET_KINDS};
