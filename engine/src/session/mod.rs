//! The `session` domain: claude-code-hermit's session state (legacy-layout §2.4–2.7, §2.9,
//! §2.10): the `runtime.json` lifecycle, task records and their turn binding, conversation
//! bindings, observations, `later.ts` hypotheses, the small markers, `SHELL.md` and the session
//! reports.
//!
//! `rules` holds the decisions (pure: documents and time in, events and upstream's verdict out),
//! `layout` the legacy codec (bytes to documents and back, byte for byte), `stamp` the timestamp
//! spellings both need. Does not read or write the store or files, nor read a clock; the engine's
//! write path (wired in phase 2 of issue 16) does.

pub mod layout;
pub mod rules;
pub mod stamp;

/// The shared upstream-compat helpers the domain stands on, named once, so that moving them
/// (the engine redesign puts them in `kernel::compat`, with stamps that can replace [`stamp`])
/// repoints one place.
pub(crate) mod compat {
    pub(crate) use crate::legacy::js;
    pub(crate) use crate::legacy::json;
    pub(crate) use crate::stdin::{is_js_whitespace, js_trim};
}
