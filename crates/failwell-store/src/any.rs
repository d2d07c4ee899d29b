//! The store a configuration names: SQLite or PostgreSQL, chosen by the
//! scheme of `database_url`.

use crate::error::{Context, StoreError};
use crate::model::{
    AttemptRow, ClaimScope, Claimed, ClaimedForward, Completion, Counts, EventRecord, ForwardCompletion,
    Leased, NewEvent, NewOperation, Operation, OperationEvent, Received, Reconciled, Recorded, StoredEvent,
    Submitted,
};
use crate::operator::{
    Alert, AlertClaim, AlertSent, Channel, DeadLetter, DeadLetterFilter, DeadLetterKind, HistoryEntry,
    ManualResolution, NewAlert, NewReport, Report, Stats,
};
use crate::{PostgresStore, SqliteStore, Store, Synchronous};

/// Runs `$e` with `$s` bound to whichever store `$self` holds.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Sqlite($s) => $e,
            AnyStore::Postgres($s) => $e,
        }
    };
}

/// How to open a store: the settings of each database.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// SQLite commit durability (ignored on PostgreSQL).
    pub synchronous: Synchronous,
    /// PostgreSQL connections per process (ignored on SQLite, which has one
    /// writer and four readers).
    pub max_connections: u32,
}

/// A [`Store`] on the database `database_url` names.
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// `sqlite://PATH`: the embedded default.
    Sqlite(SqliteStore),
    /// `postgres://…` or `postgresql://…`: shared by several processes.
    Postgres(PostgresStore),
}

impl AnyStore {
    /// Opens the store at `url` (creating an SQLite file if missing) and
    /// applies its migrations. Errors: [`StoreError::UnsupportedUrl`] for
    /// another scheme; otherwise those of [`SqliteStore::open`] and
    /// [`PostgresStore::open`].
    pub async fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        match Backend::of(url) {
            Some(Backend::Sqlite) => SqliteStore::open(url, options.synchronous).await.map(Self::Sqlite),
            Some(Backend::Postgres) => {
                PostgresStore::open(url, options.max_connections).await.map(Self::Postgres)
            }
            None => Err(StoreError::UnsupportedUrl),
        }
    }

    /// Whether the database at `url` already holds a failwell store (its
    /// migrations, `operations` and `outbox` tables; on PostgreSQL in the
    /// schema the store would be written to),
    /// looked at without creating or changing anything: operator commands
    /// refuse a database `failwell serve` has never used, instead of
    /// turning it into one. Errors: [`StoreError::UnsupportedUrl`]; the
    /// database cannot be opened (an SQLite file that does not exist
    /// included).
    pub async fn holds_store(url: &str) -> Result<bool, StoreError> {
        use sqlx::{ConnectOptions, Connection};
        match Backend::of(url) {
            Some(Backend::Sqlite) => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().context("parsing the SQLite URL")?;
                let mut conn =
                    options.read_only(true).connect().await.context("opening the SQLite database")?;
                let found: bool = sqlx::query_scalar(
                    "SELECT COUNT(*) = 3 FROM sqlite_master WHERE type = 'table' \
                     AND name IN ('_sqlx_migrations', 'operations', 'outbox')",
                )
                .fetch_one(&mut conn)
                .await
                .context("looking for failwell's tables")?;
                let _ = conn.close().await;
                Ok(found)
            }
            Some(Backend::Postgres) => {
                let mut conn = sqlx::PgConnection::connect(url).await.context("connecting to PostgreSQL")?;
                // In the schema the store's tables are written to (the
                // first of the search path that exists), not anywhere on it.
                let found: bool = sqlx::query_scalar(
                    "SELECT COUNT(*) = 3 FROM pg_tables WHERE schemaname = current_schema() \
                     AND tablename IN ('_sqlx_migrations', 'operations', 'outbox')",
                )
                .fetch_one(&mut conn)
                .await
                .context("looking for failwell's tables")?;
                let _ = conn.close().await;
                Ok(found)
            }
            None => Err(StoreError::UnsupportedUrl),
        }
    }

    /// Closes the store's connections, waiting for them to be returned.
    pub async fn close(&self) {
        each!(self, s => s.close().await)
    }
}

/// The database a URL names, by its scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:`.
    Sqlite,
    /// `postgres:` or `postgresql:`.
    Postgres,
}

impl Backend {
    /// The backend of `url`, `None` for any other scheme.
    pub fn of(url: &str) -> Option<Self> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase())?;
        match scheme.as_str() {
            "sqlite" => Some(Self::Sqlite),
            "postgres" | "postgresql" => Some(Self::Postgres),
            _ => None,
        }
    }
}

impl Store for AnyStore {
    async fn submit(&self, op: NewOperation, now_ms: i64) -> Result<Submitted, StoreError> {
        each!(self, s => s.submit(op, now_ms).await)
    }

    async fn claim(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
        scope: &ClaimScope,
    ) -> Result<Vec<Claimed>, StoreError> {
        each!(self, s => s.claim(now_ms, limit, lease_ms, scope).await)
    }

    async fn complete(&self, completions: Vec<Completion>, now_ms: i64) -> Result<Vec<Recorded>, StoreError> {
        each!(self, s => s.complete(completions, now_ms).await)
    }

    async fn due_unknown(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, StoreError> {
        each!(self, s => s.due_unknown(now_ms, limit).await)
    }

    async fn reconcile(&self, r: Reconciled, now_ms: i64) -> Result<(), StoreError> {
        each!(self, s => s.reconcile(r, now_ms).await)
    }

    async fn operation(&self, idempotency_key: &str) -> Result<Option<Operation>, StoreError> {
        each!(self, s => s.operation(idempotency_key).await)
    }

    async fn attempts(&self, operation_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
        each!(self, s => s.attempts(operation_id).await)
    }

    async fn renew(&self, queue: Leased, leases: Vec<(i64, i64)>, until_ms: i64) -> Result<u64, StoreError> {
        each!(self, s => s.renew(queue, leases, until_ms).await)
    }

    async fn delete_delivered(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        each!(self, s => s.delete_delivered(before_ms, limit).await)
    }

    async fn counts(&self) -> Result<Counts, StoreError> {
        each!(self, s => s.counts().await)
    }

    async fn receive(&self, events: Vec<NewEvent>, now_ms: i64) -> Result<Vec<Received>, StoreError> {
        each!(self, s => s.receive(events, now_ms).await)
    }

    async fn events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        each!(self, s => s.events_after(after, limit, max_bytes).await)
    }

    async fn operation_events(&self, operation_id: i64) -> Result<Vec<OperationEvent>, StoreError> {
        each!(self, s => s.operation_events(operation_id).await)
    }

    async fn event(&self, integration: &str, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
        each!(self, s => s.event(integration, event_id).await)
    }

    async fn claim_forwards(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedForward>, StoreError> {
        each!(self, s => s.claim_forwards(now_ms, limit, lease_ms).await)
    }

    async fn complete_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> Result<Vec<Recorded>, StoreError> {
        each!(self, s => s.complete_forwards(completions, now_ms).await)
    }

    async fn dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        each!(self, s => s.dead_letters(filter, limit).await)
    }

    async fn dead_letter(&self, kind: DeadLetterKind, id: i64) -> Result<Option<DeadLetter>, StoreError> {
        each!(self, s => s.dead_letter(kind, id).await)
    }

    async fn replay(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        each!(self, s => s.replay(kind, id, channel, now_ms).await)
    }

    async fn purge(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        each!(self, s => s.purge(kind, id, channel, now_ms).await)
    }

    async fn resolve(
        &self,
        idempotency_key: &str,
        outcome: failwell_policy::Outcome,
        provider_ref: Option<String>,
        note: String,
        channel: Channel,
        now_ms: i64,
    ) -> Result<ManualResolution, StoreError> {
        each!(self, s => s.resolve(idempotency_key, outcome, provider_ref, note, channel, now_ms).await)
    }

    async fn ack_dead_letters(&self, channel: Channel, now_ms: i64) -> Result<(), StoreError> {
        each!(self, s => s.ack_dead_letters(channel, now_ms).await)
    }

    async fn stats(&self, now_ms: i64, window_ms: u64, known: &[String]) -> Result<Stats, StoreError> {
        each!(self, s => s.stats(now_ms, window_ms, known).await)
    }

    async fn history(&self, operation_id: i64) -> Result<Vec<HistoryEntry>, StoreError> {
        each!(self, s => s.history(operation_id).await)
    }

    async fn operations_between(
        &self,
        provider: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Operation>, StoreError> {
        each!(self, s => s.operations_between(provider, from_ms, to_ms).await)
    }

    async fn operations_by_reference(
        &self,
        provider: &str,
        references: &[String],
    ) -> Result<Vec<Operation>, StoreError> {
        each!(self, s => s.operations_by_reference(provider, references).await)
    }

    async fn save_report(&self, report: NewReport) -> Result<i64, StoreError> {
        each!(self, s => s.save_report(report).await)
    }

    async fn reports(&self, limit: u32) -> Result<Vec<Report>, StoreError> {
        each!(self, s => s.reports(limit).await)
    }

    async fn latest_reports(&self) -> Result<Vec<Report>, StoreError> {
        each!(self, s => s.latest_reports().await)
    }

    async fn report(&self, id: i64) -> Result<Option<Report>, StoreError> {
        each!(self, s => s.report(id).await)
    }

    async fn firing_alerts(&self, kind: &str) -> Result<Vec<String>, StoreError> {
        each!(self, s => s.firing_alerts(kind).await)
    }

    async fn set_alert(
        &self,
        kind: &str,
        subject: &str,
        firing: bool,
        now_ms: i64,
        alert: Option<NewAlert>,
    ) -> Result<bool, StoreError> {
        each!(self, s => s.set_alert(kind, subject, firing, now_ms, alert).await)
    }

    async fn queue_alert(&self, alert: NewAlert) -> Result<(), StoreError> {
        each!(self, s => s.queue_alert(alert).await)
    }

    async fn claim_alert(
        &self,
        claim: AlertClaim,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<Alert>, StoreError> {
        each!(self, s => s.claim_alert(claim, now_ms, lease_ms).await)
    }

    async fn alert_sent(&self, claimed: &Alert, sent: AlertSent) -> Result<bool, StoreError> {
        each!(self, s => s.alert_sent(claimed, sent).await)
    }

    async fn claim_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        each!(self, s => s.claim_comparison(provider, window, now_ms, lease_ms).await)
    }

    async fn finish_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
    ) -> Result<(), StoreError> {
        each!(self, s => s.finish_comparison(provider, window, now_ms).await)
    }

    async fn last_comparison_window(&self, provider: &str) -> Result<Option<crate::Window>, StoreError> {
        each!(self, s => s.last_comparison_window(provider).await)
    }

    async fn abandoned_comparisons(
        &self,
        claimed_before_ms: i64,
    ) -> Result<Vec<(String, crate::Window)>, StoreError> {
        each!(self, s => s.abandoned_comparisons(claimed_before_ms).await)
    }
}
