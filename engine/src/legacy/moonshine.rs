//! Import and export of moonshine `.feedback/` directories.
//!
//! Does not decide inbox rules.
