//! What the HTTP handlers share ([`AppState`]).

use std::sync::Arc;
use std::time::Duration;

use failwell_engine::Providers;
use failwell_store::Store;
use tokio::sync::Notify;

/// What the HTTP handlers share.
#[derive(Debug)]
pub struct AppState {
    /// The store.
    pub store: Store,
    /// Configured providers, to refuse unknown ones at the door.
    pub providers: Arc<Providers>,
    /// Wakes the relay when an operation was recorded.
    pub wake: Arc<Notify>,
    /// Configured webhook sources.
    pub webhooks: Arc<failwell_engine::Webhooks>,
    /// Wakes the forwarder when a new event is to be forwarded.
    pub forward: Arc<tokio::sync::Notify>,
    /// The last-known-good answers of read operations.
    pub reads: failwell_engine::ReadCache,
    /// Renders the process's metrics (`None`: another recorder was
    /// installed first, e.g. by an embedding application).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The group commit that stores webhook events.
    pub ingest: failwell_engine::Ingest,
    /// The group commit that applies single ledger transfers.
    pub transfers: failwell_engine::Transfers,
    /// What the admin API and the dashboard need.
    pub admin: AdminState,
}

/// What the admin API, the dashboard and `GET /metrics` share.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// The bearer token (`None`: the admin API and the dashboard are off).
    pub token: Option<super::token::Token>,
    /// Where comparison reports with discrepancies go.
    pub alerts: Option<failwell_engine::AlertSink>,
    /// The window of the success rate and p95 latency.
    pub stats_window: Duration,
}
