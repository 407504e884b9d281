//! `hookstate proposals` as a drop-in for `bun proposal.ts`: every verdict line and exit code
//! golden, the JSON mode's refusals, and real processes queueing, resolving and nudging at once
//! with no vanished entry, no duplicate id and a ledger equal to the queue's history.
//!
//! Does not run upstream's scripts; their outputs are pinned from the spec and the fixture.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Run, Store};

const HERMIT_FIXTURE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/legacy/hermit");

/// A store and a hermit state directory (a copy of the real fixture, or empty).
struct Hermit {
    store: Store,
    dir: PathBuf,
    _home: tempfile::TempDir,
}

impl Hermit {
    fn new(fixture: bool) -> Hermit {
        let store = Store::new();
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("h");
        std::fs::create_dir_all(dir.join("state")).unwrap();
        if fixture {
            std::fs::copy(Path::new(HERMIT_FIXTURE).join("config.json"), dir.join("config.json"))
                .unwrap();
            for name in ["micro-proposals.json", "proposal-metrics.jsonl"] {
                let from = Path::new(HERMIT_FIXTURE).join("state").join(name);
                std::fs::copy(from, dir.join("state").join(name)).unwrap();
            }
        } else {
            std::fs::write(dir.join("config.json"), "{\"timezone\":\"UTC\"}\n").unwrap();
        }
        Hermit { store, dir, _home: home }
    }

    fn verdict(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut full =
            vec!["--format", "verdict", "proposals", "--dir", self.dir.to_str().unwrap()];
        full.extend_from_slice(args);
        self.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    }

    fn json(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut full = vec!["proposals", "--dir", self.dir.to_str().unwrap()];
        full.extend_from_slice(args);
        self.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    }
}

/// Asserts stdout is exactly `line` and a newline, with the exit code and stderr rules.
fn line(run: Run, code: i32, expected: &str) {
    let run = run.expect(code);
    assert_eq!(run.stdout, format!("{expected}\n"), "{run:?}");
}

/// A failure upstream reports with exit 1, a stderr line and no stdout.
fn fails(run: Run) {
    let run = run.expect(1);
    assert!(run.stdout.is_empty(), "{run:?}");
}

#[test]
fn every_micro_verdict_line_and_exit_code() {
    let h = Hermit::new(true);
    h.store
        .run(&["import", "--layout", "hermit-proposals", "--from", h.dir.to_str().unwrap()])
        .expect(0);
    let dup = "{\"tier\":2,\"question\":\"Move the nightly e2e run to 02:00 UTC?\"}";
    line(h.verdict(&["queue-micro"], Some(dup)), 0, "DUPLICATE|MP-20261129-2");
    let ask = "{\"tier\":2,\"question\":\"Ship it?\",\"options\":[\"deploy now\",\"deploy \
               later\",\"skip\"],\"on_resolve\":\"/hermit:act --answer {answer}\"}";
    let queued = h.verdict(&["queue-micro"], Some(ask)).expect(0);
    let id = queued.stdout.trim().strip_prefix("QUEUED|").unwrap().to_owned();
    let (date, n) = id.strip_prefix("MP-").unwrap().split_once('-').unwrap();
    // The fixture's ledger ends at MP-20261129-3; another New York date starts at 0.
    assert_eq!(n, if date == "20261129" { "4" } else { "0" }, "{id}");
    line(h.verdict(&["queue-micro"], Some(ask)), 0, &format!("DUPLICATE|{id}"));
    line(h.verdict(&["micro", "nudge", "MP-20261129-2"], None), 0, "NUDGED|MP-20261129-2|3");
    line(h.verdict(&["micro", "nudge", "MP-19990101-0"], None), 0, "NONE|no-match");
    let resolve = |answer: &str| {
        h.verdict(&["micro", "resolve", &id, "--action", "answered", "--answer", answer], None)
    };
    let ambiguous = resolve("deploy").expect(1);
    assert_eq!(ambiguous.stdout, "ERROR|ambiguous-answer|[\"deploy now\",\"deploy later\"]\n");
    line(resolve("2"), 0, &format!("RESOLVED|{id}|answered"));
    line(resolve("2"), 0, "NONE|no-match");
    fails(h.verdict(&["micro", "resolve", "MP-20261129-3"], None));
    fails(h.verdict(&["micro", "resolve", "MP-20261129-3", "--action", "done"], None));
    fails(h.verdict(&["micro", "resolve", "--action", "approved"], None));
    fails(h.verdict(&["micro", "nudge"], None));
    fails(h.verdict(&["queue-micro"], Some("not json")));
    fails(h.verdict(&["queue-micro"], Some("{\"tier\":1}")));
    fails(h.verdict(&["queue-micro"], Some("{\"question\":\"q\",\"options\":[\"one\"]}")));
    line(
        h.verdict(&["micro", "brief-cycle"], None),
        0,
        "{\"new\":[],\"renudged\":[],\"expired\":[{\"id\":\"MP-20261129-2\",\"question\":\"Move \
         the nightly e2e run to 02:00 UTC?\"},{\"id\":\"MP-20261129-3\",\"question\":\"Pin node \
         to 20.x in CI?\"}],\"dropped\":[]}",
    );
    line(
        h.verdict(&["micro", "brief-cycle"], None),
        0,
        "{\"new\":[],\"renudged\":[],\"expired\":[],\"dropped\":[]}",
    );
    let ledger = h.json(&["ledger"], None).expect(0).json();
    let last = &ledger["ledger"].as_array().unwrap()[11];
    assert_eq!(
        (last["type"].as_str(), last["action"].as_str()),
        (Some("micro-resolved"), Some("expired"))
    );
}

#[test]
fn json_mode_refuses_duplicates_and_misses_with_exit_1() {
    let h = Hermit::new(false);
    let queued = h.json(&["queue-micro"], Some("{\"question\":\"q?\"}")).expect(0).json();
    assert_eq!(queued["verdict"], format!("QUEUED|{}", queued["id"].as_str().unwrap()));
    let dup = h.json(&["queue-micro"], Some("{\"question\":\"q?\"}")).expect(1).json();
    assert_eq!((dup["ok"].as_bool(), dup["refused"].as_str()), (Some(false), Some("duplicate")));
    let miss = h.json(&["micro", "nudge", "MP-19990101-0"], None).expect(1).json();
    assert_eq!(miss["refused"], "no_match");
    let bad = h.json(&["micro", "resolve", "x", "--action", "done"], None).expect(3);
    assert!(bad.stdout.is_empty());
    h.store.run(&["proposals", "micro", "brief-cycle"]).expect(64);
}

#[test]
fn a_corrupt_queue_file_is_refused_and_the_store_is_untouched() {
    let h = Hermit::new(false);
    h.store.run(&["init"]).expect(0);
    let before = h.store.snapshot();
    std::fs::write(h.dir.join("state/micro-proposals.json"), "{\"pending\": [1,]}\n").unwrap();
    let out = h
        .store
        .run(&["import", "--layout", "hermit-proposals", "--from", h.dir.to_str().unwrap()])
        .expect(3);
    assert!(out.stderr.contains("corrupt"), "{out:?}");
    assert!(before == h.store.snapshot(), "the store changed");
}

fn spawn(h: &Hermit, args: &[&str], stdin: Option<String>) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookstate"))
        .arg("--db")
        .arg(h.store.db())
        .args(["--format", "verdict", "proposals", "--dir", h.dir.to_str().unwrap()])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    child
}

/// Processes racing on one queue: 6 entries queued first, then 16 queuers, 6 resolvers and 6
/// nudgers at once. Upstream's unlocked read-modify-write loses entries or resolves here and
/// hands out one id twice; none of that may happen.
#[test]
fn racing_processes_lose_nothing_and_share_no_id() {
    const SEEDED: usize = 6;
    const QUEUERS: usize = 16;
    let h = Hermit::new(false);
    let mut seeded = Vec::new();
    for i in 0..SEEDED {
        let run = h.verdict(&["queue-micro"], Some(&format!("{{\"question\":\"seed {i}?\"}}")));
        seeded.push(run.expect(0).stdout.trim().strip_prefix("QUEUED|").unwrap().to_owned());
    }
    let mut children = Vec::new();
    for i in 0..QUEUERS {
        children.push(spawn(&h, &["queue-micro"], Some(format!("{{\"question\":\"race {i}?\"}}"))));
        if let Some(id) = seeded.get(i % 8).filter(|_| i % 8 < SEEDED) {
            let verb = if i < 8 { "resolve" } else { "nudge" };
            let mut args = vec!["micro", verb, id.as_str()];
            if verb == "resolve" {
                args.extend(["--action", "approved"]);
            }
            children.push(spawn(&h, &args, None));
        }
    }
    let mut queued = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
        if let Some(id) = stdout.trim().strip_prefix("QUEUED|") {
            assert!(queued.insert(id.to_owned()), "id {id} handed out twice");
        }
    }
    assert_eq!(queued.len(), QUEUERS);
    let queue = h.json(&["queue"], None).expect(0).json();
    let live: BTreeSet<String> = queue["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(queued.is_subset(&live), "a queued entry vanished");
    assert!(seeded.iter().all(|id| !live.contains(id)), "a resolved entry came back");
    assert_eq!(live.len(), QUEUERS);
    let ledger = h.json(&["ledger"], None).expect(0).json();
    let mut history = BTreeSet::new();
    for row in ledger["ledger"].as_array().unwrap() {
        let id = row["micro_id"].as_str().unwrap().to_owned();
        match row["type"].as_str().unwrap() {
            "micro-queued" => assert!(history.insert(id), "queued twice in the ledger"),
            _ => assert!(history.remove(&id), "resolved an id that was not live"),
        }
    }
    assert_eq!(history, live, "the ledger is the queue's history");
    h.store.run(&["verify"]).expect(0);
}

#[test]
fn prop_verdict_lines_and_exit_codes() {
    let h = Hermit::new(false);
    let created =
        h.verdict(&["create"], Some("Title: Cache the CI install\n---\nbody\n")).expect(0);
    let id = created.stdout.trim().to_owned();
    assert!(id.starts_with("PROP-001-cache-ci-install-") && id.len() == 32, "{id}");
    line(h.verdict(&["create"], Some("Title: x\nno separator")), 0, "ERROR|missing-separator");
    line(h.verdict(&["create"], Some("---\nbody")), 0, "ERROR|missing-title");
    line(h.verdict(&["create"], Some("Title: x\nTags: ci\n---\nb")), 0, "ERROR|invalid-tags");
    line(h.verdict(&["accept", &id, "--expect", "proposed"], None), 0, &format!("OK|{id}"));
    line(h.verdict(&["defer", &id], None), 0, "ERROR|illegal-move:accepted->deferred");
    line(
        h.verdict(&["resolve", &id, "--expect", "proposed"], None),
        0,
        "ERROR|status-moved:accepted",
    );
    line(h.verdict(&["resolve", "PROP-009-none-000000"], None), 0, "ERROR|no-such-proposal");
    line(h.verdict(&["index"], None), 0, "OK|1 proposals");
    line(h.verdict(&["resolve-id", "accept prop-1"], None), 0, &format!("MATCH|{id}.md"));
    line(h.verdict(&["resolve-id", "PROP-2"], None), 0, "NONE|no-match");
    line(h.verdict(&["resolve-id", "the cache one"], None), 0, "NONE|not-a-prop-id");
    let event = |args: &[&str]| {
        let mut full = vec!["event"];
        full.extend_from_slice(args);
        h.verdict(&full, None)
    };
    let id_flag = format!("--id={id}");
    line(event(&["responded", &id_flag, "--action=accept"]), 0, "OK");
    line(event(&["resolved", &id_flag]), 0, "OK");
    line(event(&["resolved", &id_flag, "--action=accept"]), 0, "ERROR|action-not-allowed:resolved");
    line(event(&["responded", &id_flag]), 0, "ERROR|missing-action");
    line(event(&["responded", "--action=accept"]), 0, "ERROR|missing-id");
    line(event(&["responded", "--id=P-1", "--action=accept"]), 0, "ERROR|invalid-id:P-1");
    line(event(&["responded", &id_flag, "--action=ok"]), 0, "ERROR|invalid-action:ok");
    line(event(&["opened", &id_flag]), 0, "ERROR|unknown-event-type:opened");
    let ledger = h.json(&["ledger"], None).expect(0).json();
    let types: Vec<&str> =
        ledger["ledger"].as_array().unwrap().iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["created", "responded", "resolved"], "the accept already responded");
    let json = h.json(&["create"], Some("---\nbody")).expect(3);
    assert!(json.stdout.is_empty());
    h.json(&["resolve", &id, "--expect", "proposed"], None).expect(1);
}

/// Upstream numbers PROPs from an unlocked directory listing, so two creates at once share an
/// NNN; here the number is allocated inside the write transaction.
#[test]
fn racing_creates_never_share_a_number() {
    const CREATORS: usize = 8;
    let h = Hermit::new(false);
    let children: Vec<_> = (0..CREATORS)
        .map(|i| spawn(&h, &["create"], Some(format!("Title: Race {i}\n---\nbody {i}\n"))))
        .collect();
    let mut numbers = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let id = String::from_utf8(out.stdout).unwrap();
        assert!(numbers.insert(id[5..8].to_owned()), "NNN of {id} handed out twice");
    }
    let expected: BTreeSet<String> = (1..=CREATORS).map(|n| format!("{n:03}")).collect();
    assert_eq!(numbers, expected);
}

/// `--mirror` keeps the legacy files current and adopts what an unmigrated script wrote into
/// them: its queue entry and its ledger line; a ledger rewritten behind hookstate's back is
/// refused, never guessed at.
#[test]
fn mirror_writes_the_files_and_adopts_an_unmigrated_scripts_entry() {
    let h = Hermit::new(true);
    let dir = h.dir.to_str().unwrap().to_owned();
    h.store.run(&["import", "--layout", "hermit-proposals", "--from", &dir]).expect(0);
    let mirrored = |args: &[&str], stdin: Option<&str>| {
        let mut full = vec![
            "--format",
            "verdict",
            "proposals",
            "--mirror",
            dir.as_str(),
            "--dir",
            dir.as_str(),
        ];
        full.extend_from_slice(args);
        h.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    };
    mirrored(&["micro", "nudge", "MP-20261129-2"], None).expect(0);
    let queue_file = h.dir.join("state/micro-proposals.json");
    let ledger_file = h.dir.join("state/proposal-metrics.jsonl");
    let text = std::fs::read_to_string(&queue_file).unwrap();
    assert!(text.contains("\"follow_up_count\": 3"), "the mirror is current: {text}");
    // An unmigrated `proposal.ts queue-micro` writes both files its own way.
    let mut queue: serde_json::Value = serde_json::from_str(&text).unwrap();
    let legacy = serde_json::json!({
        "id": "MP-20261129-7", "tier": 1, "status": "pending", "follow_up_count": 0,
        "ts": "2026-11-29T23:00:00Z", "question": "Written by the old script?",
    });
    queue["pending"].as_array_mut().unwrap().push(legacy);
    std::fs::write(&queue_file, serde_json::to_string_pretty(&queue).unwrap() + "\n").unwrap();
    let legacy_line = "{\"ts\":\"2026-11-29T23:00:00Z\",\"type\":\"micro-queued\",\"micro_id\":\
                \"MP-20261129-7\",\"tier\":1,\"question\":\"Written by the old script?\"}\n";
    let mut ledger = std::fs::read_to_string(&ledger_file).unwrap();
    ledger.push_str(legacy_line);
    std::fs::write(&ledger_file, &ledger).unwrap();
    line(mirrored(&["micro", "nudge", "MP-20261129-7"], None), 0, "NUDGED|MP-20261129-7|1");
    let next = mirrored(&["queue-micro"], Some("{\"question\":\"And a new one?\"}")).expect(0);
    let (date, n) = next.stdout.trim().strip_prefix("QUEUED|MP-").unwrap().split_once('-').unwrap();
    assert_eq!(n, if date == "20261129" { "8" } else { "0" }, "numbering continues after 7");
    let ledger = std::fs::read_to_string(&ledger_file).unwrap();
    assert_eq!(ledger.matches("MP-20261129-7\"").count(), 1, "the adopted line is kept once");
    // An unmigrated `proposal.ts create` writes a PROP file; the next mirrored create numbers
    // after it and the index lists it.
    let foreign =
        "---\nid: PROP-003-old-script-120000\ntitle: \"Old script\"\nstatus: proposed\n---\n";
    std::fs::create_dir_all(h.dir.join("proposals")).unwrap();
    std::fs::write(h.dir.join("proposals/PROP-003-old-script-120000.md"), foreign).unwrap();
    let created = mirrored(&["create"], Some("Title: After the old one\n---\nbody\n"));
    assert!(created.stdout.starts_with("PROP-004-"), "{created:?}");
    // Mirrored, create appends its SHELL.md Findings line as upstream does; this directory has
    // no SHELL.md, so upstream's warning is the one stderr line.
    assert_eq!(created.code, 0, "{created:?}");
    assert_eq!(created.stderr, "WARN: findings append: SHELL.md unreadable\n", "{created:?}");
    line(mirrored(&["index"], None), 0, "OK|2 proposals");
    let index = std::fs::read_to_string(h.dir.join("state/proposals-index.json")).unwrap();
    assert!(index.contains("\"title\": \"Old script\""), "{index}");
    std::fs::write(&ledger_file, "").unwrap();
    let refused = mirrored(&["micro", "nudge", "MP-20261129-7"], None).expect(1);
    assert!(refused.stderr.contains("rewritten"), "{refused:?}");
}

/// Upstream's `patch` is an unlocked read-modify-write, so of two operators answering at once
/// both "win" and one answer is lost; here every move is a compare-and-swap on the status the
/// caller saw, so exactly one of the racing moves lands and the ledger holds one response.
#[test]
fn racing_status_moves_land_exactly_once() {
    const MOVERS: usize = 8;
    let h = Hermit::new(false);
    let created = h.verdict(&["create"], Some("Title: Contested\n---\nbody\n")).expect(0);
    let id = created.stdout.trim().to_owned();
    let children: Vec<_> = (0..MOVERS)
        .map(|i| {
            let verb = if i % 2 == 0 { "accept" } else { "dismiss" };
            spawn(&h, &[verb, &id, "--expect", "proposed"], None)
        })
        .collect();
    let mut landed = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        if stdout.trim() == format!("OK|{id}") {
            landed += 1;
        } else {
            assert!(stdout.starts_with("ERROR|status-moved:"), "{stdout}");
        }
    }
    assert_eq!(landed, 1, "exactly one move wins the compare-and-swap");
    let ledger = h.json(&["ledger"], None).expect(0).json();
    let responses =
        ledger["ledger"].as_array().unwrap().iter().filter(|r| r["type"] == "responded").count();
    assert_eq!(responses, 1);
}

/// `patch` as proposal-act calls it: sets with `@now`, a decision line from stdin, then
/// `event responded`; illegal status changes and bad keys are refused with upstream's tokens.
#[test]
fn patch_then_event_as_the_proposal_act_skill_calls_them() {
    let h = Hermit::new(false);
    let id = h.verdict(&["create"], Some("Title: Patch me\n---\nbody\n")).expect(0);
    let id = id.stdout.trim().to_owned();
    let accept = [
        "patch",
        &id,
        "--set",
        "status=accepted",
        "--set",
        "accepted_date=@now",
        "--set",
        "responded=true",
        "--stdin",
    ];
    let stdin = "Decision: Accepted on @now.\nSet: accepted_in_session=S-045\n";
    line(h.verdict(&accept, Some(stdin)), 0, &format!("OK|{id}"));
    let file = format!("{id}.md");
    let illegal = ["patch", file.as_str(), "--set", "status=deferred"];
    line(h.verdict(&illegal, None), 0, "ERROR|illegal-move:accepted->deferred");
    line(h.verdict(&["patch", &id, "--set", "Bad=1"], None), 0, "ERROR|invalid-key:Bad");
    line(h.verdict(&["patch", &id, "--set", "novalue"], None), 0, "ERROR|invalid-set");
    line(h.verdict(&["patch", "../PROP-001.md"], None), 0, "ERROR|no-such-proposal");
    let event = ["event", "responded", "--id", id.as_str(), "--action", "accept"];
    line(h.verdict(&event, None), 0, "OK");
    let out = h.store.dir.path().join("out");
    let scope = format!("hermit:{}", std::fs::canonicalize(&h.dir).unwrap().display());
    let to = out.to_str().unwrap();
    h.store
        .run(&["--scope", &scope, "export", "--layout", "hermit-proposals", "--to", to])
        .expect(0);
    let text = std::fs::read_to_string(out.join("proposals").join(&file)).unwrap();
    for want in ["status: accepted\n", "responded: true\n", "accepted_in_session: S-045\n"] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    assert!(text.contains("\naccepted_date: 20") && text.contains("\nAccepted on 20"), "{text}");
    let ledger = std::fs::read_to_string(out.join("state/proposal-metrics.jsonl")).unwrap();
    assert_eq!(ledger.matches("\"type\":\"responded\"").count(), 1, "{ledger}");
}

#[test]
fn list_shows_pending_micro_proposals_and_every_prop_at_once() {
    let h = Hermit::new(false);
    let queued = h.verdict(&["queue-micro"], Some(r#"{"tier":1,"question":"Ship it?"}"#));
    assert!(queued.stdout.starts_with("QUEUED|MP-"), "{queued:?}");
    let created = h.verdict(&["create"], Some("Title: Cache the install step\n---\nBody.\n"));
    assert_eq!(created.code, 0, "{created:?}");
    let list = h.json(&["list"], None).expect(0).json();
    assert_eq!(list["micro"].as_array().unwrap().len(), 1);
    assert_eq!(list["micro"][0]["question"], "Ship it?");
    assert_eq!(list["proposals"]["count"], 1, "{list}");
}

/// An --idem-key names the verb's own write, never the mirror's adoption of an unmigrated
/// script's write: a keyed nudge right after `proposal.ts queue-micro` wrote the mirrored files
/// still nudges and adopts the entry, and its retry replays the nudge (adopting what the script
/// wrote in between). The proposals mirror never carried the key (fixed with the alerts files).
#[test]
fn an_idem_keyed_verb_through_a_mirror_that_adopts_an_unmigrated_write_still_runs() {
    let h = Hermit::new(true);
    let dir = h.dir.to_str().unwrap().to_owned();
    h.store.run(&["import", "--layout", "hermit-proposals", "--from", &dir]).expect(0);
    let nudge = || {
        let args = ["--idem-key", "nudge-1", "proposals", "--mirror", &dir, "--dir", &dir];
        h.store.run(&[&args[..], &["micro", "nudge", "MP-20261129-2"]].concat())
    };
    let queue_file = h.dir.join("state/micro-proposals.json");
    let ledger_file = h.dir.join("state/proposal-metrics.jsonl");
    // What `proposal.ts queue-micro` writes, queue entry and ledger line.
    let queue_micro = |n: u32| {
        let id = format!("MP-20261129-{n}");
        let text = std::fs::read_to_string(&queue_file).unwrap();
        let mut queue: serde_json::Value = serde_json::from_str(&text).unwrap();
        let legacy = serde_json::json!({
            "id": id, "tier": 1, "status": "pending", "follow_up_count": 0,
            "ts": "2026-11-29T23:00:00Z", "question": "Written by the old script?",
        });
        queue["pending"].as_array_mut().unwrap().push(legacy);
        std::fs::write(&queue_file, serde_json::to_string_pretty(&queue).unwrap() + "\n").unwrap();
        let mut ledger = std::fs::read_to_string(&ledger_file).unwrap();
        ledger.push_str(&format!(
            "{{\"ts\":\"2026-11-29T23:00:00Z\",\"type\":\"micro-queued\",\"micro_id\":\"{id}\",\
             \"tier\":1,\"question\":\"Written by the old script?\"}}\n"
        ));
        std::fs::write(&ledger_file, &ledger).unwrap();
    };
    let entry = |id: &str| {
        let queue: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&queue_file).unwrap()).unwrap();
        let all = queue["pending"].as_array().unwrap().clone();
        all.into_iter().find(|e| e["id"] == id)
    };
    // A first mirrored call stamps the mirror (an import leaves nothing to compare with).
    let stamp = ["proposals", "--mirror", &dir, "--dir", &dir, "micro", "nudge", "MP-20261129-2"];
    h.store.run(&stamp).expect(0);
    let count = entry("MP-20261129-2").unwrap()["follow_up_count"].clone();
    queue_micro(7);
    let first = nudge().expect(0).json();
    assert_ne!(first["replayed"], true, "{first}");
    let nudged = entry("MP-20261129-2").unwrap()["follow_up_count"].clone();
    assert_eq!(nudged.as_u64(), count.as_u64().map(|c| c + 1), "the nudge landed: {first}");
    assert!(entry("MP-20261129-7").is_some(), "the unmigrated write adopted");
    queue_micro(8);
    let retry = nudge().expect(0).json();
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(entry("MP-20261129-2").unwrap()["follow_up_count"], nudged, "nudged once");
    assert!(entry("MP-20261129-8").is_some(), "the retry still adopts");
    h.store.run(&["verify"]).expect(0);
}

impl Hermit {
    /// A `--format verdict` call mirrored over the state directory.
    fn mirrored(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let dir = self.dir.to_str().unwrap();
        let mut full = vec!["--format", "verdict", "--mirror", dir, "proposals", "--dir", dir];
        full.extend_from_slice(args);
        self.store.run_with_stdin(&full, stdin.map(str::as_bytes))
    }

    fn state_file(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join("state").join(name)).ok()
    }

    fn pending_ids(&self) -> Vec<String> {
        let queue = self.json(&["queue"], None).expect(0).json();
        let entries = queue["pending"].as_array().unwrap().iter();
        entries.map(|e| e["id"].as_str().unwrap().to_owned()).collect()
    }
}

/// Issue 11, hermit loss 1: a first mirrored call on a directory that already holds
/// `state/micro-proposals.json`, with no import before it, replaced the file (its entries gone,
/// exit 0). The first call adopts what is there, as an import would.
#[test]
fn regression_11_a_first_mirrored_call_adopts_the_existing_queue() {
    let h = Hermit::new(true);
    let ledger = h.state_file("proposal-metrics.jsonl").unwrap();
    line(h.mirrored(&["micro", "nudge", "MP-20261129-2"], None), 0, "NUDGED|MP-20261129-2|3");
    let text = String::from_utf8(h.state_file("micro-proposals.json").unwrap()).unwrap();
    assert!(text.contains("\"follow_up_count\": 3") && text.contains("MP-20261129-3"), "{text}");
    assert_eq!(h.pending_ids(), ["MP-20261129-2", "MP-20261129-3"]);
    assert_eq!(h.state_file("proposal-metrics.jsonl").unwrap(), ledger, "the ledger is kept");
    let queued = h.mirrored(&["queue-micro"], Some("{\"question\":\"After the adoption?\"}"));
    let id = queued.expect(0).stdout;
    let (date, n) = id.trim().strip_prefix("QUEUED|MP-").unwrap().split_once('-').unwrap();
    assert_eq!(n, if date == "20261129" { "4" } else { "0" }, "numbered after the adopted ledger");
    h.store.run(&["verify"]).expect(0);
}

/// Issue 11, hermit loss 2: with no store yet, a corrupt `micro-proposals.json` was replaced by
/// `{"pending": []}` and the call answered `NONE|no-match`, exit 0. Upstream refuses it (exit 1
/// with a stderr line) and never overwrites it: so does the mirror, appending nothing.
#[test]
fn regression_11_a_corrupt_queue_is_refused_and_never_replaced() {
    let h = Hermit::new(false);
    let corrupt = b"{\"pending\": [1,]}\n";
    std::fs::write(h.dir.join("state/micro-proposals.json"), corrupt).unwrap();
    let run = h.mirrored(&["micro", "resolve", "MP-20261129-0", "--action", "approved"], None);
    let run = run.expect(1);
    assert!(run.stdout.is_empty() && run.stderr.contains("corrupt"), "{run:?}");
    assert_eq!(h.state_file("micro-proposals.json").unwrap(), corrupt, "the file is unchanged");
    assert!(h.state_file("proposal-metrics.jsonl").is_none());
    assert_eq!(h.store.run(&["log"]).expect(0).stdout, "", "nothing was appended");
}

/// Issue 11, hermit loss 3: a no-op call (`micro resolve` of an unknown id, `brief-cycle` on an
/// empty queue) rewrote a compact queue file as pretty JSON and created an empty ledger or a
/// `{"pending": []}` queue that was absent. A no-op writes nothing: a file keeps its own style
/// (the hand-spaced seed template too), and a file the store holds nothing for is never created.
#[test]
fn regression_11_a_no_op_mirrored_call_writes_nothing() {
    let compact = "{\"pending\":[{\"id\":\"MP-20261129-9\",\"tier\":1,\"status\":\"pending\",\
                   \"follow_up_count\":0,\"ts\":\"2026-11-29T21:50:45Z\",\"question\":\"q?\"}]}\n";
    for queue in [compact, "{\"pending\": []}\n"] {
        let h = Hermit::new(false);
        std::fs::write(h.dir.join("state/micro-proposals.json"), queue).unwrap();
        let resolve = ["micro", "resolve", "MP-19990101-0", "--action", "approved"];
        line(h.mirrored(&resolve, None), 0, "NONE|no-match");
        let cycle = "{\"new\":[],\"renudged\":[],\"expired\":[],\"dropped\":[]}";
        if queue != compact {
            line(h.mirrored(&["micro", "brief-cycle"], None), 0, cycle);
        }
        assert_eq!(h.state_file("micro-proposals.json").unwrap(), queue.as_bytes(), "{queue}");
        assert!(h.state_file("proposal-metrics.jsonl").is_none(), "no ledger created");
    }
    let empty = Hermit::new(false);
    let cycle = "{\"new\":[],\"renudged\":[],\"expired\":[],\"dropped\":[]}";
    line(empty.mirrored(&["micro", "brief-cycle"], None), 0, cycle);
    line(empty.mirrored(&["micro", "nudge", "MP-19990101-0"], None), 0, "NONE|no-match");
    assert!(empty.state_file("micro-proposals.json").is_none(), "no queue created");
    assert!(empty.state_file("proposal-metrics.jsonl").is_none(), "no ledger created");
}

/// Issue 11, hermit loss 4: a legacy `proposal.ts` that read the queue, then wrote it back with
/// its own entry after a mirrored `queue-micro` was acknowledged, made the next mirrored call
/// adopt that file: the acknowledged `QUEUED|MP-…` entry vanished while the ledger still listed
/// it. An entry leaves only by a resolve or an expiry, which the ledger records; the stale
/// rewrite's drop is not adopted, its new entry is.
#[test]
fn regression_11_a_stale_legacy_rewrite_keeps_the_acknowledged_entry() {
    let h = Hermit::new(true);
    h.store
        .run(&["import", "--layout", "hermit-proposals", "--from", h.dir.to_str().unwrap()])
        .expect(0);
    line(h.mirrored(&["micro", "nudge", "MP-20261129-3"], None), 0, "NUDGED|MP-20261129-3|3");
    let queue_file = h.dir.join("state/micro-proposals.json");
    let ledger_file = h.dir.join("state/proposal-metrics.jsonl");
    // proposal.ts reads the queue (no lock) ...
    let mut stale: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&queue_file).unwrap()).unwrap();
    // ... while a mirrored queue-micro is acknowledged ...
    let acked = h.mirrored(&["queue-micro"], Some("{\"question\":\"Acknowledged?\"}")).expect(0);
    let acked = acked.stdout.trim().strip_prefix("QUEUED|").unwrap().to_owned();
    // ... then writes its read back with its own entry, and appends its ledger line.
    let theirs = serde_json::json!({
        "id": "MP-20261129-7", "tier": 1, "status": "pending", "follow_up_count": 0,
        "ts": "2026-11-29T23:00:00Z", "question": "Written by the old script?",
    });
    stale["pending"].as_array_mut().unwrap().push(theirs);
    std::fs::write(&queue_file, serde_json::to_string_pretty(&stale).unwrap() + "\n").unwrap();
    let mut ledger = std::fs::read_to_string(&ledger_file).unwrap();
    ledger.push_str(
        "{\"ts\":\"2026-11-29T23:00:00Z\",\"type\":\"micro-queued\",\"micro_id\":\"MP-20261129-7\",\
         \"tier\":1,\"question\":\"Written by the old script?\"}\n",
    );
    std::fs::write(&ledger_file, ledger).unwrap();
    line(h.mirrored(&["micro", "nudge", "MP-20261129-7"], None), 0, "NUDGED|MP-20261129-7|1");
    let ids = h.pending_ids();
    assert!(ids.contains(&acked), "the acknowledged entry is kept: {ids:?}");
    assert!(ids.contains(&"MP-20261129-7".to_owned()), "the outside entry is adopted: {ids:?}");
    let file = std::fs::read_to_string(&queue_file).unwrap();
    assert!(file.contains(&acked) && file.contains("MP-20261129-7"), "{file}");
    let ledger = std::fs::read_to_string(&ledger_file).unwrap();
    assert_eq!(ledger.matches(&format!("\"{acked}\"")).count(), 1, "{ledger}");
    h.store.run(&["verify"]).expect(0);
}
