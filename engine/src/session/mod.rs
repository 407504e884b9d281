//! The `session` domain: claude-code-hermit's session state (legacy-layout §2.4–2.7, §2.9,
//! §2.10): the `runtime.json` lifecycle, task records and their turn binding, conversation
//! bindings, observations, `later.ts` hypotheses, the small markers, `SHELL.md` and the session
//! reports, for one hermit per scope (`hermit:<abs state dir>`).
//!
//! `rules` holds the decisions (pure: documents and time in, events and upstream's verdict out),
//! `api` the handle (`engine.session()`) that runs each verb as one decision in one write
//! transaction, `project` the projection of the domain's events onto its rows, `layout` the
//! `hermit-session` codec and its mirror layout. The contract of every verb is docs/session.md.

pub(crate) mod api;
mod api_archive;
mod api_ledgers;
mod api_signal;
mod api_tasks;
#[cfg(test)]
mod fixture_tests;
pub(crate) mod layout;
pub(crate) mod project;
pub(crate) mod rules;
pub(crate) mod views;

pub use api::{hermit_scope, scope_dir, Answer, Exit, Session};
pub use api_archive::{PauseInput, PAUSE_REASONS};
pub use api_ledgers::{CheckResult, RuntimeWrite};
pub use api_tasks::{conversation_reads_stdin, task_reads_stdin};
pub use layout::files::{kind_of, path_of, Content, SessionFile};
pub use layout::files::{parse as parse_file, render as render_file};
pub use rules::signal::SignalAnswer;
pub use rules::verdict::{Stream, Verdict};
