//! The moonshine mirror against a direct writer racing a mirrored call: a file the web (or a
//! session) writes between the adoption and the end of the call is kept, never overwritten with
//! the store's older copy, and adopted by the next call.
//!
//! Does not start processes; `cli/tests/feedback.rs` drives the mirror through the binary.

use std::path::{Path, PathBuf};

use hookstate_engine::MoonshineImport;
use hookstate_engine::{Call, Engine, Layout};
use hookstate_testkit::copy_dir;

const FIXTURE_HOME: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/moonshine/home/.agent/moonshine");
const PROJECT: &str = "gradient-descent";
/// 2026-11-29T21:50:52Z, when the real fixtures were written.
const FIXTURE_NOW_MS: u64 = 1_795_989_052_000;

fn call(now_ms: u64) -> Call {
    Call::at(format!("moonshine:{PROJECT}"), now_ms)
}

/// The end of a mirrored feedback call writes a file only over the bytes the call adopted: the
/// web dismissing a comment while a control verb runs keeps its dismissal in the file, and the
/// next call adopts it.
#[test]
fn a_mirror_never_overwrites_a_comment_file_changed_during_the_call() {
    let tmp = tempfile::tempdir().unwrap();
    let home: PathBuf = tmp.path().join("home");
    copy_dir(Path::new(FIXTURE_HOME), &home);
    let engine = Engine::open(
        &hookstate_testkit::store(&tmp.path().join("s.redb")),
        hookstate_testkit::options(),
    )
    .unwrap();
    let import = MoonshineImport::read(&home, Some(PROJECT)).unwrap();
    let imported = engine.feedback().import(&call(FIXTURE_NOW_MS), import).unwrap();
    assert!(imported.refusal.is_none());
    let file = home.join(PROJECT).join(".feedback/fb_mii0k1q2_4x8c2d.json");
    let cycle = |now: u64, mode: &str, during: &dyn Fn()| {
        let outcome = engine
            .mirrored(&call(now), &Layout::Moonshine, &home, |engine| {
                let out = engine.feedback().control(&call(now), mode, None);
                during();
                out
            })
            .unwrap();
        outcome.mirror.unwrap()
    };
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"status\": \"delivered\""), "{text}");
    let theirs = text.replace("\"status\": \"delivered\"", "\"status\": \"dismissed\"");
    let report =
        cycle(FIXTURE_NOW_MS + 1000, "paused", &|| std::fs::write(&file, &theirs).unwrap());
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), theirs, "the direct write survives");
    let control = std::fs::read_to_string(home.join(PROJECT).join(".feedback/control.json"));
    assert!(control.unwrap().contains("paused"), "the verb's own file is written");
    cycle(FIXTURE_NOW_MS + 2000, "listen", &|| {});
    let shown = engine.feedback().show(&call(0).scope, "fb_mii0k1q2_4x8c2d").unwrap();
    assert_eq!(shown.record["status"], "dismissed", "adopted by the next call: {shown:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), theirs);
    engine.ops().verify(Default::default()).unwrap();
}
