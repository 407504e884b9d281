//! The `alerts` domain (claude-code-hermit's heartbeat state): the alert ladder of
//! `state/alert-state.json` with precheck's tick counter ([`ladder`]), and the heartbeat half
//! ([`heartbeat`], pure rules in [`heartbeat_rules`]): budget alerts, the monitor's runtime
//! record, liveness, the injection alert, the next-task ack and runtime fields. Their legacy
//! layouts are `hermit-alerts` ([`layout_alerts`]) and `hermit-heartbeat`
//! ([`layout_heartbeat`]).
//!
//! Reads the proposals queue and PROP documents of the same scope (for the structured alert
//! keys) through the kernel's typed documents, never through the proposals domain.

pub mod heartbeat;
pub mod heartbeat_rules;
pub mod ladder;
pub mod layout_alerts;
pub mod layout_heartbeat;

use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{Map, Value};

use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;
use crate::kernel::write::Kernel;

pub use heartbeat_rules::{BudgetInput, MonitorSetup};

/// claude-code-hermit's heartbeat state on an open store: `engine.alerts()`.
#[derive(Clone, Copy)]
pub struct Alerts<'a> {
    k: &'a Kernel,
}

impl<'a> Alerts<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Alerts { k }
    }
}

/// The alerts domain's projection: the ladder's state and the heartbeat files.
pub(crate) struct AlertsProjection;

impl Projection for AlertsProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        let scope = &event.content.scope;
        match &event.content.body {
            Body::Alerts(_) => ladder::touched_keys(scope),
            Body::Heartbeat(body) => heartbeat::touched_keys(scope, body),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        let scope = &event.content.scope;
        match &event.content.body {
            Body::Alerts(body) => ladder::apply(views, scope, body),
            Body::Heartbeat(body) => heartbeat::apply(views, scope, body),
            _ => {}
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Alerts(event) => ladder::render(event),
            Body::Heartbeat(event) => heartbeat::render(event),
            _ => Map::new(),
        }
    }

    /// A heartbeat call rebuilds its verdict from all of its events.
    fn render_call(&self, bodies: &[&Body]) -> Map<String, Value> {
        let heartbeat: Vec<_> = bodies
            .iter()
            .filter_map(|b| match b {
                Body::Heartbeat(event) => Some(event),
                _ => None,
            })
            .collect();
        if !heartbeat.is_empty() && heartbeat.len() == bodies.len() {
            return heartbeat::render_call(&heartbeat);
        }
        bodies.last().map(|body| self.render(body)).unwrap_or_default()
    }
}
