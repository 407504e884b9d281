//! The `session` domain: claude-code-hermit's session state (legacy-layout §2.4–2.7, §2.9,
//! §2.10): the `runtime.json` lifecycle, task records and their turn binding, conversation
//! bindings, observations, `later.ts` hypotheses, the small markers, `SHELL.md` and the session
//! reports, for one hermit per scope (`hermit:<abs state dir>`).
//!
//! `rules` holds the decisions (pure: documents and time in, events and upstream's verdict out),
//! `api` the handle (`engine.session()`) that runs each verb as one decision in one write
//! transaction, `project` the projection of the domain's events onto its rows, `layout` the
//! `hermit-session` codec and its mirror layout. The contract of every verb is docs/session.md.

pub mod api;
pub mod layout;
pub(crate) mod project;
pub mod rules;

pub use api::Session;
