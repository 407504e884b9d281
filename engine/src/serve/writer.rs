//! The one writer thread: takes the writes waiting in the crossbeam channel (at most
//! [`BATCH_CALLS_MAX`] calls and [`BATCH_BYTES_MAX`] bytes), runs them in order inside one batch
//! (one write transaction, each call's decision against the writes of the calls before it),
//! commits once with `Durability::Immediate`, and only then answers every call of the batch.
//! The batch's transaction opens with its first call, and each call runs as it arrives, so its
//! work overlaps the later calls' way to the server.
//!
//! It lingers for more calls only while a connection it may still hear from is in a request or
//! was answered within the last [`LINGER_US_MAX`] µs, and never longer than that past the
//! batch's first call. A batch a call tainted (it failed after writing) is aborted and its calls
//! run again one by one; a failed commit answers every call of its batch `commit_failed` and stops
//! the server. Each call runs bounded by its caller's wait ([`Job::bound`]): the batch's lock
//! wait ends by its first call's, no call's write starts later than its own plus a grace, and a
//! batch holding a call well past its wait is dropped rather than committed. Does not know what
//! a call does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use super::protocol::{ErrorCode, Reply};
use super::shared::{AnswerTx, Job, Shared, Stop};
use crate::engine::{BatchEnd, Engine};
use crate::kernel::limits::CALL_COMMIT_LATE_MS;
use crate::kernel::write::CallBound;

/// Calls in one batch at most: bounds the time every call of a batch waits for the others, and
/// the transaction's size (each call appends a handful of events at most).
pub const BATCH_CALLS_MAX: usize = 256;
/// Request bytes in one batch at most (the sum of the jobs' sizes): a few large stdin payloads
/// fill a batch on their own.
pub const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Longest linger for more calls once a batch has its first one, in µs: above the time a
/// persistent client takes from its answer to its next request on this kind of machine
/// (measured ~40–150 µs with 8–16 clients on 2 cores, docs/performance.md), far below a commit.
pub const LINGER_US_MAX: u64 = 400;

/// A write waiting for the writer, with the channel its answer goes back on.
pub(crate) struct Pending {
    pub(crate) job: Box<dyn Job>,
    pub(crate) answer: AnswerTx,
    pub(crate) bytes: usize,
}

/// The writer's loop: until every sender is gone and the channel is drained.
pub(crate) fn run(shared: &Shared, queue: &Receiver<Pending>) {
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(pending) => pending,
            None => match queue.recv() {
                Ok(pending) => pending,
                Err(_) => return,
            },
        };
        if first.job.solo() {
            solo(shared, first);
            continue;
        }
        carried = batch(shared, queue, first);
    }
}

/// Runs the batch that starts with `first` in one transaction, each call as it arrives (so a
/// call's work overlaps the others' way to the server), and answers it after the commit: every
/// write waiting, then more while the linger allows. A solo job ends the batch and is returned,
/// to run next.
fn batch(shared: &Shared, queue: &Receiver<Pending>, first: Pending) -> Option<Pending> {
    let engine = &shared.engine;
    let started = {
        let _bound = CallBound::set(first.job.bound());
        engine.begin_batch()
    };
    match started {
        Ok(true) => {}
        // The backend cannot batch, or the batch could not start (busy, an anchor that
        // disagrees): the call meets the same condition alone and answers it as per call.
        Ok(false) | Err(_) => {
            solo(shared, first);
            return None;
        }
    }
    let start = Instant::now();
    let mut bytes = first.bytes;
    let mut ran = vec![run_in_batch(engine, first)];
    let mut carried = None;
    while ran.len() < BATCH_CALLS_MAX && bytes < BATCH_BYTES_MAX {
        let next = match queue.try_recv() {
            Ok(pending) => pending,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                let left = Duration::from_micros(LINGER_US_MAX).saturating_sub(start.elapsed());
                if left.is_zero() || engaged(shared) <= ran.len() {
                    break;
                }
                match queue.recv_timeout(left.min(Duration::from_micros(50))) {
                    Ok(pending) => pending,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        if next.job.solo() {
            carried = Some(next);
            break;
        }
        bytes += next.bytes;
        ran.push(run_in_batch(engine, next));
    }
    commit(shared, ran);
    carried
}

/// Runs one call of the open batch: its reply waits for the commit.
fn run_in_batch(engine: &Arc<Engine>, mut pending: Pending) -> (Pending, Reply) {
    let reply = run_bounded(engine, &mut pending);
    (pending, reply)
}

/// Runs a call bounded by its caller's wait ([`Job::bound`]).
fn run_bounded(engine: &Arc<Engine>, pending: &mut Pending) -> Reply {
    let _bound = CallBound::set(pending.job.bound());
    pending.job.run(engine)
}

/// Connections the writer may still hear from for this batch: in a request now, or answered
/// within the linger window (a client in a loop sends its next request right away).
fn engaged(shared: &Shared) -> usize {
    let now = shared.now_us();
    let Ok(list) = shared.engaged.lock() else {
        return 0;
    };
    list.iter()
        .filter(|e| {
            e.busy.load(Ordering::SeqCst)
                || now.saturating_sub(e.answered_us.load(Ordering::SeqCst)) < LINGER_US_MAX
        })
        .count()
}

/// Commits the batch whose calls ran (`ran`), then answers them; an aborted batch runs its calls
/// again one by one, a failed commit answers them all `commit_failed` and stops the server.
fn commit(shared: &Shared, ran: Vec<(Pending, Reply)>) {
    // A call whose caller may give up before the commit ends is not committed in this batch:
    // the batch runs again call by call, and that call, too late to start, answers busy.
    let now = Instant::now();
    let late = ran.iter().any(|(pending, _)| {
        let bound = pending.job.bound();
        bound.is_some_and(|(_, wait_end)| {
            now >= wait_end + Duration::from_millis(CALL_COMMIT_LATE_MS)
        })
    });
    let ended = match late {
        true => Ok(shared.engine.abort_batch()),
        false => shared.engine.commit_batch(),
    };
    match ended {
        Ok(BatchEnd::Committed(_)) => {
            if let Ok(mut stats) = shared.stats.lock() {
                stats.commits += 1;
                stats.writes += ran.len() as u64;
                stats.count_batch(ran.len());
            }
            for (pending, reply) in ran {
                pending.answer.send(Ok(reply));
            }
        }
        Ok(BatchEnd::Aborted(_)) => {
            if let Ok(mut stats) = shared.stats.lock() {
                stats.aborted += 1;
            }
            for (pending, _) in ran {
                solo(shared, pending);
            }
        }
        Err(err) => {
            // A store file moved over or removed refused the commit: nothing was written, and
            // the server stops as for a replaced executable.
            shared.stop(match err {
                crate::Error::StoreReplaced { .. } => Stop::Replaced,
                _ => Stop::CommitFailed,
            });
            let message =
                format!("the batch's commit failed ({err}): the call's effect is unknown");
            for (pending, _) in ran {
                pending.answer.send(Err((ErrorCode::CommitFailed, message.clone())));
            }
        }
    }
}

/// Runs one write alone: its writes commit as per call.
fn solo(shared: &Shared, mut pending: Pending) {
    if shared.engine.is_poisoned() {
        let message = "the server stopped after a failed commit; run the call in-process".into();
        pending.answer.send(Err((ErrorCode::Busy, message)));
        return;
    }
    let reply = run_bounded(&shared.engine, &mut pending);
    // A store file moved over the served one while the call waited or ran: its commit was
    // refused (which also poisons the handle), so it runs again on the file at the path.
    if reply.exit != 0 && shared.engine.check_in_place().is_err() {
        shared.stop(Stop::Replaced);
        let message = "the server's store file was replaced; run the call in-process".into();
        pending.answer.send(Err((ErrorCode::NotServed, message)));
        return;
    }
    if shared.engine.is_poisoned() {
        shared.stop(Stop::CommitFailed);
    }
    if let Ok(mut stats) = shared.stats.lock() {
        stats.solo += 1;
        stats.writes += 1;
    }
    pending.answer.send(Ok(reply));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use serde_json::Value;

    use super::*;
    use crate::core::query::Query;
    use crate::core::{Command, Expect};
    use crate::kernel::call::Call;
    use crate::kernel::limits::CALL_START_GRACE_MS;
    use crate::serve::protocol::Run;
    use crate::serve::shared::{answer_slot, Handler, Prepared, StdinSource};
    use crate::store::OpenOptions;

    const SCOPE: &str = "t";
    const NOW_MS: u64 = 1_700_000_000_000;
    /// The exit a busy call answers with (DESIGN.md §8).
    const EXIT_BUSY: u8 = 4;

    struct NoHandler;

    impl Handler for NoHandler {
        fn prepare(&self, _: Run, _: &Arc<Engine>, _: &mut dyn StdinSource) -> Prepared {
            Prepared::NotServed("not in this test".into())
        }
    }

    /// A `kv put` of `key`, bounded by `bound`, which sleeps `pause` after its first run.
    struct Put {
        key: &'static str,
        bound: Option<(Instant, Instant)>,
        pause: Duration,
    }

    impl Job for Put {
        fn run(&mut self, engine: &Arc<Engine>) -> Reply {
            let command =
                Command::KvPut { key: self.key.into(), value: "1".into(), expect: Expect::Any };
            let exit = match engine.execute(&Call::at(SCOPE, NOW_MS), &command) {
                Ok(_) => 0,
                Err(crate::Error::Busy { .. }) => EXIT_BUSY,
                Err(err) => panic!("{err}"),
            };
            std::thread::sleep(std::mem::take(&mut self.pause));
            Reply { id: 0, exit, stdout: String::new(), stderr: String::new() }
        }
        fn solo(&self) -> bool {
            false
        }
        fn bytes(&self) -> usize {
            1
        }
        fn bound(&self) -> Option<(Instant, Instant)> {
            self.bound
        }
    }

    fn shared(engine: Engine) -> Shared {
        let signalled = Arc::new(AtomicBool::new(false));
        Shared::new(Arc::new(engine), Arc::new(NoHandler), signalled, Vec::new())
    }

    fn stored(engine: &Engine, key: &str) -> bool {
        let got = engine.query(SCOPE, &Query::KvGet { key: key.into() }, NOW_MS).unwrap();
        got["found"] == Value::Bool(true)
    }

    /// A batch that still holds a call well past its caller's wait when it would commit is
    /// dropped, not committed: its calls run again alone, the late one answers busy with nothing
    /// written (its caller gave up and may have run it in-process), the others commit.
    #[test]
    fn a_batch_holding_a_call_past_its_wait_is_dropped_and_only_the_late_call_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shared =
            shared(Engine::open(&dir.path().join("s.redb"), OpenOptions::default()).unwrap());
        let (tx, rx) = crossbeam_channel::unbounded();
        let now = Instant::now();
        let on_time_then_late = Put {
            key: "late",
            bound: Some((now, now + Duration::from_millis(CALL_START_GRACE_MS / 10))),
            pause: Duration::ZERO,
        };
        // Runs after it in the same batch and keeps the batch open past the late call's wait
        // and the commit's grace.
        let slow = Put {
            key: "slow",
            bound: None,
            pause: Duration::from_millis(CALL_COMMIT_LATE_MS + CALL_START_GRACE_MS / 10),
        };
        let mut answers = Vec::new();
        for job in [on_time_then_late, slow] {
            let (answer, rx) = answer_slot();
            tx.send(Pending { job: Box::new(job), answer, bytes: 1 }).unwrap();
            answers.push(rx);
        }
        drop(tx);
        run(&shared, &rx);
        let exits: Vec<u8> = answers.into_iter().map(|a| a.recv().unwrap().unwrap().exit).collect();
        assert_eq!(exits, [EXIT_BUSY, 0]);
        let stats = shared.stats.lock().unwrap().clone();
        assert_eq!((stats.commits, stats.aborted, stats.solo), (0, 1, 2), "{stats:?}");
        assert!(!stored(&shared.engine, "late"), "the late call's write was committed");
        assert!(stored(&shared.engine, "slow"), "the on-time call's write was lost");
    }
}
