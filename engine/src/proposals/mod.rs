//! The `proposals` domain (claude-code-hermit): the micro-proposal queue ([`micro`]), PROP
//! proposals and their index ([`props`]), the ledger as a projection of the log, and the legacy
//! layout `hermit-proposals` ([`layout`]).
//!
//! Every verdict line upstream's `proposal.ts` prints is in the result's `verdict` field.
//! Decisions are pure functions over the queue and PROP documents. Does not read other domains'
//! rows.

pub mod layout;
pub mod micro;
pub mod project;
pub mod props;

use crate::kernel::write::Kernel;

pub use micro::{
    hermit_scope, mp_date, parse_micro_input, render_on_resolve, resolve_answer, AnswerError,
    MicroInput, ResolveInput, SCOPE_PREFIX,
};
pub use props::{parse_create, slugify, CreateInput, Move, MoveInput, PatchInput};

/// claude-code-hermit's proposals on an open store: `engine.proposals()`.
#[derive(Clone, Copy)]
pub struct Proposals<'a> {
    k: &'a Kernel,
}

impl<'a> Proposals<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Proposals { k }
    }
}
