//! The PostgreSQL backend, for deployments without Redis: each transition
//! is one transaction that locks the breaker's row (`SELECT … FOR
//! UPDATE`), applies [`Record::apply`] at the server's `clock_timestamp()`,
//! writes the row back and, when it changed, sends the snapshot with
//! `pg_notify` (delivered to every listener at commit). Every process
//! `LISTEN`s on the channel. Its connections commit with
//! `synchronous_commit = off`: breaker records are soft state, and a
//! transition's notice should not wait behind the server's disk.
//!
//! Table `failwell_breakers` (created when missing, in the connection's
//! schema), one row per `(namespace, name)`; channel `failwell_breakers`,
//! payload the snapshot's JSON with its namespace.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Row};

use crate::ClusterError;
use crate::record::{Event, Phase, Record, Rules, Snapshot};

const CHANNEL: &str = "failwell_breakers";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS failwell_breakers (
    namespace text NOT NULL,
    name text NOT NULL,
    generation bigint NOT NULL DEFAULT 0,
    phase smallint NOT NULL DEFAULT 0,
    recent bigint[] NOT NULL DEFAULT '{}',
    trips integer NOT NULL DEFAULT 0,
    open_until bigint NOT NULL DEFAULT 0,
    probe_owner text NOT NULL DEFAULT '',
    probe_until bigint NOT NULL DEFAULT 0,
    pause_until bigint NOT NULL DEFAULT 0,
    epoch bigint NOT NULL DEFAULT 0,
    probe_started boolean NOT NULL DEFAULT false,
    throttle_seq bigint NOT NULL DEFAULT 0,
    throttle_owner text NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, name)
)";

/// Columns added since the table's first version, for a table an earlier
/// failwell made.
const SCHEMA_ADDED: &str = "ALTER TABLE failwell_breakers
    ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS probe_started boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS throttle_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS throttle_owner text NOT NULL DEFAULT ''";

/// The record's columns and the server's clock (ms), as one select list.
macro_rules! columns {
    () => {
        "epoch, probe_started, generation, phase, recent, trips, open_until, probe_owner, probe_until, pause_until,
         throttle_seq, throttle_owner, (extract(epoch from clock_timestamp()) * 1000)::bigint AS now"
    };
}

const NOW: &str = "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint";

fn record_of(row: &PgRow) -> Record {
    Record {
        epoch: row.get("epoch"),
        probe_started: row.get("probe_started"),
        generation: u64::try_from(row.get::<i64, _>("generation")).unwrap_or(0),
        phase: Phase::from_code(i64::from(row.get::<i16, _>("phase"))),
        recent: row.get("recent"),
        trips: u32::try_from(row.get::<i32, _>("trips")).unwrap_or(0),
        open_until: row.get("open_until"),
        probe_owner: row.get("probe_owner"),
        probe_until: row.get("probe_until"),
        pause_until: row.get("pause_until"),
        throttle_seq: u64::try_from(row.get::<i64, _>("throttle_seq")).unwrap_or(0),
        throttle_owner: row.get("throttle_owner"),
    }
}

/// A `NOTIFY` payload: a snapshot and the namespace it belongs to.
#[derive(Serialize, Deserialize)]
struct Notice {
    namespace: String,
    #[serde(flatten)]
    snapshot: Snapshot,
}

/// The connection options of `url`. Errors when it cannot be parsed.
pub(crate) fn options(url: &str) -> Result<PgConnectOptions, ClusterError> {
    let lower = url.to_ascii_lowercase();
    if ["sslmode=require", "sslmode=verify-ca", "sslmode=verify-full"].iter().any(|m| lower.contains(m)) {
        return Err(ClusterError::Url(
            "sslmode require/verify-*: TLS is not built in (keep the store on a private network)".into(),
        ));
    }
    url.parse().map_err(|e: sqlx::Error| ClusterError::Url(e.to_string()))
}

/// Breaker records in PostgreSQL (see the module docs).
pub(crate) struct PostgresBackend {
    pool: PgPool,
    namespace: String,
    ready: bool,
}

impl PostgresBackend {
    /// A backend for `url` (`postgres://` or `postgresql://`); connects
    /// lazily. Errors when the URL cannot be parsed.
    pub(crate) fn new(url: &str, namespace: &str, timeout: Duration) -> Result<Self, ClusterError> {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            // A row locked by someone else, or a slow server, costs at most
            // `timeout` per statement, and the connection is not left
            // waiting behind it.
            .connect_lazy_with(
                options(url)?
                    .options([
                        ("lock_timeout", timeout.as_millis().to_string()),
                        ("statement_timeout", timeout.as_millis().to_string()),
                        // A transition is announced at commit: it need not
                        // wait for the WAL flush (a crash of the server can
                        // lose the last few ms of transitions, which the
                        // processes' own views re-establish).
                        ("synchronous_commit", "off".to_owned()),
                    ])
                    .disable_statement_logging(),
            );
        Ok(Self { pool, namespace: namespace.to_owned(), ready: false })
    }

    /// Applies `event` to breaker `name` in one transaction; `now` (server
    /// ms) is for tests, `None` uses the server's clock. Errors when
    /// PostgreSQL cannot be reached or refuses the statements.
    pub(crate) async fn apply(
        &mut self,
        name: &str,
        rules: &Rules,
        event: &Event,
        now: Option<i64>,
    ) -> Result<Snapshot, ClusterError> {
        if !self.ready {
            let mut tx = self.pool.begin().await?;
            // Concurrent CREATE TABLE IF NOT EXISTS can collide on the type name.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('failwell_breakers'))")
                .execute(&mut *tx)
                .await?;
            sqlx::query(SCHEMA).execute(&mut *tx).await?;
            sqlx::query(SCHEMA_ADDED).execute(&mut *tx).await?;
            tx.commit().await?;
            self.ready = true;
        }
        // A read takes no lock: the row as it is (or none yet).
        if *event == Event::Load {
            let row = sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM failwell_breakers WHERE namespace = $1 AND name = $2"
            ))
            .bind(&self.namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
            let (mut record, server_now) = match row {
                Some(row) => (record_of(&row), row.get("now")),
                None => (Record::default(), sqlx::query_scalar(NOW).fetch_one(&self.pool).await?),
            };
            return Ok(record.apply(name, rules, event, now.unwrap_or(server_now)));
        }
        let mut tx = self.pool.begin().await?;
        // Creates the row or locks it (the no-op update takes the row lock),
        // and reads it, in one statement.
        let row = sqlx::query(concat!(
            "INSERT INTO failwell_breakers (namespace, name) VALUES ($1, $2)
             ON CONFLICT (namespace, name) DO UPDATE SET name = EXCLUDED.name
             RETURNING ",
            columns!()
        ))
        .bind(&self.namespace)
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        let mut record = record_of(&row);
        let now = now.unwrap_or_else(|| row.get("now"));
        let snapshot = record.apply(name, rules, event, now);
        if snapshot.changed {
            let notice = Notice {
                namespace: self.namespace.clone(),
                snapshot: Snapshot { changed: false, ..snapshot.clone() },
            };
            // The update and the notification (sent at commit), in one statement.
            sqlx::query(
                "WITH updated AS (
                    UPDATE failwell_breakers SET generation = $3, phase = $4, recent = $5, trips = $6,
                           open_until = $7, probe_owner = $8, probe_until = $9, pause_until = $10, epoch = $13,
                           probe_started = $14, throttle_seq = $15, throttle_owner = $16
                    WHERE namespace = $1 AND name = $2 RETURNING name)
                 SELECT pg_notify($11, $12) FROM updated",
            )
            .bind(&self.namespace)
            .bind(name)
            .bind(i64::try_from(record.generation).unwrap_or(i64::MAX))
            .bind(record.phase.code())
            .bind(&record.recent)
            .bind(i32::try_from(record.trips).unwrap_or(i32::MAX))
            .bind(record.open_until)
            .bind(&record.probe_owner)
            .bind(record.probe_until)
            .bind(record.pause_until)
            .bind(CHANNEL)
            .bind(serde_json::to_string(&notice).unwrap_or_default())
            .bind(record.epoch)
            .bind(record.probe_started)
            .bind(i64::try_from(record.throttle_seq).unwrap_or(i64::MAX))
            .bind(&record.throttle_owner)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(snapshot)
    }

    /// The notified snapshots of this namespace, from a connection of its
    /// own. The stream ends when that connection is lost (notifications
    /// sent meanwhile are lost; the caller loads the records again).
    /// Errors when PostgreSQL cannot be reached.
    pub(crate) async fn subscribe(&self) -> Result<BoxStream<'static, Snapshot>, ClusterError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        let namespace = self.namespace.clone();
        Ok(futures_util::stream::unfold(listener, |mut listener| async move {
            match listener.try_recv().await {
                Ok(Some(notification)) => Some((Some(notification), listener)),
                Ok(None) | Err(_) => None,
            }
        })
        .filter_map(move |notification| {
            let namespace = namespace.clone();
            async move {
                let notice: Notice = serde_json::from_str(notification?.payload()).ok()?;
                (notice.namespace == namespace).then_some(notice.snapshot)
            }
        })
        .boxed())
    }
}
