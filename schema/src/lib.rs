//! hookstate-schema: the data hookstate persists and the bytes it persists them as.
//!
//! Events, view rows, ids and the on-disk record format live here, so that one crate owns every
//! promise made to old files. Does not do IO, read clocks, draw random numbers or touch redb.

pub mod alerts;
pub mod anchor_file;
pub mod event;
pub mod feedback;
pub mod format;
pub mod heartbeat;
pub mod hermit;
pub mod id;
pub mod observer;
pub mod proposals;
pub mod session;
pub mod signals;
pub mod upcast;
pub mod view;

pub use event::{Actor, Body, CoreEvent, Event, EventContent, BODY_VARIANTS};
pub use feedback::FeedbackEvent;
pub use format::{FormatError, Head, FORMAT_VERSION};
pub use id::{validate_id, validate_scope, IdError};
pub use view::{Item, ItemState, QueueMeta, ViewKey, ViewRow};
