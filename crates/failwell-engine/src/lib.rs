//! failwell's engine: the effects that carry out the policy decisions.
//!
//! The [`relay`] claims outbox messages and calls providers through a
//! [`client::ProviderClient`]; the [`reconciler`] resolves operations whose
//! outcome is unknown by asking the provider. Both are generic over
//! [`failwell_store::Store`] and take every decision from
//! `failwell-policy`: this crate holds no retry or classification rule of its
//! own, and it knows no SQL and no HTTP server.

pub mod client;
#[cfg(test)]
mod fixtures;
pub mod provider;
pub mod reconciler;
pub mod relay;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use client::{CallRequest, CallResult, ClientError, Guards, ProviderClient};
pub use provider::{Encoding, LookupSpec, OperationSpec, ProviderSpec, Providers};
pub use reconciler::{Reconciler, ReconcilerConfig};
pub use relay::{Relay, RelayConfig};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Milliseconds since the Unix epoch: the one clock read of the engine.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The running relay and reconciler of one failwell process.
#[derive(Debug)]
pub struct Engine {
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the relay and the reconciler on `store` for `providers`.
    pub fn start<S: failwell_store::Store>(
        store: S,
        providers: Arc<Providers>,
        relay: RelayConfig,
        reconciler: ReconcilerConfig,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let relay = Relay::new(store.clone(), providers.clone(), relay, wake.clone());
        let reconciler = Reconciler::new(store, providers, reconciler);
        let tasks =
            vec![tokio::spawn(relay.run(shutdown.clone())), tokio::spawn(reconciler.run(shutdown.clone()))];
        Self { wake, shutdown, tasks }
    }

    /// Tells the relay that new messages are waiting (it also polls).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A handle for waking the relay from elsewhere (the HTTP API).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Stops claiming, lets attempts in flight finish and record their
    /// results, and returns when both loops have ended.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "engine task ended abnormally");
            }
        }
    }
}
