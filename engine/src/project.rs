//! Projections: pure functions from an event to view-row changes.
//!
//! `apply` has no IO, no clock and no failure, so replay cannot fail halfway. The live write path
//! preloads the rows an event touches (`touched_keys`) into an overlay, applies, and writes the
//! overlay back; a rebuild applies every event to an in-memory map. Does not read or write redb.

use std::collections::BTreeMap;

use hookstate_schema::{Body, CoreEvent, Event, Item, ItemState, QueueMeta, ViewKey, ViewRow};

/// Row access for a projection.
pub(crate) trait ViewAccess {
    /// The current row, if any.
    fn get(&self, key: &ViewKey) -> Option<&ViewRow>;
    /// Sets a row.
    fn put(&mut self, key: ViewKey, row: ViewRow);
    /// Removes a row.
    fn delete(&mut self, key: &ViewKey);
}

impl ViewAccess for BTreeMap<ViewKey, ViewRow> {
    fn get(&self, key: &ViewKey) -> Option<&ViewRow> {
        BTreeMap::get(self, key)
    }
    fn put(&mut self, key: ViewKey, row: ViewRow) {
        self.insert(key, row);
    }
    fn delete(&mut self, key: &ViewKey) {
        self.remove(key);
    }
}

/// The rows one event may read or write, preloaded from the store. Touching any other row is a
/// bug in `touched_keys`, and panics rather than write a view that a rebuild would not produce.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    rows: BTreeMap<ViewKey, Option<ViewRow>>,
    dirty: BTreeMap<ViewKey, ()>,
}

impl Overlay {
    /// Records the stored value of a touched row.
    pub(crate) fn preload(&mut self, key: ViewKey, row: Option<ViewRow>) {
        self.rows.entry(key).or_insert(row);
    }

    /// Whether a row is already loaded.
    pub(crate) fn has(&self, key: &ViewKey) -> bool {
        self.rows.contains_key(key)
    }

    /// The rows changed since loading, with their new values (`None` = deleted).
    pub(crate) fn changes(&self) -> impl Iterator<Item = (&ViewKey, Option<&ViewRow>)> {
        self.dirty.keys().map(|key| (key, self.rows.get(key).and_then(Option::as_ref)))
    }
}

impl ViewAccess for Overlay {
    fn get(&self, key: &ViewKey) -> Option<&ViewRow> {
        let row = self.rows.get(key);
        assert!(row.is_some(), "projection read {key:?}, which touched_keys did not name");
        row.and_then(Option::as_ref)
    }
    fn put(&mut self, key: ViewKey, row: ViewRow) {
        assert!(self.rows.contains_key(&key), "projection wrote unnamed {key:?}");
        self.dirty.insert(key.clone(), ());
        self.rows.insert(key, Some(row));
    }
    fn delete(&mut self, key: &ViewKey) {
        assert!(self.rows.contains_key(key), "projection deleted unnamed {key:?}");
        self.dirty.insert(key.clone(), ());
        self.rows.insert(key.clone(), None);
    }
}

fn item_key(scope: &str, queue: &str, item: &str) -> ViewKey {
    ViewKey::Item { scope: scope.into(), queue: queue.into(), item: item.into() }
}

fn meta_key(scope: &str, queue: &str) -> ViewKey {
    ViewKey::QueueMeta { scope: scope.into(), queue: queue.into() }
}

/// The result fields an event stands for: the caller's result of a fresh call, the replayed
/// result of an idempotent repeat, and the body `hookstate log` prints.
pub(crate) fn render(body: &Body) -> serde_json::Map<String, serde_json::Value> {
    match body {
        Body::Core(core) => crate::core::render(core),
        Body::Signals(event) => crate::signals::render(event),
        Body::Observer(event) => crate::observer::render(event),
        Body::Feedback(event) => crate::feedback::project::render(event),
        Body::Proposals(event) => crate::proposals::render(event),
        Body::Alerts(event) => crate::alerts::render(event),
        Body::Heartbeat(event) => crate::heartbeat::render(event),
    }
}

/// The replayed result of an idempotent repeat from the events the first call appended: a
/// heartbeat call rebuilds its verdict from all of them; otherwise the last event stands for the
/// call.
pub(crate) fn render_replay(bodies: &[Body]) -> serde_json::Map<String, serde_json::Value> {
    let heartbeat: Vec<&hookstate_schema::heartbeat::HeartbeatEvent> = bodies
        .iter()
        .filter_map(|b| match b {
            Body::Heartbeat(event) => Some(event),
            _ => None,
        })
        .collect();
    if !heartbeat.is_empty() && heartbeat.len() == bodies.len() {
        return crate::heartbeat::render_call(&heartbeat);
    }
    bodies.last().map(render).unwrap_or_default()
}

/// Every row `apply` may read or write for this event.
pub(crate) fn touched_keys(event: &Event) -> Vec<ViewKey> {
    let scope = event.content.scope.as_str();
    let mut keys = match &event.content.body {
        Body::Core(core) => core_keys(scope, core),
        Body::Signals(event) => crate::signals::touched_keys(scope, event),
        Body::Observer(_) => crate::observer::touched_keys(scope),
        Body::Feedback(event) => crate::feedback::project::touched_keys(scope, event),
        Body::Proposals(event) => crate::proposals::touched_keys(scope, event),
        Body::Alerts(_) => crate::alerts::touched_keys(scope),
        Body::Heartbeat(event) => crate::heartbeat::touched_keys(scope, event),
    };
    if let Some(idem) = &event.content.idem_key {
        keys.push(ViewKey::Idem { scope: scope.into(), key: idem.clone() });
    }
    keys
}

fn core_keys(scope: &str, core: &CoreEvent) -> Vec<ViewKey> {
    match core {
        CoreEvent::RecordPut { key, .. } => {
            vec![ViewKey::Record { scope: scope.into(), key: key.clone() }]
        }
        CoreEvent::ItemPushed { .. }
        | CoreEvent::ItemClaimed { .. }
        | CoreEvent::ItemAcked { .. }
        | CoreEvent::ItemExtended { .. }
        | CoreEvent::ItemReleased { .. }
        | CoreEvent::ItemParked { .. }
        | CoreEvent::ItemRedriven { .. } => match core.queue_item() {
            Some((queue, item)) => vec![item_key(scope, queue, item), meta_key(scope, queue)],
            None => Vec::new(),
        },
        CoreEvent::CounterAdded { name, .. } => {
            vec![ViewKey::Counter { scope: scope.into(), name: name.clone() }]
        }
        CoreEvent::SetAdded { set, member } => vec![ViewKey::SetMember {
            scope: scope.into(),
            set: set.clone(),
            member: member.clone(),
        }],
        CoreEvent::ListAppended { list, .. } => {
            vec![ViewKey::List { scope: scope.into(), name: list.clone() }]
        }
    }
}

/// Applies one event to the views. Total: validation happened before the event was appended.
pub(crate) fn apply(views: &mut impl ViewAccess, event: &Event) {
    let scope = event.content.scope.as_str();
    match &event.content.body {
        Body::Core(core) => apply_core(views, scope, event.seq, core),
        Body::Signals(body) => crate::signals::apply(views, scope, event.seq, body),
        Body::Observer(body) => crate::observer::apply(views, scope, event.seq, body),
        Body::Feedback(fb) => crate::feedback::project::apply(views, scope, event.seq, fb),
        Body::Proposals(body) => crate::proposals::apply(views, scope, body),
        Body::Alerts(body) => crate::alerts::apply(views, scope, body),
        Body::Heartbeat(body) => crate::heartbeat::apply(views, scope, body),
    }
    if let Some(idem) = &event.content.idem_key {
        let key = ViewKey::Idem { scope: scope.into(), key: idem.clone() };
        let first_seq = match views.get(&key) {
            Some(ViewRow::Idem { first_seq, .. }) => *first_seq,
            _ => event.seq,
        };
        views.put(key, ViewRow::Idem { first_seq, last_seq: event.seq });
    }
}

fn apply_core(views: &mut impl ViewAccess, scope: &str, seq: u64, core: &CoreEvent) {
    match core {
        CoreEvent::RecordPut { key, value, rev } => views.put(
            ViewKey::Record { scope: scope.into(), key: key.clone() },
            ViewRow::Record { value: value.clone(), rev: *rev },
        ),
        CoreEvent::CounterAdded { name, value, .. } => views.put(
            ViewKey::Counter { scope: scope.into(), name: name.clone() },
            ViewRow::Counter { value: *value },
        ),
        CoreEvent::SetAdded { set, member } => views.put(
            ViewKey::SetMember { scope: scope.into(), set: set.clone(), member: member.clone() },
            ViewRow::SetMember { seq },
        ),
        CoreEvent::ListAppended { list, row, cap } => apply_list(views, scope, list, row, *cap),
        queue_event => apply_queue(views, scope, seq, queue_event),
    }
}

fn apply_list(views: &mut impl ViewAccess, scope: &str, list: &str, row: &str, cap: u32) {
    let key = ViewKey::List { scope: scope.into(), name: list.into() };
    let mut rows = match views.get(&key) {
        Some(ViewRow::List { rows }) => rows.clone(),
        _ => Vec::new(),
    };
    rows.push(row.to_owned());
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    if rows.len() > cap {
        rows.drain(..rows.len() - cap);
    }
    views.put(key, ViewRow::List { rows });
}

fn load_meta(views: &impl ViewAccess, key: &ViewKey) -> QueueMeta {
    match views.get(key) {
        Some(ViewRow::QueueMeta(meta)) => meta.clone(),
        _ => QueueMeta::default(),
    }
}

fn load_item(views: &impl ViewAccess, key: &ViewKey) -> Option<Item> {
    match views.get(key) {
        Some(ViewRow::Item(item)) => Some(item.clone()),
        _ => None,
    }
}

fn count(meta: &mut QueueMeta, state: ItemState, up: bool) {
    let slot = match state {
        ItemState::Ready => &mut meta.ready,
        ItemState::Claimed => &mut meta.claimed,
        ItemState::Parked => &mut meta.parked,
    };
    *slot = if up { *slot + 1 } else { slot.saturating_sub(1) };
}

fn apply_queue(views: &mut impl ViewAccess, scope: &str, seq: u64, event: &CoreEvent) {
    let Some((queue, item_id)) = event.queue_item() else {
        return;
    };
    let ikey = item_key(scope, queue, item_id);
    let mkey = meta_key(scope, queue);
    let mut meta = load_meta(views, &mkey);
    let before = load_item(views, &ikey);
    if let Some(old) = &before {
        count(&mut meta, old.state, false);
    }
    let after = next_item(before, seq, event, &mut meta);
    match &after {
        Some(item) => {
            count(&mut meta, item.state, true);
            views.put(ikey, ViewRow::Item(item.clone()));
        }
        None => views.delete(&ikey),
    }
    views.put(mkey, ViewRow::QueueMeta(meta));
}

fn next_item(
    before: Option<Item>,
    seq: u64,
    event: &CoreEvent,
    meta: &mut QueueMeta,
) -> Option<Item> {
    if let CoreEvent::ItemPushed { payload, for_session, max_deliveries, .. } = event {
        return Some(Item {
            payload: payload.clone(),
            for_session: for_session.clone(),
            max_deliveries: *max_deliveries,
            state: ItemState::Ready,
            deliveries: 0,
            token: 0,
            holder: None,
            holder_session: None,
            lease_until_ms: 0,
            pushed_seq: seq,
        });
    }
    let mut item = before?;
    match event {
        CoreEvent::ItemClaimed { holder, session, token, lease_until_ms, delivery, .. } => {
            meta.epoch = meta.epoch.max(*token);
            item.state = ItemState::Claimed;
            item.token = *token;
            item.holder = Some(holder.clone());
            item.holder_session.clone_from(session);
            item.lease_until_ms = *lease_until_ms;
            item.deliveries = *delivery;
        }
        CoreEvent::ItemAcked { .. } => {
            meta.acked += 1;
            return None;
        }
        CoreEvent::ItemExtended { lease_until_ms, .. } => item.lease_until_ms = *lease_until_ms,
        CoreEvent::ItemReleased { .. } => {
            item.state = ItemState::Ready;
            item.lease_until_ms = 0;
        }
        CoreEvent::ItemParked { .. } => {
            item.state = ItemState::Parked;
            item.lease_until_ms = 0;
        }
        CoreEvent::ItemRedriven { .. } => {
            item.state = ItemState::Ready;
            item.deliveries = 0;
        }
        _ => {}
    }
    Some(item)
}
