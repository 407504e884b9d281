//! The mirror layout.
