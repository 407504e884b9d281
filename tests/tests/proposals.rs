//! The proposals domain against legacy state: the real hermit state written by upstream's own
//! `proposal.ts` (a byte-faithful round trip both ways), fixtures written from the spec (wild
//! statuses, extra keys, a torn ledger line, a corrupt queue), MP ids from the ledger and the
//! configured zone, brief-cycle, and resolve handing back the rendered `on_resolve`.
//!
//! Does not start processes; `cli/tests/proposals.rs` races real ones.

use std::collections::BTreeSet;
use std::path::Path;

use hookstate_engine::{parse_create, Move, MoveInput};
use hookstate_engine::{parse_micro_input, ResolveInput};
use hookstate_engine::{read_hermit_files, INDEX_FILE, LEDGER_FILE, QUEUE_FILE};
use hookstate_engine::{Engine, Layout};
use hookstate_testkit::copy_dir as copy_tree;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy");
/// 2026-11-29T22:00:00Z: 17:00 on the 29th in New York.
const NOV_29_22H: u64 = 1_795_989_600_000;
/// 2026-11-30T04:00:00Z: still 23:00 on the 29th in New York.
const NOV_30_04H: u64 = 1_796_011_200_000;
/// 2026-09-14T08:00:00Z.
const SEP_14_08H: u64 = 1_789_372_800_000;

/// Copies a fixture's files (never the fixture itself) into `to`.
fn copy_fixture(name: &str, to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &to.join(entry.file_name()));
            } else {
                std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
            }
        }
    }
    copy(&Path::new(FIXTURES).join(name), to);
}

/// The shared hermit harness (a state directory beside a fresh store), with this file's helpers.
struct Hermit(hookstate_testkit::Hermit);

impl std::ops::Deref for Hermit {
    type Target = hookstate_testkit::Hermit;
    fn deref(&self) -> &hookstate_testkit::Hermit {
        &self.0
    }
}

fn hermit(fixture: Option<&str>) -> Hermit {
    let h = hookstate_testkit::Hermit::new(Path::new(FIXTURES), None);
    if let Some(name) = fixture {
        copy_fixture(name, &h.dir);
    }
    Hermit(h)
}

impl Hermit {
    fn import(&self) -> Value {
        let files = read_hermit_files(&self.dir).unwrap();
        self.engine.proposals().import(&self.call(1), files).unwrap().to_json()
    }

    fn export(&self, to: &Path) -> (Vec<u8>, Vec<u8>) {
        self.engine.proposals().export(&self.scope, to).unwrap();
        let state = to.join("state");
        (
            std::fs::read(state.join(QUEUE_FILE)).unwrap(),
            std::fs::read(state.join(LEDGER_FILE)).unwrap(),
        )
    }

    /// Sets the state directory's `config.timezone`, which dates MP and PROP ids.
    fn zone(&self, tz: &str) {
        let config = serde_json::json!({ "timezone": tz }).to_string();
        std::fs::write(self.dir.join("config.json"), config).unwrap();
    }

    fn queue(&self, now_ms: u64, tz: &str, json: &str) -> Value {
        let input = parse_micro_input(json).unwrap();
        self.zone(tz);
        self.engine.proposals().queue_micro(&self.call(now_ms), &input).unwrap().to_json()
    }

    fn resolve(&self, id: &str, action: &str, answer: Option<&str>) -> Value {
        let input = ResolveInput {
            id: id.into(),
            action: action.into(),
            answer: answer.map(str::to_owned),
            channel: Some("discord".into()),
        };
        self.engine.proposals().micro_resolve(&self.call(SEP_14_08H), &input).unwrap().to_json()
    }

    fn fixture_file(fixture: &str, name: &str) -> Vec<u8> {
        std::fs::read(Path::new(FIXTURES).join(fixture).join("state").join(name)).unwrap()
    }
}

#[test]
fn real_hermit_state_round_trips_byte_for_byte_both_ways() {
    for fixture in ["hermit", "hermit-wild"] {
        let first = hermit(Some(fixture));
        let imported = first.import();
        assert_eq!(imported["round_trip"], true, "{fixture}: {imported}");
        let out = first.tmp.path().join("out");
        let (queue, ledger) = first.export(&out);
        assert_eq!(queue, Hermit::fixture_file(fixture, QUEUE_FILE), "{fixture}: queue bytes");
        assert_eq!(ledger, Hermit::fixture_file(fixture, LEDGER_FILE), "{fixture}: ledger bytes");
        // import(export(state)) == state: a second store adopts the export and writes it back.
        let second = hermit(None);
        copy_tree(&out, &second.dir);
        assert_eq!(second.import()["round_trip"], true);
        let again = second.tmp.path().join("again");
        assert_eq!(second.export(&again), (queue, ledger), "{fixture}: second round trip");
        assert_eq!(tree(&again), tree(&out), "{fixture}: every file, PROPs and index included");
        second.engine.ops().verify(Default::default()).unwrap();
    }
}

/// Every file under `dir` (one level of subdirectories) by relative path.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    for sub in ["state", "proposals"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for entry in entries {
            let entry = entry.unwrap();
            let name = format!("{sub}/{}", entry.file_name().to_string_lossy());
            files.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    files
}

#[test]
fn real_prop_files_and_index_round_trip_byte_for_byte() {
    let h = hermit(Some("hermit"));
    assert_eq!(h.import()["proposals"], 2);
    let out = h.tmp.path().join("out");
    h.export(&out);
    let fixture = Path::new(FIXTURES).join("hermit");
    for name in [
        "state/proposals-index.json",
        "proposals/PROP-001-cache-dependency-install-step-ci-165046.md",
        "proposals/PROP-002-nightly-digest-flaky-tests-165046.md",
    ] {
        assert_eq!(
            std::fs::read(out.join(name)).unwrap(),
            std::fs::read(fixture.join(name)).unwrap(),
            "{name}"
        );
    }
}

impl Hermit {
    fn create(&self, now_ms: u64, stdin: &str) -> Value {
        let input = parse_create(stdin).unwrap();
        self.zone("America/New_York");
        self.engine.proposals().create(&self.call(now_ms), &input).unwrap().to_json()
    }

    fn prop_move(&self, id: &str, action: Move, expect: Option<&str>) -> Value {
        let input = MoveInput {
            id: id.into(),
            action,
            expect: expect.map(str::to_owned),
            decision: Some("Decided on @now.".into()),
            session: None,
        };
        self.zone("America/New_York");
        self.engine.proposals().move_status(&self.call(NOV_29_22H), &input).unwrap().to_json()
    }

    fn ledger_tail(&self) -> String {
        self.engine.proposals().ledger(&self.scope).unwrap().last().unwrap().clone()
    }
}

#[test]
fn prop_create_writes_upstreams_file_and_moves_are_compare_and_swap() {
    let h = hermit(Some("hermit"));
    h.import();
    let created = h.create(NOV_29_22H, "Title: Warm the build cache nightly\nSource: auto-detected\nTags: [\"build\"]\n---\n## Context\nSlow.\n");
    let id = "PROP-003-warm-build-cache-nightly-170000";
    assert_eq!(created["verdict"], id, "NNN continues the fixture's PROP-002, HHMMSS in New York");
    let out = h.tmp.path().join("out");
    h.export(&out);
    let text = std::fs::read_to_string(out.join(format!("proposals/{id}.md"))).unwrap();
    assert_eq!(
        text,
        format!(
            "---\nid: {id}\ntitle: \"Warm the build cache nightly\"\nstatus: proposed\nsource: \
             auto-detected\nsession: null\ncreated: 2026-11-29T17:00:00-05:00\naccepted_date: \
             null\nresolved_date: null\nrelated_sessions: []\ncategory: improvement\ntags: \
             [\"build\"]\nresponded: false\nself_eval_key: null\naccepted_in_session: null\n\
             success_signal: null\n---\n# Proposal: {id} — Warm the build cache nightly\n\n## \
             Context\nSlow.\n\n## Operator Decision\n\n"
        )
    );
    assert_eq!(
        h.ledger_tail(),
        format!("{{\"ts\":\"2026-11-29T22:00:00Z\",\"type\":\"created\",\"proposal_id\":\"{id}\",\"source\":\"auto-detected\",\"category\":\"improvement\",\"tags\":[\"build\"]}}")
    );
    let stale = h.prop_move(id, Move::Accept, Some("deferred"));
    assert_eq!(stale["verdict"], "ERROR|status-moved:proposed", "CAS on the status the caller saw");
    assert_eq!(h.prop_move(id, Move::Defer, Some("proposed"))["verdict"], format!("OK|{id}"));
    assert!(h.ledger_tail().contains("\"type\":\"responded\",\"proposal_id\":\"PROP-003-warm-build-cache-nightly-170000\",\"action\":\"defer\""));
    let lines = h.engine.proposals().ledger(&h.scope).unwrap().len();
    assert_eq!(h.prop_move(id, Move::Accept, None)["ledger_event"], false, "responded only once");
    assert_eq!(h.engine.proposals().ledger(&h.scope).unwrap().len(), lines);
    assert_eq!(
        h.prop_move(id, Move::Defer, None)["verdict"],
        "ERROR|illegal-move:accepted->deferred"
    );
    let resolved = h.prop_move(id, Move::Resolve, Some("accepted"));
    assert_eq!(resolved["verdict"], format!("OK|{id}"));
    assert!(h.ledger_tail().ends_with(
        "\"type\":\"resolved\",\"proposal_id\":\"PROP-003-warm-build-cache-nightly-170000\"}"
    ));
    h.export(&out);
    let text = std::fs::read_to_string(out.join(format!("proposals/{id}.md"))).unwrap();
    for line in [
        "status: resolved\n",
        "accepted_date: 2026-11-29T17:00:00-05:00\n",
        "resolved_date: 2026-11-29T17:00:00-05:00\n",
        "responded: true\n",
        "success_signal: null\ndeferred_date: 2026-11-29T17:00:00-05:00\n---\n",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert!(
        text.ends_with("## Operator Decision\nDecided on 2026-11-29T17:00:00-05:00.\n\n"),
        "{text}"
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(out.join("state/proposals-index.json")).unwrap())
            .unwrap();
    assert_eq!(index["count"], 3);
    assert_eq!(index["counts"], serde_json::json!({ "accepted": 1, "proposed": 1, "resolved": 1 }));
    assert_eq!(index["updated"], "2026-11-29T22:00:00.000Z");
    assert_eq!(index["proposals"][2]["responded"], false, "upstream's index quirk is kept");
}

#[test]
fn the_spec_example_imports_but_says_it_will_not_round_trip() {
    let h = hermit(Some("hermit-spec"));
    let imported = h.import();
    assert_eq!(
        (imported["entries"].as_u64(), imported["round_trip"].as_bool()),
        (Some(2), Some(false))
    );
    let (queue, _) = h.export(&h.tmp.path().join("out"));
    let ours: Value = serde_json::from_slice(&queue).unwrap();
    let theirs: Value =
        serde_json::from_slice(&Hermit::fixture_file("hermit-spec", QUEUE_FILE)).unwrap();
    assert_eq!(ours, theirs, "same values, JSON.stringify's layout");
}

#[test]
fn a_corrupt_or_linked_queue_file_is_refused_and_nothing_is_written() {
    let h = hermit(Some("hermit-corrupt"));
    let err = read_hermit_files(&h.dir).unwrap_err();
    assert!(err.is_invalid() && err.to_string().contains("corrupt"), "{err}");
    assert_eq!(h.engine.head().unwrap().seq, 0);
    let linked = hermit(Some("hermit"));
    let state = linked.dir.join("state");
    std::fs::rename(state.join(QUEUE_FILE), linked.dir.join("elsewhere.json")).unwrap();
    std::os::unix::fs::symlink(linked.dir.join("elsewhere.json"), state.join(QUEUE_FILE)).unwrap();
    assert!(read_hermit_files(&linked.dir).is_err());
    assert_eq!(linked.engine.head().unwrap().seq, 0);
}

#[test]
fn mp_ids_continue_the_ledger_in_the_configured_zone() {
    let h = hermit(Some("hermit"));
    h.import();
    let q = |now, tz, question: &str| {
        h.queue(now, tz, &format!("{{\"question\":\"{question}\"}}"))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(q(NOV_29_22H, "America/New_York", "a?"), "MP-20261129-4", "fixture's last N is 3");
    assert_eq!(q(NOV_30_04H, "America/New_York", "b?"), "MP-20261129-5", "still the 29th there");
    assert_eq!(q(NOV_30_04H, "UTC", "c?"), "MP-20261130-0", "a new date starts at 0");
    let dup = h.queue(NOV_30_04H, "UTC", "{\"question\":\"Pin node to 20.x in CI?\"}");
    assert_eq!(
        (dup["refused"].as_str(), dup["verdict"].as_str()),
        (Some("duplicate"), Some("DUPLICATE|MP-20261129-3"))
    );
}

#[test]
fn brief_cycle_on_wild_state_drops_bumps_and_keeps_key_order() {
    let h = hermit(Some("hermit-wild"));
    h.import();
    let cycle = h.engine.proposals().brief_cycle(&h.call(SEP_14_08H)).unwrap().to_json();
    assert_eq!(
        cycle["verdict"],
        "{\"new\":[{\"id\":\"MP-20260914-2\",\"tier\":1,\"question\":\"How should I proceed with \
         the accepted cache proposal?\",\"options\":[\"implement now\",\"session task\",\
         \"manual\"]}],\"renudged\":[{\"id\":\"MP-20260914-0\",\"tier\":1,\"question\":\"Archive \
         the stale deploy-notes draft?\",\"follow_up_count\":2}],\"expired\":[],\"dropped\":\
         [\"MP-20260914-1\"]}"
    );
    let (queue, _) = h.export(&h.tmp.path().join("out"));
    let queue: Value = serde_json::from_slice(&queue).unwrap();
    let keys: Vec<&str> = queue.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["version", "pending", "migrated"]);
    let entry = &queue["pending"][1];
    let keys: Vec<&str> = entry.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys.last(), Some(&"follow_up_count"), "a new key goes last, as in JS");
    assert_eq!(entry["follow_up_count"], 1);
    let second = h.engine.proposals().brief_cycle(&h.call(SEP_14_08H)).unwrap().to_json();
    let line: Value = serde_json::from_str(second["verdict"].as_str().unwrap()).unwrap();
    assert_eq!(line["expired"][0]["id"], "MP-20260914-0");
    assert_eq!(line["renudged"][0]["id"], "MP-20260914-2");
    let id = h.queue(SEP_14_08H, "UTC", "{\"question\":\"next?\"}")["id"].clone();
    assert_eq!(id, "MP-20260914-3", "the torn ledger line is kept and skipped");
}

#[test]
fn resolve_records_the_label_before_handing_back_on_resolve() {
    let h = hermit(Some("hermit-wild"));
    h.import();
    let unknown = h.resolve("MP-20260914-2", "answered", Some("later"));
    assert_eq!(unknown["refused"], "unknown_answer", "refused, and the entry stays queued");
    let out = h.resolve("MP-20260914-2", "answered", Some("2"));
    assert_eq!(out["verdict"], "RESOLVED|MP-20260914-2|answered");
    assert_eq!(
        out["on_resolve"],
        "/claude-code-hermit:proposal-act accept PROP-031 --answer \"session task\""
    );
    let ledger = h.engine.proposals().ledger(&h.scope).unwrap();
    assert_eq!(
        ledger.last().unwrap(),
        "{\"ts\":\"2026-09-14T08:00:00Z\",\"type\":\"micro-resolved\",\"micro_id\":\
         \"MP-20260914-2\",\"action\":\"answered\",\"question\":\"How should I proceed with the \
         accepted cache proposal?\",\"answer\":\"session task\"}"
    );
    assert_eq!(h.resolve("MP-20260914-2", "answered", Some("2"))["verdict"], "NONE|no-match");
    let queue = h.engine.proposals().queue(&h.scope).unwrap();
    assert!(queue.entries.iter().all(|e| !e.contains("MP-20260914-2")));
}

/// Queued ids in the ledger minus resolved ones are exactly the queue's ids.
pub(crate) fn ledger_matches_queue(ledger: &[String], queue_ids: &BTreeSet<String>) {
    let mut live = BTreeSet::new();
    for line in ledger {
        let Ok(row) = serde_json::from_str::<Value>(line) else { continue };
        let id = row["micro_id"].as_str().unwrap_or_default().to_owned();
        match row["type"].as_str() {
            Some("micro-queued") => assert!(live.insert(id), "{line}: id queued twice"),
            Some("micro-resolved") => assert!(live.remove(&id), "{line}: resolved but not live"),
            _ => {}
        }
    }
    assert_eq!(&live, queue_ids);
}

#[test]
fn the_ledger_is_the_queues_history() {
    let h = hermit(Some("hermit"));
    h.import();
    for i in 0..6 {
        h.queue(NOV_29_22H, "America/New_York", &format!("{{\"question\":\"q{i}?\"}}"));
    }
    h.resolve("MP-20261129-5", "approved", None);
    h.resolve("MP-20261129-7", "rejected", Some("no"));
    h.engine.proposals().brief_cycle(&h.call(NOV_29_22H)).unwrap();
    let queue = h.engine.proposals().queue(&h.scope).unwrap();
    let ids: BTreeSet<String> = queue
        .entries
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    // The fixture's MP-…-1 was resolved and …-0, -2, -3 expired by upstream; the brief-cycle
    // above expires nothing new (the six are fresh).
    ledger_matches_queue(&h.engine.proposals().ledger(&h.scope).unwrap(), &ids);
    assert_eq!(ids.len(), 4);
}

#[test]
fn an_imported_responded_line_counts_as_the_first_response() {
    let h = hermit(Some("hermit"));
    h.import();
    let event = |id: &str| {
        h.engine
            .proposals()
            .event(&h.call(NOV_29_22H), "responded", Some(id), Some("accept"))
            .unwrap()
    };
    let lines = h.engine.proposals().ledger(&h.scope).unwrap().len();
    let repeat = event("PROP-001-cache-dependency-install-step-ci-165046");
    assert_eq!((repeat.appended, repeat.result["recorded"].as_bool()), (0, Some(false)));
    assert_eq!(h.engine.proposals().ledger(&h.scope).unwrap().len(), lines);
    let first = event("PROP-002-nightly-digest-flaky-tests-165046");
    assert_eq!(first.result["recorded"], true);
    assert!(h.ledger_tail().contains("\"type\":\"responded\",\"proposal_id\":\"PROP-002"));
    h.engine.ops().verify(Default::default()).unwrap();
}

/// Spec §2.1 hazards 1 and 2, replayed step by step: two unlocked read-modify-write enqueues
/// (upstream's way; it numbers from the ledger, read just as unlocked) that both read before
/// either writes lose an entry and hand out one MP id twice. hookstate reads and writes inside
/// one transaction, so two engines on one store making the same calls keep both entries under
/// two ids.
#[test]
fn hazard_interleaved_enqueues_lose_an_entry_naively_but_not_here() {
    let h = hermit(Some("hermit"));
    let file = h.dir.join("state").join(QUEUE_FILE);
    let naive_read = || serde_json::from_slice::<Value>(&std::fs::read(&file).unwrap()).unwrap();
    let next_n = |queue: &Value| {
        let ids = queue["pending"].as_array().unwrap().iter();
        ids.filter_map(|e| e["id"].as_str()?.rsplit('-').next()?.parse::<u64>().ok()).max()
    };
    let (mut a, mut b) = (naive_read(), naive_read());
    for (queue, question) in [(&mut a, "from A?"), (&mut b, "from B?")] {
        let n = next_n(queue).map_or(0, |n| n + 1);
        let entry = serde_json::json!({ "id": format!("MP-20261129-{n}"), "question": question });
        queue["pending"].as_array_mut().unwrap().push(entry);
    }
    std::fs::write(&file, serde_json::to_vec(&a).unwrap()).unwrap();
    std::fs::write(&file, serde_json::to_vec(&b).unwrap()).unwrap();
    let naive = naive_read();
    let questions: Vec<&str> = naive["pending"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["question"].as_str())
        .collect();
    assert!(!questions.contains(&"from A?"), "the naive way lost A's entry");
    assert_eq!(a["pending"][2]["id"], b["pending"][2]["id"], "and gave A and B one id");

    let fresh = hermit(Some("hermit"));
    fresh.import();
    let other = Engine::open(
        &hookstate_testkit::store(&fresh.tmp.path().join("state.redb")),
        hookstate_testkit::options(),
    )
    .unwrap();
    let input = |q: &str| parse_micro_input(&format!("{{\"question\":\"{q}\"}}")).unwrap();
    fresh.zone("America/New_York");
    let first = fresh.engine.proposals().queue_micro(&fresh.call(NOV_29_22H), &input("from A?"));
    let second = other.proposals().queue_micro(&fresh.call(NOV_29_22H), &input("from B?"));
    let ids = [first.unwrap().to_json()["id"].clone(), second.unwrap().to_json()["id"].clone()];
    assert_eq!(ids, ["MP-20261129-4", "MP-20261129-5"]);
    let queue = fresh.engine.proposals().queue(&fresh.scope).unwrap();
    assert_eq!(queue.entries.len(), 4, "both entries kept beside the fixture's two");
}

/// The end of a mirrored proposals call writes each file only over the bytes the call saw:
/// what an unmigrated `proposal.ts` writes during the call (the queue, a ledger line, a PROP
/// file, the index) is kept as written, and the next mirrored call adopts it (the queue merged
/// per entry, so its entry joins the call's; the ledger loses no line).
#[test]
fn a_mirror_never_overwrites_proposals_files_changed_during_the_call() {
    let h = hermit(Some("hermit"));
    h.import();
    let state = h.dir.join("state");
    let prop = h.dir.join("proposals/PROP-001-cache-dependency-install-step-ci-165046.md");
    let files = [state.join(QUEUE_FILE), state.join(LEDGER_FILE), state.join(INDEX_FILE), prop];
    h.zone("UTC");
    let cycle = |now: u64, during: &dyn Fn()| {
        let call = h.call(now);
        let input = parse_micro_input(&format!("{{\"question\":\"Asked at {now}?\"}}")).unwrap();
        let outcome = h.engine.mirrored(&call, &Layout::Hermit, &h.dir, |engine| {
            during();
            engine.proposals().queue_micro(&call, &input)
        });
        outcome.unwrap();
    };
    cycle(NOV_29_22H, &|| {});
    // What the unmigrated script writes while the next call runs.
    let theirs: Vec<String> = {
        let read = |i: usize| std::fs::read_to_string(&files[i]).unwrap();
        let mut queue: Value = serde_json::from_str(&read(0)).unwrap();
        let entry = serde_json::json!({
            "id": "MP-20261129-7", "tier": 1, "status": "pending", "follow_up_count": 0,
            "ts": "2026-11-29T23:00:00Z", "question": "Written by the old script?",
        });
        queue["pending"].as_array_mut().unwrap().push(entry);
        let line = "{\"ts\":\"2026-11-29T23:00:00Z\",\"type\":\"micro-queued\",\"micro_id\":\
                    \"MP-20261129-7\",\"tier\":1,\"question\":\"Written by the old script?\"}\n";
        vec![
            serde_json::to_string_pretty(&queue).unwrap() + "\n",
            read(1) + line,
            read(2).replace("\"updated\"", " \"updated\""),
            read(3) + "\nEdited by hand.\n",
        ]
    };
    let write_theirs = || {
        for (file, text) in files.iter().zip(&theirs) {
            std::fs::write(file, text).unwrap();
        }
    };
    cycle(NOV_29_22H + 1000, &write_theirs);
    for (file, text) in files.iter().zip(&theirs) {
        assert_eq!(&std::fs::read_to_string(file).unwrap(), text, "kept: {}", file.display());
    }
    cycle(NOV_29_22H + 2000, &|| {});
    let queue = std::fs::read_to_string(&files[0]).unwrap();
    assert!(queue.contains("MP-20261129-7"), "the queue adopted: {queue}");
    let ledger = std::fs::read_to_string(&files[1]).unwrap();
    assert_eq!(ledger.matches("\"MP-20261129-7\"").count(), 1, "their line adopted: {ledger}");
    let ours = format!("Asked at {}?", NOV_29_22H + 1000);
    assert!(ledger.contains(&ours), "the call's own line is kept too: {ledger}");
    assert!(std::fs::read_to_string(&files[3]).unwrap().ends_with("\nEdited by hand.\n"));
    h.engine.ops().verify(Default::default()).unwrap();
}

/// A PROP accepted by hand in an editor that saves CRLF line ends is adopted (upstream's
/// line-anchored patterns read its frontmatter); it was taken for a stale rewrite and the
/// operator's accept and note were written over.
#[test]
fn a_prop_accepted_by_hand_with_crlf_line_ends_is_adopted() {
    let h = hermit(Some("hermit"));
    h.import();
    let prop = h.dir.join("proposals/PROP-002-nightly-digest-flaky-tests-165046.md");
    let mirrored = |now: u64| {
        let call = h.call(now);
        let outcome = h.engine.mirrored(&call, &Layout::Hermit, &h.dir, |engine| {
            engine.proposals().queue_micro(&call, &parse_micro_input("{\"question\":\"Q?\"}")?)
        });
        outcome.unwrap().mirror.unwrap()
    };
    mirrored(NOV_29_22H);
    let text = std::fs::read_to_string(&prop).unwrap();
    assert!(text.contains("\nstatus: proposed\n"), "{text}");
    let edited = text
        .replace("\nstatus: proposed\n", "\nstatus: accepted\n")
        .replace("## Context\n", "## Context\nAccepted by hand.\n")
        .replace('\n', "\r\n");
    std::fs::write(&prop, &edited).unwrap();
    let report = mirrored(NOV_29_22H + 1000);
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert_eq!(std::fs::read_to_string(&prop).unwrap(), edited, "the file is the operator's");
    let listed = h.engine.proposals().list(&h.scope).unwrap().proposals;
    let prop_002 = listed["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"].as_str().is_some_and(|id| id.starts_with("PROP-002")));
    assert_eq!(prop_002.unwrap()["status"], "accepted", "{listed}");
    h.engine.ops().verify(Default::default()).unwrap();
}
