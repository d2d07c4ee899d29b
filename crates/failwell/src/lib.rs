//! The `failwell` gateway: configuration, the HTTP API, and the process
//! that runs them beside the relay and the reconciler ([`Server`]), plus the
//! side-by-side demo.
//!
//! This crate wires the library crates together; it holds no delivery or
//! policy logic of its own. `main.rs` is a thin CLI over it, so tests start
//! the same [`Server`] on an ephemeral port.

pub mod check;
pub mod cli;
pub mod config;
pub mod demo;
pub mod http;
pub mod ops;
pub mod store;
pub mod telemetry;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

use failwell_cluster::Cluster;
use failwell_engine::{
    Engine, EngineConfig, ForwardSpecs, ForwardTargets, ProviderClient, ProviderSpecs, Providers,
};
use failwell_policy::Bulkhead;
use failwell_store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Why [`Server::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database could not be opened or migrated.
    #[error("cannot open the store")]
    Store(#[from] StoreError),
    /// The listener has no local address.
    #[error("cannot read the listener's address")]
    Listener(#[source] std::io::Error),
    /// The API's limits are invalid.
    #[error("invalid API limits")]
    Limits(#[source] failwell_policy::BulkheadConfigError),
    /// The shared breakers could not be set up.
    #[error("cannot set up the shared breakers")]
    Cluster(#[source] failwell_engine::ClientError),
}

/// Every provider's client, built once from its spec, and the forward
/// targets on them. With a `cluster`, each breaker's state is in the
/// cluster's store under the provider's name, tripped by the provider's
/// [`failwell_engine::ClusterRule`], and each adaptive rate is cut when
/// another process cuts its own; without one, each breaker is this
/// process's own. Errors: a client cannot be built (its HTTP client, or
/// its shared breaker).
pub fn clients(
    specs: &ProviderSpecs,
    forwards: &ForwardSpecs,
    cluster: Option<&Cluster>,
) -> Result<(Providers, ForwardTargets), failwell_engine::ClientError> {
    let mut providers = Providers::new();
    for (name, spec) in specs {
        let client = match cluster {
            None => ProviderClient::new(spec.clone())?,
            Some(cluster) => {
                let rule = spec.cluster_rule;
                ProviderClient::with_breaker_store(spec.clone(), |name, config, throttle| {
                    let store = cluster
                        .breaker(name, config, rule.failures, rule.window)
                        .map_err(|e| failwell_engine::ClientError::Store(Box::new(e)))?;
                    if let Some(throttle) = throttle {
                        store.follow(throttle.clone());
                    }
                    Ok(failwell_policy::DynStore::new(store))
                })?
            }
        };
        providers.insert(name.clone(), client);
    }
    // Validation made sure each forward's provider is configured.
    let forwards =
        forwards.iter().filter_map(|(name, f)| Some((name.clone(), f.target(&providers)?))).collect();
    Ok((providers, forwards))
}

/// The process's Prometheus recorder, installed on the first call; `None`
/// (and a warning) when another recorder was installed first. Call it
/// before loading a configuration: metric handles created before a recorder
/// exists (the providers' breaker, bulkhead and budget counters are created
/// with their clients) never report.
pub fn prometheus() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| match metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder() {
            Ok(handle) => {
                telemetry::describe();
                Some(handle)
            }
            Err(e) => {
                tracing::warn!(error = %e, "GET /metrics is unavailable: a metrics recorder was already installed");
                None
            }
        })
        .clone()
}

/// A running failwell: store, relay, reconciler and HTTP API.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    store: Store,
    providers: Arc<Providers>,
    engine: Engine,
    /// Keeps the shared breakers' driver running.
    cluster: Option<Cluster>,
    http: JoinHandle<std::io::Result<()>>,
    stop_http: CancellationToken,
}

impl Server {
    /// Opens the store (applying migrations), starts the relay and the
    /// reconciler, and serves the API on `listener`. Errors: the database
    /// cannot be opened or migrated.
    pub async fn start(config: Config, listener: TcpListener) -> Result<Self, StartError> {
        let addr = listener.local_addr().map_err(StartError::Listener)?;
        let store = Store::open(&config.database_url, config.store_options()).await?;
        let report = crate::store::StoreReport::inspect(&config.database_url).await?;
        tracing::info!(
            store = %report.store(),
            state = %report.state(),
            application_needs = %report.application_needs,
            failwell_needs = %report.failwell_needs,
            "store opened"
        );
        let cluster = match config.cluster {
            Some(cluster_config) => {
                let cluster = Cluster::start(cluster_config)
                    .map_err(|e| StartError::Cluster(failwell_engine::ClientError::Store(Box::new(e))))?;
                tracing::info!(
                    store = cluster.store(),
                    owner = cluster.owner(),
                    "breakers shared with the cluster"
                );
                Some(cluster)
            }
            None => None,
        };
        let (providers, forwards) =
            clients(&config.providers, &config.forwards, cluster.as_ref()).map_err(StartError::Cluster)?;
        let (providers, forwards) = (Arc::new(providers), Arc::new(forwards));
        telemetry::start_at_zero(
            providers.iter().map(|(name, client)| (name.as_str(), client.guards().breaker.is_some())),
            config.webhooks.iter().map(|(name, source)| (name.as_str(), source.forward)),
        );
        let admin = http::AdminState {
            token: config.admin_token,
            alerts: config.alerts.as_ref().map(|a| a.sink.clone()),
            stats_window: config.stats_window,
        };
        let engine = Engine::start(
            store.clone(),
            EngineConfig {
                providers: providers.clone(),
                forwards,
                relay: config.relay,
                forwarder: config.forwarder,
                reconciler: config.reconciler,
                retention: config.retention,
                alerts: config.alerts,
            },
        );
        let state = Arc::new(http::AppState {
            store: store.clone(),
            providers,
            wake: engine.waker(),
            webhooks: config.webhooks,
            forward: engine.forward_waker(),
            reads: Default::default(),
            metrics: prometheus(),
            ingest: engine.ingest(),
            transfers: engine.transfers(),
            admin,
        });
        let bulkhead = Bulkhead::new("api", config.api.bulkhead).map_err(StartError::Limits)?;
        let providers = state.providers.clone();
        let app = http::router(state, config.max_body_bytes, bulkhead, config.api.request_timeout);
        let stop_http = CancellationToken::new();
        let stop = stop_http.clone();
        let http = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await
        });
        tracing::info!(%addr, "failwell is serving");
        Ok(Self { addr, store, providers, engine, cluster, http, stop_http })
    }

    /// The API's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store, for an application that writes its own rows and outbox
    /// messages in one transaction ([`failwell_store::Outbox::enqueue`]).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The providers' clients, with their breakers, bulkheads, retry
    /// budgets and adaptive rates.
    pub fn providers(&self) -> &Providers {
        &self.providers
    }

    /// Wakes the relay after messages were enqueued directly.
    pub fn wake(&self) {
        self.engine.wake();
    }

    /// Stops the API, lets attempts in flight finish and be recorded, and
    /// closes the store.
    pub async fn shutdown(self) {
        self.stop_http.cancel();
        match self.http.await {
            Ok(Err(e)) => tracing::error!(error = %e, "HTTP server failed"),
            Err(e) => tracing::error!(error = %e, "HTTP server task ended abnormally"),
            Ok(Ok(())) => {}
        }
        self.engine.shutdown().await;
        drop(self.cluster);
        self.store.close().await;
    }
}
