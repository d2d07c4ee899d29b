//! Circuit breakers and provider pauses shared by every failwell process of
//! a cluster, without a network round trip on the hot path.
//!
//! A [`Cluster`] connects one process to a shared store — Redis (Lua
//! scripts for atomic transitions, pub/sub for propagation) or PostgreSQL
//! (row-locking transactions, `LISTEN/NOTIFY`) — and hands out
//! [`SharedBreaker`]s, each a [`failwell_policy::BreakerStore`] that answers
//! calls from a local view ([`view`] explains the rules):
//!
//! - while closed and healthy a call costs one atomic load, no round trip;
//! - failures are reported as they happen, and from the first one every
//!   process sends one call at a time, so a dead provider gets at most the
//!   threshold plus about one call per process before every process has the
//!   breaker open;
//! - one process in the whole cluster wins the half-open probe lease per
//!   open period; its result closes or reopens the breaker everywhere;
//! - a provider pause (persistent throttling's `Retry-After`, a configured
//!   pause) stops every process;
//! - a cut of a provider's sending rate after throttling is passed on, and
//!   every other process cuts its own rate ([`SharedBreaker::follow`]);
//! - every process reads every record again each `resync` (default 1 s), so
//!   a lost message is repaired;
//! - when the store cannot be reached (an error, or no answer within
//!   `timeout`), every view falls back to an in-process breaker
//!   (**degraded mode**: logged, and `failwell_cluster_degraded` is 1) and
//!   the driver tries again each `resync`; calls never wait for the store.
//!
//! The transitions are [`record::Record::apply`]; the Redis script
//! `breaker.lua` is the same function for Redis (a test compares them).

mod postgres;
pub mod record;
mod redis;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use failwell_policy::{BreakerConfig, BreakerConfigError};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use record::{Event, Phase, ProbeResult, Record, Rules, Snapshot};
pub use view::SharedBreaker;

use postgres::PostgresBackend;
use redis::RedisBackend;
use view::View;

/// Where the shared state lives and how the process talks to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `redis://…`, `postgres://…` or `postgresql://…`, over plain TCP
    /// (TLS is not built in: keep the store on a private network).
    pub url: String,
    /// Separates clusters that share one Redis or database (a key prefix,
    /// a column). Default `failwell`.
    pub namespace: String,
    /// The longest wait for the store on one operation; past it the
    /// process runs degraded. Default 1 s.
    pub timeout: Duration,
    /// How often every record is read again (and, while degraded, how
    /// often the store is tried). Default 1 s.
    pub resync: Duration,
}

impl ClusterConfig {
    /// A configuration for `url` with the defaults.
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            namespace: "failwell".to_owned(),
            timeout: Duration::from_secs(1),
            resync: Duration::from_secs(1),
        }
    }
}

/// Why a cluster could not be set up or a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The URL's scheme is not one of the supported stores (only the
    /// scheme is shown: the URL may hold a password).
    #[error("unsupported cluster URL scheme {0}: use redis://, postgres:// or postgresql://")]
    Scheme(String),
    /// The URL could not be parsed (the URL itself is not shown).
    #[error("invalid cluster URL: {0}")]
    Url(String),
    /// Two breakers with one name in one cluster.
    #[error("a shared breaker named {0:?} already exists in this cluster")]
    Duplicate(String),
    /// Invalid breaker rules.
    #[error(transparent)]
    Breaker(#[from] BreakerConfigError),
    /// Redis failed or could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] ::redis::RedisError),
    /// PostgreSQL failed or could not be reached.
    #[error("postgres: {0}")]
    Postgres(#[from] sqlx::Error),
    /// The store answered something that is not a snapshot.
    #[error("unreadable snapshot from the store: {0}")]
    Snapshot(#[from] serde_json::Error),
    /// The subscription's connection was lost.
    #[error("the subscription connection was lost")]
    Lost,
    /// No answer within the configured timeout.
    #[error("no answer within {0} ms")]
    Timeout(u128),
}

impl ClusterError {
    /// Whether the store could not be reached or did not answer (the
    /// process runs degraded), rather than answering with an error about
    /// one record.
    pub fn unreachable(&self) -> bool {
        match self {
            Self::Redis(e) => {
                e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
            }
            Self::Postgres(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Protocol(_)
            ),
            Self::Timeout(_) | Self::Lost => true,
            Self::Scheme(_) | Self::Url(_) | Self::Duplicate(_) | Self::Breaker(_) | Self::Snapshot(_) => {
                false
            }
        }
    }
}

pub(crate) fn parse_snapshot(bytes: &[u8]) -> Result<Snapshot, ClusterError> {
    Ok(serde_json::from_slice(bytes)?)
}

/// What a view asks of the driver: apply `event` to the view's record and
/// take in the answer.
pub(crate) struct Command {
    pub(crate) view: Arc<View>,
    pub(crate) event: Event,
}

enum Backend {
    Redis(Box<RedisBackend>),
    Postgres(PostgresBackend),
}

impl Backend {
    fn new(config: &ClusterConfig) -> Result<Self, ClusterError> {
        let url = config.url.as_str();
        match scheme(url) {
            "redis" => Ok(Self::Redis(Box::new(RedisBackend::new(url, &config.namespace, config.timeout)?))),
            "postgres" | "postgresql" => {
                Ok(Self::Postgres(PostgresBackend::new(url, &config.namespace, config.timeout)?))
            }
            _ => Err(ClusterError::Scheme(shown_scheme(url))),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Redis(_) => "redis",
            Self::Postgres(_) => "postgres",
        }
    }

    async fn apply(
        &mut self,
        name: &str,
        rules: &Rules,
        event: &Event,
        now: Option<i64>,
    ) -> Result<Snapshot, ClusterError> {
        match self {
            Self::Redis(b) => b.apply(name, rules, event, now).await,
            Self::Postgres(b) => b.apply(name, rules, event, now).await,
        }
    }

    async fn subscribe(&self) -> Result<BoxStream<'static, Snapshot>, ClusterError> {
        match self {
            Self::Redis(b) => b.subscribe().await,
            Self::Postgres(b) => b.subscribe().await,
        }
    }
}

fn scheme(url: &str) -> &str {
    url.split_once("://").map(|(s, _)| s).unwrap_or_default()
}

/// The scheme of `url` for an error message; the rest of a URL (which may
/// hold a password) is never shown.
fn shown_scheme(url: &str) -> String {
    match scheme(url) {
        s if !s.is_empty()
            && s.len() <= 20
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("{s:?}")
        }
        _ => "none (expected SCHEME://…)".to_owned(),
    }
}

/// One process's connection to the shared store: hands out
/// [`SharedBreaker`]s and runs the driver task that talks to the store
/// (see the crate docs). Dropping it stops the driver; the breakers then
/// stay degraded.
pub struct Cluster {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    task: JoinHandle<()>,
}

struct Shared {
    owner: Arc<str>,
    kind: &'static str,
    views: RwLock<HashMap<Arc<str>, Arc<View>>>,
    degraded: AtomicBool,
    /// The store has answered at least once.
    reached: AtomicBool,
    /// Running degraded has been logged (reset when the store answers).
    warned: AtomicBool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("store", &self.shared.kind)
            .field("owner", &self.shared.owner)
            .field("degraded", &self.degraded())
            .finish()
    }
}

impl Cluster {
    /// Checks `config` and starts the driver (needs a Tokio runtime). Does
    /// not wait for the store: until the first read succeeds the breakers
    /// answer from their in-process fallback. Errors: an unsupported or
    /// unparsable URL.
    pub fn start(config: ClusterConfig) -> Result<Self, ClusterError> {
        let backend = Backend::new(&config)?;
        let shared = Arc::new(Shared {
            owner: Arc::from(uuid::Uuid::new_v4().to_string()),
            kind: backend.kind(),
            views: RwLock::default(),
            degraded: AtomicBool::new(true),
            reached: AtomicBool::new(false),
            warned: AtomicBool::new(false),
        });
        metrics::gauge!("failwell_cluster_degraded", "store" => shared.kind).set(1.0);
        let (commands, receiver) = mpsc::channel(4096);
        let task = tokio::spawn(drive(backend, shared.clone(), receiver, config));
        Ok(Self { shared, commands, task })
    }

    /// Checks that `url` names a supported store and parses, without
    /// connecting. Errors as [`start`](Self::start).
    pub fn check_url(url: &str) -> Result<(), ClusterError> {
        match scheme(url) {
            "redis" => ::redis::Client::open(url).map(|_| ()).map_err(|e| ClusterError::Url(e.to_string())),
            "postgres" | "postgresql" => postgres::options(url).map(|_| ()),
            _ => Err(ClusterError::Scheme(shown_scheme(url))),
        }
    }

    /// A shared breaker named `name` (the provider's name): the cluster
    /// rule `rules` (failures within a window), the timing of `config`,
    /// and `config`'s rules for the in-process fallback. Errors: invalid
    /// rules, or a breaker of that name already handed out.
    pub fn breaker(
        &self,
        name: &str,
        config: BreakerConfig,
        failures: u32,
        window: Duration,
    ) -> Result<SharedBreaker, ClusterError> {
        let rules = Rules::new(&config, failures, window);
        let breaker =
            SharedBreaker::new(name, config, rules, self.shared.owner.clone(), self.commands.clone())?;
        let mut views = self.shared.views.write().unwrap_or_else(|e| e.into_inner());
        if views.contains_key(name) {
            return Err(ClusterError::Duplicate(name.to_owned()));
        }
        views.insert(breaker.view().name.clone(), breaker.view().clone());
        // Read at once (it answers from its fallback until then).
        let _ = self.commands.try_send(Command { view: breaker.view().clone(), event: Event::Load });
        Ok(breaker)
    }

    /// Whether the store cannot be reached right now (the breakers answer
    /// from their in-process fallbacks).
    pub fn degraded(&self) -> bool {
        self.shared.degraded.load(Ordering::Acquire)
    }

    /// This process's id in the store (the probe lease owner).
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// `"redis"` or `"postgres"`.
    pub fn store(&self) -> &'static str {
        self.shared.kind
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    fn views(&self) -> Vec<Arc<View>> {
        self.views.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    fn view(&self, name: &str) -> Option<Arc<View>> {
        self.views.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    fn degrade(&self, error: &ClusterError) {
        metrics::counter!("failwell_cluster_errors_total", "store" => self.kind).increment(1);
        self.degraded.store(true, Ordering::Release);
        if !self.warned.swap(true, Ordering::AcqRel) {
            tracing::warn!(store = self.kind, %error, "shared breaker state unreachable: running degraded on in-process breakers");
            metrics::gauge!("failwell_cluster_degraded", "store" => self.kind).set(1.0);
        }
        for view in self.views() {
            view.degrade();
        }
    }

    fn recovered(&self) {
        self.degraded.store(false, Ordering::Release);
        self.warned.store(false, Ordering::Release);
        metrics::gauge!("failwell_cluster_degraded", "store" => self.kind).set(0.0);
        if self.reached.swap(true, Ordering::AcqRel) {
            tracing::info!(store = self.kind, "shared breaker state reachable again");
        } else {
            tracing::info!(store = self.kind, "shared breaker state reachable");
        }
    }
}

/// The driver: applies the views' events in order (adjacent failure
/// reports of one breaker merged into one), reads every record each
/// `resync`, and runs degraded while the store cannot be reached. Published
/// snapshots are taken in by a task of their own, so a slow store operation
/// never delays what other processes announce.
async fn drive(
    mut backend: Backend,
    shared: Arc<Shared>,
    mut commands: mpsc::Receiver<Command>,
    config: ClusterConfig,
) {
    let mut published: Option<JoinHandle<()>> = None;
    let mut resync = tokio::time::interval(config.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = config.timeout;
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            received = commands.recv_many(&mut batch, 256) => {
                if received == 0 {
                    stop(published.take()).await;
                    return;
                }
                if published.is_none() {
                    // Degraded: the views answer locally; what they sent
                    // before they knew is dropped.
                    batch.clear();
                    continue;
                }
                for (view, event) in merge(batch.drain(..)) {
                    if let Err(error) = exchange(&mut backend, &shared, &view, &event, timeout).await {
                        stop(published.take()).await;
                        shared.degrade(&error);
                        break;
                    }
                }
                batch.clear();
            }
            _ = ended(&mut published) => {
                published = None;
                shared.degrade(&ClusterError::Lost);
            }
            _ = resync.tick() => {
                if published.is_none() {
                    match within(timeout, backend.subscribe()).await {
                        Ok(stream) => published = Some(tokio::spawn(take_in(stream, shared.clone()))),
                        Err(error) => {
                            shared.degrade(&error);
                            continue;
                        }
                    }
                }
                let recovering = shared.degraded.load(Ordering::Acquire);
                for view in shared.views() {
                    if let Err(error) = exchange(&mut backend, &shared, &view, &Event::Load, timeout).await {
                        stop(published.take()).await;
                        shared.degrade(&error);
                        break;
                    }
                }
                if recovering && published.is_some() {
                    shared.recovered();
                }
            }
        }
    }
}

/// Applies every published snapshot to its view until the stream ends (the
/// subscription's connection was lost).
async fn take_in(mut stream: BoxStream<'static, Snapshot>, shared: Arc<Shared>) {
    while let Some(snapshot) = stream.next().await {
        if let Some(view) = shared.view(&snapshot.name) {
            view.apply(&snapshot);
        }
    }
}

/// Stops the subscription task and waits until it has, so no snapshot it
/// was applying lands after the views are marked degraded.
async fn stop(published: Option<JoinHandle<()>>) {
    if let Some(task) = published {
        task.abort();
        let _ = task.await;
    }
}

/// Completes when the subscription task ends by itself; never without one.
async fn ended(published: &mut Option<JoinHandle<()>>) {
    match published {
        Some(task) => {
            let _ = task.await;
        }
        None => std::future::pending().await,
    }
}

/// Applies `event` to `view`'s record and gives the view the answer, then
/// frees what waited for it (a claim, a careful call's count, a trip).
/// An error about this record alone (the store answered, e.g. its keys
/// hold something else) is logged and counted, and the others are not
/// affected; errors only when the store cannot be reached.
async fn exchange(
    backend: &mut Backend,
    shared: &Shared,
    view: &View,
    event: &Event,
    timeout: Duration,
) -> Result<(), ClusterError> {
    match within(timeout, backend.apply(&view.name, &view.rules, event, None)).await {
        Ok(snapshot) => view.apply(&snapshot),
        Err(error) if error.unreachable() => return Err(error),
        Err(error) => {
            metrics::counter!("failwell_cluster_errors_total", "store" => shared.kind).increment(1);
            tracing::error!(breaker = %view.name, %error, "the shared store refused an operation on a record");
        }
    }
    match event {
        Event::Claim { .. } => view.claim_answered(),
        Event::Failures { .. } => view.failures_counted(),
        Event::Trip { .. } => view.trip_answered(),
        _ => {}
    }
    Ok(())
}

/// Merges adjacent failure reports of one breaker and one generation.
fn merge(commands: impl Iterator<Item = Command>) -> Vec<(Arc<View>, Event)> {
    let mut merged: Vec<(Arc<View>, Event)> = Vec::new();
    for Command { view, event } in commands {
        if let (
            Some((last, Event::Failures { generation, count })),
            Event::Failures { generation: g, count: c },
        ) = (merged.last_mut(), &event)
            && Arc::ptr_eq(last, &view)
            && generation == g
        {
            *count = count.saturating_add(*c);
            continue;
        }
        merged.push((view, event));
    }
    merged
}

async fn within<T>(
    timeout: Duration,
    operation: impl Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    tokio::time::timeout(timeout, operation).await.unwrap_or(Err(ClusterError::Timeout(timeout.as_millis())))
}

#[cfg(test)]
mod tests;
