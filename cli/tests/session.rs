//! The `hermit` verbs as real processes (issue 16 §8): the races that lose data upstream and must
//! not here — eight concurrent `runtime.json` field writers, eight concurrent `bind`s of one
//! key, two confirmed closes of one `result_rev`, a prune during eight observers — and bad input
//! to every verb, answered with upstream's line and exit codes and the store unchanged (its log,
//! head and views).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// 2026-09-14T08:15:02.118Z, the fixtures' morning.
const NOW: u64 = 1_789_373_702_118;
const FIXTURE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/legacy/hermit-session");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

struct Hermit {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else if path.file_name().is_some_and(|n| n != "README.md") {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

impl Hermit {
    fn new(fixture: bool) -> Hermit {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".claude-code-hermit");
        if fixture {
            copy_dir(Path::new(FIXTURE), &dir);
        } else {
            std::fs::create_dir_all(&dir).unwrap();
        }
        Hermit { tmp, dir }
    }

    /// The store: a redb file, or a schema on the PostgreSQL pass of the backend matrix.
    fn db(&self) -> PathBuf {
        hookstate_testkit::store(&self.tmp.path().join("db/state.redb"))
    }

    fn d(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hookstate"));
        command
            .arg("--db")
            .arg(self.db())
            .args(args)
            .env_remove("HOOKSTATE_SESSION")
            .env_remove("HOOKSTATE_SCOPE")
            .env("HOOKSTATE_NOW_MS", NOW.to_string());
        command
    }

    fn spawn(&self, args: &[&str], stdin: &str) -> std::process::Child {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut pipe, stdin.as_bytes()).unwrap();
        child
    }

    fn run(&self, args: &[&str], stdin: &str) -> Run {
        done(self.spawn(args, stdin))
    }

    /// `observations observe <dir> quick-deferral` with `line` on stdin, mirrored over `dir`
    /// (the state directory itself, or a copy of it).
    fn observe_in(&self, dir: &Path, line: &str) -> Run {
        let d = dir.to_str().unwrap();
        let words = ["--format", "verdict", "--mirror", d, "hermit", "observations", "observe"];
        self.run(&[&words[..], &[d, "quick-deferral"]].concat(), line)
    }

    fn import(&self) {
        let run = self.run(&["import", "--layout", "hermit-session", "--from", self.d()], "");
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
}

fn done(child: std::process::Child) -> Run {
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn eight_concurrent_runtime_field_writers_lose_no_field() {
    const WRITERS: usize = 8;
    const WRITES: usize = 10;
    let h = Hermit::new(false);
    let d = h.d().to_owned();
    let seed =
        h.run(&["--format", "verdict", "hermit", "--dir", &d, "runtime", "move", "seed"], "");
    assert_eq!((seed.code, seed.stdout.as_str()), (0, "OK|seed\n"));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, d) = (h.db(), d.clone());
            std::thread::spawn(move || {
                for n in 1..=WRITES {
                    let field = format!("writer_{w}={n}");
                    let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
                        .arg("--db")
                        .arg(&db)
                        .args(["--format", "verdict", "hermit", "--dir", &d])
                        .args(["runtime", "set", &field])
                        .stdin(Stdio::null())
                        .output()
                        .unwrap();
                    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK|runtime\n", "{out:?}");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let got = h.run(&["hermit", "--dir", &d, "runtime", "get"], "");
    let runtime: Value = serde_json::from_str(&got.stdout).unwrap();
    let runtime = &runtime["answer"];
    let kept = (0..WRITERS).filter(|w| runtime[format!("writer_{w}")] == WRITES).count();
    println!("race: runtime writers={WRITERS} writes={} fields_kept={kept}", WRITERS * WRITES);
    assert_eq!(kept, WRITERS, "every writer's field survives: {runtime}");
    assert_eq!(runtime["session_state"], "idle", "the seed's fields survive too");
    assert_eq!(h.run(&["verify"], "").code, 0);
}

#[test]
fn eight_concurrent_binds_of_one_key_one_wins() {
    let h = Hermit::new(false);
    let d = h.d().to_owned();
    let children: Vec<_> = (0..8)
        .map(|n| {
            let (name, id) = (format!("helper-{n}"), format!("session-{n}"));
            let args = ["--format", "verdict", "hermit", "conversation", &d, "bind", "discord:77"];
            let opts = ["--session-name", &name, "--session-id", &id, "--worktree", "/w"];
            h.spawn(&[&args[..], &opts[..]].concat(), "")
        })
        .collect();
    let runs: Vec<Run> = children.into_iter().map(done).collect();
    let won: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
    let lost = runs.iter().filter(|r| r.code == 1 && r.stdout == "ERROR|already-bound\n").count();
    println!("race: binds=8 won={} already_bound={lost}", won.len());
    assert_eq!(
        (won.len(), lost),
        (1, 7),
        "{:?}",
        runs.iter().map(|r| &r.stdout).collect::<Vec<_>>()
    );
    assert_eq!(won[0].stdout, "OK|discord:77\n");
    let lookup =
        h.run(&["--format", "verdict", "hermit", "conversation", &d, "lookup", "discord:77"], "");
    let record: Value = serde_json::from_str(&lookup.stdout).unwrap();
    assert_eq!(record["generation"], 1);
    assert_eq!(h.run(&["verify"], "").code, 0);
}

#[test]
fn two_confirmed_closes_with_one_result_rev_one_wins_the_other_is_not_open() {
    const ROUNDS: usize = 4;
    let h = Hermit::new(false);
    let d = h.d().to_owned();
    let verdict = ["--format", "verdict", "hermit", "task"];
    let mut not_open = 0;
    for round in 0..ROUNDS {
        let title = format!("Rotate cert {round}");
        let open = ["open", &d, "--title", &title, "--requester", "operator", "--done", "rotated"];
        let opened = h.run(&[&verdict[..], &open[..]].concat(), "");
        let id = serde_json::from_str::<Value>(&opened.stdout).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let block = ["block", &d, &id, "--result-stdin"];
        let blocked = h.run(&[&verdict[..], &block[..]].concat(), "new chain served");
        assert_eq!(serde_json::from_str::<Value>(&blocked.stdout).unwrap()["result_rev"], 1);
        let close = [
            "close",
            &d,
            &id,
            "--by",
            "confirmed",
            "--actor",
            "operator",
            "--result-rev",
            "1",
            "--reason-stdin",
        ];
        let args = [&verdict[..], &close[..]].concat();
        let (a, b) = (h.spawn(&args, "confirmed"), h.spawn(&args, "confirmed"));
        let runs = [done(a), done(b)];
        let won: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
        assert_eq!(
            won.len(),
            1,
            "{:?}",
            runs.iter().map(|r| (&r.stdout, &r.stderr)).collect::<Vec<_>>()
        );
        assert!(won[0].stdout.contains("\"closed_by\":\"confirmed\""), "{}", won[0].stdout);
        let loser = runs.iter().find(|r| r.code != 0).unwrap();
        assert_eq!(
            (loser.code, loser.stderr.as_str()),
            (1, "not-open\n"),
            "upstream's order: not-open first"
        );
        not_open += 1;
        // A stale revision is refused as upstream refuses it.
        let title = format!("Stale {round}");
        let open = ["open", &d, "--title", &title, "--requester", "operator", "--done", "d"];
        let opened = h.run(&[&verdict[..], &open[..]].concat(), "");
        let id = serde_json::from_str::<Value>(&opened.stdout).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        h.run(&[&verdict[..], &["block", &d, &id, "--result-stdin"][..]].concat(), "r1");
        h.run(&[&verdict[..], &["block", &d, &id, "--result-stdin"][..]].concat(), "r2");
        let close = [
            "close",
            &d,
            &id,
            "--by",
            "confirmed",
            "--actor",
            "operator",
            "--result-rev",
            "1",
            "--reason-stdin",
        ];
        let stale = h.run(&[&verdict[..], &close[..]].concat(), "ok");
        assert_eq!((stale.code, stale.stderr.as_str()), (1, "stale-result\n"));
    }
    println!("race: confirmed closes rounds={ROUNDS} one_won={ROUNDS} not_open={not_open}");
    assert_eq!(h.run(&["verify"], "").code, 0);
}

#[test]
fn a_prune_during_eight_observers_loses_no_row() {
    const OBSERVERS: usize = 8;
    const ROWS: usize = 15;
    const OLD: usize = 40;
    let h = Hermit::new(false);
    let old: String = (0..OLD)
        .map(|n| format!("{{\"ts\":\"2026-07-01T00:00:00Z\",\"pattern\":\"old-{n}\",\"session_id\":\"S-001\",\"source\":\"quick-deferral\"}}\n"))
        .collect();
    std::fs::create_dir_all(h.dir.join("state")).unwrap();
    std::fs::write(h.dir.join("state/observations.jsonl"), &old).unwrap();
    h.import();
    let d = h.d().to_owned();
    let pruner = {
        let (db, d) = (h.db(), d.clone());
        std::thread::spawn(move || {
            let mut prunes = 0;
            let mut pruned = 0;
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(3) && prunes < 40 {
                let out = Command::new(env!("CARGO_BIN_EXE_hookstate"))
                    .arg("--db")
                    .arg(&db)
                    .env("HOOKSTATE_NOW_MS", NOW.to_string())
                    .args(["--format", "verdict", "hermit", "prune-observations", &d])
                    .output()
                    .unwrap();
                let line = String::from_utf8(out.stdout).unwrap();
                pruned += line
                    .split(' ')
                    .nth(1)
                    .and_then(|n| n.trim_end_matches(',').parse::<usize>().ok())
                    .unwrap();
                prunes += 1;
            }
            (prunes, pruned)
        })
    };
    let observers: Vec<_> = (0..OBSERVERS)
        .map(|o| {
            let (db, d) = (h.db(), d.clone());
            std::thread::spawn(move || {
                for n in 0..ROWS {
                    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
                        .arg("--db")
                        .arg(&db)
                        .env("HOOKSTATE_NOW_MS", NOW.to_string())
                        .args([
                            "--format",
                            "verdict",
                            "hermit",
                            "observations",
                            "observe",
                            &d,
                            "quick-deferral",
                        ])
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap();
                    let label = format!("row {o}-{n}");
                    std::io::Write::write_all(&mut child.stdin.take().unwrap(), label.as_bytes())
                        .unwrap();
                    let out = child.wait_with_output().unwrap();
                    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n");
                }
            })
        })
        .collect();
    for observer in observers {
        observer.join().unwrap();
    }
    let (prunes, pruned) = pruner.join().unwrap();
    let last = h.run(&["--format", "verdict", "hermit", "prune-observations", &d], "");
    let scope = format!("hermit:{d}");
    let out = h.tmp.path().join("export");
    let exported = h.run(
        &["--scope", &scope, "export", "--layout", "hermit-session", "--to", out.to_str().unwrap()],
        "",
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let ledger = std::fs::read_to_string(out.join("state/observations.jsonl")).unwrap();
    let rows = (0..OBSERVERS)
        .flat_map(|o| (0..ROWS).map(move |n| format!("\"pattern\":\"row {o}-{n}\"")))
        .filter(|row| ledger.matches(row.as_str()).count() == 1)
        .count();
    let old_left = ledger.matches("\"pattern\":\"old-").count();
    println!("race: observers={OBSERVERS} rows={} kept={rows} prunes={} old_pruned={pruned} old_left={old_left} last={}", OBSERVERS * ROWS, prunes + 1, last.stdout.trim());
    assert_eq!(rows, OBSERVERS * ROWS, "every observed row is in the ledger once");
    assert_eq!(old_left, 0, "every stale row is pruned");
    assert_eq!(ledger.lines().count(), OBSERVERS * ROWS);
    assert_eq!(h.run(&["verify"], "").code, 0);
}

/// One bad call: its words, stdin, the JSON format's exit, and under `--format verdict` the exit
/// and what it prints (on stdout, or on stderr when it starts with `!`).
type Bad<'a> = (Vec<&'a str>, &'a str, i32, i32, &'a str);

#[test]
fn bad_input_to_every_verb_is_refused_with_the_store_unchanged() {
    let h = Hermit::new(true);
    h.import();
    let d = h.d().to_owned();
    let t = "T-20260914-081502";
    let cases: Vec<Bad> = vec![
        (vec!["task", "note", &d, "T-1"], "", 3, 1, "!invalid-id"),
        (vec!["task", "frob", &d], "", 64, 64, "!invalid-verb"),
        (vec!["task", "open", &d, "--title", "t", "--requester", "nobody", "--done", "d"], "", 3, 1, "!invalid-requester"),
        (vec!["task", "open", &d, "--title", "t", "--title", "u"], "", 64, 64, "!duplicate-flag"),
        (vec!["task", "close", &d, t, "--by", "confirmed", "--actor", "discord:90210", "--result-rev", "9", "--reason-stdin"], "ok", 1, 1, "!stale-result"),
        (vec!["task", "note", &d, t], "", 3, 1, "!empty"),
        (vec!["conversation", &d, "bind", "not a key", "--session-name", "n", "--session-id", "s", "--worktree", "/w"], "", 3, 1, "ERROR|invalid-key"),
        (vec!["conversation", &d, "update", "discord:1187734401122", "--status", "busy"], "", 3, 1, "ERROR|invalid-status"),
        (vec!["conversation", &d, "bind", "discord:1", "--session-name"], "", 64, 1, "ERROR|invalid-options"),
        (vec!["conversation", &d, "frob"], "", 64, 1, "ERROR|unknown-verb"),
        (vec!["observations", "observe", &d, "cost-spike"], "x", 3, 0, "ERROR|invalid-source:cost-spike"),
        (vec!["observations", "observe", &d, "quick-deferral"], "a\nb", 3, 0, "ERROR|multiline-pattern"),
        (vec!["later", "add", &d, "--claim", "c", "--due", "tomorrow", "--origin", "hermit"], "", 3, 1, "!invalid add arguments"),
        (vec!["later", "verdict", &d, "no-such-id", "held", "--reason-stdin"], "why", 3, 1, "!unknown id"),
        (vec!["session-archive", "frob"], "", 1, 0, "{\"ok\":false,\"reason\":\"unknown verb: frob. Valid verbs: archive, open, recover, auto-close-decision\"}"),
        (vec!["session-archive"], "", 1, 0, "{\"ok\":false,\"reason\":\"unknown verb: (none). Valid verbs: archive, open, recover, auto-close-decision\"}"),
        (vec!["session-archive", "archive", "--mode=bogus"], "Status: done", 1, 0, "{\"ok\":false,\"reason\":\"archive requires --mode=idle|close|auto, got: bogus\"}"),
        (vec!["shell-append", &d, "--section", "nope"], "x", 3, 0, "ERROR|unknown-section"),
        (vec!["shell-append", &d, "--section", "findings"], "  ", 3, 0, "ERROR|empty-line"),
        (vec!["--dir", &d, "runtime", "set", "session_state=idle"], "", 1, 0, "{\"ok\":false,\"reason\":\"lifecycle-field:session_state\"}"),
        (vec!["--dir", &d, "runtime", "set", "updated_at=1"], "", 3, 1, ""),
        (vec!["--dir", &d, "runtime", "move", "wait"], "", 1, 0, "{\"ok\":false,\"reason\":\"not-idle\"}"),
        (vec!["--dir", &d, "marker", "pause", "--reason", "nap", "--by", "me"], "", 3, 1, ""),
    ];
    // redb rewrites its header on every open for writing, so "unchanged" is the log, the head
    // and the views (what `log` and `verify` report), not the file's bytes.
    let state = || (h.run(&["log"], "").stdout, h.run(&["verify"], "").stdout);
    let before = state();
    for (words, stdin, json_exit, verdict_exit, said) in &cases {
        let json = h.run(&[&["hermit"][..], words.as_slice()].concat(), stdin);
        assert_eq!(json.code, *json_exit, "{words:?}: {} {}", json.stdout, json.stderr);
        assert!(!json.stderr.is_empty(), "{words:?}: a refusal says why on stderr");
        let verdict =
            h.run(&[&["--format", "verdict", "hermit"][..], words.as_slice()].concat(), stdin);
        assert_eq!(verdict.code, *verdict_exit, "{words:?}: {} {}", verdict.stdout, verdict.stderr);
        match said.strip_prefix('!') {
            Some(line) => assert_eq!(verdict.stderr, format!("{line}\n"), "{words:?}"),
            None if said.is_empty() => {
                assert!(verdict.stderr.starts_with("hookstate: "), "{words:?}")
            }
            None => assert_eq!(verdict.stdout, format!("{said}\n"), "{words:?}"),
        }
        assert!(verdict.code != 2 && json.code != 2, "never exit 2");
    }
    assert_eq!(state(), before, "no bad call changed the store");
}

/// `runtime set` grows `runtime.json` past 64 keys (the legacy codec's old bound): an outside
/// write of the file after that is adopted, not quarantined as corrupt with its field lost.
#[test]
fn a_runtime_json_of_many_keys_still_takes_outside_writes() {
    let h = Hermit::new(true);
    let d = h.d().to_owned();
    let fields: Vec<String> = (0..60).map(|n| format!("f{n}={n}")).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    let mirrored = ["--mirror", &d, "hermit", "--dir", &d, "runtime", "set"];
    let run = h.run(&[&mirrored[..], &fields[..]].concat(), "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let path = h.dir.join("state/runtime.json");
    let mut runtime: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(runtime.len() > 64, "{}", runtime.len());
    runtime.insert("last_error".into(), "disk full".into());
    std::fs::write(&path, serde_json::to_string_pretty(&runtime).unwrap() + "\n").unwrap();
    let run = h.run(&[&mirrored[..], &["probe=1"][..]].concat(), "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = h.run(&["hermit", "--dir", &d, "runtime", "get"], "");
    let got: Value = serde_json::from_str(&got.stdout).unwrap();
    assert_eq!(
        (got["answer"]["last_error"].as_str(), got["answer"]["probe"].as_i64()),
        (Some("disk full"), Some(1))
    );
    let quarantined = std::fs::read_dir(h.dir.join("state"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".corrupt-"))
        .count();
    assert_eq!(quarantined, 0);
}

#[test]
fn a_mirrored_verb_adopts_the_directory_and_writes_back_only_what_changed() {
    let h = Hermit::new(true);
    let d = h.d().to_owned();
    let before = std::fs::read(h.dir.join("state/runtime.json")).unwrap();
    let mirrored = ["--format", "verdict", "--mirror", &d, "hermit", "shell-append", &d];
    let run = h.run(&[&mirrored[..], &["--section", "progress"][..]].concat(), "[08:15] mirrored");
    assert_eq!((run.code, run.stdout.as_str()), (0, "OK\n"), "{}", run.stderr);
    let shell = std::fs::read_to_string(h.dir.join("sessions/SHELL.md")).unwrap();
    assert!(shell.contains("[08:15] mirrored\n"), "{shell}");
    assert_eq!(std::fs::read(h.dir.join("state/runtime.json")).unwrap(), before);
    // An outside edit of the SHELL.md section and a task list through the mirror see it.
    let edited = shell.replace("## Findings\n", "## Findings\n- outside\n");
    std::fs::write(h.dir.join("sessions/SHELL.md"), &edited).unwrap();
    let list = h.run(&["--mirror", &d, "hermit", "task", "list", &d, "--all"], "");
    assert_eq!(list.code, 0, "{}", list.stderr);
    let listed: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(listed["answer"]["total"], 2);
    let out = h.tmp.path().join("export");
    let scope = format!("hermit:{d}");
    let exported = h.run(
        &["--scope", &scope, "export", "--layout", "hermit-session", "--to", out.to_str().unwrap()],
        "",
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    assert_eq!(std::fs::read_to_string(out.join("sessions/SHELL.md")).unwrap(), edited);
    assert_eq!(h.run(&["verify"], "").code, 0);
}

/// A mirrored call renders its scope's state into the mirror directory: one whose scope names
/// another state directory (`session-archive` without `--state-dir=` falls back to the working
/// directory's) is refused before anything is read or written. It deleted every marker file of
/// the directory, and the next call adopted the deletions.
#[test]
fn a_mirror_directory_of_another_scope_is_refused_untouched() {
    let h = Hermit::new(true);
    let mirror = ["--format", "verdict", "--mirror", h.d(), "hermit"];
    let adopt = h.run(&[&mirror[..], &["later", "list", h.d()]].concat(), "");
    assert_eq!(adopt.code, 0, "{}", adopt.stderr);
    let files = crate::support::tree(&h.dir);
    let log = h.run(&["log"], "").stdout;
    let other = h.tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for words in [&["session-archive"][..], &["later", "list", other.to_str().unwrap()]] {
        let run = h.run(&[&mirror[..], words].concat(), "");
        assert_eq!(run.code, 1, "{words:?}: {}", run.stdout);
        assert!(run.stderr.contains("is not the state directory of the call's scope"), "{words:?}");
        assert_eq!(crate::support::tree(&h.dir), files, "{words:?}: the directory changed");
        assert_eq!(h.run(&["log"], "").stdout, log, "{words:?}: the store changed");
    }
}

/// A mirrored call killed after it wrote a file and before it moved the file's baseline left
/// the file holding the bytes it announced beside the baseline: the next call must not adopt
/// the store's own new line as an outside append (it did, so a kill -9 duplicated the line in
/// the file and in the store). The kill is stood in for by putting the baseline back as it was
/// before the call and leaving the announcement such a call leaves.
#[test]
fn a_file_the_mirror_wrote_before_its_baseline_moved_is_not_adopted_again() {
    let h = Hermit::new(true);
    assert_eq!(h.observe_in(&h.dir, "first\n").code, 0);
    let meta = h.dir.join(".hookstate-mirror");
    let saved = h.tmp.path().join("baseline");
    copy_dir(&meta, &saved);
    assert_eq!(h.observe_in(&h.dir, "second\n").code, 0);
    std::fs::remove_dir_all(&meta).unwrap();
    copy_dir(&saved, &meta);
    let file = h.dir.join("state/observations.jsonl");
    let announced = meta.join("base/hermit-session/state/observations.jsonl.hookstate-pending");
    std::fs::copy(&file, &announced).unwrap();
    assert_eq!(h.observe_in(&h.dir, "third\n").code, 0);
    assert!(!announced.exists(), "the announcement was taken back");
    let lines = std::fs::read_to_string(&file).unwrap();
    assert_eq!(lines.matches("\"second\"").count(), 1, "{lines}");
    let log = h.run(&["log"], "").stdout;
    assert_eq!(log.matches("second").count(), 1, "the store holds the line twice");
}

/// The mirror's baselines are of one directory at one path: a state directory copied (or
/// moved) with its `.hookstate-mirror` is a first sight where it lands. The same store found
/// every file equal to its baseline there, adopted nothing for the new scope, and rendered that
/// empty scope over the copy: every marker deleted, the ledger cut to the new line.
#[test]
fn a_mirrored_directory_copied_elsewhere_is_adopted_there_not_wiped() {
    let h = Hermit::new(true);
    let first =
        h.run(&["--format", "verdict", "--mirror", h.d(), "hermit", "later", "list", h.d()], "");
    assert_eq!(first.code, 0, "{}", first.stderr);
    let copy = h.tmp.path().join("copy");
    copy_dir(&h.dir, &copy);
    let files = |dir: &Path| std::fs::read_dir(dir.join("state")).unwrap().count();
    let before =
        (files(&copy), std::fs::read_to_string(copy.join("state/observations.jsonl")).unwrap());
    let run = h.observe_in(&copy, "seen in the copy\n");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(files(&copy), before.0, "files of the copy went");
    let lines = std::fs::read_to_string(copy.join("state/observations.jsonl")).unwrap();
    assert!(lines.starts_with(&before.1), "the copy's ledger was cut:\n{lines}");
    assert!(lines.contains("seen in the copy"), "{lines}");
}

/// The mirror's own bookkeeping written after the commit is best effort: a directory planted
/// where its owner file or a write's announcement goes failed the call after it committed
/// (exit 6), and each retry applied the call again.
#[test]
fn a_mirror_bookkeeping_path_that_is_a_directory_fails_no_committed_call() {
    let h = Hermit::new(true);
    assert_eq!(h.observe_in(&h.dir, "first\n").code, 0);
    let meta = h.dir.join(".hookstate-mirror");
    std::fs::remove_file(meta.join("store")).unwrap();
    std::fs::create_dir(meta.join("store")).unwrap();
    let pending = meta.join("base/hermit-session/state/observations.jsonl.hookstate-pending");
    std::fs::create_dir(&pending).unwrap();
    let run = h.observe_in(&h.dir, "second\n");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = std::fs::read_to_string(h.dir.join("state/observations.jsonl")).unwrap();
    assert_eq!(lines.matches("\"second\"").count(), 1, "{lines}");
}
