//! Fuzz corpus replay (filled in by the fuzz work).
