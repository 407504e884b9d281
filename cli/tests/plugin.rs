//! The Claude Code plugin in `plugin/`: every command of its `hooks/hooks.json` run the way Claude
//! Code runs it (through a shell, the event's JSON payload on stdin, `CLAUDE_PLUGIN_ROOT` and
//! `CLAUDE_PROJECT_DIR` set, here `HOOKSTATE_DB` pointing at a temporary store), with its stdout,
//! stderr and exit code checked; the commands a hook hands the model (an ack, a reply) run in a
//! shell without `HOOKSTATE_DB` and still reach that store; the SessionStart server detaches and
//! answers the later hooks; and the launcher's own failures never exit 2.
//!
//! Does not build hookstate: the launcher is pointed at the test binary with `HOOKSTATE_BIN`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hookstate_engine::{socket_path, Client, ClientFrame, ServeStats, ServerFrame};
use serde_json::{json, Value};

use super::Run;

fn plugin_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin")
}

/// A scratch world: a home, a project and a store path, none of them the user's.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World { dir: tempfile::tempdir().unwrap() }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("store/state.redb")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// Runs `command` as Claude Code runs a hook command: `sh -c`, the payload on stdin, the
    /// plugin's variables set; `with_db` sets HOOKSTATE_DB (a hook's environment), else it is
    /// left out (the model's shell).
    fn shell(&self, command: &str, stdin: &str, with_db: bool) -> Run {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .env("CLAUDE_PLUGIN_ROOT", plugin_root())
            .env("CLAUDE_PROJECT_DIR", self.project())
            .env("HOOKSTATE_BIN", env!("CARGO_BIN_EXE_hookstate"))
            .env("HOME", self.dir.path().join("home"))
            .env_remove("HOOKSTATE_DB")
            .env_remove("HOOKSTATE_SESSION")
            .env_remove("HOOKSTATE_SCOPE")
            .env_remove("HOOKSTATE_MIRROR")
            .env_remove("HOOKSTATE_PROGRAM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if with_db {
            cmd.env("HOOKSTATE_DB", self.db());
        }
        let mut child = cmd.spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A direct call on the store, as the plugin's hooks scope it.
    fn hookstate(&self, args: &[&str]) -> Run {
        let scope = format!("project:{}", self.project().display());
        let mut all = vec!["--scope", &scope];
        all.extend_from_slice(args);
        super::run_in(&self.db(), &all)
    }

    fn payload(&self, event: &str, extra: Value) -> String {
        let mut payload = json!({
            "session_id": "sess-1",
            "transcript_path": self.dir.path().join("t.jsonl"),
            "cwd": self.project(),
            "hook_event_name": event,
        });
        payload.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        payload.to_string()
    }
}

/// Every command of hooks.json, by event, after checking the file's shape.
fn commands() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(plugin_root().join("hooks/hooks.json")).unwrap();
    let hooks: Value = serde_json::from_str(&text).unwrap();
    let manifest = std::fs::read_to_string(plugin_root().join(".claude-plugin/plugin.json"));
    let manifest: Value = serde_json::from_str(&manifest.unwrap()).unwrap();
    assert_eq!(manifest["name"], "hookstate");
    let mut out = BTreeMap::new();
    for (event, groups) in hooks["hooks"].as_object().unwrap() {
        assert!(["SessionStart", "PostToolUse", "Stop"].contains(&event.as_str()), "{event}");
        for group in groups.as_array().unwrap() {
            for hook in group["hooks"].as_array().unwrap() {
                assert_eq!(hook["type"], "command", "{hook}");
                assert!(hook["timeout"].as_u64().is_some_and(|t| t <= 60), "{hook}");
                let command = hook["command"].as_str().unwrap();
                assert!(command.starts_with("\"${CLAUDE_PLUGIN_ROOT}/bin/hookstate\""));
                out.entry(event.clone()).or_insert_with(Vec::new).push(command.to_owned());
            }
        }
    }
    out
}

/// The one command of `event` whose text holds `needle`.
fn command<'a>(all: &'a BTreeMap<String, Vec<String>>, event: &str, needle: &str) -> &'a str {
    let found: Vec<&String> = all[event].iter().filter(|c| c.contains(needle)).collect();
    assert_eq!(found.len(), 1, "{event} {needle}: {found:?}");
    found[0]
}

/// The command a block reason hands the model after `marker`, up to the end of its line.
fn handed(reason: &str, marker: &str) -> String {
    let start = reason.find(marker).unwrap_or_else(|| panic!("{marker:?} in {reason}"));
    reason[start + marker.len()..].lines().next().unwrap().trim().to_owned()
}

/// The longest a backgrounded hook command may take to give the shell back, and a detached
/// server to start listening or to stop.
const DETACH_WAIT: Duration = Duration::from_secs(10);

/// The server the SessionStart hook started, stopped (SIGTERM) when dropped, so a failing test
/// leaves no server waiting out its idle time.
struct Served {
    socket: PathBuf,
    pid: u32,
}

impl Served {
    /// Waits for the server on `db` to answer and names it.
    fn find(db: &Path) -> Served {
        let socket = socket_path(db);
        let pid = answering(&socket);
        Served { socket, pid }
    }

    fn stats(&self) -> ServeStats {
        let mut client = Client::connect(&self.socket, DETACH_WAIT).unwrap();
        client.send(&ClientFrame::Stats { id: 1 }).unwrap();
        match client.receive(Instant::now() + DETACH_WAIT).unwrap() {
            ServerFrame::Stats { stats, .. } => stats,
            other => panic!("asked for stats, got {other:?}"),
        }
    }

    /// Stops the server and waits until its socket no longer answers.
    fn stop(&self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        let start = Instant::now();
        while Client::connect(&self.socket, Duration::from_millis(200)).is_ok() {
            assert!(start.elapsed() < DETACH_WAIT, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The pid of the server answering on `socket`, waiting for one at most [`DETACH_WAIT`].
fn answering(socket: &Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(client) = Client::connect(socket, DETACH_WAIT) {
            return client.pid;
        }
        assert!(start.elapsed() < DETACH_WAIT, "no server answered on {}", socket.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
    }
}

#[test]
fn every_hook_of_the_plugin_runs_as_claude_code_runs_it() {
    let world = World::new();
    std::fs::create_dir(world.project()).unwrap();
    let all = commands();
    assert_eq!(all.values().map(Vec::len).sum::<usize>(), 5, "{all:?}");
    let stop = world.payload("Stop", json!({ "stop_hook_active": false }));

    // Before the first write there is no store: the Stop hooks allow the stop and create none.
    for command in &all["Stop"] {
        let run = world.shell(command, &stop, true);
        assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
    }
    assert!(!world.db().exists(), "a Stop hook created the store");

    // SessionStart: the session is recorded once; a resume of the same session is not new.
    let once = command(&all, "SessionStart", "hook once");
    for source in ["startup", "resume"] {
        let start = world.payload("SessionStart", json!({ "source": source }));
        let run = world.shell(once, &start, true);
        assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
    }
    assert_eq!(
        world.hookstate(&["set", "has", "sessions", "sess-1"]).expect(0).json()["present"],
        true
    );
    let added = world.hookstate(&["log", "--kind", "set_added"]).expect(0).stdout;
    assert_eq!(added.lines().count(), 1, "the resume added the session again: {added}");

    // SessionStart: the server for the session's calls gives the shell back at once, prints
    // nothing, and serves the store; a second start (a resume) leaves the first one serving.
    let serve = command(&all, "SessionStart", " serve ");
    let start = world.payload("SessionStart", json!({ "source": "startup" }));
    let began = Instant::now();
    let run = world.shell(serve, &start, true);
    assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
    assert!(began.elapsed() < DETACH_WAIT, "the shell waited for the server");
    let served = Served::find(&world.db());
    let run = world.shell(serve, &start, true);
    assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
    assert_eq!(answering(&served.socket), served.pid, "a second server took over");
    let before = served.stats();

    // PostToolUse: each tool use counts once, per project, answered by the server.
    let count = command(&all, "PostToolUse", "counter add");
    let tool = world.payload(
        "PostToolUse",
        json!({ "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": {} }),
    );
    for n in 1..=3 {
        let run = world.shell(count, &tool, true);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
        assert_eq!(run.json()["value"], n, "{run:?}");
    }
    let after = served.stats();
    assert_eq!(after.writes - before.writes, 3, "the counts did not go through the server");
    served.stop();

    // Stop with a queued task: the session gets it, with an ack command for this store.
    world.hookstate(&["queue", "push", "tasks", "t1", "\"update the changelog\""]).expect(0);
    let claim = command(&all, "Stop", "hook claim");
    let run = world.shell(claim, &stop, true);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
    let block = run.json();
    assert_eq!(block["decision"], "block", "{block}");
    let reason = block["reason"].as_str().unwrap();
    assert!(reason.contains("update the changelog"), "{reason}");
    let ack = handed(reason, "record it as done with:");
    assert!(ack.contains(&format!("--db {}", world.db().display())), "{ack}");
    assert!(ack.contains("/plugin/bin/hookstate"), "the launcher is named: {ack}");
    // The model runs it in its own shell, where HOOKSTATE_DB is not set.
    let acked = world.shell(&ack, "", false);
    assert_eq!((acked.code, acked.stderr.as_str()), (0, ""), "{acked:?}");
    assert_eq!(acked.json()["ok"], true);
    assert_eq!(world.hookstate(&["queue", "list", "tasks"]).expect(0).json()["acked"], 1);
    let run = world.shell(claim, &stop, true);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "nothing left to claim: {run:?}");

    // The moonshine Stop hook: a listening project's comment is delivered with a reply command
    // that reaches this store.
    let project = ["--scope", "moonshine:essay"];
    let target = r#"{"kind":"block","path":"a.md","range":[0,4],"excerpt":"Once"}"#;
    let add = [&project[..], &["feedback", "add", "--target", target, "Say why."]].concat();
    let id = super::run_in(&world.db(), &add).expect(0).json()["id"].as_str().unwrap().to_owned();
    super::run_in(&world.db(), &[&project[..], &["feedback", "control", "listen"]].concat())
        .expect(0);
    let moonshine = command(&all, "Stop", "hook stop");
    let run = world.shell(moonshine, &stop, true);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
    let reason = run.json()["reason"].as_str().unwrap().to_owned();
    let reply = handed(&reason, "when done, run:").replace("\"<one line>\"", "'Named the why.'");
    assert!(reply.contains(&format!("--db {}", world.db().display())), "{reply}");
    let replied = world.shell(&reply, "", false);
    assert_eq!((replied.code, replied.stderr.as_str()), (0, ""), "{replied:?}");
    let shown = super::run_in(&world.db(), &[&project[..], &["feedback", "show", &id]].concat());
    assert_eq!(shown.expect(0).json()["record"]["status"], "addressed");

    // A continuation stop, a bad payload: never a block, never exit 2.
    let again = world.payload("Stop", json!({ "stop_hook_active": true }));
    world.hookstate(&["queue", "push", "tasks", "t2"]).expect(0);
    for command in &all["Stop"] {
        let run = world.shell(command, &again, true);
        assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{run:?}");
    }
    for command in all.values().flatten() {
        let run = world.shell(command, "not json", true);
        assert_ne!(run.code, 2, "{command}: {run:?}");
        assert!(run.code == 0 || run.code == 3, "{command}: {run:?}");
    }
    // The server that loop started again.
    Served::find(&world.db()).stop();
}

/// A copy of the plugin's launcher and manifest in `world`, outside any checkout: its root.
fn plugin_copy(world: &World) -> PathBuf {
    let root = world.dir.path().join("copy/plugin");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join(".claude-plugin")).unwrap();
    std::fs::copy(plugin_root().join("bin/hookstate"), root.join("bin/hookstate")).unwrap();
    let manifest = ".claude-plugin/plugin.json";
    std::fs::copy(plugin_root().join(manifest), root.join(manifest)).unwrap();
    root
}

#[test]
fn the_launcher_never_exits_2_when_it_finds_no_binary() {
    let world = World::new();
    // A copy of the plugin outside any checkout, with no hookstate on PATH and no cargo.
    let root = plugin_copy(&world);
    let out = Command::new("bash")
        .arg(root.join("bin/hookstate"))
        .args(["counter", "get", "c"])
        .env("CLAUDE_PLUGIN_ROOT", &root)
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", world.dir.path())
        .env_remove("HOOKSTATE_BIN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no hookstate binary"), "{stderr}");
}

/// A stand-in `hookstate` that prints where it was found, the launcher it was given
/// (`HOOKSTATE_PROGRAM`) and its arguments.
fn fake_binary(path: &Path, label: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let script = format!("#!/bin/sh\necho \"{label} $HOOKSTATE_PROGRAM $*\"\n");
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_launcher_runs_the_binary_on_path_else_the_one_it_built_and_names_itself() {
    let world = World::new();
    // A copy of the plugin outside any checkout.
    let root = plugin_copy(&world);
    let launcher = root.join("bin/hookstate");
    let on_path = world.dir.path().join("path");
    let cache = world.dir.path().join("cache");
    fake_binary(&on_path.join("hookstate"), "path");
    fake_binary(&cache.join("bin/hookstate"), "cache");
    let run = |how: &Path, path: &str| {
        let out = Command::new("bash")
            .arg(how)
            .args(["counter", "get", "c"])
            .current_dir(world.dir.path())
            .env("CLAUDE_PLUGIN_ROOT", &root)
            .env("PATH", path)
            .env("HOOKSTATE_CACHE_DIR", &cache)
            .env_remove("HOOKSTATE_BIN")
            .env_remove("HOOKSTATE_LAUNCHED")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let path = format!("{}:/usr/bin:/bin", on_path.display());
    let named = format!("{} counter get c", launcher.display());
    assert_eq!(run(&launcher, &path), format!("path {named}"));
    // Called by a path with `..` in it, it still names itself by its plain absolute path.
    let roundabout = root.join("bin/../bin/hookstate");
    assert_eq!(run(&roundabout, &path), format!("path {named}"));
    let relative = Path::new("copy/plugin/bin/hookstate");
    assert_eq!(run(relative, &path), format!("path {named}"));
    // Nothing on PATH and no checkout around it: the binary it built into its cache.
    assert_eq!(run(&launcher, "/usr/bin:/bin"), format!("cache {named}"));
}

/// The hooks' usual case writes nothing: a repeated SessionStart and a Stop with no queued work
/// are answered from the store opened for reading, so the file is not touched (a writer's open
/// and close alone rewrite its header and allocator state, and cost five fdatasyncs); a Stop
/// with work does write.
#[test]
fn an_idle_hook_leaves_the_store_file_untouched() {
    let world = World::new();
    std::fs::create_dir(world.project()).unwrap();
    let all = commands();
    let once = command(&all, "SessionStart", "hook once");
    let claim = command(&all, "Stop", "hook claim");
    let start = world.payload("SessionStart", json!({ "source": "startup" }));
    let stop = world.payload("Stop", json!({ "stop_hook_active": false }));
    let first = world.shell(once, &start, true);
    assert_eq!((first.code, first.stderr.as_str()), (0, ""), "{first:?}");
    let bytes = std::fs::read(world.db()).unwrap();
    for (command, payload) in [(once, &start), (claim, &stop), (claim, &stop)] {
        let run = world.shell(command, payload, true);
        assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""), "{run:?}");
        assert!(std::fs::read(world.db()).unwrap() == bytes, "{command} rewrote the store file");
    }
    world.hookstate(&["queue", "push", "tasks", "t1"]).expect(0);
    let bytes = std::fs::read(world.db()).unwrap();
    let run = world.shell(claim, &stop, true);
    assert_eq!(run.json()["decision"], "block", "{run:?}");
    assert!(std::fs::read(world.db()).unwrap() != bytes, "the claim was not written");
}
