//! The core primitives' projection: records, queue items and their counts, counters, set
//! members and capped lists.
//!
//! Pure: no IO, no clock, no failure. Does not decide anything; `rules.rs` does.

use hookstate_schema::{Body, CoreEvent, Event, Item, ItemState, QueueMeta, ViewKey, ViewRow};
use serde_json::{Map, Value};

use super::index;
use crate::kernel::doc::put_doc;
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The core primitives' projection.
pub(crate) struct CoreProjection;

impl Projection for CoreProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Core(core) => core_keys(&event.content.scope, core),
            _ => Vec::new(),
        }
    }

    fn derived_keys(&self, event: &Event, views: &dyn ViewAccess) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Core(core) => index_keys(views, &event.content.scope, event.seq, core),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Core(core) = &event.content.body {
            apply_core(views, &event.content.scope, event.seq, core);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Core(core) => super::rules::render(core),
            _ => Map::new(),
        }
    }
}

fn item_key(scope: &str, queue: &str, item: &str) -> ViewKey {
    ViewKey::Item { scope: scope.into(), queue: queue.into(), item: item.into() }
}

fn meta_key(scope: &str, queue: &str) -> ViewKey {
    ViewKey::QueueMeta { scope: scope.into(), queue: queue.into() }
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

/// The queue index rows an item event moves: the item's row before and after the event.
fn index_keys(views: &dyn ViewAccess, scope: &str, seq: u64, core: &CoreEvent) -> Vec<ViewKey> {
    let Some((queue, item_id)) = core.queue_item() else {
        return Vec::new();
    };
    let before = load_item(views, &item_key(scope, queue, item_id));
    let mut meta = load_meta(views, &meta_key(scope, queue));
    let old = before.as_ref().and_then(|item| index::index_key(scope, queue, item));
    let new = next_item(before, seq, core, &mut meta)
        .and_then(|item| index::index_key(scope, queue, &item));
    old.into_iter().chain(new).collect()
}

fn apply_core(views: &mut dyn ViewAccess, scope: &str, seq: u64, core: &CoreEvent) {
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

fn apply_list(views: &mut dyn ViewAccess, scope: &str, list: &str, row: &str, cap: u32) {
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

fn load_meta(views: &dyn ViewAccess, key: &ViewKey) -> QueueMeta {
    match views.get(key) {
        Some(ViewRow::QueueMeta(meta)) => meta.clone(),
        _ => QueueMeta::default(),
    }
}

fn load_item(views: &dyn ViewAccess, key: &ViewKey) -> Option<Item> {
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

fn apply_queue(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &CoreEvent) {
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
    let old_index = before.as_ref().and_then(|item| index::index_key(scope, queue, item));
    let after = next_item(before, seq, event, &mut meta);
    let new_index = after.as_ref().and_then(|item| index::index_key(scope, queue, item));
    if let Some(key) = old_index.filter(|key| new_index.as_ref() != Some(key)) {
        views.delete(&key);
    }
    match &after {
        Some(item) => {
            count(&mut meta, item.state, true);
            views.put(ikey, ViewRow::Item(item.clone()));
        }
        None => views.delete(&ikey),
    }
    if let (Some(key), Some(item)) = (new_index, &after) {
        put_doc(views, key, &index::Entry::of(item_id, item));
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
