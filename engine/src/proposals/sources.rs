//! What upstream's scripts check in a hermit state directory before they trust its proposal
//! files: `proposal.ts create`'s template (`templates/PROPOSAL.md.template`, `ERROR|template-…`
//! with nothing written), and the two decision sources `heartbeat.ts alert-state` derives its
//! pending-decision alerts from (`deriveMicroPendingKeys`, `deriveProposalPendingKeys`), which
//! freeze those alerts when they cannot be read.
//!
//! Reads files only (under a held root); writes nothing and opens no store. Does not decide what
//! a verb does with the answer.

use std::path::Path;

use super::layout::{parse_queue, QUEUE_FILE, QUEUE_FILE_BYTES_MAX, STATE_DIR};
use super::props::{check_prop_file, CreateRefused, PROPOSALS_DIR, PROP_FILE_BYTES_MAX};
use crate::kernel::error::Result;
use crate::legacy::root::Root;

/// `proposal.ts create`'s template, under the state directory's `templates/`.
const TEMPLATE_DIR: &str = "templates";
/// The template file.
const TEMPLATE_FILE: &str = "PROPOSAL.md.template";
/// A template is a frontmatter block and a few headings; far above upstream's.
const TEMPLATE_BYTES_MAX: usize = 256 * 1024;

/// `proposal.ts create`'s template checks, in its order: `state-dir-not-found` when the state
/// directory does not exist, `template-missing` when `templates/PROPOSAL.md.template` cannot be
/// read, `template-malformed` when it does not open with `---` or has no closing `\n---`.
/// `None` when the template is usable (hookstate renders its own copy of upstream's template;
/// docs/decisions.md).
///
/// # Errors
/// An unsafe path (a symlinked component).
pub fn template_refused(dir: &Path) -> Result<Option<CreateRefused>> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(Some(CreateRefused("state-dir-not-found")));
    }
    let root = Root::open(dir, false)?;
    // Upstream's readFileSync fails on anything but a readable file: every failure is missing.
    let bytes = match root.subdir(TEMPLATE_DIR, false) {
        Ok(Some(templates)) => templates.read(TEMPLATE_FILE, TEMPLATE_BYTES_MAX).ok().flatten(),
        Ok(None) | Err(_) => None,
    };
    let Some(bytes) = bytes else {
        return Ok(Some(CreateRefused("template-missing")));
    };
    let text = String::from_utf8_lossy(&bytes);
    let closed = text.get(3..).is_some_and(|rest| rest.contains("\n---"));
    if !text.starts_with("---") || !closed {
        return Ok(Some(CreateRefused("template-malformed")));
    }
    Ok(None)
}

/// Which decision sources of a state directory `heartbeat.ts alert-state` could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourcesUnreadable {
    /// `state/micro-proposals.json` exists and does not read as a queue: upstream's detail
    /// (`micro-proposals.json is unparseable (…)`, `… has no \`pending\` array`).
    pub micro: Option<String>,
    /// A `proposals/PROP-*.md` file (or the directory's listing) could not be read.
    pub proposals: bool,
}

impl SourcesUnreadable {
    /// Whether any source is unreadable.
    #[must_use]
    pub fn any(&self) -> bool {
        self.micro.is_some() || self.proposals
    }
}

/// Reads the two decision sources of the state directory `dir` as `alert-state` does: a
/// missing queue file or `proposals/` is no failure (nothing pending); a queue file that does
/// not parse as the mirror reads it, or a PROP file that cannot be read as UTF-8 text, is.
///
/// # Errors
/// An unsafe path to the directory itself.
pub fn decision_sources_unreadable(dir: &Path) -> Result<SourcesUnreadable> {
    let root = Root::open(dir, false)?;
    let micro = match root.subdir(STATE_DIR, false) {
        Ok(None) => None,
        Ok(Some(state)) => match state.read(QUEUE_FILE, QUEUE_FILE_BYTES_MAX) {
            Ok(None) => None,
            Ok(Some(bytes)) => parse_queue(&bytes).err().map(|e| queue_detail(&bytes, &e)),
            Err(e) => Some(format!("{QUEUE_FILE} is unparseable ({e})")),
        },
        Err(e) => Some(format!("{QUEUE_FILE} is unparseable ({e})")),
    };
    Ok(SourcesUnreadable { micro, proposals: props_unreadable(&root) })
}

/// readMicroProposals' error: JSON that does not parse, or a top level without a `pending`
/// array; any other refusal of the mirror's reader is named in the first form.
fn queue_detail(bytes: &[u8], refused: &crate::kernel::error::Error) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Err(e) => format!("{QUEUE_FILE} is unparseable ({e})"),
        Ok(value) if !value.get("pending").is_some_and(serde_json::Value::is_array) => {
            format!("{QUEUE_FILE} has no `pending` array")
        }
        Ok(_) => format!("{QUEUE_FILE} is unparseable ({refused})"),
    }
}

fn props_unreadable(root: &Root) -> bool {
    let dir = match root.subdir(PROPOSALS_DIR, false) {
        Ok(Some(dir)) => dir,
        Ok(None) => return false,
        Err(_) => return true,
    };
    let Ok(names) = dir.list() else {
        return true;
    };
    names
        .iter()
        .filter(|n| n.starts_with("PROP-") && n.ends_with(".md") && check_prop_file(n).is_ok())
        .any(|name| match dir.read(name, PROP_FILE_BYTES_MAX) {
            // A file gone between the listing and the read is unambiguous, as upstream says.
            Ok(None) => false,
            Ok(Some(bytes)) => std::str::from_utf8(&bytes).is_err(),
            Err(_) => true,
        })
}
