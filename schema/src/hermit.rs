//! The scope of a claude-code-hermit state directory: `hermit:<abs state dir>`, shared by the
//! `proposals` and `alerts` domains, which both keep their records there.
//!
//! Pure naming: does not check that the directory exists or read anything in it.

/// The scope prefix of a hermit state directory.
pub const SCOPE_PREFIX: &str = "hermit:";

/// The scope of the hermit state directory `dir` (an absolute path).
#[must_use]
pub fn scope_of(dir: &str) -> String {
    format!("{SCOPE_PREFIX}{dir}")
}

/// The state directory a hermit scope names, when the scope is `hermit:<absolute path>`.
#[must_use]
pub fn dir_of(scope: &str) -> Option<&str> {
    scope.strip_prefix(SCOPE_PREFIX).filter(|dir| dir.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_names_its_absolute_directory_only() {
        assert_eq!(scope_of("/h/.claude-code-hermit"), "hermit:/h/.claude-code-hermit");
        assert_eq!(dir_of("hermit:/h"), Some("/h"));
        assert_eq!(dir_of("hermit:relative/h"), None);
        assert_eq!(dir_of("moonshine:/h"), None);
        assert_eq!(dir_of(&scope_of("/x")), Some("/x"));
    }
}
