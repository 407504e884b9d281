//! The build is for the CPU that builds it (`.cargo/config.toml`: `-C target-cpu=native` on
//! x86_64), so no process of a hook probes the CPU's features at run time (docs/decisions.md).
//! Fails when the setting is lost: the CPU has a feature this build was not compiled for. A build
//! given its own `RUSTFLAGS` (a portable binary, a sanitizer) chose otherwise and is not checked.

/// Variables through which a build gets flags that replace the config's.
const OVERRIDES: [&str; 3] = ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"];

#[cfg(target_arch = "x86_64")]
#[test]
fn the_build_has_every_vector_feature_of_this_cpu() {
    if OVERRIDES.iter().any(|v| std::env::var_os(v).is_some_and(|f| !f.is_empty())) {
        return;
    }
    // What std, blake3 and redb's xxh3 would otherwise detect with `cpuid` in every process.
    let missing: Vec<&str> = [
        ("sse4.1", std::arch::is_x86_feature_detected!("sse4.1"), cfg!(target_feature = "sse4.1")),
        ("avx2", std::arch::is_x86_feature_detected!("avx2"), cfg!(target_feature = "avx2")),
        (
            "avx512f",
            std::arch::is_x86_feature_detected!("avx512f"),
            cfg!(target_feature = "avx512f"),
        ),
        (
            "avx512vl",
            std::arch::is_x86_feature_detected!("avx512vl"),
            cfg!(target_feature = "avx512vl"),
        ),
    ]
    .into_iter()
    .filter(|(_, cpu_has, built_for)| *cpu_has && !*built_for)
    .map(|(name, _, _)| name)
    .collect();
    assert!(
        missing.is_empty(),
        "this CPU has {missing:?} but the build was not compiled for it: \
         .cargo/config.toml's target-cpu=native is not in effect"
    );
}
