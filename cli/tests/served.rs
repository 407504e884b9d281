//! The CLI suite through `hookstate serve` (issue 14): one script of calls — every kind of
//! answer (done, refused, invalid, usage, a replayed and a mismatched idempotency key, stdin
//! verbs, hook verbs, hermit verbs with verdict output, text format, reads of a missing record)
//! — runs on two fresh stores, one in-process (`HOOKSTATE_SERVE=0`) and one through a server
//! the calls find by themselves. Stdout, stderr and exit codes must be identical once the
//! store's path, the caller's pid and the hashes (which cover the pid) are written as
//! placeholders, and the server must have answered every served call.
//!
//! Also: a second `serve` on the same store says which pid holds it and exits non-zero, and
//! SIGTERM stops the server with exit 0 and its counters.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::support::hookstate;

/// The fixed clock of both runs, so that every timestamp and lease agrees.
const NOW_MS: &str = "1767225600000";

/// The script: arguments after `--db DB`, and the stdin, if any. `{dir}` is the run's hermit
/// state directory.
fn script() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    vec![
        (vec!["kv", "put", "k", r#"{"a":1}"#], None),
        (vec!["kv", "put", "k", "2", "--expect-rev", "5"], None),
        (vec!["kv", "get", "k"], None),
        (vec!["kv", "get", "missing"], None),
        (vec!["kv", "put", "k2", "--stdin"], Some(r#"{"from":"stdin"}"#)),
        (vec!["kv", "put", "k3", "--stdin"], Some("not json")),
        (vec!["kv", "put", "bad/id", "1"], None),
        (vec!["queue", "push", "q", "i1", r#"{"n":1}"#], None),
        (vec!["queue", "push", "q", "i2"], None),
        (vec!["queue", "claim", "q", "--holder", "h1", "--lease-ms", "60000"], None),
        (vec!["queue", "claim", "q", "--item", "i1", "--holder", "h2"], None),
        (vec!["queue", "ack", "q", "i1", "--token", "999"], None),
        (vec!["queue", "ack", "q", "i1", "--token", "1"], None),
        (vec!["queue", "list", "q"], None),
        (vec!["queue", "claim"], None),
        (vec!["--idem-key", "key-1", "counter", "add", "c", "5"], None),
        (vec!["--idem-key", "key-1", "counter", "add", "c", "5"], None),
        (vec!["--idem-key", "key-1", "counter", "add", "c", "6"], None),
        (vec!["counter", "get", "c"], None),
        (vec!["set", "add", "s", "m"], None),
        (vec!["set", "add", "s", "m"], None),
        (vec!["--format", "text", "set", "has", "s", "m"], None),
        (vec!["list", "append", "l", r#"{"x":1}"#, "--cap", "2"], None),
        (vec!["list", "get", "l"], None),
        (vec!["--scope", "other", "kv", "get", "k"], None),
        (
            vec!["--session", "sess-1", "observer", "append"],
            Some(r#"[{"kind":"user","text":"hello"}]"#),
        ),
        (vec!["--session", "sess-1", "observer", "state"], None),
        (vec!["hook", "session-start"], Some(r#"{"session_id":"sess-2","source":"startup"}"#)),
        (
            vec!["--format", "verdict", "proposals", "--dir", "{dir}", "queue-micro"],
            Some(r#"{"tier":"micro","question":"Ship it?"}"#),
        ),
        (vec!["--format", "verdict", "proposals", "--dir", "{dir}", "queue-micro"], Some("{")),
        (vec!["proposals", "--dir", "{dir}", "list"], None),
        (vec!["kv", "frobnicate"], None),
    ]
}

/// One call's answer with the run's own details written as placeholders.
fn normalized(output: &Output, db: &Path, dir: &Path) -> (Option<i32>, String, String) {
    let clean = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes)
            .replace(&db.display().to_string(), "<db>")
            .replace(&dir.display().to_string(), "<dir>");
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        // Hashes: 64 hex digits.
        while let Some(at) = rest.find(|c: char| c.is_ascii_hexdigit()) {
            out.push_str(&rest[..at]);
            let run = rest[at..].chars().take_while(char::is_ascii_hexdigit).count();
            if run == 64 {
                out.push_str("<hash>");
            } else {
                out.push_str(&rest[at..at + run]);
            }
            rest = &rest[at + run..];
        }
        out.push_str(rest);
        pid_free(&out)
    };
    (output.status.code(), clean(&output.stdout), clean(&output.stderr))
}

/// `"pid":N` written as `"pid":<pid>`: events record the caller's pid.
fn pid_free(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\"pid\":") {
        let start = at + "\"pid\":".len();
        out.push_str(&rest[..start]);
        let digits = rest[start..].chars().take_while(char::is_ascii_digit).count();
        out.push_str(if digits > 0 { "<pid>" } else { "" });
        rest = &rest[start + digits..];
    }
    out.push_str(rest);
    out
}

fn call(db: &Path, dir: &Path, args: &[&str], stdin: Option<&str>, direct: bool) -> Output {
    let dir_text = dir.display().to_string();
    let args: Vec<String> = args.iter().map(|a| a.replace("{dir}", &dir_text)).collect();
    let mut command = hookstate(db);
    command.env("HOOKSTATE_NOW_MS", NOW_MS).env("HOME", dir).env_remove("HOOKSTATE_SOCKET");
    if direct {
        command.env("HOOKSTATE_SERVE", "0");
    }
    let mut child = command
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// Starts `hookstate serve` on `db` and waits for its first line.
fn start_server(db: &Path) -> (Child, Value) {
    let mut child = hookstate(db)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    let serving: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    child.stdout = Some(stdout.into_inner());
    (child, serving)
}

/// Stops a server with SIGTERM and returns its exit code and its last line.
fn stop_server(child: Child) -> (Option<i32>, Value) {
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let out = child.wait_with_output().unwrap();
    let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").to_owned();
    (out.status.code(), serde_json::from_str(&last).unwrap_or(Value::Null))
}

#[test]
fn the_cli_suite_answers_the_same_through_a_server() {
    let root = tempfile::tempdir().unwrap();
    let run = |name: &str, served: bool| {
        let dir = root.path().join(name);
        let db = dir.join("store").join("state.redb");
        std::fs::create_dir_all(dir.join("hermit")).unwrap();
        let init = call(&db, &dir, &["init"], None, true);
        assert_eq!(init.status.code(), Some(0), "{init:?}");
        let server = served.then(|| start_server(&db));
        let answers: Vec<_> = script()
            .into_iter()
            .map(|(args, stdin)| {
                let args: Vec<&str> = args.into_iter().collect();
                let out = call(&db, &dir.join("hermit"), &args, stdin, !served);
                (args.join(" "), normalized(&out, &db, &dir.join("hermit")))
            })
            .collect();
        let stopped = server.map(|(child, serving)| {
            assert_eq!(serving["socket"], format!("{}.sock", db.display()));
            stop_server(child)
        });
        let verify = call(&db, &dir, &["verify"], None, true);
        assert_eq!(verify.status.code(), Some(0), "{verify:?}");
        (answers, stopped)
    };
    let (direct, _) = run("direct", false);
    let (served, stopped) = run("served", true);
    let mut differ = Vec::new();
    for ((call, a), (_, b)) in direct.iter().zip(&served) {
        if a != b {
            differ.push(format!("{call}\n  direct: {a:?}\n  served: {b:?}"));
        }
    }
    let codes: Vec<Option<i32>> = direct.iter().map(|(_, (code, _, _))| *code).collect();
    println!("served parity calls={} differ={} exits={codes:?}", direct.len(), differ.len());
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    // The script covers what it claims to: success, refusal, invalid and usage.
    for code in [0, 1, 3, 64] {
        assert!(codes.contains(&Some(code)), "no call exited {code}: {codes:?}");
    }
    let (exit, last) = stopped.unwrap();
    assert_eq!(exit, Some(0), "SIGTERM stops the server with exit 0");
    assert_eq!(last["stopped"], "signal");
    let requests = last["stats"]["requests"].as_u64().unwrap();
    // Every call of the script but `init` is served (none is a local verb).
    assert_eq!(requests, script().len() as u64, "calls the server answered: {last}");
}

#[test]
fn a_second_server_names_the_first_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (first, serving) = start_server(&db);
    let second = hookstate(&db).arg("serve").stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(4), "{second:?}");
    assert!(stderr.contains(&format!("pid {}", serving["pid"])), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (exit, _) = stop_server(first);
    assert_eq!(exit, Some(0));
    assert!(!Path::new(&format!("{}.sock", db.display())).exists(), "the socket is removed");
}
