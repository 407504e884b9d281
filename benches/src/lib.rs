//! hookstate-benches: bench binaries live in `benches/`; shared helpers here.
//!
//! Does not ship anything.
