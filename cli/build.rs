//! Links the `hookstate` binary for a cheap start on Linux with glibc:
//! - as a position-dependent executable: a PIE binary of this size carries about 41,000 relative
//!   relocations, which the dynamic loader applies on every start, faulting in and copying some
//!   500 pages (2.5 ms of a 3.5 ms call). The code stays position-independent; only the final
//!   link fixes its address;
//! - with gcc's unwinder linked in statically (`libgcc_eh.a`, as a `crt-static` build does),
//!   ahead of the `-lgcc_s` the standard library asks for, which `--as-needed` then drops: loading
//!   `libgcc_s.so.1` runs its constructor `__cpu_indicator_init`, whose `cpuid` instructions cost
//!   about 0.18 ms a process on a VM where each one traps (7.8 µs). Without the archive (another
//!   compiler, another libc) the binary links `libgcc_s` as before.
//!
//! docs/decisions.md, "Costs that grow with the work".

use std::process::Command;

fn main() {
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let gnu = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    let sanitized = std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("sanitizer"));
    if linux && !sanitized {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    if linux && gnu && !sanitized {
        if let Some(dir) = static_unwinder_dir() {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// The directory of the C compiler's `libgcc_eh.a`, when it has one.
fn static_unwinder_dir() -> Option<String> {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(compiler).arg("-print-file-name=libgcc_eh.a").output().ok()?;
    let path = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // An unknown file comes back as the bare name.
    if !out.status.success() || !path.is_absolute() || !path.is_file() {
        return None;
    }
    Some(path.parent()?.to_str()?.to_owned())
}
