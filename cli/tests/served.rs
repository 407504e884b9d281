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

/// Idle bound of every server a test starts: longer than any quiet spell of a test, short
/// enough that a server a panicking test leaves running goes away soon.
pub(crate) const LEFT_BEHIND_IDLE_S: &str = "60";
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

/// Starts `hookstate serve` on `db` and waits for its first line. A server a failed test
/// leaves behind stops by itself after [`LEFT_BEHIND_IDLE_S`] without a request.
fn start_server(db: &Path) -> (Child, Value) {
    let mut child = hookstate(db)
        .args(["serve", "--idle-exit-s", LEFT_BEHIND_IDLE_S])
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

/// A relative `--db` names the same store, and prints the same path, served or not: a server
/// makes the caller's paths absolute against the caller's directory, and so does a direct call.
#[test]
fn a_relative_db_prints_the_same_path_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let init = hookstate(&db).arg("init").output().unwrap();
    assert!(init.status.success(), "{init:?}");
    let stats = |served: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hookstate"));
        command.current_dir(dir.path()).args(["--db", "state.redb", "stats"]);
        command.env_remove("HOOKSTATE_SOCKET").env_remove("HOOKSTATE_SCOPE");
        if !served {
            command.env("HOOKSTATE_SERVE", "0");
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let direct = stats(false);
    let (server, _) = start_server(&db);
    let served = stats(true);
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    assert_eq!(last["stats"]["requests"], 1, "the served stats went to the server: {last}");
    assert_eq!(direct, served);
    let path: Value = serde_json::from_str(&direct).unwrap();
    assert_eq!(path["path"], db.display().to_string(), "{direct}");
}

/// How long a server may take to notice its executable was replaced and stop (it looks once a
/// second).
const REPLACED_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[test]
fn a_server_stops_when_its_executable_is_replaced_and_not_when_it_is_only_read() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = bin.join("hookstate");
    std::fs::copy(env!("CARGO_BIN_EXE_hookstate"), &exe).unwrap();
    let db = dir.path().join("state.redb");
    // A process another test thread forks while the copy's write handle is open holds that
    // handle until it execs, and this exec fails with ETXTBSY meanwhile: try again shortly.
    let mut attempts = 0;
    let mut child = loop {
        let spawned = Command::new(&exe)
            .args(["--db", db.to_str().unwrap(), "serve", "--idle-exit-s", LEFT_BEHIND_IDLE_S])
            .env_remove("HOOKSTATE_SESSION")
            .env_remove("HOOKSTATE_SCOPE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"serving\""), "{line}");
    // Reading the executable (another process starting from it) is no upgrade.
    std::fs::read(&exe).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server stopped with its executable unchanged"
    );
    let put = hookstate(&db).args(["kv", "put", "k", "1"]).output().unwrap();
    assert_eq!(put.status.code(), Some(0), "{put:?}");
    // An upgrade: a new file renamed over the old name.
    let next = bin.join(".hookstate.new");
    std::fs::copy(env!("CARGO_BIN_EXE_hookstate"), &next).unwrap();
    std::fs::rename(&next, &exe).unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < REPLACED_STOP_WAIT, "the server did not stop after the upgrade");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let last: Value = serde_json::from_str(rest.lines().last().unwrap_or("")).unwrap();
    assert_eq!(last["stopped"], "replaced", "{rest}");
    assert!(!hookstate_engine::socket_path(&db).exists(), "the socket outlived the server");
    let get = hookstate(&db).args(["kv", "get", "k"]).output().unwrap();
    assert_eq!(get.status.code(), Some(0), "calls run in-process after it: {get:?}");
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

/// Hook calls one after another (one connection each) are served by the thread the first one
/// started: a connection thread whose connection closed waits for the next one. Two clients
/// connected at once still get a thread each.
#[test]
fn calls_one_after_another_reuse_one_connection_thread() {
    use hookstate_engine::{socket_path, Client};
    const CALLS: usize = 16;
    // Each call starts after the last one's process exited, so its thread waits again by then
    // but for the scheduler: a call that comes first starts a thread, which waits from then on.
    const THREADS_MAX: u64 = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (server, _) = start_server(&db);
    for n in 0..CALLS {
        let value = n.to_string();
        let put = call(&db, dir.path(), &["kv", "put", "k", &value], None, false);
        assert_eq!(put.status.code(), Some(0), "{put:?}");
        let get = call(&db, dir.path(), &["kv", "get", "k"], None, false);
        let got: Value = serde_json::from_slice(&get.stdout).unwrap();
        assert_eq!(got["value"], n as u64, "{got}");
    }
    let wait = std::time::Duration::from_secs(10);
    let both = [Client::connect(&socket_path(&db), wait), Client::connect(&socket_path(&db), wait)];
    assert!(both.iter().all(Result::is_ok), "two connections at once are both served");
    drop(both);
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    let stats = &last["stats"];
    let connections = stats["connections"].as_u64().unwrap();
    let threads = stats["threads"].as_u64().unwrap();
    println!("served calls={} connections={connections} threads={threads}", 2 * CALLS);
    assert_eq!(stats["requests"], 2 * CALLS as u64, "{last}");
    assert_eq!(connections, 2 * CALLS as u64 + 2, "{last}");
    assert!((2..=THREADS_MAX).contains(&threads), "threads started: {last}");
}

/// Persistent clients hammering one server: its writes are committed in batches (the server's
/// largest batch holds more than one call), and inside them every compare-and-swap and every
/// idempotency key behaves as per call — no item claimed twice, each revision of a contended
/// record won once, a key shared by every client applied once, and a refusal in a batch does not
/// disturb the calls beside it.
#[test]
fn group_commit_keeps_every_compare_and_swap_and_key() {
    use hookstate_engine::{socket_path, Answer, Client, ClientFrame, Run, ServerFrame};
    use std::time::{Duration, Instant};
    const CLIENTS: usize = 12;
    const ITEMS: usize = 60;
    const ROUNDS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    for n in 0..ITEMS {
        let out = call(&db, dir.path(), &["queue", "push", "q", &format!("i{n}")], None, true);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let (server, _) = start_server(&db);
    let socket = socket_path(&db);
    let wait = Duration::from_secs(30);
    let run = |client: &mut Client, id: u64, argv: &[String]| -> (u8, Value) {
        let request = Run { id, argv: argv.to_vec(), ..Run::default() };
        match client.run(&request, &mut || None, Instant::now() + wait).unwrap() {
            Answer::Reply(reply) => {
                (reply.exit, serde_json::from_str(&reply.stdout).unwrap_or(Value::Null))
            }
            Answer::Error { error, message } => panic!("{error:?}: {message}"),
        }
    };
    let results: Vec<Vec<(String, u8, Value)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (socket, run) = (&socket, &run);
                s.spawn(move || {
                    let mut client = Client::connect(socket, wait).unwrap();
                    let mut seen = Vec::new();
                    let holder = format!("c{c}");
                    let strings =
                        |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
                    for round in 0..ROUNDS {
                        let id = (round * 4) as u64;
                        let claim = strings(&["queue", "claim", "q", "--holder", &holder]);
                        let (code, v) = run(&mut client, id, &claim);
                        seen.push(("claim".to_owned(), code, v));
                        // Every client races for the next revision of one record.
                        let (_, got) = run(&mut client, id + 1, &strings(&["kv", "get", "hot"]));
                        let rev = got["rev"].as_u64().unwrap_or(0).to_string();
                        let value = format!("{{\"c\":{c}}}");
                        let put = strings(&["kv", "put", "hot", &value, "--expect-rev", &rev]);
                        let (code, v) = run(&mut client, id + 2, &put);
                        seen.push(("put".to_owned(), code, v));
                        // One key per round, shared by every client: applied once.
                        let key = format!("round-{round}");
                        let add = strings(&["--idem-key", &key, "counter", "add", "c", "1"]);
                        let (code, v) = run(&mut client, id + 3, &add);
                        seen.push(("add".to_owned(), code, v));
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut stats_client = Client::connect(&socket, wait).unwrap();
    stats_client.send(&ClientFrame::Stats { id: 1 }).unwrap();
    let ServerFrame::Stats { stats, .. } = stats_client.receive(Instant::now() + wait).unwrap()
    else {
        panic!("no stats");
    };
    drop(stats_client);
    let (exit, _) = stop_server(server);
    assert_eq!(exit, Some(0));
    let all: Vec<&(String, u8, Value)> = results.iter().flatten().collect();
    let mut items = std::collections::BTreeMap::new();
    for (_, code, v) in all.iter().filter(|(verb, _, _)| verb == "claim") {
        assert_eq!(*code, 0, "{v}");
        if v["claimed"] == true {
            *items.entry(v["item"].as_str().unwrap().to_owned()).or_insert(0) += 1;
        }
    }
    let doubles: Vec<_> = items.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubles.is_empty(), "items claimed twice: {doubles:?}");
    assert_eq!(items.len(), ITEMS.min(CLIENTS * ROUNDS), "every item claimed once");
    let mut revs = std::collections::BTreeMap::new();
    let (mut won, mut lost) = (0, 0);
    for (_, code, v) in all.iter().filter(|(verb, _, _)| verb == "put") {
        match code {
            0 => {
                won += 1;
                *revs.entry(v["rev"].as_u64().unwrap()).or_insert(0) += 1;
            }
            1 => {
                assert_eq!(v["refused"], "rev_mismatch", "{v}");
                lost += 1;
            }
            other => panic!("put exit {other}: {v}"),
        }
    }
    assert!(revs.values().all(|n| *n == 1), "a revision won twice: {revs:?}");
    assert_eq!(revs.len(), won, "revisions won");
    let adds: Vec<_> = all.iter().filter(|(verb, _, _)| verb == "add").collect();
    assert!(adds.iter().all(|(_, code, _)| *code == 0), "{adds:?}");
    let counter = call(&db, dir.path(), &["counter", "get", "c"], None, true);
    let value: Value = serde_json::from_slice(&counter.stdout).unwrap();
    assert_eq!(value["value"], ROUNDS as u64, "one add per shared key: {value}");
    println!(
        "group commit clients={CLIENTS} writes={} commits={} batch_max={} batch_sizes={:?} \
         cas_won={won} cas_lost={lost}",
        stats.writes, stats.commits, stats.batch_max, stats.batch_sizes
    );
    assert!(stats.batch_max > 1, "no batch held two calls: {stats:?}");
    assert!(stats.commits < stats.writes, "every write had its own commit: {stats:?}");
    let verify = call(&db, dir.path(), &["verify"], None, true);
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
}

/// The socket's safety bounds (issue 14, deliverable 5), against a real server: a frame that
/// announces more than the request bound is answered `too_large` and the connection closed
/// unread; a client that starts a frame and goes silent is cut off at the request deadline;
/// one connection past the bound is answered `busy`; and after all of it the server still
/// answers a call.
#[test]
fn the_socket_bounds_its_clients_and_keeps_serving() {
    use hookstate_engine::{
        socket_path, Client, CONNECTIONS_MAX, REQUEST_BYTES_MAX, REQUEST_READ_MS,
    };
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (server, _) = start_server(&db);
    let socket = socket_path(&db);
    let wait = Duration::from_secs(10);
    let hello = |stream: &mut UnixStream| -> Vec<u8> {
        let mut header = [0u8; 4];
        stream.read_exact(&mut header).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
        stream.read_exact(&mut payload).unwrap();
        payload
    };
    // Too large: the header alone is enough.
    let mut big = UnixStream::connect(&socket).unwrap();
    big.set_read_timeout(Some(wait)).unwrap();
    hello(&mut big);
    let len = u32::try_from(REQUEST_BYTES_MAX + 1).unwrap();
    big.write_all(&len.to_be_bytes()).unwrap();
    let answer: Value = serde_json::from_slice(&hello(&mut big)).unwrap();
    assert_eq!(answer["error"], "too_large", "{answer}");
    let mut rest = Vec::new();
    assert_eq!(big.read_to_end(&mut rest).unwrap(), 0, "the connection is closed");
    // Silent mid-frame: cut off at the deadline, not before, and well before a minute.
    let mut slow = UnixStream::connect(&socket).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(REQUEST_READ_MS * 3))).unwrap();
    hello(&mut slow);
    let started = Instant::now();
    slow.write_all(&[0, 0, 1, 0, b'{']).unwrap();
    let mut rest = Vec::new();
    let read = slow.read_to_end(&mut rest);
    let took = started.elapsed();
    assert!(read.is_ok() && rest.is_empty(), "closed without an answer: {read:?} {rest:?}");
    assert!(took >= Duration::from_millis(REQUEST_READ_MS - 100), "cut off early: {took:?}");
    assert!(took < Duration::from_millis(REQUEST_READ_MS * 2), "cut off late: {took:?}");
    // The connection bound: CONNECTIONS_MAX held open, the next one is told busy.
    // (The threads of the two connections closed above may take a moment to count down.)
    drop((big, slow));
    let mut held: Vec<Client> = Vec::new();
    let deadline = Instant::now() + wait;
    while held.len() < CONNECTIONS_MAX {
        match Client::connect(&socket, wait) {
            Ok(client) => held.push(client),
            Err(e) if Instant::now() < deadline => {
                assert!(e.to_string().contains("connections are open"), "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{} connections held, then: {e}", held.len()),
        }
    }
    let refused = Client::connect(&socket, wait).unwrap_err();
    assert!(refused.to_string().contains("connections are open"), "{refused}");
    drop(held);
    // Still serving.
    let deadline = Instant::now() + wait;
    let client = loop {
        match Client::connect(&socket, wait) {
            Ok(client) => break client,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the server stopped serving: {e}"),
        }
    };
    let mut client = client;
    let run = hookstate_engine::Run {
        id: 5,
        argv: vec!["kv".into(), "get".into(), "k".into()],
        ..Default::default()
    };
    match client.run(&run, &mut || None, Instant::now() + wait).unwrap() {
        hookstate_engine::Answer::Reply(reply) => assert_eq!(reply.exit, 0, "{reply:?}"),
        other => panic!("{other:?}"),
    }
    drop(client);
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    assert!(last["stats"]["refused"].as_u64().unwrap() >= 1, "{last}");
}

/// A peer of another uid is refused by its credentials, before anything is read, even when the
/// socket's mode would let it connect (the test loosens it; the server never does). Runs where
/// the test can switch user (as root, with `setpriv`); elsewhere it says so and checks only
/// that the socket is 0600.
#[test]
fn a_peer_of_another_uid_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let db = dir.path().join("state.redb");
    let (server, _) = start_server(&db);
    let socket = hookstate_engine::socket_path(&db);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket's mode");
    let root = std::process::Command::new("id").arg("-u").output().unwrap();
    let can_switch = String::from_utf8_lossy(&root.stdout).trim() == "0"
        && Path::new("/usr/bin/setpriv").exists();
    if can_switch {
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        // As nobody, through node: connect and print the first frame the server sends.
        let script = format!(
            "const s=require('net').createConnection({:?});let b=Buffer.alloc(0);\
             s.on('data',d=>{{b=Buffer.concat([b,d]);}});s.on('close',()=>{{\
             console.log(b.subarray(4).toString());}});",
            socket.display().to_string()
        );
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "node", "-e", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let answer: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{text:?} {:?}: {e}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(answer["error"], "refused", "{answer}");
        assert!(answer["message"].as_str().unwrap().contains("uid 65534"), "{answer}");
    } else {
        println!("peer uid: cannot switch user here; checked the socket's mode only");
    }
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    if can_switch {
        assert_eq!(last["stats"]["refused"], 1, "{last}");
    }
}

/// A hook's request goes before the server's hello (the round trip saved), so a server that
/// stops (SIGSTOP) after the connect holds a request it has not answered, and might run it once
/// resumed: the call runs in-process once the hello bound passes, under an idempotency key of its
/// own making, so a run of the held request would replay it rather than apply it again.
#[test]
fn a_request_a_stopped_server_holds_runs_here_once_under_its_key() {
    use hookstate_engine::HELLO_WAIT_MS;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (server, serving) = start_server(&db);
    let pid = serving["pid"].to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    };
    signal("-STOP");
    let started = Instant::now();
    let added =
        hookstate(&db).args(["counter", "add", "c"]).env_remove("HOOKSTATE_SOCKET").output();
    let waited = started.elapsed();
    signal("-CONT");
    let added = added.unwrap();
    assert_eq!(added.status.code(), Some(0), "{added:?}");
    assert!(String::from_utf8_lossy(&added.stdout).contains("\"value\":1"), "{added:?}");
    assert!(waited >= Duration::from_millis(HELLO_WAIT_MS), "ran here only after the hello bound");
    let (exit, _) = stop_server(server);
    assert_eq!(exit, Some(0));
    let direct = |args: &[&str]| {
        let out = hookstate(&db).env("HOOKSTATE_SERVE", "0").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(direct(&["counter", "get", "c"]).contains("\"value\":1"), "applied once");
    let log = direct(&["log", "--kind", "counter_added"]);
    let event: Value = serde_json::from_str(log.trim()).unwrap_or_else(|e| panic!("{log}: {e}"));
    let key = event["idem_key"].as_str().unwrap_or_default();
    assert!(key.starts_with("fwd-"), "ran under a key of its own making: {event}");
}

/// How long the test holds the store's write lock from outside the server.
const OUTSIDE_HOLD_MS: u64 = 2_500;
/// The forwarded calls' `--wait-ms` while the lock is held.
const SHORT_WAIT_MS: &str = "300";

/// Holds the store's write lock from outside the server for [`OUTSIDE_HOLD_MS`], on a thread
/// that has taken it when this returns.
fn hold_write_lock(db: &Path) -> std::thread::JoinHandle<()> {
    let (locked, is_locked) = std::sync::mpsc::channel();
    let db = db.to_path_buf();
    let holder = std::thread::spawn(move || {
        let database = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .open(&db)
            .unwrap();
        let txn = database.begin_write().unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(OUTSIDE_HOLD_MS));
        txn.abort().unwrap();
    });
    is_locked.recv().unwrap();
    holder
}

/// A forwarded write whose caller's wait (`--wait-ms`, or `HOOKSTATE_WAIT_MS`) runs out while
/// another process holds the write lock answers busy (exit 4) at that wait and is never applied
/// later. The server waited its own 10 s for the lock and committed the write once the holder
/// let go, after the caller had exited 4: a hook that retried, as exit 4 asks, applied it twice.
#[test]
fn a_forwarded_write_busy_past_its_wait_is_never_applied_later() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let direct = |args: &[&str]| {
        let out = hookstate(&db).env("HOOKSTATE_SERVE", "0").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(direct(&["counter", "add", "c"]).contains("\"value\":1"));
    let (server, _) = start_server(&db);
    let holder = hold_write_lock(&db);
    for by_env in [false, true] {
        let mut command = hookstate(&db);
        command.env_remove("HOOKSTATE_SOCKET").env_remove("HOOKSTATE_WAIT_MS");
        match by_env {
            true => command.env("HOOKSTATE_WAIT_MS", SHORT_WAIT_MS).args(["counter", "add", "c"]),
            false => command.args(["--wait-ms", SHORT_WAIT_MS, "counter", "add", "c"]),
        };
        let started = Instant::now();
        let out = command.output().unwrap();
        let waited = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "by env {by_env}: {stderr}");
        assert!(stderr.contains("store is busy"), "{stderr}");
        // It says how long the caller waited, as in-process (it said "0 ms" through a server).
        let said: u64 = stderr
            .split("for ")
            .nth(1)
            .and_then(|rest| rest.split(" ms").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no wait in {stderr}"));
        assert!(said >= SHORT_WAIT_MS.parse::<u64>().unwrap(), "{stderr}");
        assert!(
            waited < Duration::from_millis(OUTSIDE_HOLD_MS),
            "answered at its wait: {waited:?}"
        );
    }
    holder.join().unwrap();
    // The lock is free: a write the server still held for those calls would commit now.
    let served =
        hookstate(&db).args(["counter", "add", "d"]).env_remove("HOOKSTATE_SOCKET").output();
    assert!(served.unwrap().status.success(), "the server writes again");
    let (exit, stopped) = stop_server(server);
    assert_eq!(exit, Some(0), "{stopped}");
    assert!(direct(&["counter", "get", "c"]).contains("\"value\":1"), "neither busy call applied");
}

/// A fake server in node: listens on `socket`, says hello, writes each request it reads to
/// `captured` and answers it with `exit` and a forged stdout; ends after one connection.
fn fake_server_script(socket: &Path, captured: &Path, exit: u8) -> String {
    format!(
        "const net=require('net'),fs=require('fs');const f=o=>{{const b=Buffer.from(\
         JSON.stringify(o));const h=Buffer.alloc(4);h.writeUInt32BE(b.length);\
         return Buffer.concat([h,b]);}};const srv=net.createServer(c=>{{let b=Buffer.alloc(0);\
         c.write(f({{hookstate:'serve',protocol:1,pid:1,db:'x'}}));c.on('data',d=>{{\
         b=Buffer.concat([b,d]);if(b.length>=4&&b.length>=4+b.readUInt32BE(0)){{\
         const req=JSON.parse(b.subarray(4,4+b.readUInt32BE(0)).toString());\
         fs.writeFileSync({captured:?},JSON.stringify(req));c.end(f({{id:req.id,exit:{exit},\
         stdout:'{{\"FORGED\":true}}\\n',stderr:'injected\\n'}}));\
         srv.close(()=>process.exit(0));}}}});}});\
         srv.listen({socket:?},()=>{{fs.chmodSync({socket:?},0o777);console.log('up');}});\
         setTimeout(()=>process.exit(0),20000);",
        captured = captured.display().to_string(),
        socket = socket.display().to_string(),
    )
}

/// The CLI gives its request only to a listener of its own user, and never exits with a code
/// hookstate does not give: a fake server of the same user answering exit 2 (a blocking error
/// for Claude Code) makes the call exit 5 without printing the answer; one of another user
/// (as root, through `setpriv`) gets nothing, and the call runs in-process. The CLI sent its
/// whole request (arguments, environment, working directory) to any listener and exited with
/// whatever it answered.
#[test]
fn the_cli_forwards_only_to_its_own_user_and_never_exits_with_a_foreign_code() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    // The fake's directory: open to the user it runs as.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = open.path().join("fake.sock");
    let captured = open.path().join("captured.json");
    let start = |command: &mut Command| {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "up");
        child
    };
    let call =
        || hookstate(&db).env("HOOKSTATE_SOCKET", &socket).args(["counter", "add", "c"]).output();
    let mut fake =
        start(Command::new("node").args(["-e", &fake_server_script(&socket, &captured, 2)]));
    let out = call().unwrap();
    let _ = fake.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(out.stdout.is_empty() && !stderr.contains("injected"), "{out:?}");
    assert!(stderr.contains("answered exit 2"), "{stderr}");

    let root = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&root.stdout).trim() != "0"
        || !Path::new("/usr/bin/setpriv").exists()
    {
        println!("foreign listener: cannot switch user here; checked the exit code only");
        return;
    }
    // node removes its socket when it closes.
    let _ = std::fs::remove_file(&socket);
    std::fs::remove_file(&captured).unwrap();
    let script = fake_server_script(&socket, &captured, 0);
    let mut fake = start(Command::new("setpriv").args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "node",
        "-e",
        &script,
    ]));
    let out = call().unwrap();
    let _ = fake.kill();
    let _ = fake.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("\"value\":1") && !stdout.contains("FORGED"), "ran here: {stdout}");
    assert!(!captured.exists(), "the foreign listener got the request");
}

/// A call naming a second anchor directory the server does not keep (`--anchor-dir`,
/// `HOOKSTATE_ANCHOR_DIR`) runs in-process, where that anchor is checked and moved: the server
/// answered it with its own anchor, so the caller's was never written, a missing directory was
/// not refused, and the caller's next direct call found its anchor missing (exit 5).
#[test]
fn a_call_naming_another_second_anchor_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let anchors = tempfile::tempdir().unwrap();
    let anchor_dir = anchors.path().to_str().unwrap();
    let (server, _) = start_server(&db);
    let run = |envs: &[(&str, &str)], args: &[&str]| {
        let mut command = hookstate(&db);
        command
            .env_remove("HOOKSTATE_SOCKET")
            .env_remove("HOOKSTATE_ANCHOR_DIR")
            .envs(envs.to_vec());
        command.args(args).output().unwrap()
    };
    let added = run(&[], &["--anchor-dir", anchor_dir, "counter", "add", "a"]);
    assert_eq!(added.status.code(), Some(0), "{added:?}");
    assert_eq!(std::fs::read_dir(anchors.path()).unwrap().count(), 1, "its anchor was written");
    let added = run(&[("HOOKSTATE_ANCHOR_DIR", anchor_dir)], &["counter", "add", "a"]);
    assert_eq!(added.status.code(), Some(0), "{added:?}");
    let direct =
        run(&[("HOOKSTATE_SERVE", "0")], &["--anchor-dir", anchor_dir, "counter", "add", "a"]);
    assert!(String::from_utf8_lossy(&direct.stdout).contains("\"value\":3"), "{direct:?}");
    let missing = run(&[], &["--anchor-dir", "/nonexistent/anchors", "counter", "get", "a"]);
    assert_eq!(missing.status.code(), Some(6), "refused as in-process: {missing:?}");
    // A call naming none is still the server's.
    assert_eq!(run(&[], &["counter", "add", "b"]).status.code(), Some(0));
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    assert_eq!(last["stats"]["writes"], 1, "only the call naming no anchor was served: {last}");
}

/// A store file moved over the served one (a restore put in place) takes the writes that follow:
/// the server refuses to commit to the file it holds, which is no longer the store, stops, and
/// the calls run in-process on the file at the path. It went on committing to the old file,
/// every write acknowledged and lost, and the store at the path then refused writes (exit 5).
#[test]
fn a_store_moved_over_the_served_one_takes_every_write_that_follows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let run = |db: &Path, args: &[&str]| {
        let out = hookstate(db).env_remove("HOOKSTATE_SOCKET").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&db, &["counter", "add", "c"]);
    let (server, _) = start_server(&db);
    let dump = dir.path().join("state.dump");
    run(&db, &["dump", "--to", dump.to_str().unwrap()]);
    let restored = dir.path().join("restored.redb");
    run(&restored, &["restore", "--from", dump.to_str().unwrap()]);
    let with_head = |path: &Path| {
        let mut head = path.as_os_str().to_owned();
        head.push(".head");
        std::path::PathBuf::from(head)
    };
    std::fs::rename(with_head(&restored), with_head(&db)).unwrap();
    std::fs::rename(&restored, &db).unwrap();
    for want in 2..=4 {
        let added = run(&db, &["counter", "add", "c"]);
        assert!(added.contains(&format!("\"value\":{want}")), "{added}");
    }
    let (exit, last) = stop_server(server);
    assert_eq!((exit, last["stopped"].as_str()), (Some(0), Some("replaced")), "{last}");
    let direct = hookstate(&db).env("HOOKSTATE_SERVE", "0").args(["counter", "get", "c"]).output();
    let direct = String::from_utf8_lossy(&direct.unwrap().stdout).into_owned();
    assert!(direct.contains("\"value\":4"), "every write is in the store at the path: {direct}");
}

/// A store file moved over the served one while a call that runs alone (a mirrored one) waits
/// for the write lock: its commit to the old file is refused, and the call runs again on the
/// file at the path. It answered exit 6 (the refused commit), which tells a hook to stop.
#[test]
fn a_call_alone_that_meets_a_store_moved_over_the_served_one_runs_on_the_new_file() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let run = |db: &Path, args: &[&str]| {
        let out = hookstate(db).env("HOOKSTATE_SERVE", "0").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&db, &["counter", "add", "c"]);
    let dump = dir.path().join("state.dump");
    run(&db, &["dump", "--to", dump.to_str().unwrap()]);
    let restored = dir.path().join("restored.redb");
    run(&restored, &["restore", "--from", dump.to_str().unwrap()]);
    let (server, _) = start_server(&db);
    let holder = hold_write_lock(&db);
    let mirror = dir.path().join("mirror");
    let call = hookstate(&db)
        .env_remove("HOOKSTATE_SOCKET")
        .args(["--wait-ms", "10000", "--mirror", mirror.to_str().unwrap(), "counter", "add", "c"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The server has taken the request (and checked its file) and waits for the lock.
    std::thread::sleep(Duration::from_millis(OUTSIDE_HOLD_MS / 3));
    let mut head = db.as_os_str().to_owned();
    head.push(".head");
    let mut restored_head = restored.as_os_str().to_owned();
    restored_head.push(".head");
    std::fs::rename(&restored_head, &head).unwrap();
    std::fs::rename(&restored, &db).unwrap();
    holder.join().unwrap();
    let out = call.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (exit, last) = stop_server(server);
    assert_eq!((exit, last["stopped"].as_str()), (Some(0), Some("replaced")), "{last}");
    assert_eq!(last["stats"]["solo"], 0, "the call was not answered from the old file: {last}");
    assert!(run(&db, &["counter", "get", "c"]).contains("\"value\":2"), "in the store at the path");
}

/// A usage error prints the same line with and without a server when a variable sets a flag
/// (`HOOKSTATE_SESSION`, as hooks set it): in-process, clap counted the flag as given and put it
/// in the line (`usage: hookstate kv put --session <SESSION> <KEY>`), or added a clause.
#[test]
fn a_usage_error_reads_the_same_served_or_not_with_a_variable_set() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (server, _) = start_server(&db);
    let cases: [&[&str]; 4] =
        [&["kv", "put"], &["counter"], &["kv", "put", "k", "1", "--bogus"], &["queue", "claim"]];
    for args in cases {
        let run = |direct: bool| {
            let mut command = hookstate(&db);
            command.env_remove("HOOKSTATE_SOCKET").env("HOOKSTATE_SESSION", "s1");
            command.env("HOOKSTATE_WAIT_MS", "500");
            if direct {
                command.env("HOOKSTATE_SERVE", "0");
            }
            command.args(args).output().unwrap()
        };
        let (direct, served) = (run(true), run(false));
        assert_eq!(direct.status.code(), Some(64), "{args:?}: {direct:?}");
        assert_eq!(
            (direct.status.code(), &direct.stderr),
            (served.status.code(), &served.stderr),
            "{args:?}: {direct:?} {served:?}"
        );
        assert!(!String::from_utf8_lossy(&direct.stderr).contains("--session <SESSION>"));
    }
    // A variable that is no wait, beside a flag that is one: a usage error either way (the
    // server took the flag and wrote).
    let run = |direct: bool| {
        let mut command = hookstate(&db);
        command.env_remove("HOOKSTATE_SOCKET").env("HOOKSTATE_WAIT_MS", "soon");
        if direct {
            command.env("HOOKSTATE_SERVE", "0");
        }
        command.args(["--wait-ms", "100", "counter", "add", "c"]).output().unwrap()
    };
    let (direct, served) = (run(true), run(false));
    assert_eq!(direct.status.code(), Some(64), "{direct:?}");
    assert_eq!((direct.status.code(), &direct.stderr), (served.status.code(), &served.stderr));
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    assert_eq!(last["stats"]["writes"], 0, "{last}");
}

/// A forwarded write keeps to its caller's wait as the call would in-process: `--wait-ms 0` (one
/// try of the lock) writes on an idle store, and a wait past its bound is refused (exit 3). The
/// server answered every write of wait 0 busy while no one held the lock, and took a wait past
/// the bound.
#[test]
fn a_served_wait_of_0_writes_and_one_past_the_bound_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let (server, _) = start_server(&db);
    let run = |args: &[&str]| {
        hookstate(&db)
            .env_remove("HOOKSTATE_SOCKET")
            .env_remove("HOOKSTATE_WAIT_MS")
            .args(args)
            .output()
            .unwrap()
    };
    for _ in 0..3 {
        let added = run(&["--wait-ms", "0", "counter", "add", "c"]);
        assert_eq!(added.status.code(), Some(0), "{added:?}");
    }
    let past = run(&["--wait-ms", "600001", "counter", "add", "c"]);
    assert_eq!(past.status.code(), Some(3), "{past:?}");
    assert!(String::from_utf8_lossy(&past.stderr).contains("outside 0..=600000"), "{past:?}");
    let (exit, last) = stop_server(server);
    assert_eq!(exit, Some(0));
    assert_eq!(last["stats"]["writes"], 4, "every call was served: {last}");
    let got = hookstate(&db).env("HOOKSTATE_SERVE", "0").args(["counter", "get", "c"]).output();
    assert!(String::from_utf8_lossy(&got.unwrap().stdout).contains("\"value\":3"));
}

/// A command handed to the model (a claim's ack) names the program the hook ran, by its path,
/// where no launcher names itself (`HOOKSTATE_PROGRAM`): the binary copied into a plugin's
/// `bin/` and run by its absolute path was named as a bare `hookstate`, which the model's shell
/// did not find. Through a server the client's path is named, not the server's.
#[test]
fn a_handed_command_names_the_program_the_caller_ran() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.redb");
    let program = env!("CARGO_BIN_EXE_hookstate");
    let stop = r#"{"session_id":"s1","stop_hook_active":false,"hook_event_name":"Stop"}"#;
    let claim = |direct: bool| {
        let mut command = hookstate(&db);
        command.env_remove("HOOKSTATE_PROGRAM").env_remove("HOOKSTATE_SOCKET");
        if direct {
            command.env("HOOKSTATE_SERVE", "0");
        }
        let mut child = command
            .args(["hook", "claim", "tasks"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stop.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let block: Value = serde_json::from_slice(&out.stdout).unwrap();
        block["reason"].as_str().unwrap().to_owned()
    };
    for item in ["t1", "t2"] {
        hookstate(&db).args(["queue", "push", "tasks", item]).output().unwrap();
    }
    let named = format!("{program} --db {}", db.display());
    let reason = claim(true);
    assert!(reason.contains(&named), "in process: {reason}");
    let (server, _) = start_server(&db);
    let reason = claim(false);
    let (code, stats) = stop_server(server);
    assert_eq!(code, Some(0));
    assert!(reason.contains(&named), "served: {reason}");
    assert_eq!(stats["stats"]["writes"], 1, "the claim went through the server: {stats}");
}
