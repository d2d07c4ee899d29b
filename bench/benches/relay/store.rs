//! The databases a drain runs on: PostgreSQL (messages committed through
//! the outbox contract's plain SQL) and MySQL or MariaDB (committed through
//! failwell's Rust API, `Outbox::enqueue`, in one transaction).

use std::time::{Duration, Instant};

use failwell_store::{Message, MySqlStore, Outbox};
use hdrhistogram::Histogram;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{Connection, MySqlConnection, PgConnection};

/// The database every run creates, uses and drops on its server.
const DATABASE: &str = "bench_failwell";

/// `application_name` of this benchmark's own PostgreSQL connections,
/// whose backends are not counted as the relay's.
const BENCH_APPLICATION: &str = "failwell-bench";

/// The payload of message `seq`: about 150 bytes of JSON, as the peers'.
fn payload(seq: u64) -> serde_json::Value {
    json!({"order_id": "ORD-0000000001", "customer": "C-12345", "amount_cents": 129900,
           "currency": "EUR", "note": "y".repeat(40), "seq": seq})
}

/// The payload of message `g` in SQL, as [`payload`] writes it.
macro_rules! pg_payload {
    () => {
        "jsonb_build_object('order_id', 'ORD-0000000001', 'customer', 'C-12345', \
         'amount_cents', 129900, 'currency', 'EUR', 'note', repeat('y', 40), 'seq', g)"
    };
}

/// The enqueue of `from..to` through the outbox contract's plain SQL, as
/// an application enqueues in bulk: `failwell_enqueue`, one statement.
const PG_ENQUEUE: &str = concat!(
    "SELECT count(*) FROM failwell_enqueue('sink', 'post', ARRAY(SELECT ",
    pg_payload!(),
    "::json FROM generate_series($1::bigint, $2::bigint - 1) g))"
);

/// The same rows inserted into the view `failwell_outbox`, as an
/// application enqueues one intent in its transaction.
const PG_INSERT: &str = concat!(
    "INSERT INTO failwell_outbox (provider, operation, payload) SELECT 'sink', 'post', ",
    pg_payload!(),
    " FROM generate_series($1::bigint, $2::bigint - 1) g"
);

/// Rows per enqueue statement.
const PG_ENQUEUE_ROWS: u64 = 50_000;

/// A database server a drain can run on, by its admin URL.
#[derive(Clone, Debug)]
pub enum Server {
    Postgres(String),
    MySql(String),
}

/// A fresh database of a [`Server`], connected.
#[derive(Clone)]
pub enum Db {
    Postgres(PgPool),
    MySql(MySqlStore),
}

impl Server {
    /// `postgres` or `mysql`: the name runs and summaries carry.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::MySql(_) => "mysql",
        }
    }

    /// The URL of [`DATABASE`] on this server.
    pub fn database_url(&self) -> String {
        let (Self::Postgres(admin) | Self::MySql(admin)) = self;
        let (base, query) = admin.split_once('?').map_or((admin.as_str(), None), |(b, q)| (b, Some(q)));
        let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
        match query {
            Some(q) => format!("{root}/{DATABASE}?{q}"),
            None => format!("{root}/{DATABASE}"),
        }
    }

    async fn admin(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Self::Postgres(url) => {
                let mut conn = PgConnection::connect(url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            Self::MySql(url) => {
                let mut conn = MySqlConnection::connect(url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }

    /// Drops [`DATABASE`] if it is there and creates it empty.
    pub async fn recreate(&self) {
        match self {
            Self::Postgres(_) => {
                self.admin(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")).await
            }
            Self::MySql(_) => self.admin(&format!("DROP DATABASE IF EXISTS {DATABASE}")).await,
        }
        self.admin(&format!("CREATE DATABASE {DATABASE}")).await;
    }

    /// Drops [`DATABASE`].
    pub async fn drop_database(&self) {
        self.admin(&format!("DROP DATABASE {DATABASE}")).await;
    }

    /// Connects to [`DATABASE`], which failwell has migrated.
    pub async fn connect(&self) -> Db {
        let url = self.database_url();
        match self {
            Self::Postgres(_) => {
                let options: PgConnectOptions = url.parse().unwrap();
                Db::Postgres(PgPool::connect_with(options.application_name(BENCH_APPLICATION)).await.unwrap())
            }
            Self::MySql(_) => Db::MySql(MySqlStore::open(&url, 8).await.unwrap()),
        }
    }

    /// The machine's limit for single-row commits on this server: commits/s
    /// of one-row `INSERT`s, each its own transaction, from `connections`
    /// connections at once for `seconds` (in [`DATABASE`], which it
    /// recreates; with the server's own durability settings).
    pub async fn commit_limit(&self, connections: usize, seconds: u64) -> f64 {
        self.recreate().await;
        let url = self.database_url();
        let create = match self {
            Self::Postgres(_) => "CREATE TABLE commits (id bigserial PRIMARY KEY, note text NOT NULL)",
            Self::MySql(_) => {
                "CREATE TABLE commits (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT NOT NULL)"
            }
        };
        self.admin_in_database(create).await;
        let until = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                let (url, server) = (url.clone(), self.clone());
                tokio::spawn(async move {
                    let mut commits = 0u64;
                    match server {
                        Self::Postgres(_) => {
                            let mut conn = PgConnection::connect(&url).await.unwrap();
                            while Instant::now() < until {
                                sqlx::query("INSERT INTO commits (note) VALUES ($1)")
                                    .bind("one row")
                                    .execute(&mut conn)
                                    .await
                                    .unwrap();
                                commits += 1;
                            }
                        }
                        Self::MySql(_) => {
                            let mut conn = MySqlConnection::connect(&url).await.unwrap();
                            while Instant::now() < until {
                                sqlx::query("INSERT INTO commits (note) VALUES (?)")
                                    .bind("one row")
                                    .execute(&mut conn)
                                    .await
                                    .unwrap();
                                commits += 1;
                            }
                        }
                    }
                    commits
                })
            })
            .collect();
        let mut total = 0;
        for worker in workers {
            total += worker.await.unwrap();
        }
        let rate = total as f64 / started.elapsed().as_secs_f64();
        self.drop_database().await;
        rate
    }

    async fn admin_in_database(&self, sql: &str) {
        let in_database = match self {
            Self::Postgres(_) => Self::Postgres(self.database_url()),
            Self::MySql(_) => Self::MySql(self.database_url()),
        };
        in_database.admin(sql).await;
    }
}

impl Db {
    /// Commits messages `from..to` (their payload's `seq`) in one transaction.
    pub async fn enqueue(&self, from: u64, to: u64) {
        match self {
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await.unwrap();
                for start in (from..to).step_by(PG_ENQUEUE_ROWS as usize) {
                    sqlx::query(PG_ENQUEUE)
                        .bind(start as i64)
                        .bind((start + PG_ENQUEUE_ROWS).min(to) as i64)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
            }
            Self::MySql(store) => {
                let mut tx = store.begin().await.unwrap();
                let now_ms = failwell_engine::now_ms();
                for seq in from..to {
                    Outbox::enqueue(&mut tx, &Message::new("sink", "post", payload(seq)), now_ms)
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }
    }

    async fn count(&self, sql: &'static str) -> i64 {
        match self {
            Self::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Self::MySql(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await.unwrap(),
        }
    }

    /// Whether any message is not delivered yet. Polled every 10 ms during
    /// a drain, so it reads one entry of the pending messages' index
    /// (`outbox_provider_due`), not all of them: a `count(*)` of 50,000 pending
    /// messages took 5–25 ms of the database server's CPU each time, on a
    /// machine whose two cores failwell and PostgreSQL share (it is not
    /// counted in their CPU per message, but it slowed their drain; the
    /// peers' harnesses count what they delete instead).
    pub async fn any_pending(&self) -> bool {
        self.count(
            "SELECT count(*) FROM (SELECT 1 FROM outbox WHERE state = 'pending' ORDER BY provider LIMIT 1) p",
        )
        .await
            > 0
    }

    /// Operations that succeeded, and calls made.
    pub async fn outcomes(&self) -> (i64, i64) {
        let succeeded = self.count("SELECT count(*) FROM operations WHERE status = 'succeeded'").await;
        (succeeded, self.count("SELECT count(*) FROM attempts WHERE kind = 'call'").await)
    }

    /// The database server's processes that serve the relay: PostgreSQL's
    /// backends of [`DATABASE`] but this benchmark's own; MySQL's one server
    /// process (all of it: it has one process for every connection).
    pub async fn server_pids(&self) -> Vec<u32> {
        match self {
            Self::Postgres(pool) => {
                let backends: Vec<i32> = sqlx::query_scalar(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name <> $1",
                )
                .bind(BENCH_APPLICATION)
                .fetch_all(pool)
                .await
                .unwrap();
                backends.into_iter().map(|pid| pid as u32).collect()
            }
            Self::MySql(_) => mysql_server_pids(),
        }
    }

    /// Refreshes the planner's statistics of every table (`ANALYZE`).
    pub async fn analyze(&self) {
        match self {
            Self::Postgres(pool) => sqlx::query("ANALYZE").execute(pool).await.map(drop),
            Self::MySql(store) => {
                sqlx::query("ANALYZE TABLE outbox, operations").execute(store.pool()).await.map(drop)
            }
        }
        .unwrap();
    }

    /// PostgreSQL's WAL position (bytes since the start of its WAL;
    /// `pg_current_wal_lsn`), for the WAL written per message; `None` on
    /// MySQL. It counts the whole server's writes: nothing else should run
    /// on it during a drain.
    pub async fn wal_position(&self) -> Option<u64> {
        match self {
            Self::Postgres(pool) => {
                let bytes: i64 = sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
                    .fetch_one(pool)
                    .await
                    .unwrap();
                Some(bytes as u64)
            }
            Self::MySql(_) => None,
        }
    }

    /// Checkpoints PostgreSQL has started so far, timed and requested
    /// (`pg_stat_bgwriter`, `pg_stat_checkpointer` from PostgreSQL 17 on):
    /// after one, the first change of each page writes the whole page to the
    /// WAL, so a drain that runs across one writes more.
    /// `None` on MySQL.
    pub async fn checkpoints(&self) -> Option<u64> {
        let Self::Postgres(pool) = self else { return None };
        let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
            .fetch_one(pool)
            .await
            .unwrap();
        let count = if version >= 170_000 {
            "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
        } else {
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        };
        let count: i64 = sqlx::query_scalar(count).fetch_one(pool).await.unwrap();
        Some(count as u64)
    }

    /// Latency (µs) of `count` single-row transactions through the outbox
    /// contract and as many into a plain queue table (pgmq's layout: an id,
    /// timestamps, a read count, the message as `jsonb`, an index on the
    /// visibility time), alternating, each from `BEGIN` to the return of its
    /// `COMMIT`, on one connection; `None` on MySQL.
    pub async fn insert_latency(&self, count: usize) -> Option<(Histogram<u64>, Histogram<u64>)> {
        let Self::Postgres(pool) = self else { return None };
        let mut conn = pool.acquire().await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE plain_queue (msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
               read_ct integer NOT NULL DEFAULT 0, enqueued_at timestamptz NOT NULL DEFAULT now(), \
               vt timestamptz NOT NULL DEFAULT now(), message jsonb); \
             CREATE INDEX plain_queue_vt ON plain_queue (vt)",
        )
        .execute(&mut *conn)
        .await
        .unwrap();
        let contract = PG_INSERT;
        let plain = concat!(
            "INSERT INTO plain_queue (message) SELECT ",
            pg_payload!(),
            " FROM generate_series($1::bigint, $2::bigint - 1) g"
        );
        let mut latencies = [(); 2].map(|_| Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap());
        for i in 0..count * 2 {
            let seq = 1_000_000_000 + i as i64;
            let started = Instant::now();
            let mut tx = conn.begin().await.unwrap();
            sqlx::query(if i % 2 == 0 { contract } else { plain })
                .bind(seq)
                .bind(seq + 1)
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            latencies[i % 2].record(started.elapsed().as_micros().max(1) as u64).unwrap();
        }
        let [contract, plain] = latencies;
        Some((contract, plain))
    }

    pub async fn close(self) {
        match self {
            Self::Postgres(pool) => pool.close().await,
            Self::MySql(store) => store.pool().close().await,
        }
    }
}

/// The pids of the processes named `mariadbd` or `mysqld` on this machine.
fn mysql_server_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            matches!(comm.trim(), "mariadbd" | "mysqld")
        })
        .collect()
}
