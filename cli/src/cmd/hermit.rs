//! What the hermit verbs (`proposals`, `alerts`) share: the scope of the state directory they
//! act on.
//!
//! Does not read the directory; the engine does.

use std::path::Path;

use hookstate_engine::schema::hermit::{dir_of, scope_of};

use crate::args::Cli;
use crate::exit::CliError;

/// The scope of the hermit state directory: `--dir` (made absolute, symlinks resolved when it
/// exists), else `--scope hermit:<abs dir>`.
pub(crate) fn hermit_scope(cli: &Cli, dir: Option<&Path>) -> Result<String, CliError> {
    if let Some(dir) = dir {
        let abs = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .map_err(|source| CliError::Io { op: format!("resolve {}", dir.display()), source })?;
        let text = abs
            .to_str()
            .ok_or_else(|| CliError::Invalid(format!("{} is not UTF-8", abs.display())))?;
        return Ok(scope_of(text));
    }
    match dir_of(&cli.scope) {
        Some(_) => Ok(cli.scope.clone()),
        None => Err(CliError::Usage(
            "hermit verbs need --dir DIR or --scope hermit:<abs state dir>".into(),
        )),
    }
}
