//! The `proposals` domain (claude-code-hermit): the micro-proposal queue (`micro.rs`), PROP
//! proposals and their index (`props.rs`) and status moves (`moves.rs`), the ledger as a projection of the log
//! (`project.rs`), the handle `engine.proposals()` (`api.rs`), and the legacy layout
//! `hermit-proposals` with its mirror (`layout.rs`, merged by `merge.rs`), and the checks
//! upstream makes of the directory's template and decision sources (`sources.rs`), and
//! `state/state-summary.md`, the report upstream's create regenerates (`summary.rs`; it reads
//! the directory's alert files as files, never the alerts domain's rows).
//!
//! Every verdict line upstream's `proposal.ts` prints is in the result's `verdict` field.
//! Decisions are pure functions over the queue and PROP documents. Does not read other domains'
//! rows.

pub(crate) mod api;
pub(crate) mod layout;
pub(crate) mod merge;
pub(crate) mod metrics;
pub(crate) mod micro;
pub(crate) mod moves;
pub(crate) mod project;
pub(crate) mod props;
pub(crate) mod sources;
pub(crate) mod summary;

pub use api::{IndexRead, LedgerRead, ListRead, MetricsRead, Proposals, QueueRead, ResolveIdRead};
pub use layout::{read_hermit_files, HermitFiles};
pub use layout::{INDEX_FILE, LEDGER_FILE, QUEUE_FILE};
pub use micro::{parse_micro_input, MicroInput, ResolveInput};
pub use moves::{parse_patch_stdin, Move, MoveInput, PatchInput};
pub use props::{parse_create, CreateInput, CreateRefused};
pub use sources::{decision_sources_unreadable, template_refused, SourcesUnreadable};
pub(crate) use summary::regenerate as regenerate_summary;
