//! The mirror under a lock-less legacy writer, for every layout (the hermit state directory's
//! three at once): a seeded interleaving of
//! mirrored calls with a writer that reads a layout's file, waits, and writes it back with its
//! own change (a stale read, then a write), before, during or after a call. At the end, after
//! one more mirrored call, no change hookstate acknowledged and no change the legacy writer made
//! is lost; a stale rewrite is at most a reported conflict.
//!
//! Single-threaded and deterministic: the "race" is the interleaving, which the seed picks, and
//! a write during a call runs inside the mirrored verb, between the mirror's read and its
//! write-back. `HOOKSTATE_RACE_ROUNDS` makes the run longer. Does not spawn processes.

use std::path::{Path, PathBuf};

use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Engine, Layout, Outcome, Result};

use crate::powerloss::Rng;

/// Rounds per layout in the default run.
const ROUNDS_DEFAULT: u64 = 120;

fn rounds() -> u64 {
    std::env::var("HOOKSTATE_RACE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS_DEFAULT)
}

/// When the legacy writer's write lands, relative to one mirrored call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    Before,
    During,
    After,
}

/// One layout's side of the race: what hookstate does in a mirrored call, what the legacy
/// writer does to the file, and the check that nothing was lost.
trait Case {
    fn name(&self) -> &'static str;
    fn layout(&self) -> Layout;
    fn call(&self, now_ms: u64) -> Call;
    /// One mutation by hookstate; its acknowledged change is remembered.
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome>;
    /// The legacy writer reads the file (the stale read).
    fn read(&self, dir: &Path) -> Option<Vec<u8>>;
    /// The legacy writer writes back what it read with its own change; remembers the change.
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, now_ms: u64, rng: &mut Rng);
    /// The acknowledged or outside changes missing from the store or the file.
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String>;
}

fn race(case: &mut dyn Case, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        &hookstate_testkit::store(&tmp.path().join("state.redb")),
        hookstate_testkit::options(),
    )
    .unwrap();
    let dir = tmp.path().join("mirror");
    let mut rng = Rng(seed);
    let layout = case.layout();
    let name = case.name();
    let mut now_ms = 1_764_000_000_000;
    let (mut conflicts, mut writes, mut kept) = (0usize, 0u64, 0usize);
    let mut stale: Option<Option<Vec<u8>>> = None;
    for _ in 0..rounds() {
        now_ms += 1 + rng.next() % 1000;
        if stale.is_none() && rng.next().is_multiple_of(2) {
            stale = Some(case.read(&dir));
        }
        let when = match rng.next() % 4 {
            0 => Some(When::Before),
            1 => Some(When::During),
            2 => Some(When::After),
            _ => None,
        };
        let write_now = stale.is_some() && when.is_some();
        let call = case.call(now_ms);
        if write_now && when == Some(When::Before) {
            let read = stale.take().unwrap();
            case.write(&dir, read.as_deref(), now_ms, &mut rng);
            writes += 1;
        }
        let during = write_now && when == Some(When::During);
        let mut pending = if during { stale.take() } else { None };
        let outcome = {
            let case_cell = std::cell::RefCell::new(&mut *case);
            let rng_cell = std::cell::RefCell::new(&mut rng);
            engine
                .mirrored(&call, &layout, &dir, |engine| {
                    let out =
                        case_cell.borrow_mut().mutate(engine, now_ms, &mut rng_cell.borrow_mut());
                    if let Some(read) = pending.take() {
                        let mut case = case_cell.borrow_mut();
                        case.write(&dir, read.as_deref(), now_ms, &mut rng_cell.borrow_mut());
                    }
                    out
                })
                .unwrap_or_else(|e| panic!("{name} seed {seed}: mirrored call failed: {e}"))
        };
        if during {
            writes += 1;
        }
        let report = outcome.mirror.expect("a mirrored call reports");
        conflicts += report.conflicts.len();
        kept += report.kept.len();
        if write_now && when == Some(When::After) {
            let read = stale.take().unwrap();
            case.write(&dir, read.as_deref(), now_ms, &mut rng);
            writes += 1;
        }
    }
    // One more call adopts what the last writes left.
    now_ms += 1;
    let call = case.call(now_ms);
    engine.mirrored(&call, &layout, &dir, |engine| case.mutate(engine, now_ms, &mut rng)).unwrap();
    let lost = case.lost(&engine, &dir);
    engine.ops().verify(Default::default()).unwrap();
    println!(
        "mirror race {name} seed={seed} rounds={} legacy_writes={writes} kept={kept} conflicts={conflicts} lost={}",
        rounds(),
        lost.len()
    );
    assert!(lost.is_empty(), "{name} seed {seed} lost: {lost:?}");
}

/// A seeded index below `len` (0 when `len` is 0).
fn index(rng: &mut Rng, len: usize) -> usize {
    usize::try_from(rng.next() % (len.max(1) as u64)).unwrap_or(0)
}

fn read_file(path: PathBuf) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

// ---------------------------------------------------------------------------------------------
// loopd: hookstate registers PMs and records turns; the legacy writer adds keys it owns.

struct Loopd {
    bundle: String,
    /// The last PM hookstate registered.
    pm: Option<String>,
    /// Each session's last acknowledged turn stamp.
    turns: std::collections::BTreeMap<String, String>,
    /// The legacy writer's own keys and their last values.
    legacy: std::collections::BTreeMap<String, u64>,
    counter: u64,
}

impl Loopd {
    fn new() -> Loopd {
        Loopd {
            bundle: "/race/bundle".into(),
            pm: None,
            turns: Default::default(),
            legacy: Default::default(),
            counter: 0,
        }
    }
}

impl Case for Loopd {
    fn name(&self) -> &'static str {
        "loopd"
    }
    fn layout(&self) -> Layout {
        Layout::Loopd { file: "loopd.json".into() }
    }
    fn call(&self, now_ms: u64) -> Call {
        Call::at(hookstate_engine::bundle_scope(&self.bundle), now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        let call = self.call(now_ms);
        self.counter += 1;
        if rng.next().is_multiple_of(3) {
            let session = format!("pm-{}", self.counter);
            let out = engine.signals().register_pm(&call, &self.bundle, &session)?;
            self.pm = Some(session);
            return Ok(out);
        }
        let session = format!("role-{}", rng.next() % 3);
        let turn = hookstate_engine::TurnInput {
            session: session.clone(),
            bundle: self.bundle.clone(),
            cwd: self.bundle.clone(),
            duration_ms: self.counter,
            reason: "done".into(),
            aborted: false,
        };
        let mut call = call;
        call.actor.session = Some(session.clone());
        let out = engine.signals().turn(&call, &turn)?;
        let at = engine.signals().latest(&call.scope)?;
        let record = at.into_iter().find(|(s, _)| *s == session).map(|(_, r)| r.at).unwrap();
        self.turns.insert(session, record);
        Ok(out)
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("loopd.json"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, rng: &mut Rng) {
        let mut map: serde_json::Map<String, serde_json::Value> =
            read.and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
        let key = format!("legacy.k{}", rng.next() % 4);
        self.counter += 1;
        map.insert(key.clone(), serde_json::json!(self.counter));
        self.legacy.insert(key, self.counter);
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("loopd.json"), serde_json::to_vec(&map).unwrap()).unwrap();
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let mut lost = Vec::new();
        let scope = hookstate_engine::bundle_scope(&self.bundle);
        let pm = engine.signals().pm(&scope).unwrap().map(|p| p.current.session);
        if pm != self.pm {
            lost.push(format!("the PM registration {:?} (store: {pm:?})", self.pm));
        }
        let latest: std::collections::BTreeMap<String, String> =
            engine.signals().latest(&scope).unwrap().into_iter().map(|(s, r)| (s, r.at)).collect();
        for (session, at) in &self.turns {
            if latest.get(session) != Some(at) {
                lost.push(format!("the turn of {session} at {at}"));
            }
        }
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("loopd.json")).unwrap()).unwrap();
        for (key, value) in &self.legacy {
            if file[key] != serde_json::json!(value) {
                lost.push(format!("the outside key {key}={value}"));
            }
        }
        lost
    }
}

// ---------------------------------------------------------------------------------------------
// observer: hookstate appends rows and counts turns; the legacy writer appends rows, counts
// turns and marks findings delivered, from a stale read.

/// Turns bumped at most, so that the window (8 turns, 60 rows) evicts nothing.
const OBSERVER_TURNS_MAX: u64 = 6;
/// Rows written at most, by both sides.
const OBSERVER_ROWS_MAX: usize = 50;

struct Observer {
    rows: Vec<String>,
    delivered: Vec<String>,
    turns: u64,
    counter: u64,
}

impl Case for Observer {
    fn name(&self) -> &'static str {
        "observer"
    }
    fn layout(&self) -> Layout {
        Layout::Observer { file: "claude-management.json".into() }
    }
    fn call(&self, now_ms: u64) -> Call {
        Call::at("observer:race", now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        let call = self.call(now_ms);
        self.counter += 1;
        if rng.next().is_multiple_of(4) && self.turns < OBSERVER_TURNS_MAX {
            self.turns += 1;
            return engine.observer().turn(&call, None);
        }
        if self.rows.len() >= OBSERVER_ROWS_MAX || !rng.next().is_multiple_of(3) {
            return engine.observer().turn(&call, Some("sub"));
        }
        let text = format!("hs-{}", self.counter);
        let row = hookstate_engine::RowInput {
            kind: "user".into(),
            text: Some(text.clone()),
            name: None,
            input: None,
        };
        self.rows.push(text);
        engine.observer().append(&call, &[row])
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("claude-management.json"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, rng: &mut Rng) {
        use hookstate_engine::schema::observer::{ObservedRow, ObserverState};
        let mut state: ObserverState =
            read.and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
        self.counter += 1;
        // As claude-management's hook does: rows are stamped with the turn it read; a turn that
        // ends is counted after its rows.
        if self.rows.len() < OBSERVER_ROWS_MAX {
            let text = format!("legacy-{}", self.counter);
            state.buffer.push(ObservedRow {
                turn: state.turn,
                kind: "user".into(),
                text: text.clone(),
            });
            self.rows.push(text);
            if rng.next().is_multiple_of(3) && self.turns < OBSERVER_TURNS_MAX {
                state.turn += 1;
                self.turns += 1;
            }
        }
        let key = format!("gotcha:legacy {}", self.counter);
        state.delivered.push(key.clone());
        self.delivered.push(key);
        std::fs::create_dir_all(dir).unwrap();
        let text = serde_json::to_string_pretty(&state).unwrap() + "\n";
        std::fs::write(dir.join("claude-management.json"), text).unwrap();
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let mut lost = Vec::new();
        let state = engine.observer().doc("observer:race").unwrap().state;
        let rows: Vec<&str> = state.buffer.iter().map(|r| r.text.as_str()).collect();
        lost.extend(
            self.rows.iter().filter(|r| !rows.contains(&r.as_str())).map(|r| format!("row {r}")),
        );
        let delivered = self.delivered.iter().filter(|k| !state.delivered.contains(k));
        lost.extend(delivered.map(|k| format!("delivered {k}")));
        if state.turn != self.turns {
            lost.push(format!("turns: {} counted, {} made", state.turn, self.turns));
        }
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("claude-management.json")).unwrap())
                .unwrap();
        if file["buffer"].as_array().map_or(0, Vec::len) != state.buffer.len() {
            lost.push("the file does not hold the store's window".into());
        }
        lost
    }
}

// ---------------------------------------------------------------------------------------------
// hermit: hookstate queues, resolves and nudges micro-proposals and ticks the alert ladder over
// the whole state directory; the legacy writer is `proposal.ts` without a lock: it reads the
// queue, then writes that read back with its own queued entry (or without an entry it
// resolved), and appends its ledger line to the ledger as it is then.

/// The legacy writer's ids: another date than hookstate's, as two writers' ids never collide once
/// the mirror adopted their ledger lines.
const HERMIT_LEGACY_DATE: &str = "19990101";

struct Hermit {
    /// The state directory the scope names (its `config.json` dates hookstate's ids).
    home: tempfile::TempDir,
    /// Ids hookstate queued (acknowledged).
    acked: std::collections::BTreeSet<String>,
    /// Ids the legacy writer queued.
    outside: std::collections::BTreeSet<String>,
    /// Ids resolved, by either side.
    resolved: std::collections::BTreeSet<String>,
    /// The ledger lines the legacy writer appended.
    lines: Vec<String>,
    counter: u64,
}

impl Hermit {
    fn new() -> Hermit {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.json"), "{\"timezone\":\"UTC\"}\n").unwrap();
        Hermit {
            home,
            acked: Default::default(),
            outside: Default::default(),
            resolved: Default::default(),
            lines: Vec::new(),
            counter: 0,
        }
    }

    fn scope(&self) -> String {
        hookstate_engine::schema::hermit::scope_of(self.home.path().to_str().unwrap())
    }

    fn pending(engine: &Engine, scope: &str) -> Vec<String> {
        let queue = engine.proposals().pending(scope).unwrap().pending;
        queue.iter().map(|e| e["id"].as_str().unwrap_or_default().to_owned()).collect()
    }

    fn ledger_line(kind: &str, id: &str, extra: &str) -> String {
        format!(
            "{{\"ts\":\"1999-01-01T00:00:00Z\",\"type\":\"{kind}\",\"micro_id\":\"{id}\",{extra}\
             \"question\":\"legacy {id}\"}}"
        )
    }
}

impl Case for Hermit {
    fn name(&self) -> &'static str {
        "hermit"
    }
    fn layout(&self) -> Layout {
        Layout::Hermit
    }
    fn call(&self, now_ms: u64) -> Call {
        Call::at(self.scope(), now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        let call = self.call(now_ms);
        self.counter += 1;
        let pending = Hermit::pending(engine, &call.scope);
        let pick = |rng: &mut Rng| pending.get(index(rng, pending.len())).cloned();
        match rng.next() % 5 {
            0 | 1 => {
                let payload = format!("{{\"question\":\"hookstate {}?\"}}", self.counter);
                let input = hookstate_engine::parse_micro_input(&payload)?;
                let out = engine.proposals().queue_micro(&call, &input)?;
                let id = out.result["id"].as_str().unwrap_or_default().to_owned();
                if out.refusal.is_none() {
                    self.acked.insert(id);
                }
                Ok(out)
            }
            2 if !pending.is_empty() => {
                let id = pick(rng).unwrap_or_default();
                let input = hookstate_engine::ResolveInput {
                    id: id.clone(),
                    action: "approved".into(),
                    answer: None,
                    channel: None,
                };
                let out = engine.proposals().micro_resolve(&call, &input)?;
                if out.refusal.is_none() {
                    self.resolved.insert(id);
                }
                Ok(out)
            }
            3 if !pending.is_empty() => {
                engine.proposals().micro_nudge(&call, &pick(rng).unwrap_or_default())
            }
            _ => {
                let input = hookstate_engine::parse_tick_input("{\"firing\":[]}").unwrap();
                engine.alerts().tick(&call, &input)
            }
        }
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("state/micro-proposals.json"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, rng: &mut Rng) {
        let mut queue: serde_json::Value = read
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_else(|| serde_json::json!({ "pending": [] }));
        let entries = queue["pending"].as_array_mut().unwrap();
        self.counter += 1;
        let line = if rng.next().is_multiple_of(3) && !entries.is_empty() {
            // `micro resolve`: the entry leaves the queue it read, the ledger gets its line.
            let entry = entries.remove(index(rng, entries.len()));
            let id = entry["id"].as_str().unwrap().to_owned();
            self.resolved.insert(id.clone());
            Hermit::ledger_line("micro-resolved", &id, "\"action\":\"rejected\",")
        } else {
            // `queue-micro`: its entry joins the queue it read.
            let id = format!("MP-{HERMIT_LEGACY_DATE}-{}", self.counter);
            entries.push(serde_json::json!({
                "id": id, "tier": 1, "status": "pending", "follow_up_count": 0,
                "ts": "1999-01-01T00:00:00Z", "question": format!("legacy {id}"),
            }));
            self.outside.insert(id.clone());
            Hermit::ledger_line("micro-queued", &id, "\"tier\":1,")
        };
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let text = serde_json::to_string_pretty(&queue).unwrap() + "\n";
        std::fs::write(state.join("micro-proposals.json"), text).unwrap();
        // `appendJsonlLine`: the line goes after whatever the ledger holds now.
        let mut ledger = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(state.join("proposal-metrics.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut ledger, format!("{line}\n").as_bytes()).unwrap();
        self.lines.push(line);
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let scope = self.scope();
        let store: std::collections::BTreeSet<String> =
            Hermit::pending(engine, &scope).into_iter().collect();
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("state/micro-proposals.json")).unwrap())
                .unwrap();
        let in_file: std::collections::BTreeSet<String> = file["pending"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect();
        let mut lost = Vec::new();
        for id in self.acked.iter().chain(&self.outside).filter(|id| !self.resolved.contains(*id)) {
            if !store.contains(id) || !in_file.contains(id) {
                let whose = if self.acked.contains(id) { "acknowledged" } else { "outside" };
                lost.push(format!("the {whose} entry {id}"));
            }
        }
        for id in self.resolved.iter().filter(|id| store.contains(*id) || in_file.contains(*id)) {
            lost.push(format!("the resolve of {id} (the entry came back)"));
        }
        let ledger = engine.proposals().ledger(&scope).unwrap();
        for line in self.lines.iter().filter(|l| !ledger.contains(l)) {
            lost.push(format!("the outside ledger line {line}"));
        }
        let file_ledger =
            std::fs::read_to_string(dir.join("state/proposal-metrics.jsonl")).unwrap();
        if file_ledger.lines().collect::<Vec<_>>() != ledger {
            lost.push("the ledger file does not hold the store's ledger".into());
        }
        lost
    }
}

#[test]
fn loopd_mirror_loses_nothing_to_a_stale_legacy_writer() {
    for seed in 1..=3 {
        race(&mut Loopd::new(), seed);
    }
}

#[test]
fn observer_mirror_loses_nothing_to_a_stale_legacy_writer() {
    for seed in 1..=3 {
        let mut case = Observer { rows: Vec::new(), delivered: Vec::new(), turns: 0, counter: 0 };
        race(&mut case, seed);
    }
}

// ---------------------------------------------------------------------------------------------
// moonshine: hookstate adds, claims, replies, dismisses and drains; the legacy writer is the web
// dev server, creating comments and dismissing one it read (its read maybe stale by then).

const MOONSHINE_PROJECT: &str = "race";

fn moonshine_inbox(dir: &Path) -> PathBuf {
    dir.join(MOONSHINE_PROJECT).join(".feedback")
}

#[derive(Default)]
struct Moonshine {
    /// Comments hookstate added, and the ones the web created.
    added: Vec<String>,
    web_added: Vec<String>,
    /// Each acknowledged claim's id and token (the last one per comment).
    claims: std::collections::BTreeMap<String, u64>,
    /// Acknowledged replies and dismissals.
    replies: std::collections::BTreeMap<String, String>,
    dismissed: Vec<String>,
    /// Dismissals the web wrote.
    web_dismissed: Vec<String>,
    /// Which comment file the web reads next.
    cursor: std::cell::Cell<usize>,
    counter: u64,
    /// Whether the author switched listen mode on (drains then claim every pending comment).
    listening: bool,
}

impl Moonshine {
    fn comments(engine: &Engine) -> Vec<(String, serde_json::Value)> {
        let listed = engine.feedback().list(&format!("moonshine:{MOONSHINE_PROJECT}")).unwrap();
        listed.comments.into_iter().map(|c| (c.id, c.record)).collect()
    }
}

impl Case for Moonshine {
    fn name(&self) -> &'static str {
        "moonshine"
    }
    fn layout(&self) -> Layout {
        Layout::Moonshine
    }
    fn call(&self, now_ms: u64) -> Call {
        let scope = format!("moonshine:{MOONSHINE_PROJECT}");
        let actor = Actor { session: Some("hs".into()), ..Actor::default() };
        Call::at(scope, now_ms).by(actor)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        use hookstate_engine::{ClaimAsk, DrainAsk, Pass};
        let call = self.call(now_ms);
        let fb = engine.feedback();
        if !self.listening {
            self.listening = true;
            return fb.control(&call, "listen", None);
        }
        let pick = |ids: Vec<String>, rng: &mut Rng| {
            (!ids.is_empty())
                .then(|| ids[usize::try_from(rng.below(ids.len() as u64)).unwrap()].clone())
        };
        match rng.below(6) {
            0 => {
                let target = r#"{"kind":"block","path":"a.md"}"#;
                let out = fb.add(&call, target, "from hookstate")?;
                self.added.push(out.result["id"].as_str().unwrap().to_owned());
                Ok(out)
            }
            1 | 2 => {
                let ask = ClaimAsk { holder: None, id: None, all: false, stale_ms: 300_000 };
                let out = fb.claim(&call, &ask)?;
                for c in out.result["claimed"].as_array().into_iter().flatten() {
                    let id = c["id"].as_str().unwrap().to_owned();
                    self.claims.insert(id, c["token"].as_u64().unwrap());
                }
                Ok(out)
            }
            3 => {
                let open: Vec<String> = self
                    .claims
                    .keys()
                    .filter(|id| !self.replies.contains_key(*id))
                    .cloned()
                    .collect();
                let Some(id) = pick(open, rng) else { return fb.heartbeat(&call, None, 90) };
                self.counter += 1;
                let reply = format!("reply {}", self.counter);
                let out = fb.reply(&call, &id, self.claims[&id], &reply)?;
                if out.refusal.is_none() {
                    self.replies.insert(id, reply);
                }
                Ok(out)
            }
            4 => {
                let ids = Self::comments(engine).into_iter().map(|(id, _)| id).collect();
                let Some(id) = pick(ids, rng) else { return fb.heartbeat(&call, None, 90) };
                let out = fb.dismiss(&call, &id)?;
                if out.refusal.is_none() {
                    self.dismissed.push(id);
                }
                Ok(out)
            }
            _ => {
                let ask =
                    DrainAsk { pass: Pass::Tick, holder: None, stale_ms: 300_000, interval_s: 90 };
                let out = fb.drain(&call, &ask)?;
                for c in out.result["claimed"].as_array().into_iter().flatten() {
                    let id = c["id"].as_str().unwrap().to_owned();
                    self.claims.insert(id, c["token"].as_u64().unwrap());
                }
                Ok(out)
            }
        }
    }
    /// The author reads the HUD: a pending comment when there is one (the one it dismisses
    /// next), else any.
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(moonshine_inbox(dir))
            .ok()?
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("fb_") && n.ends_with(".json"))
            .filter_map(|n| Some((n.clone(), std::fs::read(moonshine_inbox(dir).join(n)).ok()?)))
            .collect();
        files.sort();
        let pending: Vec<&(String, Vec<u8>)> = files
            .iter()
            .filter(|(_, bytes)| String::from_utf8_lossy(bytes).contains("\"status\": \"pending\""))
            .collect();
        let shown = if pending.is_empty() { files.iter().collect() } else { pending };
        let (name, bytes) = shown.get(self.cursor.get() % shown.len().max(1))?;
        self.cursor.set(self.cursor.get() + 7);
        Some([name.as_bytes(), b"\n", bytes].concat())
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, now_ms: u64, rng: &mut Rng) {
        let inbox = moonshine_inbox(dir);
        std::fs::create_dir_all(&inbox).unwrap();
        // The web writes a temp file and renames it over the name.
        let write = |name: &str, text: String| {
            let temp = inbox.join(format!("{name}.moonshine-tmp"));
            std::fs::write(&temp, text).unwrap();
            std::fs::rename(&temp, inbox.join(name)).unwrap();
        };
        let read = read.and_then(|r| {
            let at = r.iter().position(|b| *b == b'\n')?;
            let name = String::from_utf8(r[..at].to_vec()).ok()?;
            let record: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&r[at + 1..]).ok()?;
            Some((name, record))
        });
        match read {
            Some((name, mut record)) if rng.below(3) != 0 => {
                let status = record["status"].as_str().unwrap_or_default();
                if status == "pending" || status == "delivered" {
                    record.insert("status".into(), "dismissed".into());
                    write(&name, serde_json::to_string_pretty(&record).unwrap() + "\n");
                    self.web_dismissed.push(name.trim_end_matches(".json").to_owned());
                }
            }
            _ => {
                self.counter += 1;
                let id = format!("fb_web{}_{now_ms}", self.counter);
                let record = serde_json::json!({
                    "id": id, "ts": "2026-11-29T22:00:00.000Z", "project": MOONSHINE_PROJECT,
                    "status": "pending", "target": { "kind": "block", "path": "a.md" },
                    "comment": "from the web", "reply": null, "deliveredAt": null,
                    "addressedAt": null,
                });
                write(&format!("{id}.json"), serde_json::to_string_pretty(&record).unwrap() + "\n");
                self.web_added.push(id);
            }
        }
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let mut lost = Vec::new();
        let comments: std::collections::BTreeMap<String, serde_json::Value> =
            Self::comments(engine).into_iter().collect();
        let status =
            |id: &str| comments.get(id).and_then(|r| r["status"].as_str()).unwrap_or("absent");
        for id in self.added.iter().chain(&self.web_added) {
            if !comments.contains_key(id) {
                lost.push(format!("the comment {id}"));
            }
        }
        for (id, reply) in &self.replies {
            if comments[id]["reply"] != serde_json::json!(reply) || status(id) != "addressed" {
                lost.push(format!("the reply {reply:?} to {id} (store: {})", comments[id]));
            }
        }
        for id in &self.dismissed {
            if status(id) != "dismissed" {
                lost.push(format!("hookstate's dismissal of {id} (store: {})", status(id)));
            }
        }
        for id in &self.web_dismissed {
            // Conflicts aside: a dismissal read before an acknowledged reply leaves the reply.
            if status(id) != "dismissed" && !self.replies.contains_key(id) {
                lost.push(format!("the web's dismissal of {id} (store: {})", status(id)));
            }
        }
        for id in self.claims.keys() {
            if status(id) == "pending" {
                lost.push(format!("the claim of {id}"));
            }
        }
        for (id, record) in &comments {
            let file = std::fs::read(moonshine_inbox(dir).join(format!("{id}.json"))).ok();
            let file: Option<serde_json::Value> =
                file.and_then(|b| serde_json::from_slice(&b).ok());
            if file.as_ref().map(|f| &f["status"]) != Some(&record["status"]) {
                lost.push(format!(
                    "the file of {id} does not show the store's {}",
                    record["status"]
                ));
            }
        }
        lost
    }
}

#[test]
fn moonshine_mirror_loses_nothing_to_a_stale_web_writer() {
    for seed in 1..=3 {
        race(&mut Moonshine::default(), seed);
    }
}

#[test]
fn hermit_mirror_loses_nothing_to_a_stale_proposal_ts() {
    for seed in 1..=3 {
        race(&mut Hermit::new(), seed);
    }
}

// ---------------------------------------------------------------------------------------------
// hermit alert state: hookstate counts precheck ticks and runs alert-state ticks mirrored; the
// legacy writer is an unmigrated precheck: it reads `state/alert-state.json`, adds one tick to
// what it read, and writes that back (often the very bytes the mirror wrote since, which only
// the file's stamp tells apart). Precheck runs at most once between two mirrored calls: when two
// precheck writes land with no call between them, the first stale, the second builds on the
// first's count, and the tick the first overwrote is lost to the file before the mirror can see
// it (upstream's own lost update, documented in docs/decisions.md).

struct HermitTicks {
    home: tempfile::TempDir,
    /// Ticks counted, on either side.
    ticks: u64,
    /// Whether a mirrored call ran since precheck last wrote.
    observed: bool,
}

impl HermitTicks {
    fn new() -> HermitTicks {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.json"), "{\"timezone\":\"UTC\"}\n").unwrap();
        HermitTicks { home, ticks: 0, observed: true }
    }

    fn scope(&self) -> String {
        hookstate_engine::schema::hermit::scope_of(self.home.path().to_str().unwrap())
    }
}

impl Case for HermitTicks {
    fn name(&self) -> &'static str {
        "hermit-alerts"
    }
    fn layout(&self) -> Layout {
        Layout::Hermit
    }
    fn call(&self, now_ms: u64) -> Call {
        Call::at(self.scope(), now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        let call = self.call(now_ms);
        self.observed = true;
        if rng.next().is_multiple_of(3) {
            let input = hookstate_engine::parse_tick_input("{\"firing\":[]}").unwrap();
            return engine.alerts().tick(&call, &input);
        }
        self.ticks += 1;
        engine.alerts().count_tick(&call)
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("state/alert-state.json"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, _: &mut Rng) {
        if !self.observed {
            return;
        }
        // Upstream's precheck starts from the seed template when there is no file yet.
        let Some(mut state) =
            read.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        else {
            return;
        };
        let ticks = state["total_ticks"].as_u64().unwrap_or(0) + 1;
        state["total_ticks"] = serde_json::json!(ticks);
        self.ticks += 1;
        self.observed = false;
        let text = serde_json::to_string_pretty(&state).unwrap() + "\n";
        // `writeAlertState`: a temp file renamed over the state (a new inode each write).
        let temp = dir.join(format!("state/.alert-state.json.{}.tmp", std::process::id()));
        std::fs::write(&temp, text).unwrap();
        std::fs::rename(&temp, dir.join("state/alert-state.json")).unwrap();
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let mut lost = Vec::new();
        let state = engine.alerts().state(&self.scope()).unwrap();
        let counted = state["total_ticks"].as_u64().unwrap_or(0);
        if counted != self.ticks {
            lost.push(format!("ticks: {counted} counted, {} made", self.ticks));
        }
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("state/alert-state.json")).unwrap())
                .unwrap();
        if file["total_ticks"].as_u64() != Some(counted) {
            lost.push("the file does not hold the store's count".into());
        }
        lost
    }
}

#[test]
fn hermit_alert_state_mirror_loses_no_tick_to_a_stale_precheck() {
    for seed in 1..=3 {
        race(&mut HermitTicks::new(), seed);
    }
}

// ---------------------------------------------------------------------------------------------
// hermit-session: hookstate merges runtime.json fields and observes rows; the legacy writer
// (a stale `updateRuntimeField`, a stale `appendFileSync`) sets its own fields and appends
// its own lines.

const SESSION_SCOPE: &str = "hermit:/race/.claude-code-hermit";

fn session_call(now_ms: u64) -> Call {
    Call::at(SESSION_SCOPE, now_ms)
}

struct SessionRuntime {
    /// Each field's last acknowledged (or written) value, by who wrote it.
    fields: std::collections::BTreeMap<String, u64>,
    counter: u64,
    /// The layout: the session's own, or the whole hermit directory (where the heartbeat
    /// layout keeps the file).
    layout: Layout,
}

impl Case for SessionRuntime {
    fn name(&self) -> &'static str {
        match self.layout {
            Layout::HermitSession => "hermit-session runtime.json",
            _ => "hermit runtime.json",
        }
    }
    fn layout(&self) -> Layout {
        self.layout.clone()
    }
    fn call(&self, now_ms: u64) -> Call {
        session_call(now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, rng: &mut Rng) -> Result<Outcome> {
        self.counter += 1;
        let key = format!("hs_k{}", rng.next() % 4);
        let sets = vec![(key.clone(), self.counter.to_string())];
        let write = hookstate_engine::RuntimeWrite::Merge {
            sets,
            unset: Vec::new(),
            expect_updated_at: None,
        };
        let answer = engine.session().runtime(&session_call(now_ms), &write)?;
        self.fields.insert(key, self.counter);
        Ok(answer.outcome)
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("state/runtime.json"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, rng: &mut Rng) {
        let mut map: serde_json::Map<String, serde_json::Value> =
            read.and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
        self.counter += 1;
        let key = format!("legacy_k{}", rng.next() % 4);
        map.insert(key.clone(), serde_json::json!(self.counter));
        self.fields.insert(key, self.counter);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let text = serde_json::to_string_pretty(&map).unwrap() + "\n";
        std::fs::write(dir.join("state/runtime.json"), text).unwrap();
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let answer = engine.session().runtime_get(SESSION_SCOPE).unwrap();
        let store: serde_json::Value = serde_json::from_str(&answer.verdict.lines[0]).unwrap();
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("state/runtime.json")).unwrap())
                .unwrap();
        let mut lost = Vec::new();
        for (key, value) in &self.fields {
            if store[key] != serde_json::json!(value) {
                lost.push(format!("{key}={value} (store: {})", store[key]));
            }
            if file[key] != serde_json::json!(value) {
                lost.push(format!("{key}={value} in the file (file: {})", file[key]));
            }
        }
        lost
    }
}

struct SessionObservations {
    rows: Vec<String>,
    counter: u64,
}

impl Case for SessionObservations {
    fn name(&self) -> &'static str {
        "hermit-session observations.jsonl"
    }
    fn layout(&self) -> Layout {
        Layout::Hermit
    }
    fn call(&self, now_ms: u64) -> Call {
        session_call(now_ms)
    }
    fn mutate(&mut self, engine: &Engine, now_ms: u64, _: &mut Rng) -> Result<Outcome> {
        self.counter += 1;
        let label = format!("hs-{}", self.counter);
        let args = vec!["quick-deferral".to_owned()];
        let answer = engine.session().observe(&session_call(now_ms), &args, &label)?;
        self.rows.push(format!("\"pattern\":\"{label}\""));
        Ok(answer.outcome)
    }
    fn read(&self, dir: &Path) -> Option<Vec<u8>> {
        read_file(dir.join("state/observations.jsonl"))
    }
    fn write(&mut self, dir: &Path, read: Option<&[u8]>, _: u64, _: &mut Rng) {
        let mut bytes = read.map(<[u8]>::to_vec).unwrap_or_default();
        self.counter += 1;
        let line = format!("{{\"pattern\":\"legacy-{}\"}}", self.counter);
        bytes.extend_from_slice(format!("{line}\n").as_bytes());
        self.rows.push(format!("\"pattern\":\"legacy-{}\"", self.counter));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::write(dir.join("state/observations.jsonl"), bytes).unwrap();
    }
    fn lost(&self, engine: &Engine, dir: &Path) -> Vec<String> {
        let out = dir.join("..").join("export");
        engine.session().export(SESSION_SCOPE, &out).unwrap();
        let store = std::fs::read_to_string(out.join("state/observations.jsonl")).unwrap();
        let file = std::fs::read_to_string(dir.join("state/observations.jsonl")).unwrap();
        let mut lost = Vec::new();
        for row in &self.rows {
            if store.matches(row.as_str()).count() != 1 {
                lost.push(format!(
                    "row {row} ({} in the store)",
                    store.matches(row.as_str()).count()
                ));
            }
            if !file.contains(row.as_str()) {
                lost.push(format!("row {row} in the file"));
            }
        }
        lost
    }
}

#[test]
fn hermit_session_mirror_loses_nothing_to_a_stale_legacy_writer() {
    for seed in 1..=3 {
        for layout in [Layout::HermitSession, Layout::Hermit] {
            race(&mut SessionRuntime { fields: Default::default(), counter: 0, layout }, seed);
        }
        race(&mut SessionObservations { rows: Vec::new(), counter: 0 }, seed);
    }
}
