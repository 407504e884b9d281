//! Import and export.
