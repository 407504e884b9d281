//! Every clap error path we can reach exits 64 (sysexits EX_USAGE), never 2, which Claude Code
//! reads as "block the tool call or the stop": unknown verbs and flags, missing arguments, bad
//! enum values, conflicts, repeated flags, non-UTF-8 arguments, a missing verb, and a missing HOME
//! for the default store. Each error is one line that keeps clap's detail (the missing argument,
//! the valid values, a suggestion). `hook stop` with HOME unset exits 0, as its help promises.
//!
//! Does not open a store except to show that nothing was created.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{Run, Store};

/// Runs the binary with `args` and no HOME or HOOKSTATE_DB (so only an explicit --db names a
/// store), with `stdin` when given.
fn run_bare(args: &[OsString], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(args)
        .env_remove("HOME")
        .env_remove("HOOKSTATE_DB")
        .env_remove("HOOKSTATE_SESSION")
        .env_remove("HOOKSTATE_SCOPE")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// One clap error path: the arguments and what the one stderr line must say.
struct Case {
    what: &'static str,
    args: Vec<OsString>,
    says: &'static [&'static str],
}

fn case(what: &'static str, args: &[&str], says: &'static [&'static str]) -> Case {
    Case { what, args: os(args), says }
}

fn cases(db: &'static str) -> Vec<Case> {
    let with_db =
        |args: &[&'static str]| -> Vec<&'static str> { [&["--db", db][..], args].concat() };
    let mut all = vec![
        case("unknown verb", &with_db(&["frobnicate"]), &["unrecognized subcommand 'frobnicate'"]),
        case("misspelt verb", &with_db(&["qeue", "list", "q"]), &["similar subcommand", "'queue'"]),
        case("unknown sub-verb", &with_db(&["kv", "gte", "k"]), &["'gte'", "hookstate kv"]),
        case("unknown flag", &with_db(&["kv", "get", "k", "--bogus"]), &["'--bogus'"]),
        case("unknown global flag", &with_db(&["--dbb", "x", "stats"]), &["'--dbb'"]),
        case("extra positional", &with_db(&["kv", "get", "k", "extra"]), &["'extra'"]),
        case("missing argument", &with_db(&["kv", "put"]), &["not provided", "<KEY>"]),
        case("missing flag", &with_db(&["queue", "ack", "q", "a"]), &["--token <TOKEN>"]),
        case(
            "missing layout",
            &with_db(&["import", "--from", "/nonexistent"]),
            &["--layout <LAYOUT>"],
        ),
        case("missing verb", &with_db(&["queue"]), &["a verb is required", "claim", "push"]),
        case("no verb at all", &with_db(&[]), &["a verb is required", "kv", "queue"]),
        case(
            "bad format",
            &with_db(&["--format", "yaml", "stats"]),
            &["'yaml'", "json, text, verdict"],
        ),
        case(
            "bad layout",
            &with_db(&["export", "--layout", "nope", "--to", "/nonexistent"]),
            &["'nope'", "loopd"],
        ),
        case("bad shell", &with_db(&["completions", "tcsh"]), &["'tcsh'", "bash"]),
        case("bad control mode", &with_db(&["feedback", "control", "loud"]), &["accumulate"]),
        case("not a number", &with_db(&["--wait-ms", "soon", "stats"]), &["'soon'"]),
        case(
            "number above u64",
            &with_db(&["queue", "ack", "q", "a", "--token", "18446744073709551616"]),
            &["18446744073709551616"],
        ),
        case(
            "conflicting flags",
            &with_db(&["kv", "put", "k", "1", "--create", "--expect-rev", "1"]),
            &["'--create' cannot be used with"],
        ),
        case("limit and tail", &with_db(&["log", "--limit", "1", "--tail", "1"]), &["--tail"]),
        case(
            "repeated flag",
            &with_db(&["--format", "json", "--format", "text", "stats"]),
            &["'--format"],
        ),
        case(
            "verdict format keeps 64",
            &with_db(&["--format", "verdict", "proposals", "index", "--bogus"]),
            &["'--bogus'"],
        ),
        case("default store without HOME", &["kv", "get", "k"], &["HOME is not set", "--db"]),
        case("write without HOME", &["kv", "put", "k", "1"], &["HOME is not set"]),
        case(
            "verdict without HOME",
            &["--format", "verdict", "--scope", "hermit:/h", "alerts", "list"],
            &["HOME"],
        ),
    ];
    let mut bad_utf8 = os(&with_db(&["kv", "get"]));
    bad_utf8.push(OsString::from_vec(vec![b'k', 0xff]));
    all.push(Case { what: "non-UTF-8 argument", args: bad_utf8, says: &["UTF-8"] });
    all
}

#[test]
fn every_clap_error_path_exits_64_with_its_detail_on_one_line() {
    let store = Store::new();
    let db = store.db();
    let all = cases(Box::leak(db.to_str().unwrap().to_owned().into_boxed_str()));
    let mut wrong = Vec::new();
    for case in &all {
        let run = run_bare(&case.args, None);
        let line = run.stderr.trim_end();
        let ok = run.code == 64
            && run.stdout.is_empty()
            && run.stderr.lines().count() == 1
            && line.starts_with("hookstate: ")
            && !line.contains('\u{1b}')
            && case.says.iter().all(|s| line.contains(s));
        if !ok {
            wrong.push(format!("{}: {run:?}", case.what));
        }
    }
    println!("usage cases={} wrong={}", all.len(), wrong.len());
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(!db.exists(), "a usage error created the store");
}

#[test]
fn help_and_version_exit_0_and_short_help_leaves_the_global_options_out() {
    let store = Store::new();
    let short = store.run(&["kv", "put", "-h"]).expect(0).stdout;
    let long = store.run(&["kv", "put", "--help"]).expect(0).stdout;
    assert!(!short.contains("--wait-ms") && !short.contains("Global options"), "{short}");
    assert!(long.contains("Global options:") && long.contains("--wait-ms"), "{long}");
    assert!(short.contains("--expect-rev") && long.contains("--expect-rev"));
    store.run(&["--version"]).expect(0);
    let queue = store.run(&["proposals", "queue", "--help"]).expect(0).stdout;
    assert!(queue.contains("micro-proposals.json"), "proposals queue has no help: {queue}");
    let list = store.run(&["proposals", "list", "--help"]).expect(0).stdout;
    assert!(!list.contains("micro-proposals.json holds it"), "two texts glued: {list}");
}

#[test]
fn hook_stop_without_home_allows_the_stop_and_exits_0() {
    let payload = r#"{"session_id":"s1","stop_hook_active":false,"hook_event_name":"Stop"}"#;
    let run = run_bare(&os(&["hook", "stop"]), Some(payload));
    assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
    let run = run_bare(&os(&["hook", "claim", "tasks"]), Some(payload));
    assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
}

#[test]
fn an_engine_error_in_verdict_format_exits_1_and_a_usage_error_64() {
    let store = Store::new();
    let dir = store.dir.path().join("hermit");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let over = ["--format", "verdict", "--wait-ms", "99999999", "proposals", "--dir", dir, "index"];
    store.run(&over).expect(1);
    store.run(&["--format", "verdict", "proposals", "index", "--nope"]).expect(64);
}

#[test]
fn common_mistakes_get_a_hint() {
    let store = Store::new();
    let bare = store.run(&["kv", "put", "k", "hello"]).expect(3);
    assert!(bare.stderr.contains(r#"'"hello"'"#), "{bare:?}");
    let empty = store.run(&["--session", "", "queue", "claim", "q"]).expect(3);
    assert!(empty.stderr.contains("--session is empty"), "{empty:?}");
    assert!(!store.db().exists(), "a refused call created the store");
    let shared = store.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let group_writable = std::os::unix::fs::PermissionsExt::from_mode(0o775);
    std::fs::set_permissions(&shared, group_writable).unwrap();
    let db = shared.join("state.redb");
    let run = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["--db", db.to_str().unwrap(), "kv", "put", "k", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("writable by its group"), "{stderr}");
}

#[test]
fn the_checked_in_cli_reference_matches_the_definitions() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    let generated = Store::new().run(&["__cli-reference"]).expect(0).stdout;
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/cli.md differs from the clap definitions; regenerate it with \
         `cargo run -q -p hookstate -- __cli-reference > docs/cli.md`"
    );
}

/// Help written into a full disk is an IO error (exit 6, one line), as any output is; it was
/// lost with exit 0. A closed pipe stays the reader's choice (exit 0).
#[test]
fn help_into_a_full_disk_exits_6() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--help")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("hookstate: write stdout"), "{stderr}");
}

/// A relative HOME counts as unset (exit 64): it put the default store under the directory each
/// call ran in (`./relhome/.agent/hookstate/state.redb`), so hooks started in different
/// directories wrote to different stores.
#[test]
fn a_relative_home_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .args(["counter", "add", "x"])
        .current_dir(dir.path())
        .env("HOME", "relhome")
        .env_remove("HOOKSTATE_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("HOME is not set or not an absolute path"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing made in the cwd");
}
