//! End-to-end tests of the moonshine verbs: the real upstream run replayed through hookstate
//! (the Stop hook's exact output, the exported files byte for byte), round trips both ways,
//! hostile legacy directories, orphaned claims, the claim and routing rules, and Stop-hook and
//! listener-tick processes racing on the same projects.
//!
//! Does not call the engine in-process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::{Run, Store};
use hookstate_testkit::{copy_dir, read_tree};

const PROJECT: &str = "gradient-descent";
/// 2026-11-29T21:50:52Z, when the real fixtures were written.
const FIXTURE_NOW_MS: u64 = 1_795_989_052_000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/legacy/moonshine")
}

/// A directory beside the store's (the store directory's snapshot must hold only the store).
fn scratch(store: &Store) -> PathBuf {
    let dir = store.dir.path().with_extension("scratch");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of the real moonshine home beside the store.
fn real_home(store: &Store) -> PathBuf {
    let home = scratch(store).join("home");
    copy_dir(&fixtures().join("home/.agent/moonshine"), &home);
    home
}

fn inbox(home: &Path) -> PathBuf {
    home.join(PROJECT).join(".feedback")
}

fn fb(store: &Store, args: &[&str]) -> Run {
    let mut all = vec!["feedback", "--project", PROJECT];
    all.extend_from_slice(args);
    store.run(&all)
}

fn at(ms: u64) -> String {
    ms.to_string()
}

fn stop(store: &Store, session: &str, extra: &[&str]) -> Run {
    let payload = json!({ "session_id": session, "stop_hook_active": false, "cwd": "/tmp" });
    let mut args = vec!["hook", "stop"];
    args.extend_from_slice(extra);
    store.run_with_stdin(&args, Some(payload.to_string().as_bytes()))
}

#[test]
fn the_real_upstream_run_replayed_prints_the_hooks_bytes_and_exports_the_real_files() {
    let store = Store::new();
    let home = real_home(&store);
    // Undo the hook, the reply and the dismiss: the three comments as the web wrote them.
    std::fs::remove_file(inbox(&home).join("adapter.json")).unwrap();
    for entry in std::fs::read_dir(inbox(&home)).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("fb_") {
            continue;
        }
        let mut text = std::fs::read_to_string(&path).unwrap();
        for status in ["delivered", "addressed", "dismissed"] {
            text = text.replace(&format!("\"status\": \"{status}\""), "\"status\": \"pending\"");
        }
        text = text.replace("\"deliveredAt\": \"2026-11-29T21:50:52Z\"", "\"deliveredAt\": null");
        text = text.replace("\"addressedAt\": \"2026-11-29T21:50:53Z\"", "\"addressedAt\": null");
        text = text.replace(
            "\"reply\": \"Named it an exponentially weighted average in the first sentence.\"",
            "\"reply\": null",
        );
        std::fs::write(&path, text).unwrap();
    }
    store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]).expect(0);
    let now = at(FIXTURE_NOW_MS);
    let out = stop(
        &store,
        "s1",
        &[
            "--now-ms",
            &now,
            "--reply-via",
            "files",
            "--moonshine-home",
            "/home/author/.agent/moonshine",
        ],
    )
    .expect(0);
    let expected = std::fs::read_to_string(fixtures().join("stop-hook-output.json")).unwrap();
    assert_eq!(out.stdout, expected);
    let later = at(FIXTURE_NOW_MS + 1000);
    let reply = "Named it an exponentially weighted average in the first sentence.";
    fb(&store, &["--now-ms", &later, "reply", "fb_mii0m3bb_q1w2e3", "--token", "3", reply])
        .expect(0);
    fb(&store, &["dismiss", "fb_mii0l7aa_0p3k9w"]).expect(0);
    let out = scratch(&store).join("out");
    store.run(&["export", "--layout", "moonshine", "--to", out.to_str().unwrap()]).expect(0);
    assert_eq!(
        read_tree(&out).unwrap(),
        read_tree(&fixtures().join("home/.agent/moonshine")).unwrap()
    );
}

#[test]
fn real_files_round_trip_both_ways() {
    let store = Store::new();
    let home = real_home(&store);
    store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]).expect(0);
    let out = scratch(&store).join("out");
    let export = ["export", "--layout", "moonshine", "--to", out.to_str().unwrap()];
    store.run(&export).expect(0);
    assert_eq!(
        read_tree(&out).unwrap(),
        read_tree(&home).unwrap(),
        "export(import(files)) == files"
    );
    let again = store.run(&export).expect(0).json();
    assert_eq!((again["written"].as_u64(), again["unchanged"].as_u64()), (Some(0), Some(5)));
    let second = Store::new();
    second.run(&["import", "--layout", "moonshine", "--from", out.to_str().unwrap()]).expect(0);
    assert_eq!(fb(&second, &["list"]).expect(0).json(), fb(&store, &["list"]).expect(0).json());
    second.run(&["verify"]).expect(0);
    let twice = store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]);
    assert_eq!(twice.expect(1).json()["refused"], "exists");
}

/// Imports `home` and asserts the exit code, a one-line error naming `needle`, an unchanged
/// store, and no file outside the store directory.
fn refused_import(store: &Store, home: &Path, code: i32, needle: &str) {
    let before = store.snapshot();
    let run = store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]);
    let run = run.expect(code);
    assert!(run.stderr.contains(needle), "{needle}: {run:?}");
    assert!(store.snapshot() == before, "the store changed: {run:?}");
}

#[test]
fn hostile_inboxes_are_refused_with_an_unchanged_store() {
    let store = Store::new();
    store.run(&["init"]).expect(0);
    let outside = tempfile::tempdir().unwrap();
    let hostile = |name: &str| {
        let home = scratch(&store).join(name);
        copy_dir(&fixtures().join("home/.agent/moonshine"), &home);
        home
    };
    let home = hostile("symlinked");
    std::fs::remove_dir_all(inbox(&home)).unwrap();
    std::os::unix::fs::symlink(outside.path(), inbox(&home)).unwrap();
    refused_import(&store, &home, 6, "symlink");
    let home = hostile("dotdot");
    let evil = std::fs::read_to_string(inbox(&home).join("fb_mii0k1q2_4x8c2d.json"))
        .unwrap()
        .replace("\"id\": \"fb_mii0k1q2_4x8c2d\"", "\"id\": \"../../evil\"");
    std::fs::write(inbox(&home).join("fb_mii0k1q2_4x8c2d.json"), evil).unwrap();
    refused_import(&store, &home, 3, "does not match the file name");
    let home = hostile("huge");
    let huge =
        format!("{{\n  \"id\": \"fb_x\",\n  \"comment\": \"{}\"\n}}\n", "x".repeat(10 << 20));
    std::fs::write(inbox(&home).join("fb_x.json"), huge).unwrap();
    refused_import(&store, &home, 3, "bytes, limit is");
    let home = hostile("badjson");
    std::fs::write(inbox(&home).join("fb_bad.json"), "{\"id\": \"fb_bad\",\n").unwrap();
    refused_import(&store, &home, 3, "fb_bad.json");
    let home = hostile("fifo");
    let fifo = inbox(&home).join("fb_fifo.json");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    refused_import(&store, &home, 3, "not a regular file");
    let home = hostile("restyled");
    std::fs::write(inbox(&home).join("control.json"), "{ \"mode\": \"listen\" }\n").unwrap();
    refused_import(&store, &home, 3, "byte for byte");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // An export through a symlinked inbox writes nothing outside the root.
    let good = real_home(&store);
    store.run(&["import", "--layout", "moonshine", "--from", good.to_str().unwrap()]).expect(0);
    let out = scratch(&store).join("out");
    std::fs::create_dir_all(out.join(PROJECT)).unwrap();
    std::os::unix::fs::symlink(outside.path(), inbox(&out)).unwrap();
    let run = store.run(&["export", "--layout", "moonshine", "--to", out.to_str().unwrap()]);
    run.expect(6);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn orphaned_claims_are_restored_by_the_spec_rules() {
    let store = Store::new();
    store.run(&["init"]).expect(0);
    let home = real_home(&store);
    let dir = inbox(&home);
    // A claim whose owner died before writing back: the base is gone, the orphan comes back.
    std::fs::rename(
        dir.join("fb_mii0k1q2_4x8c2d.json"),
        dir.join("fb_mii0k1q2_4x8c2d.json.claiming.999999999"),
    )
    .unwrap();
    // A claim that finished but did not remove its name: the base wins.
    std::fs::write(dir.join("fb_mii0l7aa_0p3k9w.json.claiming.1"), b"stale").unwrap();
    // The live rewrite buffer (hazard 4) is never taken for a record.
    std::fs::write(dir.join("fb_mii0m3bb_q1w2e3.json.claiming.12.tmp"), b"partial").unwrap();
    // A claim held right now by a live process: refused, nothing written.
    let live = format!("fb_zzz.json.claiming.{}", std::process::id());
    std::fs::write(dir.join(&live), b"{}").unwrap();
    refused_import(&store, &home, 1, "live process");
    std::fs::remove_file(dir.join(&live)).unwrap();
    let out = store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]);
    let out = out.expect(0).json();
    assert_eq!(
        out["imported"][0]["restored"],
        json!(["fb_mii0k1q2_4x8c2d.json.claiming.999999999"])
    );
    let show = fb(&store, &["show", "fb_mii0k1q2_4x8c2d"]).expect(0).json();
    assert_eq!(show["record"]["status"], "delivered");
    let exported = scratch(&store).join("out");
    store.run(&["export", "--layout", "moonshine", "--to", exported.to_str().unwrap()]).expect(0);
    assert_eq!(
        read_tree(&exported).unwrap(),
        read_tree(&fixtures().join("home/.agent/moonshine")).unwrap()
    );
}

fn add(store: &Store, now: u64, text: &str) -> String {
    let target =
        r#"{"kind":"block","path":"a/b.md","range":[0,4],"excerpt":"Some","anchorHash":"abc123"}"#;
    let run = fb(store, &["--now-ms", &at(now), "add", "--target", target, text]).expect(0);
    run.json()["id"].as_str().unwrap().to_owned()
}

fn claim(store: &Store, now: u64, session: &str) -> Value {
    let args = ["--session", session, "--now-ms", &at(now), "claim"];
    fb(store, &args).expect(0).json()
}

#[test]
fn claims_redeliver_after_300_s_and_a_stale_reply_is_refused_naming_the_holder() {
    let store = Store::new();
    let t0 = FIXTURE_NOW_MS;
    let id = add(&store, t0, "Tighten this.");
    let first = claim(&store, t0, "s1");
    assert_eq!(
        (first["claimed"][0]["id"].as_str(), first["claimed"][0]["token"].as_u64()),
        (Some(id.as_str()), Some(1))
    );
    assert_eq!(claim(&store, t0 + 299_000, "s2")["claimed"], json!([]));
    let second = claim(&store, t0 + 300_000, "s2");
    assert_eq!(second["claimed"][0]["token"], 2);
    let late = fb(&store, &["reply", &id, "--token", "1", "done"]).expect(1);
    assert_eq!(late.json()["refused"], "stale_token");
    assert!(late.stderr.contains("held by s2 (session s2) with token 2"), "{late:?}");
    fb(&store, &["reply", &id, "--token", "2", "done\nsecond line"]).expect(3);
    fb(&store, &["reply", &id, "--token", "2", "Tightened."]).expect(0);
    // A window past its bound is refused in the seconds it was given, not in saturated ms.
    for over in ["86401", &u64::MAX.to_string()] {
        let run = fb(&store, &["claim", "--stale-after-s", over]).expect(3);
        let line = format!("hookstate: --stale-after-s of {over} s is outside 0..=86400\n");
        assert_eq!(run.stderr, line);
    }
    let kept = fb(&store, &["dismiss", &id]).expect(1);
    assert_eq!(kept.json()["refused"], "addressed");
    assert_eq!(fb(&store, &["show", &id]).expect(0).json()["record"]["reply"], "Tightened.");
    // A dismissal is never overwritten by a reply or a later claim.
    let other = add(&store, t0, "Cut this.");
    let token = claim(&store, t0, "s1")["claimed"][0]["token"].as_u64().unwrap();
    fb(&store, &["dismiss", &other]).expect(0);
    fb(&store, &["dismiss", &other]).expect(0);
    let refused = fb(&store, &["reply", &other, "--token", &token.to_string(), "x"]).expect(1);
    assert_eq!(refused.json()["refused"], "dismissed");
    assert_eq!(claim(&store, t0 + 3_600_000, "s3")["claimed"], json!([]));
    assert_eq!(fb(&store, &["show", &other]).expect(0).json()["record"]["status"], "dismissed");
    store.run(&["verify"]).expect(0);
}

#[test]
fn stop_hook_and_tick_follow_mode_address_and_session_rules() {
    let store = Store::new();
    let t0 = FIXTURE_NOW_MS;
    let now = at(t0);
    add(&store, t0, "One.");
    // No control: accumulate, so the Stop hook stays silent and claims nothing.
    assert_eq!(stop(&store, "s1", &["--now-ms", &now]).expect(0).stdout, "");
    let payload = br#"{"session_id":"s1","stop_hook_active":true}"#;
    fb(&store, &["control", "listen"]).expect(0);
    assert_eq!(store.run_with_stdin(&["hook", "stop"], Some(payload)).expect(0).stdout, "");
    // Listen mode for session A: session B and an unknown session skip, A drains.
    fb(&store, &["control", "listen", "--for-session", "A"]).expect(0);
    let tick = |session: Option<&str>| {
        let mut args = vec!["feedback", "--project", PROJECT, "--now-ms", &now];
        if let Some(s) = session {
            args.extend(["--session", s]);
        }
        args.push("tick");
        store.run(&args).expect(0).json()
    };
    assert_eq!(tick(Some("B"))["claimed"], json!([]));
    let unknown = tick(None);
    assert_eq!(
        unknown["projects"][0]["skipped"],
        "a session is requested and this session's id is unknown"
    );
    let drained = tick(Some("A"));
    assert_eq!(drained["claimed"][0]["comment"], "One.");
    assert_eq!(drained["projects"][0]["heartbeat"]["pending"], 1);
    // Paused: heartbeat only; an address request overrides it once and is consumed.
    add(&store, t0, "Two.");
    fb(&store, &["control", "paused"]).expect(0);
    assert_eq!(tick(Some("B"))["claimed"], json!([]));
    fb(&store, &["address"]).expect(0);
    let out = stop(&store, "B", &["--now-ms", &now]).expect(0);
    assert!(out.stdout.contains("COMMENT: Two."), "{out:?}");
    assert_eq!(fb(&store, &["list"]).expect(0).json()["address"], Value::Null);
    // Stopped: a final heartbeat with mode stopped, and the loop ends.
    fb(&store, &["control", "stopped"]).expect(0);
    let last = tick(Some("A"));
    assert_eq!(
        (last["continue"].as_bool(), last["projects"][0]["heartbeat"]["mode"].as_str()),
        (Some(false), Some("stopped"))
    );
    // The kill switch silences both.
    let off = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", store.db().to_str().unwrap(), "feedback", "tick"])
        .env("MOONSHINE_FEEDBACK", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let off: Value = serde_json::from_slice(&off.stdout).unwrap();
    assert_eq!((off["disabled"].as_bool(), off["continue"].as_bool()), (Some(true), Some(false)));
}

/// The `--token N` of each comment in a Stop hook's reason.
fn tokens_in_reason(stdout: &str) -> Vec<(String, u64)> {
    if stdout.is_empty() {
        return Vec::new();
    }
    let reason: Value = serde_json::from_str(stdout).unwrap();
    let reason = reason["reason"].as_str().unwrap();
    reason
        .lines()
        .filter_map(|line| line.split_once("feedback reply ")?.1.split_once(" --token "))
        .map(|(id, rest)| (id.to_owned(), rest.split(' ').next().unwrap().parse().unwrap()))
        .collect()
}

#[test]
fn stop_hooks_and_ticks_racing_deliver_each_comment_once_and_lose_nothing() {
    const COMMENTS: usize = 12;
    const ROUNDS: usize = 4;
    let store = std::sync::Arc::new(Store::new());
    let db = store.db();
    let run = |args: Vec<String>, stdin: Option<Vec<u8>>| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
            .arg("--db")
            .arg(&db)
            .args(&args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(bytes) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&bytes).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let code = out.status.code().unwrap();
        if code != 0 {
            // Kept on stdout's side of the assertion message, so a failure names its cause.
            eprintln!("hookstate {args:?} exited {code}: {}", String::from_utf8_lossy(&out.stderr));
        }
        (code, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // "listen" drains on every pass; "quiet" (accumulate) only when an address request asks.
    for project in ["listen", "quiet"] {
        for n in 0..COMMENTS {
            let target = r#"{"kind":"block","path":"a.md"}"#;
            let args =
                ["feedback", "--project", project, "add", "--target", target, &format!("c{n}")];
            assert_eq!(run(args.iter().map(|s| s.to_string()).collect(), None).0, 0);
        }
    }
    assert_eq!(
        run(
            ["feedback", "--project", "listen", "control", "listen"].map(String::from).to_vec(),
            None
        )
        .0,
        0
    );
    let ids = |project: &str| -> Vec<String> {
        let (_, out) =
            run(["feedback", "--project", project, "list"].map(String::from).to_vec(), None);
        let list: Value = serde_json::from_str(&out).unwrap();
        list["comments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let to_dismiss: Vec<(String, String)> = ["listen", "quiet"]
        .iter()
        .flat_map(|p| ids(p).into_iter().step_by(3).map(move |id| (p.to_string(), id)))
        .collect();
    let claims = std::sync::Mutex::new(Vec::<(String, u64, String)>::new());
    let replies = std::sync::Mutex::new(Vec::<(String, String)>::new());
    let dismissed = std::sync::Mutex::new(Vec::<String>::new());
    let requests = std::sync::Mutex::new(Vec::<u64>::new());
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let (run, claims, replies) = (&run, &claims, &replies);
            scope.spawn(move || {
                let session = format!("w{worker}");
                for _ in 0..ROUNDS {
                    let got: Vec<(String, String, u64)> = if worker % 2 == 0 {
                        let payload = json!({ "session_id": session, "stop_hook_active": false });
                        let (code, out) = run(
                            vec!["hook".into(), "stop".into()],
                            Some(payload.to_string().into_bytes()),
                        );
                        assert_eq!(code, 0, "{out}");
                        let reason: Value = if out.is_empty() {
                            Value::Null
                        } else {
                            serde_json::from_str(&out).unwrap()
                        };
                        let text = reason["reason"].as_str().unwrap_or_default().to_owned();
                        tokens_in_reason(&out)
                            .into_iter()
                            .map(|(id, t)| {
                                let project = if text
                                    .contains(&format!("moonshine:listen feedback reply {id}"))
                                {
                                    "listen"
                                } else {
                                    "quiet"
                                };
                                (project.to_owned(), id, t)
                            })
                            .collect()
                    } else {
                        let args =
                            ["--session", &session, "feedback", "tick"].map(String::from).to_vec();
                        let (code, out) = run(args, None);
                        assert_eq!(code, 0, "{out}");
                        let tick: Value = serde_json::from_str(&out).unwrap();
                        tick["claimed"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|c| {
                                (
                                    c["project"].as_str().unwrap().to_owned(),
                                    c["id"].as_str().unwrap().to_owned(),
                                    c["token"].as_u64().unwrap(),
                                )
                            })
                            .collect()
                    };
                    for (project, id, token) in got {
                        claims.lock().unwrap().push((id.clone(), token, session.clone()));
                        let reply = format!("by {session}");
                        let args = [
                            "feedback",
                            "--project",
                            &project,
                            "reply",
                            &id,
                            "--token",
                            &token.to_string(),
                            &reply,
                        ]
                        .map(String::from)
                        .to_vec();
                        let (code, out) = run(args, None);
                        if code == 0 {
                            replies.lock().unwrap().push((id, reply));
                        } else {
                            assert!(out.contains("\"refused\":\"dismissed\""), "{out}");
                        }
                    }
                }
            });
        }
        let (run, dismissed, requests, to_dismiss) = (&run, &dismissed, &requests, &to_dismiss);
        scope.spawn(move || {
            for (i, (project, id)) in to_dismiss.iter().enumerate() {
                let (code, out) = run(
                    ["feedback", "--project", project, "dismiss", id].map(String::from).to_vec(),
                    None,
                );
                if code == 0 {
                    dismissed.lock().unwrap().push(id.clone());
                } else {
                    assert!(out.contains("\"refused\":\"addressed\""), "{out}");
                }
                if i % 2 == 0 {
                    let (code, out) = run(
                        ["feedback", "--project", "quiet", "address"].map(String::from).to_vec(),
                        None,
                    );
                    assert_eq!(code, 0);
                    let out: Value = serde_json::from_str(&out).unwrap();
                    requests.lock().unwrap().push(out["request"].as_u64().unwrap());
                }
            }
        });
    });
    let claims = claims.into_inner().unwrap();
    let project_of: BTreeMap<String, &str> = ["listen", "quiet"]
        .iter()
        .flat_map(|p| ids(p).into_iter().map(move |id| (id, *p)))
        .collect();
    let project_of: BTreeMap<&str, &str> =
        project_of.iter().map(|(id, p)| (id.as_str(), *p)).collect();
    let ids_claimed: BTreeSet<&String> = claims.iter().map(|(id, _, _)| id).collect();
    assert_eq!(ids_claimed.len(), claims.len(), "a comment was delivered twice in one lease");
    let tokens: BTreeSet<(&str, u64)> =
        claims.iter().map(|(id, t, _)| (project_of[id.as_str()], *t)).collect();
    assert_eq!(tokens.len(), claims.len(), "two claims in one project shared a token");
    let mut final_state = BTreeMap::new();
    for project in ["listen", "quiet"] {
        let (_, out) =
            run(["feedback", "--project", project, "list"].map(String::from).to_vec(), None);
        let list: Value = serde_json::from_str(&out).unwrap();
        for c in list["comments"].as_array().unwrap() {
            final_state.insert(c["id"].as_str().unwrap().to_owned(), c["record"].clone());
        }
        let last = requests.lock().unwrap().iter().max().copied();
        if project == "quiet" {
            // The last address request is either still pending or was consumed by a drain.
            let (_, log) =
                run(["log", "--kind", "address_consumed"].map(String::from).to_vec(), None);
            let consumed =
                log.lines().any(|l| l.contains(&format!("\"consumed\":{}", last.unwrap())));
            assert!(consumed ^ !list["address"].is_null(), "last request lost: {log} {list}");
        }
    }
    for (id, reply) in replies.into_inner().unwrap() {
        assert_eq!(
            (final_state[&id]["status"].as_str(), final_state[&id]["reply"].as_str()),
            (Some("addressed"), Some(reply.as_str())),
            "lost reply of {id}"
        );
    }
    for id in dismissed.into_inner().unwrap() {
        assert_eq!(final_state[&id]["status"], "dismissed", "lost dismissal of {id}");
    }
    // Listen mode drains on every pass and every claim was answered at once: nothing is left
    // pending or delivered there.
    for id in ids("listen") {
        let status = final_state[&id]["status"].as_str().unwrap();
        assert!(status == "addressed" || status == "dismissed", "{id} ended {status}");
    }
    assert!(claims.len() >= COMMENTS / 2, "too few claims to call this a race: {claims:?}");
    assert_eq!(run(vec!["verify".into()], None).0, 0);
    drop(store);
}

#[test]
fn a_mirror_stays_current_and_adopts_what_direct_writers_change() {
    let store = Store::new();
    let home = real_home(&store);
    let mirror = home.to_str().unwrap().to_owned();
    store.run(&["import", "--layout", "moonshine", "--from", &mirror]).expect(0);
    let m = |args: &[&str]| {
        let mut all = vec!["feedback", "--project", PROJECT, "--mirror", &mirror];
        all.extend_from_slice(args);
        store.run(&all)
    };
    let dir = inbox(&home);
    // The web dev server creates a comment: the next call adopts it, the claim shows in the file.
    let web = "{\n  \"id\": \"fb_web1\",\n  \"ts\": \"2026-11-29T22:00:00.000Z\",\n  \"project\": \
               \"gradient-descent\",\n  \"status\": \"pending\",\n  \"target\": {\n    \"kind\": \
               \"block\",\n    \"path\": \"a.md\"\n  },\n  \"comment\": \"New.\",\n  \"reply\": \
               null,\n  \"deliveredAt\": null,\n  \"addressedAt\": null\n}\n";
    std::fs::write(dir.join("fb_web1.json"), web).unwrap();
    let claimed = m(&["--session", "s1", "claim", "--id", "fb_web1"]).expect(0).json();
    let token = claimed["claimed"][0]["token"].as_u64().unwrap();
    let file = std::fs::read_to_string(dir.join("fb_web1.json")).unwrap();
    assert!(file.contains("\"status\": \"delivered\""), "{file}");
    // A session records its reply by editing the file (reply-via files): adopted as a reply.
    let replied = file
        .replace("\"status\": \"delivered\"", "\"status\": \"addressed\"")
        .replace("\"reply\": null", "\"reply\": \"Done.\"")
        .replace("\"addressedAt\": null", "\"addressedAt\": \"2026-11-29T22:01:00Z\"");
    std::fs::write(dir.join("fb_web1.json"), replied).unwrap();
    // The web sets listen mode and asks for an address; a tick adopts both and consumes it.
    let control = "{\n  \"mode\": \"paused\",\n  \"updatedAt\": \"2026-11-29T22:02:00.000Z\"\n}\n";
    std::fs::write(dir.join("control.json"), control).unwrap();
    std::fs::write(
        dir.join("address.json"),
        "{\n  \"requestedAt\": \"2026-11-29T22:02:01.000Z\"\n}\n",
    )
    .unwrap();
    m(&["--session", "s1", "tick"]).expect(0);
    let list = fb(&store, &["list"]).expect(0).json();
    assert_eq!(list["mode"], "paused");
    assert_eq!(list["address"], Value::Null);
    assert!(!dir.join("address.json").exists(), "a consumed request stays in the mirror");
    let shown = fb(&store, &["show", "fb_web1"]).expect(0).json();
    assert_eq!(
        (shown["record"]["reply"].as_str(), shown["token"].as_u64()),
        (Some("Done."), Some(token))
    );
    // The web dismisses a comment: adopted.
    let dismissed = std::fs::read_to_string(dir.join("fb_mii0k1q2_4x8c2d.json"))
        .unwrap()
        .replace("\"status\": \"delivered\"", "\"status\": \"dismissed\"");
    std::fs::write(dir.join("fb_mii0k1q2_4x8c2d.json"), dismissed).unwrap();
    m(&["heartbeat"]).expect(0);
    assert_eq!(
        fb(&store, &["show", "fb_mii0k1q2_4x8c2d"]).expect(0).json()["record"]["status"],
        "dismissed"
    );
    // A reply written into a file the store already holds as dismissed is a conflict: reported
    // on stderr and in the result, never adopted, and it blocks neither the verb nor the rest.
    let dismissed = std::fs::read_to_string(dir.join("fb_mii0l7aa_0p3k9w.json")).unwrap();
    let late = dismissed
        .replace("\"status\": \"dismissed\"", "\"status\": \"addressed\"")
        .replace("\"reply\": null", "\"reply\": \"Too late.\"");
    std::fs::write(dir.join("fb_mii0l7aa_0p3k9w.json"), late).unwrap();
    let kept = m(&["heartbeat"]);
    assert_eq!((kept.code, kept.stderr.lines().count()), (0, 1), "{kept:?}");
    assert!(kept.stderr.contains("mirror kept the store's fb_mii0l7aa_0p3k9w"), "{kept:?}");
    assert_eq!(kept.json()["mirror_conflicts"][0]["record"], "fb_mii0l7aa_0p3k9w", "{kept:?}");
    assert_eq!(
        fb(&store, &["show", "fb_mii0l7aa_0p3k9w"]).expect(0).json()["record"]["status"],
        "dismissed"
    );
    let file = std::fs::read_to_string(dir.join("fb_mii0l7aa_0p3k9w.json")).unwrap();
    assert_eq!(file, dismissed, "the file shows the store's record again");
    m(&["heartbeat"]).expect(0); // a conflict is reported once: no stderr line now
    store.run(&["verify"]).expect(0);
}

#[test]
fn a_tick_says_whether_each_claimed_excerpt_is_still_in_its_source() {
    let store = Store::new();
    let home = scratch(&store).join("home");
    let content = home.join(PROJECT).join("content/a");
    std::fs::create_dir_all(&content).unwrap();
    std::fs::write(content.join("b.md"), "Some text, η moved.").unwrap();
    let t0 = FIXTURE_NOW_MS;
    add(&store, t0, "Kept.");
    fb(&store, &["control", "listen"]).expect(0);
    let tick = |now: u64| {
        let args = ["--now-ms", &at(now), "tick", "--moonshine-home", home.to_str().unwrap()];
        fb(&store, &args).expect(0).json()
    };
    assert_eq!(tick(t0)["claimed"][0]["anchor_matches"], true);
    std::fs::write(content.join("b.md"), "Text, η moved. Some").unwrap();
    assert_eq!(tick(t0 + 300_000)["claimed"][0]["anchor_matches"], false);
    std::fs::remove_file(content.join("b.md")).unwrap();
    assert_eq!(tick(t0 + 600_000)["claimed"][0]["anchor_matches"], Value::Null);
}

#[test]
fn spec_written_files_round_trip_both_ways() {
    let store = Store::new();
    let home = scratch(&store).join("spec");
    let spec =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/legacy/moonshine-spec");
    copy_dir(&spec.join("home"), &home);
    store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]).expect(0);
    let out = scratch(&store).join("spec-out");
    store.run(&["export", "--layout", "moonshine", "--to", out.to_str().unwrap()]).expect(0);
    assert_eq!(read_tree(&out).unwrap(), read_tree(&home).unwrap());
    let second = Store::new();
    second.run(&["import", "--layout", "moonshine", "--from", out.to_str().unwrap()]).expect(0);
    let list =
        |s: &Store| s.run(&["feedback", "--project", "attention-heads", "list"]).expect(0).json();
    assert_eq!(list(&second), list(&store));
    assert_eq!(list(&store)["heartbeat"]["lastDrainedAt"], "2026-09-14T09:20:00Z");
}

#[test]
fn bad_feedback_input_is_refused_before_the_store_is_created() {
    let store = Store::new();
    let target = r#"{"kind":"block","path":"a.md"}"#;
    let cases: [&[&str]; 7] = [
        &["feedback", "--project", "p", "reply", "fb_x", "--token", "1", "two\nlines"],
        &["feedback", "--project", "p", "reply", "../x", "--token", "1", "ok"],
        &["feedback", "--project", "p/..", "dismiss", "fb_x"],
        &[
            "feedback",
            "--project",
            "p",
            "add",
            "--target",
            r#"{"kind":"block","path":"../../x"}"#,
            "c",
        ],
        &["feedback", "--project", "p", "add", "--target", target, "   "],
        &["feedback", "--project", "p", "control", "listen", "--for-session", "a b"],
        &["feedback", "--project", "p", "tick", "--interval-s", "0"],
    ];
    for args in cases {
        store.run(args).expect(3);
    }
    store.run_with_stdin(&["hook", "stop"], Some(b"not json")).expect(3);
    store.run(&["feedback", "--project", "p", "claim", "--holder=-x"]).expect(3);
    assert!(!store.db().exists(), "bad input created the store");
}

/// An --idem-key names the verb's own write, never the mirror's adoption of what a direct writer
/// changed: a keyed dismiss right after the web wrote a new comment into the mirror still
/// dismisses and adopts the comment, and its retry replays the dismiss (adopting what the web
/// wrote in between).
#[test]
fn an_idem_keyed_verb_through_a_mirror_that_adopts_a_direct_write_still_runs() {
    let store = Store::new();
    let home = real_home(&store);
    let mirror = home.to_str().unwrap().to_owned();
    store.run(&["import", "--layout", "moonshine", "--from", &mirror]).expect(0);
    let dir = inbox(&home);
    let web = |id: &str| {
        let text = format!(
            "{{\n  \"id\": \"{id}\",\n  \"ts\": \"2026-11-29T22:00:00.000Z\",\n  \"project\": \
             \"gradient-descent\",\n  \"status\": \"pending\",\n  \"target\": {{\n    \"kind\": \
             \"block\",\n    \"path\": \"a.md\"\n  }},\n  \"comment\": \"New.\",\n  \"reply\": \
             null,\n  \"deliveredAt\": null,\n  \"addressedAt\": null\n}}\n"
        );
        std::fs::write(dir.join(format!("{id}.json")), text).unwrap();
    };
    let dismiss = || {
        let args = ["--mirror", &mirror, "--idem-key", "dismiss-1", "dismiss"];
        fb(&store, &[&args[..], &["fb_mii0k1q2_4x8c2d"]].concat())
    };
    web("fb_web1");
    let first = dismiss().expect(0).json();
    assert_ne!(first["replayed"], true, "{first}");
    let status = |id: &str| fb(&store, &["show", id]).expect(0).json()["record"]["status"].clone();
    assert_eq!(status("fb_mii0k1q2_4x8c2d"), "dismissed", "the dismiss landed: {first}");
    assert_eq!(status("fb_web1"), "pending", "the direct write adopted");
    web("fb_web2");
    let retry = dismiss().expect(0).json();
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(status("fb_web2"), "pending", "the retry still adopts");
    store.run(&["verify"]).expect(0);
}

/// What `import` of the real home prints, as it printed before imports were batched.
const REAL_IMPORT_STDOUT: &str = "{\"imported\":[{\"project\":\"gradient-descent\",\"events\":5,\
\"restored\":[],\"ignored\":[],\"seq\":5}],\"ok\":true}\n";
/// What `import` of a generated five-project home prints, as it printed before (one commit per
/// project then; one commit for all five now).
const FIVE_IMPORT_STDOUT: &str = "{\"imported\":[\
{\"project\":\"p0000\",\"events\":5,\"restored\":[],\"ignored\":[],\"seq\":5},\
{\"project\":\"p0001\",\"events\":4,\"restored\":[],\"ignored\":[],\"seq\":9},\
{\"project\":\"p0002\",\"events\":5,\"restored\":[],\"ignored\":[],\"seq\":14},\
{\"project\":\"p0003\",\"events\":4,\"restored\":[],\"ignored\":[],\"seq\":18},\
{\"project\":\"p0004\",\"events\":5,\"restored\":[],\"ignored\":[],\"seq\":23}],\"ok\":true}\n";

#[test]
fn a_batched_import_prints_the_same_bytes_and_nothing_on_a_stderr_that_is_no_terminal() {
    let store = Store::new();
    let home = real_home(&store);
    let run = store.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]);
    let run = run.expect(0);
    assert_eq!(run.stdout, REAL_IMPORT_STDOUT);
    assert_eq!(run.stderr, "", "no progress line on a pipe");
    let five = scratch(&store).join("five");
    hookstate_testkit::moonshine_home(&five, 5, 3).unwrap();
    let other = Store::new();
    let run = other.run(&["import", "--layout", "moonshine", "--from", five.to_str().unwrap()]);
    let run = run.expect(0);
    assert_eq!(run.stdout, FIVE_IMPORT_STDOUT);
    assert_eq!(run.stderr, "");
    other.run(&["verify"]).expect(0);
}

/// Runs `hookstate import` of `home` into `db` with a pseudo-terminal as its stderr: the exit
/// code, stdout, and what the terminal showed.
fn import_on_a_terminal(db: &Path, home: &Path) -> (i32, String, String) {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave =
        std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(db)
        .args(["import", "--layout", "moonshine", "--from"])
        .arg(home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    // Read the terminal while the child runs (its buffer is small); reads end with EIO once the
    // child, the last holder of the other side, is gone.
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rustix::io::read(&master, &mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let out = child.wait_with_output().unwrap();
    let shown = reader.join().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), shown)
}

#[test]
fn on_a_terminal_import_shows_one_updating_progress_line_and_prints_the_same_stdout() {
    let store = Store::new();
    let home = scratch(&store).join("home");
    hookstate_testkit::moonshine_home(&home, 40, 4).unwrap();
    let (code, stdout, shown) = import_on_a_terminal(&store.db(), &home);
    assert_eq!(code, 0, "{shown}");
    // The same answer as on a pipe.
    let piped = Store::new();
    let run = piped.run(&["import", "--layout", "moonshine", "--from", home.to_str().unwrap()]);
    assert_eq!(stdout, run.expect(0).stdout);
    // One line (the terminal shows \n as \r\n), rewritten in place with \r, ending at the total.
    let lines: Vec<&str> = shown.split_terminator("\r\n").collect();
    assert_eq!(lines.len(), 1, "{shown:?}");
    let last = lines[0].rsplit('\r').next().unwrap();
    assert!(last.starts_with("import: 40/40 projects, 220/220 events, 1 commits, "), "{shown:?}");
    assert!(last.trim_end().ends_with(" events/s"), "{shown:?}");
    assert!(lines[0].starts_with("\rimport: 0/40 projects"), "the first update: {shown:?}");
}
