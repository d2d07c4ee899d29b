//! The MySQL store (MySQL 8.0+, MariaDB 10.6+), for applications whose own
//! data is there: several failwell processes may share one database.
//!
//! The tables and rules are PostgreSQL's (`migrations/mysql`), and so are
//! the isolation level (`READ COMMITTED`) and the locking: every read
//! that decides a write locks its rows (`FOR UPDATE`; a claim waits for a
//! row another process is claiming rather than skip it, see `store.rs`),
//! and every completion is a compare-and-set on `(id, lease_token)`. The statements are the shared ones, run through [`sql`],
//! which turns their numbered parameters into MySQL's `?`; batches are
//! passed as JSON arrays (`JSON_TABLE`). Only SQL that MySQL 8.0 and
//! MariaDB both accept is used: no `RETURNING`, no `FOR UPDATE OF`.
//!
//! MySQL has no `LISTEN/NOTIFY`: a relay learns of messages another
//! process enqueued at its next poll. Applications enqueue with plain SQL
//! into the table `failwell_outbox`, whose rows each claim takes over
//! first (`contract.rs`).

mod alerts;
mod comparisons;
mod contract;
mod inbox;
mod ledger;
mod operator;
mod outbox;
mod rows;
mod settle;
pub(crate) mod sql;
mod store;
mod writes;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Transaction};

use crate::error::{Context, StoreError};

/// The MySQL and MariaDB [`Backend`](crate::Backend).
///
/// One pool of up to `max_connections` connections, shared by every
/// reader and writer of this process; lease tokens start at a random
/// point per process, so two processes never hand out the same one.
#[derive(Clone, Debug)]
pub struct MySqlStore {
    pool: MySqlPool,
    tokens: Arc<AtomicI64>,
}

impl MySqlStore {
    /// Connects to `url` (`mysql://user:password@host:port/database`) with
    /// up to `max_connections` connections, and applies the migrations
    /// (serialised across processes by sqlx's lock). Errors: the URL cannot
    /// be parsed, the server refuses or cannot be reached, the database or
    /// user does not exist ([`StoreError::Database`]), the URL names no
    /// database ([`StoreError::NoDatabase`]), or a migration fails.
    pub async fn open(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: MySqlConnectOptions = url.parse().context("parsing the MySQL URL")?;
        if options.get_database().is_none_or(str::is_empty) {
            return Err(StoreError::NoDatabase);
        }
        let options = options.disable_statement_logging();
        // One connection first: its error says why (refused, no such
        // database or user), where a pool would only time out.
        let first = MySqlConnection::connect_with(&options).await.context("connecting to MySQL")?;
        let _ = first.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            // PostgreSQL's isolation: a locking read locks only the rows
            // it returns and no gaps, so a claim that passes over a row
            // leaves it to the next claim.
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(conn, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await
                        .map(|_| ())
                })
            })
            .connect_with(options)
            .await
            .context("connecting to MySQL")?;
        sqlx::migrate!("./migrations/mysql").run(&pool).await.map_err(StoreError::Migrate)?;
        let tokens = Arc::new(AtomicI64::new(rand::random::<i64>() >> 1));
        Ok(Self { pool, tokens })
    }

    /// Begins a transaction in which an application can change its own
    /// tables and call [`Outbox::enqueue`](crate::Outbox::enqueue), so both
    /// commit or neither does.
    pub async fn begin(&self) -> Result<Transaction<'static, MySql>, StoreError> {
        self.pool.begin().await.context("beginning a transaction")
    }

    /// The connection pool, for an application's own statements.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The pool reads go through: the same one.
    pub(crate) fn read_pool(&self) -> &MySqlPool {
        &self.pool
    }
}

#[async_trait::async_trait]
impl crate::Backend for MySqlStore {
    async fn close(&self) {
        self.pool.close().await;
    }
}
