//! Links the `hookstate` binary as a position-dependent executable on Linux: a PIE binary of this
//! size carries about 41,000 relative relocations, which the dynamic loader applies on every
//! start, faulting in and copying some 500 pages (2.5 ms of a 3.5 ms call). The code stays
//! position-independent; only the final link fixes its address (docs/decisions.md, "Costs that
//! grow with the work").

fn main() {
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let sanitized = std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("sanitizer"));
    if linux && !sanitized {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
