//! The PostgreSQL store, for deployments that outgrow one machine: several
//! failwell processes share one database.
//!
//! The tables and rules are SQLite's (`migrations/postgres`), in the
//! connection's schema (`search_path`); there is no single writer here, so
//! every read that decides a write locks its rows (`FOR UPDATE`, `SKIP
//! LOCKED` where another process may take the next row instead), and every
//! completion is a compare-and-set on `(id, lease_token)`. Batch statements
//! pass id lists as arrays (`= ANY($1)`, `unnest`).

mod alerts;
mod comparisons;
mod floors;
mod inbox;
mod ledger;
mod operator;
mod outbox;
mod rows;
mod settle;
mod store;
mod writes;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Postgres, Transaction};

use crate::error::{Context, StoreError};

/// The PostgreSQL [`Backend`](crate::Backend).
///
/// One pool of up to `max_connections` connections, shared by every
/// reader and writer of this process; lease tokens start at a random
/// point per process, so two processes never hand out the same one.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    tokens: Arc<AtomicI64>,
    floors: Arc<floors::ClaimFloors>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`, with
    /// `?options=-csearch_path%3Dschema` to use a schema other than
    /// `public`) with up to `max_connections` connections, and applies the
    /// migrations (serialised across processes by sqlx's advisory lock).
    /// Errors: the URL cannot be parsed, the server refuses or cannot be
    /// reached, the database or role does not exist
    /// ([`StoreError::Database`]), no schema of the `search_path` exists
    /// ([`StoreError::NoSchema`]), or a migration fails.
    pub async fn open(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse().context("parsing the PostgreSQL URL")?;
        let options = options.disable_statement_logging();
        // One connection first: its error says why (refused, no such
        // database or role), where a pool would only time out; and the
        // schema the tables go into must exist.
        let mut first = PgConnection::connect_with(&options).await.context("connecting to PostgreSQL")?;
        let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(&mut first)
            .await
            .context("reading the connection's schema")?;
        let _ = first.close().await;
        if schema.is_none() {
            return Err(StoreError::NoSchema);
        }
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await.map_err(StoreError::Migrate)?;
        let tokens = Arc::new(AtomicI64::new(rand::random::<i64>() >> 1));
        Ok(Self { pool, tokens, floors: Arc::default() })
    }

    /// Begins a transaction in which an application can change its own
    /// tables and call [`Outbox::enqueue`](crate::Outbox::enqueue), so both
    /// commit or neither does.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.pool.begin().await.context("beginning a transaction")
    }

    /// The connection pool, for an application's own statements.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Notices of commits that enqueued messages in this store's schema,
    /// on a connection of their own (`LISTEN failwell_outbox`), so a relay
    /// wakes at once instead of at its next poll. Errors: PostgreSQL cannot
    /// be reached.
    pub async fn new_messages(&self) -> Result<NewMessages, StoreError> {
        let schema: String = sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(&self.pool)
            .await
            .context("reading the store's schema")?;
        let mut listener = PgListener::connect_with(&self.pool).await.context("connecting to listen")?;
        listener.listen(NEW_MESSAGES).await.context("listening for new messages")?;
        Ok(NewMessages { listener, schema })
    }

    /// The pool reads go through: the same one.
    pub(crate) fn read_pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The channel a commit that enqueued messages notifies (`0003_notify.sql`).
const NEW_MESSAGES: &str = "failwell_outbox";

/// Notices of new outbox messages (see [`PostgresStore::new_messages`]).
#[derive(Debug)]
pub struct NewMessages {
    listener: PgListener,
    schema: String,
}

impl NewMessages {
    /// Waits for the next commit that enqueued messages in this store's
    /// schema. A lost connection is opened again (notices sent meanwhile
    /// are lost: the relay's polling finds those messages). Errors: the
    /// connection cannot be opened again.
    pub async fn next(&mut self) -> Result<(), StoreError> {
        loop {
            let notice = self.listener.recv().await.context("waiting for new messages")?;
            if notice.payload() == self.schema {
                return Ok(());
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::Backend for PostgresStore {
    async fn close(&self) {
        self.pool.close().await;
    }
}

/// The statement builders the shared statement macros call: sqlx's own.
mod sql {
    pub(crate) use sqlx::{query, query_as, query_scalar};

    /// Runs `query`, an `INSERT` of one row that ends in `RETURNING id`,
    /// and returns the new row's id.
    pub(crate) async fn inserted_id(
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
        conn: &mut sqlx::postgres::PgConnection,
    ) -> Result<i64, sqlx::Error> {
        sqlx::Row::try_get(&query.fetch_one(conn).await?, 0)
    }
}
