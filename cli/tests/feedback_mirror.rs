//! The moonshine mirror against the web dev server writing the inbox while hookstate runs:
//! issue 11's moonshine loss (a dismiss from a read taken before a mirrored claim made every
//! later mirrored call of the project exit 1, so new comments and dismissals never reached the
//! store), pinned step by step and under a live, lock-less web writer racing mirrored calls.
//!
//! Does not call the engine in-process; the web writer is a thread writing files as the web's
//! endpoints do (read, change, temp file, rename).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::{Run, Store};

const PROJECT: &str = "essay";

/// A directory beside the store's (the store directory's snapshot must hold only the store).
fn home(store: &Store) -> PathBuf {
    let dir = store.dir.path().with_extension("home");
    std::fs::create_dir_all(dir.join(PROJECT).join(".feedback")).unwrap();
    dir
}

fn inbox(home: &Path) -> PathBuf {
    home.join(PROJECT).join(".feedback")
}

/// A comment as the web's `POST /__moonshine/feedback` writes it.
fn web_comment(id: &str) -> String {
    format!(
        "{{\n  \"id\": \"{id}\",\n  \"ts\": \"2026-11-29T22:00:00.000Z\",\n  \"project\": \
         \"{PROJECT}\",\n  \"status\": \"pending\",\n  \"target\": {{\n    \"kind\": \
         \"block\",\n    \"path\": \"a.md\"\n  }},\n  \"comment\": \"Say why.\",\n  \"reply\": \
         null,\n  \"deliveredAt\": null,\n  \"addressedAt\": null\n}}\n"
    )
}

/// What the web's dismiss endpoint writes back: the record it read, with `status` dismissed.
fn dismissed(read: &str) -> Option<String> {
    let mut record: serde_json::Map<String, Value> = serde_json::from_str(read).ok()?;
    let status = record.get("status")?.as_str()?;
    if status != "pending" && status != "delivered" {
        return None;
    }
    record.insert("status".into(), "dismissed".into());
    Some(serde_json::to_string_pretty(&record).ok()? + "\n")
}

/// Writes `name` as the web does: a temp file, then a rename over the name.
fn web_write(dir: &Path, name: &str, text: &str) {
    let temp = dir.join(format!("{name}.moonshine-tmp"));
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, dir.join(name)).unwrap();
}

fn mirrored(store: &Store, home: &Path, args: &[&str]) -> Run {
    let home = home.to_str().unwrap();
    let mut all = vec!["--mirror", home, "feedback", "--project", PROJECT];
    all.extend_from_slice(args);
    store.run(&all)
}

fn status(store: &Store, id: &str) -> Value {
    let shown = store.run(&["feedback", "--project", PROJECT, "show", id]).expect(0).json();
    shown["record"]["status"].clone()
}

/// Issue 11's moonshine loss: the web's dismiss written from a read taken before a mirrored
/// claim (a legal move, delivered → dismissed) was refused as `mirror_conflict`, and from then
/// on every mirrored call of the project exited 1. The dismiss is adopted (the store keeps the
/// claim's `deliveredAt`, which the web's stale read did not hold) and every later call runs.
#[test]
fn a_web_dismiss_from_a_read_before_a_mirrored_claim_is_adopted_and_blocks_nothing() {
    let store = Store::new();
    let home = home(&store);
    let dir = inbox(&home);
    let web = web_comment("fb_web1");
    web_write(&dir, "fb_web1.json", &web);
    let claimed = mirrored(&store, &home, &["--session", "s1", "claim"]).expect(0).json();
    assert_eq!(claimed["claimed"][0]["id"], "fb_web1", "{claimed}");
    let file = std::fs::read_to_string(dir.join("fb_web1.json")).unwrap();
    assert!(file.contains("\"status\": \"delivered\""), "the claim is mirrored: {file}");
    // The web read the comment before the claim and writes that read back, dismissed.
    web_write(&dir, "fb_web1.json", &dismissed(&web).unwrap());
    web_write(&dir, "fb_web2.json", &web_comment("fb_web2"));
    for args in [
        &["heartbeat"][..],
        &["--session", "s1", "claim"],
        &["control", "listen"],
        &["--session", "s1", "tick"],
        &["dismiss", "fb_web2"],
    ] {
        mirrored(&store, &home, args).expect(0);
    }
    assert_eq!(status(&store, "fb_web1"), "dismissed");
    assert_eq!(status(&store, "fb_web2"), "dismissed", "later calls still run and adopt");
    let file = std::fs::read_to_string(dir.join("fb_web1.json")).unwrap();
    assert!(file.contains("\"status\": \"dismissed\""), "{file}");
    assert!(!file.contains("\"deliveredAt\": null"), "the store's claim stamp is kept: {file}");
    store.run(&["verify"]).expect(0);
}

/// A comment file whose target path leaves the project (`..`, absolute) is held to the rule
/// `feedback add` keeps: a mirrored claim reports it as a conflict and hands out the good comment
/// only, and an import refuses the project naming the path, the store unchanged. Both took it
/// before, and the Stop hook then told the model to edit `content/../../../outside.txt`.
#[test]
fn a_comment_file_whose_target_leaves_the_project_is_never_taken_in() {
    let store = Store::new();
    let home = home(&store);
    let dir = inbox(&home);
    web_write(&dir, "fb_good1.json", &web_comment("fb_good1"));
    for (id, path) in [("fb_evil1", "../../../outside.txt"), ("fb_evil2", "/etc/passwd")] {
        let text = web_comment(id).replace("\"a.md\"", &format!("\"{path}\""));
        web_write(&dir, &format!("{id}.json"), &text);
    }
    let run = mirrored(&store, &home, &["--session", "s1", "claim", "--all"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr.lines().count(), 2, "a warning line per conflict: {run:?}");
    let claimed = run.json();
    let ids: Vec<&str> =
        claimed["claimed"].as_array().unwrap().iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["fb_good1"], "{claimed}");
    let conflicts = claimed["mirror_conflicts"].to_string();
    assert!(conflicts.contains("outside.txt") && conflicts.contains("/etc/passwd"), "{claimed}");
    for id in ["fb_evil1", "fb_evil2"] {
        store.run(&["feedback", "--project", PROJECT, "show", id]).expect(3);
    }

    let other = Store::new();
    other.run(&["init"]).expect(0);
    let head = || other.run(&["stats"]).expect(0).json()["head"].clone();
    let before = head();
    let from = home.to_str().unwrap();
    let run = other.run(&["import", "--layout", "moonshine", "--from", from]).expect(3);
    assert!(run.stderr.contains("is not a relative path"), "{run:?}");
    assert_eq!(head(), before, "the refused import wrote nothing");
}

/// A mirrored call over every project leaves alone a project directory it cannot use safely (a
/// symlink, one its group may write, as umask 002 makes them) and reports it, so one such
/// directory does not stop the Stop hook or a tick for the others (it failed them all with exit
/// 6); a call about that very project still fails.
#[test]
fn one_unsafe_project_directory_does_not_stop_a_mirrored_call_over_every_project() {
    use std::os::unix::fs::PermissionsExt;
    let store = Store::new();
    let home = home(&store);
    web_write(&inbox(&home), "fb_good1.json", &web_comment("fb_good1"));
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), home.join("linked")).unwrap();
    std::fs::create_dir(home.join("loose")).unwrap();
    std::fs::set_permissions(home.join("loose"), std::fs::Permissions::from_mode(0o775)).unwrap();
    let from = home.to_str().unwrap();
    let run = store.run(&["--mirror", from, "--session", "s1", "feedback", "tick"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr.lines().count(), 2, "a warning line per project left alone: {run:?}");
    let tick = run.json();
    let conflicts = tick["mirror_conflicts"].to_string();
    assert!(conflicts.contains("is a symlink") && conflicts.contains("writable by its group"));
    assert_eq!(status(&store, "fb_good1"), "pending", "the good project was adopted: {tick}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "nothing written there");
    let about = ["--mirror", from, "feedback", "--project", "linked", "claim"];
    let run = store.run(&about).expect(6);
    assert!(run.stderr.contains("unsafe path"), "{run:?}");
}

use hookstate_testkit::Rng;

/// Web operations in the live race: a new comment or a dismiss, each a lock-less write.
const WEB_OPS: u64 = 300;

/// The web dev server as the HUD drives it: new comments, and dismissals read from the file,
/// written back after a pause (a stale read whenever a mirrored call wrote in between).
fn web_writer(dir: &Path, seed: u64, added: &Mutex<Vec<String>>, gone: &Mutex<Vec<String>>) {
    let mut rng = Rng(seed);
    for n in 0..WEB_OPS {
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("fb_") && n.ends_with(".json"))
            .collect();
        let pick = (!names.is_empty() && !rng.next().is_multiple_of(3))
            .then(|| names[usize::try_from(rng.next()).unwrap() % names.len()].clone());
        match pick {
            Some(name) => {
                let Ok(read) = std::fs::read_to_string(dir.join(&name)) else { continue };
                std::thread::sleep(std::time::Duration::from_micros(rng.next() % 6000));
                if let Some(text) = dismissed(&read) {
                    web_write(dir, &name, &text);
                    gone.lock().unwrap().push(name.trim_end_matches(".json").to_owned());
                }
            }
            None => {
                let id = format!("fb_live{n}_{}", rng.next() % 1000);
                web_write(dir, &format!("{id}.json"), &web_comment(&id));
                added.lock().unwrap().push(id);
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(rng.next() % 8000));
    }
}

/// Issue 11's moonshine figures (under a live web writer 3,949 of 3,955 mirrored calls failed,
/// 1,136 of 1,140 new comments and all 567 dismissals never reached the store): a lock-less web
/// writer races mirrored claims, ticks and heartbeats; every mirrored call exits 0, and every
/// comment the web created and every dismissal it wrote reaches the store.
#[test]
fn a_live_web_writer_racing_mirrored_calls_loses_nothing() {
    let store = Store::new();
    let home = home(&store);
    let dir = inbox(&home);
    mirrored(&store, &home, &["control", "listen"]).expect(0);
    let (added, gone) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let done = std::sync::atomic::AtomicBool::new(false);
    let calls = Mutex::new(Vec::<(Vec<String>, i32, String)>::new());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let seed = std::env::var("HOOKSTATE_RACE_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0x5eed_0011);
            web_writer(&dir, seed, &added, &gone);
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        for worker in 0..2u64 {
            let (store, home, calls, done) = (&store, &home, &calls, &done);
            scope.spawn(move || {
                let session = format!("w{worker}");
                let verbs: [&[&str]; 3] = [&["claim"], &["tick"], &["heartbeat"]];
                let mut n = worker;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let verb = verbs[usize::try_from(n % 3).unwrap()];
                    n += 1;
                    let args = [&["--session", session.as_str()][..], verb].concat();
                    let run = mirrored(store, home, &args);
                    let args = args.iter().map(|a| (*a).to_owned()).collect();
                    calls.lock().unwrap().push((args, run.code, run.stderr));
                }
            });
        }
    });
    let calls = calls.into_inner().unwrap();
    let failed: Vec<_> = calls.iter().filter(|(_, code, _)| *code != 0).collect();
    let (added, gone) = (added.into_inner().unwrap(), gone.into_inner().unwrap());
    println!(
        "moonshine live race: mirrored_calls={} failed={} web_comments={} web_dismissals={}",
        calls.len(),
        failed.len(),
        added.len(),
        gone.len()
    );
    // One more call adopts what the last writes left.
    let last = mirrored(&store, &home, &["heartbeat"]);
    assert!(
        failed.is_empty(),
        "{} of {} mirrored calls failed, the first: {:?}",
        failed.len(),
        calls.len(),
        failed.first()
    );
    assert_eq!((last.code, last.stderr.as_str()), (0, ""), "{last:?}");
    let list = store.run(&["feedback", "--project", PROJECT, "list"]).expect(0).json();
    let stored: BTreeSet<(String, String)> = list["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["record"]["status"].to_string()))
        .collect();
    let ids: BTreeSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    let lost: Vec<&String> = added.iter().filter(|id| !ids.contains(id.as_str())).collect();
    let undismissed: Vec<&String> = gone
        .iter()
        .filter(|id| !stored.contains(&((*id).clone(), "\"dismissed\"".to_owned())))
        .collect();
    println!(
        "moonshine live race: lost_comments={} lost_dismissals={}",
        lost.len(),
        undismissed.len()
    );
    assert!(lost.is_empty(), "new comments lost: {lost:?}");
    assert!(undismissed.is_empty(), "dismissals lost: {undismissed:?}");
    assert!(added.len() >= 10 && gone.len() >= 10, "too few web writes to call this a race");
    store.run(&["verify"]).expect(0);
}

/// A comment file that does not parse (cut short, a byte-order mark) is set aside as
/// `<file>.corrupt-<ms>` with its bytes, one stderr line says so, and the store's version takes
/// its place; it was written over with no copy kept.
#[test]
fn a_comment_file_that_does_not_parse_is_set_aside_not_written_over() {
    let store = Store::new();
    let home = home(&store);
    let dir = inbox(&home);
    web_write(&dir, "fb_cut1.json", &web_comment("fb_cut1"));
    mirrored(&store, &home, &["heartbeat"]).expect(0);
    let cut = "{\n  \"id\": \"fb_cut1\",\n  \"st";
    web_write(&dir, "fb_cut1.json", cut);
    let run = mirrored(&store, &home, &["heartbeat"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("renamed") && run.stderr.lines().count() == 1, "{run:?}");
    let aside: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("fb_cut1.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), cut);
    let file = std::fs::read_to_string(dir.join("fb_cut1.json")).unwrap();
    assert!(file.contains("\"status\": \"pending\""), "the store's version: {file}");
    store.run(&["verify"]).expect(0);
}
