//! The session projection.
