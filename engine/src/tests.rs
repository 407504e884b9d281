//! Row-cost tests: the hot verbs read the rows they need, whatever the history. A store is
//! wrapped so that every view row and every event a transaction reads (a point read, or one met
//! in a scan) is counted, and a verb's count on a deep store is held to its count on a shallow
//! one.
//!
//! Test-only; knows the domains only through the engine's handles.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hookstate_schema::feedback::{FeedbackEvent, FileKind, JsonDoc, Style};
use hookstate_schema::format::STORE_ID_BYTES;
use hookstate_schema::proposals::ProposalsEvent;
use hookstate_schema::{Body, CoreEvent};

use crate::engine::Engine;
use crate::feedback::{DrainAsk, Pass, ReplyVia, StopAsk};
use crate::kernel::call::Call;
use crate::kernel::error::Result;
use crate::kernel::storage::{EventVisitor, ReadTxn, RowVisitor, Storage, WriteTxn};
use crate::query::LogFilter;
use crate::store::{self, OpenOptions};
use crate::Command;

/// A store whose transactions count the view rows they read, the table scopes a write opens
/// (`WriteTxn::with_tables`) and the events and view rows it writes outside one.
struct Counting {
    inner: Box<dyn Storage>,
    rows: Arc<AtomicU64>,
    scopes: Arc<AtomicU64>,
    unscoped: Arc<AtomicU64>,
}

struct CountingTxn<T: ?Sized> {
    inner: Box<T>,
    rows: Arc<AtomicU64>,
    scopes: Arc<AtomicU64>,
    unscoped: Arc<AtomicU64>,
    in_scope: bool,
}

impl<T: ?Sized> CountingTxn<T> {
    fn over(inner: Box<T>, store: &Counting) -> Self {
        CountingTxn {
            inner,
            rows: Arc::clone(&store.rows),
            scopes: Arc::clone(&store.scopes),
            unscoped: Arc::clone(&store.unscoped),
            in_scope: false,
        }
    }

    /// Counts a write of an event or a view row made outside a table scope.
    fn wrote(&self) {
        if !self.in_scope {
            self.unscoped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

macro_rules! read_methods {
    () => {
        fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.inner.meta(key)
        }
        fn event(&self, seq: u64) -> Result<Option<Vec<u8>>> {
            self.rows.fetch_add(1, Ordering::Relaxed);
            self.inner.event(seq)
        }
        fn events(&self, from: u64, to: u64, visit: &mut EventVisitor<'_>) -> Result<()> {
            let rows = &self.rows;
            self.inner.events(from, to, &mut |seq, bytes| {
                rows.fetch_add(1, Ordering::Relaxed);
                visit(seq, bytes)
            })
        }
        fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.rows.fetch_add(1, Ordering::Relaxed);
            self.inner.view(key)
        }
        fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
            let rows = &self.rows;
            self.inner.views_with_prefix(prefix, &mut |key, row| {
                rows.fetch_add(1, Ordering::Relaxed);
                visit(key, row)
            })
        }
    };
}

impl ReadTxn for CountingTxn<dyn ReadTxn + '_> {
    read_methods!();
}

impl ReadTxn for CountingTxn<dyn WriteTxn + '_> {
    read_methods!();
}

impl WriteTxn for CountingTxn<dyn WriteTxn + '_> {
    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put_meta(key, value)
    }
    fn append_event(&mut self, seq: u64, record: &[u8]) -> Result<()> {
        self.wrote();
        self.inner.append_event(seq, record)
    }
    fn put_view(&mut self, key: &[u8], row: &[u8]) -> Result<()> {
        self.wrote();
        self.inner.put_view(key, row)
    }
    fn delete_view(&mut self, key: &[u8]) -> Result<()> {
        self.wrote();
        self.inner.delete_view(key)
    }
    fn clear_views(&mut self) -> Result<()> {
        self.inner.clear_views()
    }
    /// Runs `body` on the counting wrapper itself, so that every row it reads is counted.
    fn with_tables(&mut self, body: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>) -> Result<()> {
        self.scopes.fetch_add(1, Ordering::Relaxed);
        let outer = std::mem::replace(&mut self.in_scope, true);
        let ran = body(self);
        self.in_scope = outer;
        ran
    }
    fn commit(self: Box<Self>) -> Result<()> {
        self.inner.commit()
    }
}

/// The methods of [`Storage`] about files (the store's path, its anchors, stale temporaries)
/// that a test's wrapper hands to its `inner` store unchanged.
macro_rules! forward_files {
    () => {
        fn path(&self) -> std::path::PathBuf {
            self.inner.path()
        }
        fn anchor_path(&self) -> std::path::PathBuf {
            self.inner.anchor_path()
        }
        fn read_anchor(&self) -> Result<Option<String>> {
            self.inner.read_anchor()
        }
        fn update_anchors(
            &self,
            store_id: &[u8; STORE_ID_BYTES],
            next: &mut dyn FnMut(Option<&str>) -> Option<String>,
        ) -> Result<bool> {
            self.inner.update_anchors(store_id, next)
        }
        fn remove_stale_temps(&self) -> Result<u32> {
            self.inner.remove_stale_temps()
        }
    };
}

impl Storage for Counting {
    forward_files!();
    fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        let inner = self.inner.begin_write(deadline)?;
        Ok(Box::new(CountingTxn::over(inner, self)))
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        let inner = self.inner.begin_read()?;
        Ok(Box::new(CountingTxn::over(inner, self)))
    }
}

fn counted(path: &Path) -> (Engine, Arc<AtomicU64>) {
    let (engine, store) = counting(path);
    (engine, store.rows)
}

/// The counters of a [`Counting`] store.
struct Counters {
    rows: Arc<AtomicU64>,
    scopes: Arc<AtomicU64>,
    unscoped: Arc<AtomicU64>,
}

fn counting(path: &Path) -> (Engine, Counters) {
    let options = OpenOptions::default();
    let inner = store::open(path, options).unwrap();
    let counters = Counters {
        rows: Arc::new(AtomicU64::new(0)),
        scopes: Arc::new(AtomicU64::new(0)),
        unscoped: Arc::new(AtomicU64::new(0)),
    };
    let store = Counting {
        inner,
        rows: Arc::clone(&counters.rows),
        scopes: Arc::clone(&counters.scopes),
        unscoped: Arc::clone(&counters.unscoped),
    };
    let engine = Engine::on_storage(Box::new(store), std::time::Duration::from_secs(1)).unwrap();
    (engine, counters)
}

/// Every call, alone or in a group commit, reads and writes inside one table scope of its
/// transaction (`WriteTxn::with_tables`, where redb opens each table once for the call): no
/// event or view row is written outside it.
#[test]
fn every_call_writes_inside_one_table_scope() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, counters) = counting(&dir.path().join("s.redb"));
    let command = |n: usize| Command::QueuePush {
        queue: "work".into(),
        item: format!("i{n}"),
        payload: "{}".into(),
        for_session: None,
        max_deliveries: 5,
    };
    engine.execute(&call("s"), &command(0)).unwrap();
    let claim = Command::QueueClaim {
        queue: "work".into(),
        item: None,
        holder: "w".into(),
        lease_ms: 600_000,
    };
    engine.execute(&call("s"), &claim).unwrap();
    let calls: Vec<_> = (1..4).map(|n| (call("s"), command(n))).collect();
    for outcome in engine.ops().execute_batch(&calls).unwrap() {
        assert_eq!(outcome.unwrap().appended, 1);
    }
    assert_eq!(counters.scopes.load(Ordering::Relaxed), 5, "one scope a call");
    assert_eq!(counters.unscoped.load(Ordering::Relaxed), 0, "written outside a scope");
}

const NOW_MS: u64 = 1_764_460_800_000;

fn call(scope: &str) -> Call {
    Call::at(scope, NOW_MS)
}

fn push(item: &str, for_session: Option<&str>) -> (String, Body) {
    let event = CoreEvent::ItemPushed {
        queue: "work".into(),
        item: item.into(),
        payload: "{}".into(),
        for_session: for_session.map(str::to_owned),
        max_deliveries: 5,
    };
    ("s".to_owned(), Body::Core(event))
}

/// The rows one claim-next reads on a queue of `ready` items behind `claimed` items whose
/// leases run, and `elsewhere` items addressed to another session.
fn claim_rows(ready: usize, claimed: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (engine, rows) = counted(&dir.path().join("s.redb"));
    let items: Vec<_> = (0..claimed + ready).map(|n| push(&format!("i{n:06}"), None)).collect();
    crate::engine::append_unchecked(&engine, &call("s"), &items).unwrap();
    let claim = Command::QueueClaim {
        queue: "work".into(),
        item: None,
        holder: "w".into(),
        lease_ms: 600_000,
    };
    for _ in 0..claimed {
        engine.execute(&call("s"), &claim).unwrap();
    }
    rows.store(0, Ordering::Relaxed);
    let outcome = engine.execute(&call("s"), &claim).unwrap();
    assert_eq!(outcome.result["item"], format!("i{claimed:06}"), "the oldest ready item");
    rows.load(Ordering::Relaxed)
}

/// `log --tail N` with no filter reads the last N events, not the whole log (0.44 s at 202,000
/// events against 0.006 s for `--limit 1`); with a filter it reads on as before.
#[test]
fn a_tail_of_the_whole_log_reads_only_its_events() {
    let tail_rows = |events: usize, scope: Option<&str>| {
        let dir = tempfile::tempdir().unwrap();
        let (engine, rows) = counted(&dir.path().join("s.redb"));
        let items: Vec<_> = (0..events).map(|n| push(&format!("i{n:06}"), None)).collect();
        crate::engine::append_unchecked(&engine, &call("s"), &items).unwrap();
        rows.store(0, Ordering::Relaxed);
        let filter = LogFilter {
            scope: scope.map(str::to_owned),
            limit: Some(2),
            tail: true,
            ..LogFilter::default()
        };
        let got = engine.log(&filter).unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![events as u64 - 1, events as u64]);
        rows.load(Ordering::Relaxed)
    };
    assert_eq!(tail_rows(3_000, None), 2);
    assert_eq!(tail_rows(3_000, Some("s")), 3_000, "a filtered tail reads the log");
}

#[test]
fn claim_next_reads_the_same_rows_at_any_queue_depth() {
    let shallow = claim_rows(2, 3);
    let deep = claim_rows(3_000, 3);
    assert!(shallow > 0);
    assert_eq!(deep, shallow, "claim-next read {deep} rows at 3,000 ready, {shallow} at 2");
}

/// The rows one claim-next reads once the leases of `ended` claimed items ran out (their
/// claimers were killed), with 2 ready items behind them.
fn claim_rows_past_ended_leases(ended: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (engine, rows) = counted(&dir.path().join("s.redb"));
    let items: Vec<_> = (0..ended + 2).map(|n| push(&format!("i{n:06}"), None)).collect();
    crate::engine::append_unchecked(&engine, &call("s"), &items).unwrap();
    let claim = |lease_ms| Command::QueueClaim {
        queue: "work".into(),
        item: None,
        holder: "w".into(),
        lease_ms,
    };
    for _ in 0..ended {
        engine.execute(&call("s"), &claim(1_000)).unwrap();
    }
    rows.store(0, Ordering::Relaxed);
    let later = Call { now_ms: NOW_MS + 5_000, ..call("s") };
    let outcome = engine.execute(&later, &claim(600_000)).unwrap();
    assert_eq!(outcome.result["item"], "i000000", "the oldest ended lease is handed out again");
    assert_eq!(outcome.result["delivery"], 2);
    rows.load(Ordering::Relaxed)
}

/// Each ended lease costs a claim its index row only: the item rows read are the one handed out
/// (a claim used to read every ended lease's item to order them).
#[test]
fn claim_next_past_ended_leases_reads_one_index_row_per_lease_and_one_item() {
    let shallow = claim_rows_past_ended_leases(3);
    let deep = claim_rows_past_ended_leases(600);
    assert_eq!(deep - shallow, 600 - 3, "{deep} rows past 600 ended leases, {shallow} past 3");
}

#[test]
fn claim_next_skips_items_addressed_elsewhere_and_takes_an_expired_lease_first() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = counted(&dir.path().join("s.redb"));
    let items = vec![push("a", None), push("b", Some("other")), push("c", None)];
    crate::engine::append_unchecked(&engine, &call("s"), &items).unwrap();
    let claim = |lease_ms, now_ms| {
        let command =
            Command::QueueClaim { queue: "work".into(), item: None, holder: "w".into(), lease_ms };
        let call = Call { now_ms, ..call("s") };
        engine.execute(&call, &command).unwrap().result["item"].clone()
    };
    assert_eq!(claim(1_000, NOW_MS), "a");
    assert_eq!(claim(600_000, NOW_MS), "c", "b is addressed to another session");
    // a's lease ended: it is older than any ready item, and is handed out again.
    assert_eq!(claim(600_000, NOW_MS + 2_000), "a");
    assert_eq!(claim(600_000, NOW_MS + 2_000), serde_json::Value::Null);
}

fn text(fields: &[(&str, &str)], style: Style) -> JsonDoc {
    let fields = fields.iter().map(|(k, v)| ((*k).to_owned(), format!("{v:?}"))).collect();
    JsonDoc { fields, style }
}

fn file(project: &str, file: FileKind, doc: JsonDoc) -> (String, Body) {
    let event = FeedbackEvent::FileWritten { file, doc, request: 0 };
    (format!("moonshine:{project}"), Body::Feedback(event))
}

/// A project in `mode` with its adapter manifest, and `comments` pending comments.
fn project(project: &str, mode: &str, comments: usize) -> Vec<(String, Body)> {
    with_comments(project, mode, comments, "pending")
}

/// A project in `mode` with its adapter manifest, and `comments` comments in `status`.
fn with_comments(project: &str, mode: &str, comments: usize, status: &str) -> Vec<(String, Body)> {
    let mut out = vec![
        file(project, FileKind::Control, text(&[("mode", mode)], Style::Pretty)),
        file(project, FileKind::Adapter, text(&[("harness", "claude-code")], Style::Compact)),
    ];
    for n in 0..comments {
        let id = format!("fb_{n:06}");
        let doc = text(&[("id", &id), ("status", status), ("comment", "c")], Style::Pretty);
        let event = FeedbackEvent::CommentAdded { id, doc };
        out.push((format!("moonshine:{project}"), Body::Feedback(event)));
    }
    out
}

/// The rows an idle Stop hook reads beside `accumulating` projects of `comments` comments each,
/// with `addressed` comments of history in the listening project.
fn stop_rows(accumulating: usize, comments: usize, addressed: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (engine, rows) = counted(&dir.path().join("s.redb"));
    let mut events = with_comments("listening", "listen", addressed, "addressed");
    for p in 0..accumulating {
        events.extend(project(&format!("acc{p:03}"), "accumulate", comments));
    }
    crate::engine::append_unchecked(&engine, &call("s"), &events).unwrap();
    let ask = StopAsk {
        drain: DrainAsk { pass: Pass::Stop, holder: None, stale_ms: 300_000, interval_s: 45 },
        home: dir.path().to_path_buf(),
        via: ReplyVia::Hookstate,
        command: "hookstate".into(),
    };
    rows.store(0, Ordering::Relaxed);
    let stop = engine.feedback().stop_idle(&call("moonshine"), &ask).unwrap();
    let stop = stop.expect("nothing to append");
    assert!(stop.output.is_some(), "listen mode without a fresh heartbeat nudges");
    rows.load(Ordering::Relaxed)
}

#[test]
fn an_idle_stop_hook_reads_no_row_of_an_accumulating_project() {
    let none = stop_rows(0, 0, 0);
    let many = stop_rows(30, 100, 0);
    assert!(none > 0);
    assert_eq!(many, none, "the Stop hook read {many} rows beside 30 projects, {none} alone");
}

#[test]
fn an_idle_stop_hook_reads_no_addressed_comment_of_a_listening_project() {
    let none = stop_rows(0, 0, 0);
    let history = stop_rows(0, 0, 2_000);
    assert_eq!(history, none, "the Stop hook read {history} rows beside 2,000 addressed comments");
}

fn micro_queued(scope: &str, n: usize) -> (String, Body) {
    let event = ProposalsEvent::MicroQueued(hookstate_schema::proposals::MicroQueued {
        id: format!("MP-20260101-{n}"),
        tier: 1,
        question: "Move the nightly job?".into(),
        options: None,
        on_resolve: None,
        ts: "2026-01-01T00:00:00Z".into(),
    });
    (scope.to_owned(), Body::Proposals(event))
}

/// The rows and events reading one hermit directory's ledger costs beside `others` ledger lines
/// of other directories.
fn ledger_reads(others: usize) -> (usize, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (engine, rows) = counted(&dir.path().join("s.redb"));
    let mine = "hermit:/srv/a/.claude-code-hermit";
    let mut events: Vec<_> = (1..=3).map(|n| micro_queued(mine, n)).collect();
    // 100 lines per other directory: one directory's queue is rewritten by each of its events.
    events.extend(
        (0..others).map(|n| micro_queued(&format!("hermit:/srv/b{}/.hermit", n / 100), n % 100)),
    );
    crate::engine::append_unchecked(&engine, &call("s"), &events).unwrap();
    rows.store(0, Ordering::Relaxed);
    let lines = engine.proposals().ledger(mine).unwrap().len();
    (lines, rows.load(Ordering::Relaxed))
}

#[test]
fn a_hermit_ledger_is_read_from_its_own_events_not_the_whole_log() {
    let (lines, alone) = ledger_reads(0);
    let (same, beside) = ledger_reads(1_000);
    assert_eq!((lines, same), (3, 3), "three micro-queued lines");
    assert_eq!(beside, alone, "the ledger read {beside} rows beside 1,000 other lines");
}

#[test]
fn a_bulk_loaded_store_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let engine = Engine::open(&path, OpenOptions::default()).unwrap();
    let items: Vec<_> = (0..20).map(|n| push(&format!("i{n:03}"), None)).collect();
    crate::engine::append_unchecked(&engine, &call("s"), &items).unwrap();
    // The events-per-domain counter moved with the bulk load, so verify accepts the store.
    let report = engine.ops().verify(Default::default()).unwrap();
    assert_eq!(report.events, 20);
}

/// A store with history of several domains: kv keys overwritten, queue items pushed, claimed,
/// acked and released (idempotency keys on some calls), counters, sets and a capped list, a
/// feedback project with comments, and micro-proposals.
fn mixed_store(path: &Path) -> Engine {
    let engine = Engine::open(path, OpenOptions::default()).unwrap();
    let mut events = with_comments("p", "listen", 30, "pending");
    let (a, b) = ("hermit:/srv/a/.claude-code-hermit", "hermit:/srv/b/.claude-code-hermit");
    // Two queues edited in turn, so a replay's kept queue documents meet every kind of edit,
    // and one replaced whole by an import (after which the kept form must not be used).
    for n in 1..=20 {
        events.push(micro_queued(a, n));
        events.push(micro_queued(b, n));
    }
    let micro = |scope: &str, event: ProposalsEvent| (scope.to_owned(), Body::Proposals(event));
    for n in (1..=20).step_by(3) {
        let id = format!("MP-20260101-{n}");
        events.push(micro(a, ProposalsEvent::MicroNudged { id: id.clone(), count: 2 }));
        let resolved = ProposalsEvent::MicroResolved {
            id: id.clone(),
            action: "approved".into(),
            question: "Move the nightly job?".into(),
            answer: None,
            ts: "2026-01-02T00:00:00Z".into(),
            channel: None,
        };
        events.push(micro(a, resolved));
        events.push(micro(a, ProposalsEvent::MicroDropped { id }));
    }
    let imported = ProposalsEvent::QueueImported {
        top: "{\"pending\":[]}".into(),
        entries: Vec::new(),
        style: None,
        verbatim: None,
    };
    events.push(micro(b, imported));
    events.extend((21..=25).map(|n| micro_queued(b, n)));
    crate::engine::append_unchecked(&engine, &call("s"), &events).unwrap();
    let run = |scope: &str, idem: Option<String>, command: Command| {
        let call = Call { idem_key: idem, ..call(scope) };
        engine.execute(&call, &command).unwrap()
    };
    for n in 0..60 {
        let (key, value) = (format!("k{}", n % 20), format!("\"v{n}\""));
        let idem = (n % 3 == 0).then(|| format!("put-{n}"));
        run("s", idem, Command::KvPut { key, value, expect: crate::Expect::Any });
        run("s", None, Command::CounterAdd { name: format!("c{}", n % 4), delta: 1 });
        run("t", None, Command::SetAdd { set: "s".into(), member: format!("m{}", n % 7) });
        run(
            "t",
            None,
            Command::ListAppend { list: "l".into(), row: format!("{{\"n\":{n}}}"), cap: 10 },
        );
    }
    for n in 0..30 {
        let push = Command::QueuePush {
            queue: "work".into(),
            item: format!("i{n:03}"),
            payload: "{}".into(),
            for_session: None,
            max_deliveries: 5,
        };
        run("s", None, push);
    }
    for n in 0..20 {
        let claim = Command::QueueClaim {
            queue: "work".into(),
            item: None,
            holder: "w".into(),
            lease_ms: 600_000,
        };
        let outcome = run("s", Some(format!("claim-{n}")), claim);
        let item = outcome.result["item"].as_str().unwrap().to_owned();
        let token = outcome.result["token"].as_u64().unwrap();
        let done = if n % 4 == 0 {
            Command::QueueRelease { queue: "work".into(), item, token }
        } else {
            Command::QueueAck { queue: "work".into(), item, token }
        };
        run("s", None, done);
    }
    engine
}

/// Every stored view row, key and value bytes, in key order.
fn stored_views(engine: &Engine) -> Vec<(Vec<u8>, Vec<u8>)> {
    let txn = engine.kernel().begin_read().unwrap();
    let mut rows = Vec::new();
    txn.views_with_prefix(&[], &mut |key, row| {
        rows.push((key.to_vec(), row.to_vec()));
        Ok(true)
    })
    .unwrap();
    rows
}

/// Held rows for the replays below: far fewer than the store's rows, so they spill many times.
const FEW_HELD: usize = 5;
/// The most rows one event of `mixed_store` names (an item with its indexes, meta and
/// idempotency rows), for the bound the replay keeps.
const EVENT_ROWS_MAX: usize = 8;

#[test]
fn a_replay_that_spills_verifies_and_rebuilds_the_views_a_replay_in_memory_does() {
    let dir = tempfile::tempdir().unwrap();
    let engine = mixed_store(&dir.path().join("s.redb"));
    let stored = stored_views(&engine);
    assert!(stored.len() > 20 * FEW_HELD, "{} rows", stored.len());
    let (in_memory, memory) =
        crate::audit::verify_with(engine.kernel(), Default::default(), usize::MAX).unwrap();
    assert!(!memory.spilled);
    assert!(memory.held_peak >= stored.len(), "in memory, every row was held: {memory:?}");
    let (report, memory) =
        crate::audit::verify_with(engine.kernel(), Default::default(), FEW_HELD).unwrap();
    assert!(memory.spilled, "the replay moved rows to its spill table");
    // The bound: the rows held and those in flight, each at most the bound plus one event's.
    assert!(memory.held_peak <= 2 * (FEW_HELD + EVENT_ROWS_MAX), "{memory:?}");
    assert_eq!(report, in_memory);
    assert_eq!(report.views, stored.len() as u64);
    assert_eq!(report.lookups, stored.len() as u64);
    let rebuilt = crate::audit::rebuild_with(engine.kernel(), FEW_HELD).unwrap();
    assert_eq!(rebuilt.views, stored.len() as u64);
    assert_eq!(stored_views(&engine), stored, "a spilled rebuild wrote the same rows");
    let names: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "only the store and its anchor are left: {names:?}");
}

/// Raw view rows to set (`Some`) or remove (`None`).
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Changes the stored views of `engine` by `change` (raw rows, past the engine).
fn tamper(engine: &Engine, change: &Changes) {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut txn = engine.kernel().storage().begin_write(deadline).unwrap();
    txn.write_views(change).unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_replay_that_spills_finds_a_changed_a_missing_and_an_extra_row() {
    use hookstate_schema::format::{encode_view_key, encode_view_row};
    use hookstate_schema::{ViewKey, ViewRow};
    let record = |key: &str, value: &str| {
        let key = encode_view_key(&ViewKey::Record { scope: "s".into(), key: key.into() });
        let row = encode_view_row(&key, &ViewRow::Record { value: value.into(), rev: 1 });
        (key, row)
    };
    let (k5, _) = record("k5", "");
    let (changed_key, changed_row) = record("k7", "\"tampered\"");
    let (extra_key, extra_row) = record("zz-extra", "1");
    // What the rebuild writes and removes: the one row each case changed.
    type Case = (&'static str, Changes, (u64, Option<u64>));
    let cases: [Case; 3] = [
        ("changed", vec![(changed_key, Some(changed_row))], (1, Some(0))),
        ("missing", vec![(k5, None)], (1, Some(0))),
        ("extra", vec![(extra_key, Some(extra_row))], (0, Some(1))),
    ];
    for (what, change, differences) in cases {
        let dir = tempfile::tempdir().unwrap();
        let engine = mixed_store(&dir.path().join("s.redb"));
        crate::audit::verify_with(engine.kernel(), Default::default(), FEW_HELD).unwrap();
        tamper(&engine, &change);
        let err = crate::audit::verify_with(engine.kernel(), Default::default(), FEW_HELD)
            .expect_err(what);
        assert!(matches!(err, crate::kernel::error::Error::ViewMismatch { .. }), "{what}: {err}");
        let rebuilt = crate::audit::rebuild_with(engine.kernel(), FEW_HELD).unwrap();
        assert_eq!((rebuilt.written, rebuilt.removed), differences, "{what}");
        crate::audit::verify_with(engine.kernel(), Default::default(), FEW_HELD).unwrap();
    }
}

#[test]
fn a_replay_on_a_store_with_no_place_for_a_spill_table_holds_every_row() {
    // The counting wrapper keeps the trait's default: no spill table (as a PostgreSQL store).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(mixed_store(&path));
    let (engine, _) = counted(&path);
    let (report, memory) =
        crate::audit::verify_with(engine.kernel(), Default::default(), FEW_HELD).unwrap();
    assert!(!memory.spilled, "nowhere to spill: the rows stayed held");
    assert_eq!(report.views, stored_views(&engine).len() as u64);
    let rebuilt = crate::audit::rebuild_with(engine.kernel(), FEW_HELD).unwrap();
    assert_eq!(rebuilt.views, report.views);
}

#[test]
fn a_replay_keeps_a_decoded_document_as_its_row_until_the_row_is_written_again() {
    use crate::kernel::doc::{doc_key, edit_doc, get_doc};
    use crate::kernel::replay::ReplayViews;
    use crate::kernel::view::ViewAccess;
    use hookstate_schema::proposals::QueueDoc;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("s.redb"), OpenOptions::default()).unwrap();
    let mut views = ReplayViews::new(engine.kernel().storage(), usize::MAX);
    let key = doc_key("s", "proposals.queue", "queue");
    let entry = |n: u32| format!("{{\"id\":\"MP-{n}\"}}");
    edit_doc::<QueueDoc>(&mut views, &key, |q| q.entries.push(entry(1)));
    // Kept: a second edit finds the document in place (an edit of another type does not).
    let mut found = None;
    assert!(views.edit_kept(&key, &mut |doc| {
        found = doc.downcast_mut::<QueueDoc>().map(|q| q.entries.clone());
        found.is_some()
    }));
    assert_eq!(found, Some(vec![entry(1)]));
    assert!(!views.edit_kept(&key, &mut |doc| doc.downcast_mut::<String>().is_some()));
    // The row is the kept document's encoding, after each edit (encoded once, then again).
    let read = |views: &ReplayViews<'_>| get_doc::<QueueDoc>(views, &key).unwrap().entries;
    assert_eq!(read(&views), vec![entry(1)]);
    edit_doc::<QueueDoc>(&mut views, &key, |q| q.entries.push(entry(2)));
    assert_eq!(read(&views), vec![entry(1), entry(2)], "an edit after a read is seen");
    // Another write of the row drops the kept document.
    views.put(key.clone(), hookstate_schema::ViewRow::Doc { json: "{}".into() });
    assert!(!views.edit_kept(&key, &mut |_| true), "another write of the row drops it");
    edit_doc::<QueueDoc>(&mut views, &key, |q| q.entries.push(entry(3)));
    assert_eq!(read(&views), vec![entry(3)], "decoded again from the row written");
}

/// A store whose next read snapshot, once armed, waits after it began for a commit made on
/// another thread: a reader's check with a writer's commit in the middle, every time.
struct CommitAfterSnapshot {
    inner: Box<dyn Storage>,
    armed: Arc<std::sync::atomic::AtomicBool>,
    go: std::sync::mpsc::Sender<()>,
    done: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Storage for CommitAfterSnapshot {
    forward_files!();
    fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        self.inner.begin_write(deadline)
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        let txn = self.inner.begin_read()?;
        if self.armed.swap(false, Ordering::SeqCst) {
            self.go.send(()).unwrap();
            self.done.lock().unwrap().recv().unwrap();
        }
        Ok(txn)
    }
}

/// A reader's own anchor check (`anchor_note`, what `Engine::location` reports) reads the
/// anchors before it begins its snapshot: a writer moves them only after its commit, so that
/// snapshot holds every event they name. Read the other way round, a commit between the
/// snapshot and the anchor read looks like a rolled-back log.
#[test]
fn a_commit_between_a_readers_anchor_read_and_its_snapshot_is_not_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let inner = store::open(&dir.path().join("s.redb"), OpenOptions::default()).unwrap();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (go, go_rx) = std::sync::mpsc::channel();
    let (done_tx, done) = std::sync::mpsc::channel();
    let store = CommitAfterSnapshot { inner, armed: Arc::clone(&armed), go, done: done.into() };
    let engine =
        Arc::new(Engine::on_storage(Box::new(store), std::time::Duration::from_secs(1)).unwrap());
    let add = Command::CounterAdd { name: "c".into(), delta: 1 };
    engine.execute(&call("s"), &add).unwrap();
    let writer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || {
            go_rx.recv().unwrap();
            let head = engine.execute(&call("s"), &add).unwrap().head.seq;
            done_tx.send(()).unwrap();
            head
        })
    };
    let before = engine.head().unwrap().seq;
    armed.store(true, Ordering::SeqCst);
    let note = engine.kernel().anchor_note().unwrap();
    assert_eq!(writer.join().unwrap(), before + 1, "the writer committed inside the check");
    assert!(note.is_none(), "{note:?}");
}

#[test]
fn a_commit_between_a_readers_snapshot_and_its_anchor_read_is_not_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let engine = Engine::open(&path, OpenOptions::default()).unwrap();
    let add = Command::CounterAdd { name: "c".into(), delta: 1 };
    engine.execute(&call("s"), &add).unwrap();
    let snapshot = engine.kernel().begin_read().unwrap();
    // A writer commits and moves the anchors past the reader's snapshot before it reads them.
    engine.execute(&call("s"), &add).unwrap();
    assert!(engine.kernel().anchor_problem(&*snapshot).unwrap().is_none());
    assert!(engine.kernel().anchor_note().unwrap().is_none());
    drop(snapshot);
    // A log that really went back behind its anchors is still told.
    let older = dir.path().join("older.redb");
    std::fs::copy(&path, &older).unwrap();
    engine.execute(&call("s"), &add).unwrap();
    drop(engine);
    std::fs::rename(&older, &path).unwrap();
    let engine =
        Engine::open(&path, OpenOptions { read_only: true, ..OpenOptions::default() }).unwrap();
    let snapshot = engine.kernel().begin_read().unwrap();
    let problem = engine.kernel().anchor_problem(&*snapshot).unwrap();
    assert!(problem.is_some_and(|p| p.to_string().contains("rolled back")));
    assert!(engine.kernel().anchor_note().unwrap().is_some());
}
