//! failwell's engine: the effects that carry out the policy decisions.
//!
//! The [`relay`] claims outbox messages and calls providers through a
//! [`client::ProviderClient`]; the [`reconciler`] resolves operations whose
//! outcome is unknown by asking the provider; the [`forwarder`] delivers
//! received webhook events to the application; [`compare`] lists the
//! provider's records for a time window and stores what disagrees with ours,
//! and [`alerts`] runs those comparisons on their schedule and tells an
//! alert sink what an operator must see; [`ledger`] applies the balance
//! ledger's transfers in group commits and ends holds whose time has
//! come. All are generic over
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
mod ingest;
pub mod ledger;
pub mod provider;
mod pump;
pub mod reads;
pub mod reconciler;
pub mod relay;
pub mod retention;
pub mod schedule;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

pub use alerts::{
    AgeAlert, AlertSink, SinkRefusal, compare_and_alert, deliver, run_schedule, send_queued, watch_age,
};
pub use client::{CallRequest, CallResult, ClientError, Guards, ProviderClient, ProviderSpecs, Providers};
pub use clock::now_ms;
pub use compare::{CompareError, Compared, ListError, compare};
pub use forwarder::{ForwardSpec, ForwardSpecs, ForwardTarget, ForwardTargets, Forwarder};
pub use ingest::{INGEST_LINGER, Ingest};
pub use ledger::Transfers;
pub use provider::{
    ClusterRule, CompareSpec, Encoding, LookupSpec, OperationSpec, PauseRule, PauseWhen, ProviderSpec,
    TimeUnit,
};
pub use pump::PumpConfig;
pub use reads::ReadCache;
pub use reconciler::{Reconciler, ReconcilerConfig};
pub use relay::Relay;
pub use retention::RetentionConfig;
pub use schedule::{Schedule, ScheduleError};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
pub use webhooks::{LedgerMapping, WebhookSource, Webhooks};

/// The time from `at_ms` to `now_ms` (ms since the Unix epoch): zero when
/// `at_ms` is later, and saturating, so a damaged stored time (say
/// `i64::MIN`) reads as a very long time ago instead of overflowing.
pub fn since(now_ms: i64, at_ms: i64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(at_ms).max(0) as u64)
}

/// `[alerts]`: where alerts go, and when the oldest open entry raises one.
#[derive(Clone, Debug)]
pub struct Alerts {
    /// The sink (a generic JSON or Slack incoming webhook).
    pub sink: AlertSink,
    /// The oldest-open-entry rule (`None`: off).
    pub age: Option<AgeAlert>,
}

/// What one process's engine runs: the clients and targets, and the
/// settings of each background task.
#[derive(Debug)]
pub struct EngineConfig {
    /// The providers' clients (the relay's, the reconciler's and the
    /// comparisons').
    pub providers: Arc<Providers>,
    /// Where events are forwarded.
    pub forwards: Arc<ForwardTargets>,
    /// The relay's settings.
    pub relay: PumpConfig,
    /// The forwarder's settings.
    pub forwarder: PumpConfig,
    /// The reconciler's settings.
    pub reconciler: ReconcilerConfig,
    /// Retention of delivered messages (`None`: kept).
    pub retention: Option<RetentionConfig>,
    /// Alerts (`None`: none are sent; comparisons still run on schedule).
    pub alerts: Option<Alerts>,
}

/// The background work of one failwell process, all started here: the
/// relay, the reconciler, the forwarder, retention, the comparison
/// schedule, the alert sender and the oldest-entry watch, the webhook
/// group commit ([`Ingest`]), the ledger's group commit ([`Transfers`]) and
/// its hold sweep ([`ledger::sweep`]), and on PostgreSQL the listener that
/// wakes the relay on new messages.
#[derive(Debug)]
pub struct Engine {
    wake: Arc<Notify>,
    forward: Arc<Notify>,
    ingest: Ingest,
    transfers: Transfers,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts every background task on `store` with `config`.
    pub fn start(store: failwell_store::Store, config: EngineConfig) -> Self {
        let EngineConfig { providers, forwards, relay, forwarder, reconciler, retention, alerts } = config;
        let (wake, forward) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::with_capacity(9);
        let forwarder = Forwarder::new(store.clone(), forwards, forwarder, forward.clone());
        let relay = Relay::new(store.clone(), providers.clone(), relay, wake.clone());
        if let Some(retention) = retention {
            tasks.push(tokio::spawn(retention::run(store.clone(), retention, shutdown.clone())));
        }
        let reconciler = Reconciler::new(store.clone(), providers.clone(), reconciler);
        tasks.extend([
            tokio::spawn(relay.run(shutdown.clone())),
            tokio::spawn(reconciler.run(shutdown.clone())),
            tokio::spawn(forwarder.run(shutdown.clone())),
        ]);
        let sink = alerts.as_ref().map(|a| a.sink.clone());
        tasks.push(tokio::spawn(ledger::sweep(store.clone(), shutdown.clone())));
        tasks.push(tokio::spawn(run_schedule(store.clone(), providers.clone(), sink, shutdown.clone())));
        if let Some(alerts) = alerts {
            tasks.push(tokio::spawn(send_queued(store.clone(), alerts.sink.clone(), shutdown.clone())));
            if let Some(age) = alerts.age {
                let known = providers.keys().cloned().collect();
                tasks.push(tokio::spawn(watch_age(store.clone(), known, age, alerts.sink, shutdown.clone())));
            }
        }
        if let Some(postgres) = store.backend::<failwell_store::PostgresStore>() {
            tasks.push(tokio::spawn(wake_on_new_messages(postgres.clone(), wake.clone(), shutdown.clone())));
        }
        let transfers = Transfers::start(store.clone());
        let ingest = Ingest::start(store);
        Self { wake, forward, ingest, transfers, shutdown, tasks }
    }

    /// The group commit that stores webhook events.
    pub fn ingest(&self) -> Ingest {
        self.ingest.clone()
    }

    /// The group commit that applies single ledger transfers.
    pub fn transfers(&self) -> Transfers {
        self.transfers.clone()
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
    /// results, and returns when every task has ended (the webhook and
    /// ledger group commits end once their last handles are dropped).
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "engine task ended abnormally");
            }
        }
    }
}

/// Wakes the relay whenever a commit enqueued messages in the PostgreSQL
/// store, from this process or any other (an application's own
/// transaction included), until `stop`. Without the notices (PostgreSQL
/// unreachable), the relay still polls; the listener is opened again every
/// second.
async fn wake_on_new_messages(
    store: failwell_store::PostgresStore,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    loop {
        match store.new_messages().await {
            Ok(mut notices) => loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    notice = notices.next() => match notice {
                        Ok(()) => wake.notify_one(),
                        Err(e) => {
                            tracing::warn!(error = %e, "notices of new messages stopped; polling meanwhile");
                            break;
                        }
                    },
                }
            },
            Err(e) => tracing::warn!(error = %e, "cannot listen for new messages; polling meanwhile"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// An error with its causes, `outer: inner: …`: a store error's message
/// names what failwell was doing, its cause what the database said; a
/// reqwest error's message names no cause (e.g. a timeout). A cause whose
/// text the message already ends with (sqlx's database errors repeat
/// theirs) is written once.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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

    /// An error that says `text`, caused by `source`.
    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Said {
        text: &'static str,
        #[source]
        source: Option<Box<Said>>,
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let said = |text, source: Option<Said>| Said { text, source: source.map(Box::new) };
        let database = said("1045 (28000): Access denied", None);
        let repeated = said("error returned from database: 1045 (28000): Access denied", Some(database));
        let error = said("connecting to MySQL", Some(repeated));
        assert_eq!(
            super::chain(&error),
            "connecting to MySQL: error returned from database: 1045 (28000): Access denied"
        );
    }
}
