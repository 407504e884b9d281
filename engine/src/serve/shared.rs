//! What the server's connection threads and its writer thread share: the [`Handler`] a request
//! runs through and the [`Job`] a write becomes, the shared state (the engine, the stop flag,
//! the counters, the connections the writer's linger watches) and the slot an answer goes
//! back in. Apart from `server.rs` and `writer.rs` so that neither imports the other's logic.
//! Does not touch a socket or run anything.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::protocol::{ErrorCode, Reply, Run, Stats};
use crate::engine::Engine;

/// How a request is run; the CLI implements it with its own dispatch.
pub trait Handler: Send + Sync {
    /// Runs `run` on its connection's thread, answering it when it only reads, or returns the
    /// job the writer thread must run. `stdin` fetches the client's stdin when the verb reads it
    /// and the request carried none.
    fn prepare(&self, run: Run, engine: &Arc<Engine>, stdin: &mut dyn StdinSource) -> Prepared;
}

/// The client's stdin, asked for when a verb reads it.
pub trait StdinSource {
    /// The bytes, or `None` when the client gave none (it went away, or sent something else).
    fn fetch(&mut self) -> Option<String>;
}

/// What the connection thread does with a request.
pub enum Prepared {
    /// Answered here (a read, a usage error, a refusal decided before any write).
    Answer(Reply),
    /// Not served: the client runs it itself.
    NotServed(String),
    /// The client went away before the verb could run: nothing was run, nobody to answer.
    Abandon,
    /// A write: the writer runs it.
    Write(Box<dyn Job>),
}

/// A write, run by the writer thread: in a batch, or alone.
pub trait Job: Send {
    /// Runs the verb; its writes join the writer's open batch, if any. May run more than once
    /// (a batch that had to be aborted runs its calls again, one by one).
    fn run(&mut self, engine: &Arc<Engine>) -> Reply;
    /// Whether it must run alone, outside a batch (a mirrored call writes files after its
    /// commit).
    fn solo(&self) -> bool;
    /// Its size, for the batch's byte bound.
    fn bytes(&self) -> usize;
    /// When it was received and when its caller's wait (`--wait-ms`) ends: the writer starts
    /// none of its writes after that, and ends its lock waits by then, as the caller would
    /// in-process; such a write answers "busy" (exit 4), having written nothing. `None`: the
    /// server's own wait alone.
    fn bound(&self) -> Option<(Instant, Instant)> {
        None
    }
}

/// Why the accept loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Running = 0,
    Signal = 1,
    Idle = 2,
    CommitFailed = 3,
    /// The watched executable was replaced (an upgrade).
    Replaced = 4,
}

/// What the connection threads and the writer share.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) stop: AtomicUsize,
    pub(crate) signalled: Arc<AtomicBool>,
    pub(crate) stats: Mutex<Stats>,
    /// Open connections.
    pub(crate) open: AtomicUsize,
    /// Requests read and not yet answered.
    pub(crate) in_flight: AtomicUsize,
    /// When the last request arrived, in µs since `epoch`.
    pub(crate) last_request_us: AtomicU64,
    /// Connections in a request, or answered within the writer's linger window: the writes
    /// the writer may still expect for its batch.
    pub(crate) engaged: Mutex<Vec<Arc<Engagement>>>,
    pub(crate) epoch: Instant,
    /// The hello frame every connection gets first.
    pub(crate) hello: Vec<u8>,
}

/// One connection's part in the writer's linger: in a request, or when it was last answered.
#[derive(Default)]
pub(crate) struct Engagement {
    pub(crate) busy: AtomicBool,
    pub(crate) answered_us: AtomicU64,
}

impl Shared {
    /// The state of a server on `engine` that has served nothing yet.
    pub(crate) fn new(
        engine: Arc<Engine>,
        handler: Arc<dyn Handler>,
        signalled: Arc<AtomicBool>,
        hello: Vec<u8>,
    ) -> Shared {
        Shared {
            engine,
            handler,
            stop: AtomicUsize::new(0),
            signalled,
            stats: Mutex::new(Stats::default()),
            open: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            last_request_us: AtomicU64::new(0),
            engaged: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            hello,
        }
    }

    pub(crate) fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn stop(&self, why: Stop) {
        let _ = self.stop.compare_exchange(0, why as usize, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub(crate) fn stopping(&self) -> bool {
        if self.signalled.load(Ordering::SeqCst) {
            self.stop(Stop::Signal);
        }
        self.stop.load(Ordering::SeqCst) != Stop::Running as usize
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Stats)) {
        if let Ok(mut stats) = self.stats.lock() {
            f(&mut stats);
        }
    }
}

/// A reply or a protocol error for a write, as the writer hands it back.
pub(crate) type Answered = Result<Reply, (ErrorCode, String)>;

/// Where the writer puts a write's answer and its connection thread sleeps until it is there.
///
/// Not a channel: a crossbeam receiver spins and yields before it sleeps, and eight connection
/// threads doing that on two cores while the writer ran their batch were a tenth of the server's
/// CPU (docs/decisions.md). This one sleeps at once (a futex wait) and is woken once.
struct AnswerSlot {
    state: Mutex<AnswerState>,
    ready: Condvar,
}

enum AnswerState {
    Waiting,
    Sent(Answered),
    /// The writer dropped the call without answering (it stopped), or the answer was taken.
    Dropped,
}

/// The writer's end of one answer; dropping it unanswered wakes the connection with an error.
pub(crate) struct AnswerTx(Arc<AnswerSlot>);

/// The connection's end of one answer.
pub(crate) struct AnswerRx(Arc<AnswerSlot>);

/// The two ends of one answer.
pub(crate) fn answer_slot() -> (AnswerTx, AnswerRx) {
    let slot =
        Arc::new(AnswerSlot { state: Mutex::new(AnswerState::Waiting), ready: Condvar::new() });
    (AnswerTx(Arc::clone(&slot)), AnswerRx(slot))
}

impl AnswerSlot {
    fn lock(&self) -> MutexGuard<'_, AnswerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn settle(&self, to: AnswerState) {
        let mut state = self.lock();
        if matches!(*state, AnswerState::Waiting) {
            *state = to;
            self.ready.notify_one();
        }
    }
}

impl AnswerTx {
    /// Hands the answer over and wakes the connection.
    pub(crate) fn send(self, answered: Answered) {
        self.0.settle(AnswerState::Sent(answered));
    }
}

impl Drop for AnswerTx {
    fn drop(&mut self) {
        self.0.settle(AnswerState::Dropped);
    }
}

impl AnswerRx {
    /// Sleeps until the writer answered; `None` when it dropped the call unanswered.
    pub(crate) fn recv(self) -> Option<Answered> {
        let mut state = self.0.lock();
        while matches!(*state, AnswerState::Waiting) {
            state = self.0.ready.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        match std::mem::replace(&mut *state, AnswerState::Dropped) {
            AnswerState::Sent(answered) => Some(answered),
            AnswerState::Waiting | AnswerState::Dropped => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_wakes_its_connection_once_and_a_dropped_call_wakes_it_empty() {
        let (tx, rx) = answer_slot();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(Err((ErrorCode::Busy, "later".into())));
        });
        let got = rx.recv();
        writer.join().unwrap();
        assert!(matches!(got, Some(Err((ErrorCode::Busy, ref m))) if m == "later"), "{got:?}");
        let (tx, rx) = answer_slot();
        drop(tx);
        assert!(rx.recv().is_none(), "a call the writer dropped must not hang its connection");
    }
}
