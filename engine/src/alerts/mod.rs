//! The `alerts` domain (claude-code-hermit's heartbeat state): the alert ladder of
//! `state/alert-state.json` with precheck's tick counter (`tick_input.rs`, `ladder.rs`), and the
//! heartbeat half (`heartbeat.rs`, `heartbeat_rules.rs`): budget alerts, the monitor's runtime
//! record, liveness, the injection alert, the next-task ack and runtime fields. The handle is
//! `engine.alerts()` (`api.rs`, `monitor.rs`, with the settings of `config.rs`), the projection `project.rs`;
//! the legacy layouts `hermit-alerts` (`layout_alerts.rs`) and `hermit-heartbeat`
//! (`layout_heartbeat.rs`) are mirrored by the field merge of `merge.rs`.
//!
//! Reads the proposals queue and PROP documents of the same scope (for the structured alert
//! keys) through the kernel's typed documents, never through the proposals domain.

pub(crate) mod api;
pub(crate) mod config;
pub(crate) mod heartbeat;
pub(crate) mod heartbeat_rules;
pub(crate) mod ladder;
pub(crate) mod layout_alerts;
pub(crate) mod layout_heartbeat;
pub(crate) mod merge;
pub(crate) mod monitor;
pub(crate) mod project;
pub(crate) mod self_eval;
pub(crate) mod stale;
pub(crate) mod tick_input;

pub use api::{check_next_task, next_task_refused, tick_line, Alerts, TokenRead};
pub use config::HeartbeatConfig;
pub use heartbeat::parse_runtime_set;
pub use heartbeat::{FILE_BYTES_MAX, NEXT_TASK_FILE, STATE_FILES};
pub use heartbeat_rules::{
    check_budget, check_hash, check_stamp, check_time, BudgetInput, MonitorSetup,
};
pub use heartbeat_rules::{monitor_command, period_key, LIVENESS_WAIT_MS_MAX};
pub use layout_alerts::ALERT_STATE_FILE;
pub use layout_alerts::{alert_state_read_failure, read_hermit_alerts, AlertFile};
pub use layout_heartbeat::{read_heartbeat_files, HeartbeatFiles};
pub use monitor::{
    check_liveness_wait, monitor_setup, InjectionRead, LivenessRead, MonitorArgs, MonitorStatus,
};
pub use tick_input::{parse_tick_input, Rejection, TickInput};
