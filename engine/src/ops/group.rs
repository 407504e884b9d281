//! Group commit for a program that embeds the engine: [`Ops::execute_batch`] runs many core
//! calls in one write transaction and makes them durable with one commit, as `serve`'s writer
//! thread does for its clients (the same kernel batch, `kernel/batch.rs`).

use crate::core::Command;
use crate::engine::{BatchEnd, Engine};
use crate::kernel::call::{Call, Outcome};
use crate::kernel::error::Result;
use crate::ops::api::Ops;

/// Calls one [`Ops::execute_batch`] takes at most: one transaction holds every event of its calls
/// until the commit, and every call of the batch waits for that commit. Above the server's own
/// batch bound (`serve::GROUP_CALLS_MAX`), so a bench can measure batches of 512.
pub const GROUP_CALLS_MAX: usize = 1024;

impl Ops<'_> {
    /// The answer of a core call that, decided on a read snapshot, appends nothing (a claim of an
    /// empty queue, a member already in its set), without a write transaction: on a store file
    /// opened only for reading it costs no fdatasync, where [`Engine::execute`] opens a writer
    /// for it. `None` when the call would append, carries an idempotency key, or the store keeps
    /// its own clock or disagrees with its anchors: run it with [`Engine::execute`] then, which
    /// decides again under the write lock. A hook that is idle most of the time (a Stop hook
    /// claiming from a mostly empty queue) asks this first.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad call or command; store errors.
    pub fn answer_if_idle(&self, call: &Call, command: &Command) -> Result<Option<Outcome>> {
        crate::core::api::answer_if_idle(self.kernel(), call, command)
    }

    /// Runs `calls` in order in one write transaction and commits it once, durably: each call's
    /// decision sees the writes of the calls before it, idempotency keys and compare-and-swaps are
    /// decided exactly as by [`Engine::execute`], and each call gets its own answer (a refusal or
    /// an invalid call answers alone and does not disturb the others). When a call fails after it
    /// wrote (a store error, a damaged row) the batch is dropped whole and every call runs again
    /// on its own, so no answer ever stands for an effect that was not committed. A backend that
    /// cannot hold a transaction across calls runs them one by one.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for more than [`GROUP_CALLS_MAX`] calls; the errors of opening a
    /// write (busy, poisoned, an anchor that disagrees) and of the commit, after which the
    /// effect of the batch is unknown (the engine then refuses every write, as after a failed
    /// commit of one call).
    pub fn execute_batch(&self, calls: &[(Call, Command)]) -> Result<Vec<Result<Outcome>>> {
        if calls.len() > GROUP_CALLS_MAX {
            return Err(crate::Error::Invalid(format!(
                "a batch holds at most {GROUP_CALLS_MAX} calls, got {}",
                calls.len()
            )));
        }
        let engine = self.engine();
        let one_by_one = |engine: &Engine| -> Vec<Result<Outcome>> {
            calls.iter().map(|(call, command)| engine.execute(call, command)).collect()
        };
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        if !engine.begin_batch()? {
            return Ok(one_by_one(engine));
        }
        let open = OpenBatch { engine, done: false };
        let answers = one_by_one(engine);
        match open.commit()? {
            BatchEnd::Committed(_) => Ok(answers),
            BatchEnd::Aborted(_) => Ok(one_by_one(engine)),
        }
    }
}

/// This thread's open batch: committed by [`OpenBatch::commit`], or, when a call panics and
/// unwinds past it, ended on drop (a panicking call taints the batch, so nothing of it commits)
/// so that the engine can open the next one.
struct OpenBatch<'e> {
    engine: &'e Engine,
    done: bool,
}

impl OpenBatch<'_> {
    fn commit(mut self) -> Result<BatchEnd> {
        self.done = true;
        self.engine.commit_batch()
    }
}

impl Drop for OpenBatch<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Unwinding: the batch is tainted and aborts, which cannot fail.
            let _ = self.engine.commit_batch();
        }
    }
}
