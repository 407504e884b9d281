//! The one projection trait every domain implements, and the kernel's application of an event
//! through a table of them: the domain's rows, then the idempotency row every event with a key
//! carries.
//!
//! A projection is pure: no IO, no clock, no failure, so replay cannot fail halfway. Does not
//! know any domain; the engine hands the kernel its table.

use hookstate_schema::{Body, Event, ViewKey, ViewRow, BODY_VARIANTS};
use serde_json::{Map, Value};

use crate::kernel::limits::IDEM_KEY_TTL_MS;
use crate::kernel::view::ViewAccess;

/// What a domain's events do to the views, and what they stand for in a result.
pub(crate) trait Projection: Sync {
    /// Every row `apply` may read or write for this event (the live write path preloads them).
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey>;
    /// Applies one event to the views. Total: validation happened before the event was appended.
    fn apply(&self, views: &mut dyn ViewAccess, event: &Event);
    /// The result fields an event stands for: the caller's result of a fresh call, the replayed
    /// result of an idempotent repeat, and the body `hookstate log` prints.
    fn render(&self, body: &Body) -> Map<String, Value>;
    /// The replayed result of a call that appended `bodies` (all of this projection's domain).
    /// By default the last event stands for the call.
    fn render_call(&self, bodies: &[&Body]) -> Map<String, Value> {
        bodies.last().map(|body| self.render(body)).unwrap_or_default()
    }
}

/// The projection of each [`Body`] variant, indexed by [`Body::variant_index`].
pub(crate) type Table = [&'static dyn Projection; BODY_VARIANTS];

/// Every row applying `event` may read or write, its idempotency row included.
pub(crate) fn touched_keys(table: &Table, event: &Event) -> Vec<ViewKey> {
    let mut keys = table[event.content.body.variant_index()].touched_keys(event);
    if let Some(idem) = &event.content.idem_key {
        keys.push(idem_key(&event.content.scope, idem));
    }
    keys
}

/// Applies one event: its domain's projection, then its idempotency row (the first and last seq
/// of the call that carried the key, and its time). A key whose binding expired starts over with
/// the call that reuses it.
pub(crate) fn apply(table: &Table, views: &mut dyn ViewAccess, event: &Event) {
    table[event.content.body.variant_index()].apply(views, event);
    if let Some(idem) = &event.content.idem_key {
        let key = idem_key(&event.content.scope, idem);
        let now = event.content.at_ms;
        let (first_seq, at_ms) = match views.get(&key) {
            Some(ViewRow::Idem { first_seq, at_ms, .. }) if !idem_expired(*at_ms, now) => {
                (*first_seq, *at_ms)
            }
            _ => (event.seq, now),
        };
        views.put(key, ViewRow::Idem { first_seq, last_seq: event.seq, at_ms });
    }
}

/// Whether a key first used at `first_ms` is free again at `now_ms` ([`IDEM_KEY_TTL_MS`]).
pub(crate) fn idem_expired(first_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(first_ms) >= IDEM_KEY_TTL_MS
}

/// The result fields one event stands for.
pub(crate) fn render(table: &Table, body: &Body) -> Map<String, Value> {
    table[body.variant_index()].render(body)
}

/// The replayed result of the events one call appended: their domain's rendering when they all
/// belong to one variant, otherwise the last event's.
pub(crate) fn render_call(table: &Table, bodies: &[Body]) -> Map<String, Value> {
    let Some(last) = bodies.last() else {
        return Map::new();
    };
    let index = last.variant_index();
    if bodies.iter().all(|b| b.variant_index() == index) {
        let refs: Vec<&Body> = bodies.iter().collect();
        return table[index].render_call(&refs);
    }
    render(table, last)
}

/// The row that remembers which events a call with idempotency key `key` appended.
pub(crate) fn idem_key(scope: &str, key: &str) -> ViewKey {
    ViewKey::Idem { scope: scope.into(), key: key.into() }
}
