//! The SQLite store: the embedded default (one process, one file).
//!
//! Write transactions start with `BEGIN IMMEDIATE`, so a transaction that
//! reads before it writes cannot fail to upgrade its lock; the file runs in
//! WAL mode with a busy timeout. Batch statements pass id lists as a JSON
//! array (`json_each`) instead of building SQL strings.

mod alerts;
mod comparisons;
mod contract;
mod inbox;
mod ledger;
mod operator;
mod outbox;
mod rows;
mod settle;
mod store;
mod writes;

use std::str::FromStr;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use crate::error::{Context, StoreError};

/// How hard SQLite pushes each commit to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync on every commit: an acknowledged operation survives power loss.
    /// The default.
    Full,
    /// WAL without fsync per commit: survives a process crash (`kill -9`),
    /// may lose the last commits on power loss. Faster.
    Normal,
}

/// The SQLite [`Backend`](crate::Backend).
///
/// Writes go through one connection (`writer`), so concurrent writers wait
/// in the pool's fair queue instead of in SQLite's sleeping busy handler;
/// reads use a separate pool of up to four connections (WAL lets them run
/// beside the writer).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    tokens: std::sync::Arc<AtomicI64>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `url`
    /// (`sqlite://path`), sets WAL mode, foreign keys, recursive triggers
    /// and a 30 s busy timeout, and applies the migrations. Errors: the
    /// file cannot be opened, or a migration fails.
    pub async fn open(url: &str, synchronous: Synchronous) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .context("parsing the SQLite URL")?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            // A row that `INSERT OR REPLACE` / `UPDATE OR REPLACE` deletes
            // fires the delete triggers too (SQLite skips them otherwise),
            // so an operation with a message cannot be replaced away.
            .pragma("recursive_triggers", "ON")
            .busy_timeout(Duration::from_secs(30));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .context("opening the SQLite database")?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await.map_err(StoreError::Migrate)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.create_if_missing(false))
            .await
            .context("opening the SQLite database for reading")?;
        let tokens = std::sync::Arc::new(AtomicI64::new(rand::random::<i64>() >> 1));
        Ok(Self { writer, reader, tokens })
    }

    /// Begins a write transaction (`BEGIN IMMEDIATE`) in which an application
    /// can change its own tables and call [`Outbox::enqueue`](crate::Outbox::enqueue), so both commit
    /// or neither does.
    pub async fn begin(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.writer.begin_with("BEGIN IMMEDIATE").await.context("beginning a transaction")
    }

    /// The write connection's pool, for an application's own statements
    /// outside a transaction of [`Self::begin`].
    pub fn pool(&self) -> &SqlitePool {
        &self.writer
    }

    /// The pool reads go through (beside the writer, in WAL mode).
    pub(crate) fn read_pool(&self) -> &SqlitePool {
        &self.reader
    }
}

#[async_trait::async_trait]
impl crate::Backend for SqliteStore {
    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

/// The statement builders the shared statement macros call: sqlx's own, which bind `$N` parameters by number on SQLite.
mod sql {
    pub(crate) use sqlx::{query, query_as, query_scalar};

    /// Runs `query`, an `INSERT` of one row that ends in `RETURNING id`,
    /// and returns the new row's id.
    pub(crate) async fn inserted_id(
        query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        conn: &mut sqlx::sqlite::SqliteConnection,
    ) -> Result<i64, sqlx::Error> {
        sqlx::Row::try_get(&query.fetch_one(conn).await?, 0)
    }
}
