//! The one integration test binary: engine-level tests on real redb files in temporary
//! directories.

mod corpus;
mod model;
mod store;
