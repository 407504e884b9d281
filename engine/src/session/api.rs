//! The session domain's handle, `engine.session()`.

use crate::kernel::write::Kernel;

/// claude-code-hermit's session state on an open store: `engine.session()`.
#[derive(Clone, Copy)]
pub struct Session<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Session<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Session { k }
    }
}
