//! Every bound the engine enforces, each with the reason for its value.
//!
//! Anything from outside (arguments, stdin, bytes read back) that breaks one of these is refused
//! with `Error::Invalid` before anything is written. Does not check anything itself.

/// Hook payloads are small; a bigger JSON value means a bug upstream, not a use case.
pub const VALUE_BYTES_MAX: usize = 64 * 1024;
/// One encoded event: a value plus names and actor fields.
pub const EVENT_BYTES_MAX: usize = VALUE_BYTES_MAX + 8 * 1024;
/// Bounds the size of one write transaction (parks found by one claim, items redriven at once).
pub const APPEND_EVENT_COUNT_MAX: usize = 256;
/// A stdin payload: generous for any hook payload, small enough to hold in memory twice.
pub const STDIN_BYTES_MAX: usize = 1024 * 1024;
/// JSON nesting allowed in values (serde_json's own recursion limit is 128).
pub const JSON_DEPTH_MAX: usize = 64;
/// Longest lease: a day. A hook that needs longer should extend.
pub const LEASE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Default lease for a claim when the caller does not say.
pub const LEASE_MS_DEFAULT: u64 = 5 * 60 * 1000;
/// Most deliveries an item may be allowed before it is parked.
pub const DELIVERIES_MAX: u32 = 1000;
/// Default deliveries before parking.
pub const DELIVERIES_DEFAULT: u32 = 5;
/// Live items one queue may hold: a claim scans the live items, so this bounds its cost.
pub const QUEUE_ITEMS_MAX: u64 = 100_000;
/// Rows a capped list may keep.
pub const LIST_ROWS_MAX: u32 = 10_000;
/// Events one `log` call returns.
pub const LOG_EVENTS_MAX: usize = 100_000;
/// Longest wait for the write transaction: far above any hook's timeout.
pub const WAIT_MS_MAX: u64 = 10 * 60 * 1000;
/// Default wait for the write transaction: well below Claude Code's default hook timeout (60 s).
pub const WAIT_MS_DEFAULT: u64 = 10_000;
/// How far the store's clock (the host's on redb, the database server's on PostgreSQL) may be
/// behind the time of the log's last event and still be raised to it when a writer times its
/// calls (a clock stepped back: times keep log order). A last event further ahead (a future time
/// a test clock pinned) leaves the clock as it is, so it cannot stop the store's clock for longer
/// than this.
pub const CLOCK_RAISE_MS_MAX: u64 = 60_000;
/// First pause between attempts to take a lock (the write transaction, or a lock redb waits for).
pub const LOCK_BACKOFF_US_MIN: u64 = 100;
/// Longest pause between attempts: short, so that a freed lock is taken within a fraction of a
/// commit's time and no waiter sleeps through release after release (p99 latency under
/// contention: 8 claim processes p99 58–66 ms at 300 µs against 93–129 ms at 2 ms,
/// docs/decisions.md).
pub const LOCK_BACKOFF_US_MAX: u64 = 300;
/// Longest pause before a transaction the database server aborted for a conflict runs again
/// (PostgreSQL): conflicting writers spread their [`TXN_ATTEMPTS_MAX`] attempts over the same
/// span as before the lock's pause was shortened.
pub const CONFLICT_BACKOFF_US_MAX: u64 = 2_000;
/// How long a read-only open waits for another process to finish opening the store for writing
/// (redb refuses a reader while a writer's open has the recovery flag set). Past this, the reader
/// opens for writing itself, which repairs a store a killed writer left needing repair.
pub const READ_ONLY_REPAIR_WAIT_MS: u64 = 200;
/// How long a reader waits for redb's header lock before it reads the header without it: longer
/// than a healthy writer holds it (a header write, or the fsync of an open or a close), short
/// enough that a reading hook never stalls behind a writer that was stopped holding it.
pub const READ_HEADER_WAIT_MS: u64 = 50;
/// Times a reader reads the header again after a read without the lock raced a header write.
pub const READ_TORN_RETRIES: u32 = 8;
/// How long a read that finds the store needing a repair (a killed writer, nobody repairing)
/// waits for the write lock to repair it itself; a writer holding the lock repairs it instead.
pub const READ_REPAIR_LOCK_WAIT_MS: u64 = 50;
/// How long an idempotency key stays bound to its first request: far longer than any retry of a
/// hook delivery (bounded by a hook's timeout, minutes), short enough that a key reused days later
/// is a new request, not a replay of a stale answer.
pub const IDEM_KEY_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// The prefix of the idempotency keys the CLI makes up for a write it forwards to `hookstate
/// serve` (`fwd-` and 24 random hex digits): such a key serves only the call's one in-process
/// retry after a lost answer.
pub const FORWARD_KEY_PREFIX: &str = "fwd-";
/// How long `compact` keeps the event a forwarded call's key is bound to: past the longest a
/// forwarded call waits for its answer before its one retry (seconds), so that the keys every
/// forwarded write carries do not hold compaction back for [`IDEM_KEY_TTL_MS`] as a caller's own
/// keys do. The key still replays for that long while its event is kept.
pub const FORWARD_KEY_COMPACT_MS: u64 = 10 * 60 * 1000;
/// The first result of a keyed call kept in its first event for replays: a result above this
/// (a result carrying a large value) is not kept, and a replay renders the events instead.
pub const STORED_RESULT_BYTES_MAX: usize = VALUE_BYTES_MAX + 8 * 1024;
/// Age after which one of our temporary files (beside the store, or in a legacy directory) is a
/// leftover of a killed writer: no live writer keeps one for more than a second or two.
pub const STALE_TEMP_SECS: u64 = 600;
/// Directory entries one leftover scan looks at, so the scan's cost has a bound.
pub const STALE_TEMP_SCAN_MAX: usize = 10_000;
/// Attempts of one write transaction that a database server aborted for a serialization failure or
/// a deadlock (PostgreSQL): each abort means another writer committed first, so a few attempts
/// settle it; more means sustained contention, and BUSY tells the hook to retry later.
pub const TXN_ATTEMPTS_MAX: u32 = 8;
/// An anchor line (of the second anchor, or of a single-line anchor file of an earlier release).
pub const ANCHOR_BYTES_MAX: usize = 256;
/// Conflicts one mirrored call reports; more are not listed.
pub const CONFLICTS_SHOWN_MAX: usize = 64;
/// Entries in redb's page cache for a per-call process: small, since a call touches few pages.
pub const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Rebuilt view rows a replay (`verify`, `rebuild`) holds in memory before it moves them to its
/// spill table beside the store: 1–1.5 KiB each as the projections hold them, and at most twice
/// this many at once (those held, those being written), so the replay's own rows stay near
/// 60 MiB whatever the store holds (its peak at 1M events: 150–177 MiB in all, the spill
/// table's run index and filters included).
pub const SPILL_HELD_ROWS_MAX: usize = 24 * 1024;
/// Bytes of a block of a run in a replay's spill table (`store::spill`): a lookup reads one
/// block of each run that may hold its key, and the run keeps each block's first key in memory.
pub const SPILL_BLOCK_BYTES: usize = 16 * 1024;
/// Bytes of a run of a replay's spill table held in memory before they go to its file: a run
/// of [`SPILL_HELD_ROWS_MAX`] rows is written a piece at a time.
pub const SPILL_WRITE_BYTES: usize = 1024 * 1024;
/// Bits a key of the filter each run of a replay's spill table keeps of its keys: about 1.7% of
/// the lookups of a key a run does not hold read one of its blocks anyway.
pub const RUN_FILTER_BITS_PER_KEY: usize = 10;
/// Events a replay's reading thread hands its projecting thread at once.
pub const REPLAY_BATCH_EVENTS: usize = 256;
/// Batches that may wait between a replay's two threads: with [`REPLAY_BATCH_EVENTS`], a bound on
/// the decoded events held.
pub const REPLAY_QUEUE_BATCHES: usize = 8;
/// Bits of the filter a replay keeps of the keys in its spill table (2 MiB): a lookup of a key
/// never spilled is skipped, with a false positive about 3% of the time at 2M spilled keys.
pub const SPILL_FILTER_BITS: usize = 1 << 24;
/// Rows read from or written to the spill table, or compared with the stored views, per visit.
pub const SPILL_CHUNK_ROWS: usize = 4096;

/// Chunks of rebuilt rows `verify` reads ahead on its own thread while it compares the ones
/// before (the spill table's reads and the views' scan overlap); each is at most
/// [`SPILL_CHUNK_ROWS`] rows.
pub const COMPARE_PREFETCH_CHUNKS: usize = 2;

const _: () = assert!(EVENT_BYTES_MAX > VALUE_BYTES_MAX);
const _: () = assert!(SPILL_FILTER_BITS.is_multiple_of(64));
const _: () = assert!(STDIN_BYTES_MAX >= VALUE_BYTES_MAX);
const _: () = assert!(LEASE_MS_DEFAULT <= LEASE_MS_MAX);
const _: () = assert!(DELIVERIES_DEFAULT <= DELIVERIES_MAX);
const _: () = assert!(WAIT_MS_DEFAULT <= WAIT_MS_MAX);

/// How much longer than its wait a forwarded call's caller waits for the server's answer before
/// it runs the call itself, under the same idempotency key (`cli/src/forward.rs`).
pub const ANSWER_MARGIN_MS: u64 = 2_000;
/// How long past its caller's wait a forwarded call may still start a write on the server: the
/// server's own queue does not count against it (a wait of 0 still gets its one try of the lock,
/// as in-process).
pub const CALL_START_GRACE_MS: u64 = 500;
/// How long past its caller's wait a batch holding the call is dropped rather than committed
/// (its calls run again alone; the late ones answer busy, nothing written): the rest of
/// [`ANSWER_MARGIN_MS`] is the commit's, so a call's write never lands after its caller gave up
/// unless the commit itself outlasts that (a server stopped in the middle of its fdatasync).
pub const CALL_COMMIT_LATE_MS: u64 = 1_000;
const _: () = assert!(CALL_START_GRACE_MS < CALL_COMMIT_LATE_MS);
const _: () = assert!(CALL_COMMIT_LATE_MS < ANSWER_MARGIN_MS);
const _: () = assert!(LOCK_BACKOFF_US_MIN <= LOCK_BACKOFF_US_MAX);
const _: () = assert!(LOCK_BACKOFF_US_MIN <= CONFLICT_BACKOFF_US_MAX);
const _: () = assert!(TXN_ATTEMPTS_MAX >= 1);
const _: () = assert!(READ_HEADER_WAIT_MS <= WAIT_MS_DEFAULT);
const _: () = assert!(READ_REPAIR_LOCK_WAIT_MS <= WAIT_MS_DEFAULT);
const _: () = assert!((EVENT_BYTES_MAX as u64) * (APPEND_EVENT_COUNT_MAX as u64) <= 64 << 20);
