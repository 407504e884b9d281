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
