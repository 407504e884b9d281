//! The power-loss simulator (RELIABILITY.md A4): an in-memory disk whose durable image changes
//! only on `sync_data`, a crash at every mutating operation (write, set_len, sync) of a seeded
//! workload, and for each crash several disk images: unsynced operations dropped, or a random
//! subset kept with writes torn at 512-byte sectors. Every image must open with redb's integrity
//! check, verify (chain from genesis, views equal a rebuild), and hold every acknowledged event
//! (every commit that returned) at its seq and hash.
//!
//! Crashes during store creation are simulated too: a real store is created in a temporary file,
//! synced, then published by a link ([`creation_is_atomic`]), so an image cut inside creation is
//! not at the store's path, and the image published must open; a store created in place (the
//! `non-atomic-create` drill) must open from every cut. Does not touch a real store file; the
//! head anchor goes to a scratch directory.

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use hookstate_engine::{creation_is_atomic, Call, Command, Expect, LogFilter, OpenOptions};

/// Commands in the seeded workload (each is one durable commit when it appends).
const WORKLOAD_COMMANDS: u64 = 16;
/// The command before which the workload closes the store and opens it again, so cuts fall in
/// a clean close and in the open of a closed file too.
const REOPEN_AT: u64 = WORKLOAD_COMMANDS / 2;
/// Images per crash point: variant 0 drops every unsynced operation, the last keeps them all,
/// the others keep a random subset with random sectors of each write.
const IMAGES_PER_CRASH: u64 = 8;
/// The unit a torn write is cut at.
const SECTOR_BYTES: usize = 512;
/// The seed when `HOOKSTATE_POWERLOSS_SEED` is unset.
const SEED_DEFAULT: u64 = 0x706f_7765_726c_6f73;

pub(crate) use hookstate_testkit::Rng;

/// An operation that changed the volatile image since the last sync.
#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// The disk: what a power cut would keep (`durable`), what reads see (`current`), and the
/// operations in between.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Op>,
    /// Mutating operations done so far (writes, set_lens, syncs).
    ops: u64,
    /// Syncs done so far (group.rs counts a batch's flushes with them).
    pub(crate) syncs: u64,
    /// The mutating operation that does not happen: the power is cut just before it.
    crash_at: Option<u64>,
    /// The durable image and the unsynced operations at the cut (the cut write among them, as it
    /// may have reached the disk in part).
    crashed: Option<(Vec<u8>, Vec<Op>)>,
    /// An IO error to return instead of doing an operation.
    error: Option<DiskError>,
}

/// Operation `at` fails with `errno`, and every later one too when `persistent`.
#[derive(Debug, Clone, Copy)]
struct DiskError {
    at: u64,
    errno: i32,
    persistent: bool,
}

fn index(offset: u64) -> usize {
    usize::try_from(offset).unwrap()
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, data } => {
            let end = index(*offset) + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[index(*offset)..end].copy_from_slice(data);
        }
        Op::SetLen(len) => image.resize(index(*len), 0),
    }
}

impl Disk {
    /// Counts a mutating operation; `Err` once the power is cut.
    fn step(&mut self, op: Option<&Op>) -> std::io::Result<()> {
        if self.crashed.is_some() {
            return Err(std::io::Error::other("power is off"));
        }
        self.ops += 1;
        if self.crash_at == Some(self.ops) {
            let mut pending = self.pending.clone();
            pending.extend(op.cloned());
            self.crashed = Some((self.durable.clone(), pending));
            return Err(std::io::Error::other("power cut"));
        }
        if let Some(error) = self.error {
            if self.ops == error.at || (error.persistent && self.ops > error.at) {
                return Err(std::io::Error::from_raw_os_error(error.errno));
            }
        }
        Ok(())
    }
}

/// redb's view of the simulated disk. One process, so every lock is granted.
#[derive(Debug, Clone)]
pub(crate) struct SimBackend(pub(crate) Arc<Mutex<Disk>>);

type LockResult<T> = Result<T, redb::BackendError>;

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.lock().unwrap().current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let disk = self.0.lock().unwrap();
        let start = index(offset);
        let bytes = disk.current.get(start..start + out.len()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end")
        })?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        let op = Op::SetLen(len);
        disk.step(Some(&op))?;
        apply(&mut disk.current, &op);
        disk.pending.push(op);
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        disk.step(None)?;
        disk.syncs += 1;
        disk.durable = disk.current.clone();
        disk.pending.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        let op = Op::Write { offset, data: data.to_vec() };
        disk.step(Some(&op))?;
        apply(&mut disk.current, &op);
        disk.pending.push(op);
        Ok(())
    }

    fn try_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<bool> {
        Ok(true)
    }
    fn try_lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<bool> {
        Ok(true)
    }
    fn lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<()> {
        Ok(())
    }
    fn lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<()> {
        Ok(())
    }
    fn unlock_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<()> {
        Ok(())
    }
    fn query_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> LockResult<bool> {
        Ok(false)
    }
}

fn options(create: bool) -> OpenOptions {
    OpenOptions {
        wait_ms: 1_000,
        create,
        check_integrity: !create,
        check_beside_replay: false,
        read_only: false,
        absent_is_empty: false,
        anchor_dir: None,
        server_clock: true,
        upgrade_schema: false,
    }
}

/// The seeded workload's `n`th command: queue pushes, claims and acks, record puts, set adds and
/// counters over a few keys, so commits rewrite the same pages.
fn command(rng: &mut Rng, n: u64) -> Command {
    let item = format!("i{}", rng.below(4));
    let queue = "q".to_owned();
    match rng.below(6) {
        0 => Command::QueuePush {
            queue,
            item,
            payload: format!("{{\"n\":{n}}}"),
            for_session: None,
            max_deliveries: 5,
        },
        1 => Command::QueueClaim { queue, item: None, holder: format!("h{n}"), lease_ms: 60_000 },
        2 => Command::QueueAck { queue, item, token: rng.below(n + 1) },
        3 => Command::KvPut {
            key: format!("k{}", rng.below(3)),
            value: format!("\"{}\"", "x".repeat(index(rng.below(3_000)))),
            expect: Expect::Any,
        },
        4 => Command::SetAdd { set: "s".into(), member: format!("m{}", rng.below(8)) },
        _ => Command::CounterAdd { name: "c".into(), delta: 1 },
    }
}

/// What goes wrong in a run, at a mutating operation counted after the store was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// The power is cut just before operation `k`.
    Crash(u64),
    /// Operation `k` fails with `errno` (and every later one too when `persistent`); the process
    /// goes on.
    Error {
        k: u64,
        errno: i32,
        persistent: bool,
    },
}

/// What a run left: the disk, the acknowledged `(seq, hash)`s, the mutating operations after
/// creation, the errors the engine returned, and whether anything panicked.
struct RunResult {
    disk: Arc<Mutex<Disk>>,
    /// The head anchor the run left beside the store (written after each commit returned).
    anchor: Option<Vec<u8>>,
    acked: Vec<(u64, [u8; 32])>,
    ops: u64,
    errors: Vec<hookstate_engine::Error>,
    panicked: bool,
}

/// Runs the seeded workload on a fresh disk with `fault`. After a crash it stops; after an IO
/// error it goes on with the next command, as a long-lived caller would.
fn run(seed: u64, fault: Fault) -> RunResult {
    let scratch = tempfile::tempdir().unwrap();
    let disk = Arc::new(Mutex::new(Disk::default()));
    let path = scratch.path().join("sim.redb");
    let mut engine =
        hookstate_engine::open_on_backend(&path, SimBackend(Arc::clone(&disk)), options(true))
            .unwrap();
    let created_ops = {
        let mut disk = disk.lock().unwrap();
        let created = disk.ops;
        match fault {
            Fault::None => {}
            Fault::Crash(k) => disk.crash_at = Some(k + created),
            Fault::Error { k, errno, persistent } => {
                disk.error = Some(DiskError { at: k + created, errno, persistent });
            }
        }
        created
    };
    let mut rng = Rng(seed);
    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    let workload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for n in 1..=WORKLOAD_COMMANDS {
            if n == REOPEN_AT {
                // A clean close and an open of the closed file, as every hook call does.
                drop(engine);
                match hookstate_engine::open_on_backend(
                    &path,
                    SimBackend(Arc::clone(&disk)),
                    options(false),
                ) {
                    Ok(reopened) => engine = reopened,
                    Err(err) => {
                        assert!(fault != Fault::None, "the reopen failed without a fault: {err}");
                        errors.push(err);
                        return;
                    }
                }
            }
            let call = Call::at("sim", 1_000 * n);
            match engine.execute(&call, &command(&mut rng, n)) {
                Ok(outcome) if outcome.appended > 0 => {
                    acked.push((outcome.head.seq, outcome.head.hash));
                }
                Ok(_) => {}
                Err(err) => {
                    assert!(fault != Fault::None, "the workload failed without a fault: {err}");
                    errors.push(err);
                    if matches!(fault, Fault::Crash(_)) {
                        break;
                    }
                }
            }
        }
        drop(engine);
    }));
    let ops = disk.lock().unwrap().ops - created_ops;
    let anchor = std::fs::read(scratch.path().join("sim.redb.head")).ok();
    RunResult { disk, anchor, acked, ops, errors, panicked: workload.is_err() }
}

/// The disk images a cut can leave: variant 0 keeps no unsynced operation, the last keeps all,
/// the others keep each operation with even odds and each sector of a kept write with even odds.
fn image(durable: &[u8], pending: &[Op], variant: u64, rng: &mut Rng) -> Vec<u8> {
    let mut image = durable.to_vec();
    for op in pending {
        let keep_all = variant + 1 == IMAGES_PER_CRASH;
        if variant == 0 || (!keep_all && !rng.coin()) {
            continue;
        }
        match op {
            Op::Write { offset, data } if !keep_all => {
                for (k, sector) in data.chunks(SECTOR_BYTES).enumerate() {
                    if rng.coin() {
                        let at = *offset + (k * SECTOR_BYTES) as u64;
                        apply(&mut image, &Op::Write { offset: at, data: sector.to_vec() });
                    }
                }
            }
            other => apply(&mut image, other),
        }
    }
    image
}

/// Opens one image beside the anchor the run left and checks it (the anchor lags or matches
/// every image: it is written only after a commit returned); `Err` names the violation.
fn check(image: Vec<u8>, anchor: Option<&[u8]>, acked: &[(u64, [u8; 32])]) -> Result<(), String> {
    let scratch = tempfile::tempdir().unwrap();
    if let Some(anchor) = anchor {
        std::fs::write(scratch.path().join("sim.redb.head"), anchor).unwrap();
    }
    let disk = Disk { durable: image.clone(), current: image, ..Disk::default() };
    let backend = SimBackend(Arc::new(Mutex::new(disk)));
    let engine = hookstate_engine::open_on_backend(
        &scratch.path().join("sim.redb"),
        backend,
        options(false),
    )
    .map_err(|e| format!("unopenable: {e}"))?;
    // Lost events first: an image that lost a commit also fails `verify` (its anchor, moved
    // after that commit, is ahead of its log), and the loss is the finding.
    let events = engine.log(&LogFilter::default()).map_err(|e| format!("log: {e}"))?;
    for (seq, hash) in acked {
        let found = events.iter().find(|e| e.seq == *seq);
        if found.is_none_or(|e| e.hash != *hash) {
            return Err(format!("acked event {seq} lost"));
        }
    }
    engine.ops().verify(Default::default()).map_err(|e| format!("verify: {e}"))?;
    Ok(())
}

#[test]
fn power_loss_at_every_operation_keeps_acked_events_and_an_openable_store() {
    let seed = std::env::var("HOOKSTATE_POWERLOSS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    let start = std::time::Instant::now();
    let clean = run(seed, Fault::None);
    let total_ops = clean.ops;
    assert!(clean.acked.len() as u64 > WORKLOAD_COMMANDS / 2, "the workload barely appended");
    let mut rng = Rng(seed ^ 0x1a9e);
    let (mut images, mut acked_checked) = (0u64, 0u64);
    let mut violations: Vec<String> = Vec::new();
    for crash_at in 1..=total_ops {
        let RunResult { disk, anchor, acked, panicked, .. } = run(seed, Fault::Crash(crash_at));
        assert!(!panicked, "crash at op {crash_at} panicked");
        let (durable, pending) = disk.lock().unwrap().crashed.clone().unwrap();
        for variant in 0..IMAGES_PER_CRASH {
            images += 1;
            acked_checked += acked.len() as u64;
            let image = image(&durable, &pending, variant, &mut rng);
            if let Err(why) = check(image, anchor.as_deref(), &acked) {
                violations.push(format!("crash at op {crash_at} image {variant}: {why}"));
            }
        }
    }
    let count = |what: &str| violations.iter().filter(|v| v.contains(what)).count();
    println!(
        "powerloss crash_points={total_ops} images={images} acked_checked={acked_checked} \
         violations={} unopenable={} lost_acked={} verify_failed={} seed={seed} elapsed_ms={}",
        violations.len(),
        count(": unopenable"),
        count(": acked event"),
        count(": verify"),
        start.elapsed().as_millis()
    );
    assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
}

/// The I/O-error loop (RELIABILITY.md A5): operation k of the workload fails with EIO (only that
/// one) or ENOSPC (that one and every later one), for every k. The engine must return errors,
/// never panic, and never call a disk error corruption; the disk as the process left it must open,
/// verify, and hold every acknowledged event.
#[test]
fn io_errors_at_every_operation_never_panic_and_leave_a_verifying_store() {
    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;
    let seed = SEED_DEFAULT;
    let total_ops = run(seed, Fault::None).ops;
    let (mut fault_points, mut panics, mut errored_runs) = (0, 0, 0);
    let (mut wrong_errors, mut failures) = (Vec::new(), Vec::new());
    for (errno, persistent) in [(EIO, false), (ENOSPC, true)] {
        for k in 1..=total_ops {
            fault_points += 1;
            let result = run(seed, Fault::Error { k, errno, persistent });
            panics += u32::from(result.panicked);
            errored_runs += u32::from(!result.errors.is_empty());
            for err in &result.errors {
                let text = err.to_string();
                if matches!(
                    err,
                    hookstate_engine::Error::StoreCorrupt(_)
                        | hookstate_engine::Error::Corrupt(_)
                        | hookstate_engine::Error::ChainBroken { .. }
                ) {
                    wrong_errors.push(format!("errno {errno} at op {k}: {text}"));
                }
            }
            let image = result.disk.lock().unwrap().current.clone();
            if let Err(why) = check(image, result.anchor.as_deref(), &result.acked) {
                failures.push(format!("errno {errno} at op {k}: {why}"));
            }
        }
    }
    println!(
        "ioerrors fault_points={fault_points} errored_runs={errored_runs} panics={panics} \
         wrong_errors={} \
         post_fault_verify_failures={} seed={seed}",
        wrong_errors.len(),
        failures.len()
    );
    assert_eq!(panics, 0, "a disk error panicked");
    assert!(errored_runs * 2 > fault_points, "most faults never reached the engine");
    assert!(wrong_errors.is_empty(), "{wrong_errors:#?}");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Power loss inside store creation (the mutating operations of creating a store on an empty
/// disk): with atomic creation a cut leaves no store at the store's path, and the image that is
/// published (the durable image once creation returned) must open and verify; created in place,
/// every image of every cut is the store and must open.
#[test]
fn power_loss_during_creation_leaves_no_store_or_an_openable_one() {
    let mut rng = Rng(SEED_DEFAULT ^ 0xc4ea);
    let create = |crash_at: Option<u64>| {
        let scratch = tempfile::tempdir().unwrap();
        let disk = Arc::new(Mutex::new(Disk { crash_at, ..Disk::default() }));
        let backend = SimBackend(Arc::clone(&disk));
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            hookstate_engine::open_on_backend(
                &scratch.path().join("sim.redb"),
                backend,
                options(true),
            )
            .is_ok()
        }));
        (disk, opened)
    };
    let (clean, opened) = create(None);
    assert_eq!(opened.ok(), Some(true), "creation failed without a fault");
    let (creation_ops, published) = {
        let disk = clean.lock().unwrap();
        (disk.ops, disk.durable.clone())
    };
    let atomic = creation_is_atomic();
    let (mut images, mut no_store, mut panics) = (0u64, 0u64, 0u64);
    let mut violations = Vec::new();
    if atomic {
        images += 1;
        if let Err(why) = check(published, None, &[]) {
            violations.push(format!("published image: {why}"));
        }
    }
    for crash_at in 1..=creation_ops {
        let (disk, opened) = create(Some(crash_at));
        panics += u64::from(opened.is_err());
        let Some((durable, pending)) = disk.lock().unwrap().crashed.clone() else {
            continue;
        };
        for variant in 0..IMAGES_PER_CRASH {
            images += 1;
            if atomic {
                // The temporary file was never linked: the store's path holds nothing.
                no_store += 1;
            } else if let Err(why) = check(image(&durable, &pending, variant, &mut rng), None, &[])
            {
                violations.push(format!("crash at op {crash_at} image {variant}: {why}"));
            }
        }
    }
    let unopenable = violations.iter().filter(|v| v.contains(": unopenable")).count();
    println!(
        "powerloss_create crash_points={creation_ops} images={images} atomic={atomic} \
         no_store={no_store} unopenable={unopenable} violations={} panics={panics}",
        violations.len()
    );
    assert_eq!(panics, 0, "a crash inside creation panicked");
    assert!(violations.is_empty(), "{violations:#?}");
}
