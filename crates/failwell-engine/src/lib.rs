//! failwell's engine: the effects that carry out the policy decisions.
//!
//! The [`relay`] claims outbox messages and calls providers through a
//! [`client::ProviderClient`]; the [`reconciler`] resolves operations whose
//! outcome is unknown by asking the provider; the [`forwarder`] delivers
//! received webhook events to the application; [`compare`] lists the
//! provider's records for a time window and stores what disagrees with ours,
//! and [`alerts`] runs those comparisons on their schedule and tells an
//! alert sink what an operator must see. All are generic over
//! [`failwell_store::Store`] and take every decision from
//! `failwell-policy`: this crate holds no retry or classification rule of its
//! own, and it knows no SQL and no HTTP server.

pub mod alerts;
pub mod client;
pub mod clock;
pub mod compare;
#[cfg(test)]
mod fixtures;
pub mod forwarder;
pub mod provider;
mod pump;
pub mod reconciler;
pub mod relay;
pub mod retention;
pub mod schedule;

use std::sync::Arc;
use std::time::Duration;

pub use alerts::{
    AgeAlert, AlertSink, SinkRefusal, compare_and_alert, deliver, run_schedule, send_queued, watch_age,
};
pub use client::{CallRequest, CallResult, ClientError, Guards, ProviderClient, Providers};
pub use clock::now_ms;
pub use compare::{CompareError, Compared, ListError, compare};
pub use forwarder::{ForwardTarget, ForwardTargets, Forwarder};
pub use provider::{
    ClusterRule, CompareSpec, Encoding, LookupSpec, OperationSpec, PauseRule, PauseWhen, ProviderSpec,
    TimeUnit,
};
pub use pump::RelayConfig;
pub use reconciler::{Reconciler, ReconcilerConfig};
pub use relay::Relay;
pub use retention::RetentionConfig;
pub use schedule::{Schedule, ScheduleError};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The time from `at_ms` to `now_ms` (ms since the Unix epoch): zero when
/// `at_ms` is later, and saturating, so a damaged stored time (say
/// `i64::MIN`) reads as a very long time ago instead of overflowing.
pub fn since(now_ms: i64, at_ms: i64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(at_ms).max(0) as u64)
}

/// The running relay, reconciler and forwarder of one failwell process.
#[derive(Debug)]
pub struct Engine {
    wake: Arc<Notify>,
    forward: Arc<Notify>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the relay and the reconciler on `store` for `providers`, the
    /// forwarder for `forwards` (with its own `forwarder` settings), and
    /// retention of delivered messages when `retention` is given.
    pub fn start<S: failwell_store::Store>(
        store: S,
        providers: Arc<Providers>,
        forwards: Arc<ForwardTargets>,
        relay: RelayConfig,
        forwarder: RelayConfig,
        reconciler: ReconcilerConfig,
        retention: Option<RetentionConfig>,
    ) -> Self {
        let (wake, forward) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let shutdown = CancellationToken::new();
        let forwarder = Forwarder::new(store.clone(), forwards, forwarder, forward.clone());
        let relay = Relay::new(store.clone(), providers.clone(), relay, wake.clone());
        let mut tasks = Vec::with_capacity(4);
        if let Some(retention) = retention {
            tasks.push(tokio::spawn(retention::run(store.clone(), retention, shutdown.clone())));
        }
        let reconciler = Reconciler::new(store, providers, reconciler);
        tasks.extend([
            tokio::spawn(relay.run(shutdown.clone())),
            tokio::spawn(reconciler.run(shutdown.clone())),
            tokio::spawn(forwarder.run(shutdown.clone())),
        ]);
        Self { wake, forward, shutdown, tasks }
    }

    /// Tells the relay that new messages are waiting (it also polls).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A handle for waking the relay from elsewhere (the HTTP API).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// A handle for waking the forwarder when events were stored (it also
    /// polls).
    pub fn forward_waker(&self) -> Arc<Notify> {
        self.forward.clone()
    }

    /// Stops claiming, lets attempts in flight finish and record their
    /// results, and returns when all three loops have ended.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "engine task ended abnormally");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn since_reads_a_damaged_time_as_long_ago_and_a_later_one_as_now() {
        assert_eq!(super::since(5_000, 2_000), Duration::from_secs(3));
        assert_eq!(super::since(5_000, 9_000), Duration::ZERO);
        assert_eq!(super::since(5_000, i64::MIN), Duration::from_millis(i64::MAX as u64));
        assert_eq!(super::since(i64::MIN, i64::MAX), Duration::ZERO);
    }
}
