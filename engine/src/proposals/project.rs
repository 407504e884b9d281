//! The proposals projection: the queue document, MP sequence counters, PROP documents, the
//! index and the ledger-derived marks, through the queue half's and the PROP half's functions.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{Map, Value};

use super::micro;
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The proposals domain's projection.
pub(crate) struct ProposalsProjection;

impl Projection for ProposalsProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Proposals(body) => micro::touched_keys(&event.content.scope, body),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Proposals(body) = &event.content.body {
            micro::apply(views, &event.content.scope, body);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Proposals(event) => micro::render(event),
            _ => Map::new(),
        }
    }
}
