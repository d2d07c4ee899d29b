//! The balance ledger: transfers per second through failwell's ledger
//! (`failwell_engine::ledger::Transfers`, which applies concurrent
//! transfers a batch per transaction), beside the naive pattern of the
//! article this project starts from — one transaction per debit, `SELECT …
//! FOR UPDATE` of the balance, `UPDATE` both accounts, `INSERT` the
//! transfer with a unique id — in the same run, on the same database, from
//! the same number of concurrent clients.
//!
//! ```sh
//! cargo bench --manifest-path bench/Cargo.toml --bench ledger
//! ```
//!
//! Settings (environment):
//! - `DATABASE_URL`: an admin URL of the PostgreSQL server (default
//!   `postgres://postgres@127.0.0.1:5432/postgres`); each run creates and
//!   drops the database `bench_ledger` there. SQLite runs on a temporary
//!   file, with failwell's default `synchronous = FULL` for both sides.
//! - `STORES`: `postgres,sqlite` (the default), or one of them.
//! - `SCENARIOS`: `hot` (every transfer debits one account and credits
//!   another) and `spread` (between random accounts of `ACCOUNTS`, default
//!   10000); both by default.
//! - `N` transfers per run (default 20000), `CLIENTS` concurrent clients
//!   (default 64), `REPS` repetitions, interleaved (default 5): in odd
//!   repetitions failwell runs first, in even ones the naive pattern.
//!
//! Every account is funded so that every transfer is accepted; after each
//! run the bench checks that the debits and credits add up. It prints
//! transfers/s per run, the median and range per configuration, and the CPU
//! per transfer (µs) of this process (the clients and, for failwell, its
//! ledger) and of the PostgreSQL backends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use failwell_engine::ledger::Transfers;
use failwell_store::{
    NewAccount, NewTransfer, PostgresStore, SqliteStore, Store, Synchronous, TransferResult,
};
use sqlx::{Connection, Executor};

/// The settings of a whole bench run.
struct Settings {
    admin_url: String,
    stores: Vec<String>,
    scenarios: Vec<String>,
    n: usize,
    clients: usize,
    reps: usize,
    accounts: usize,
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_owned()).collect()
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
struct Run {
    per_second: f64,
    /// CPU µs per transfer: this process, the database server.
    cpu: (f64, f64),
}

/// Where a run happens: a PostgreSQL database made for it, or a SQLite
/// file.
enum Place {
    Postgres { admin: String, url: String },
    Sqlite { _dir: tempfile::TempDir, url: String },
}

impl Place {
    async fn new(store: &str, admin: &str) -> Self {
        match store {
            "postgres" => {
                let mut conn = sqlx::PgConnection::connect(admin).await.expect("PostgreSQL at DATABASE_URL");
                conn.execute("DROP DATABASE IF EXISTS bench_ledger WITH (FORCE)").await.unwrap();
                conn.execute("CREATE DATABASE bench_ledger").await.unwrap();
                let url = match admin.rsplit_once('/') {
                    Some((server, _)) => format!("{server}/bench_ledger"),
                    None => panic!("DATABASE_URL has no database name"),
                };
                Place::Postgres { admin: admin.into(), url }
            }
            "sqlite" => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
                Place::Sqlite { _dir: dir, url }
            }
            other => panic!("unknown store {other:?} (postgres or sqlite)"),
        }
    }

    async fn drop(self) {
        if let Place::Postgres { admin, .. } = self {
            let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
            conn.execute("DROP DATABASE IF EXISTS bench_ledger WITH (FORCE)").await.unwrap();
        }
    }

    /// Whether the database is a server whose CPU is measured (PostgreSQL).
    fn is_server(&self) -> bool {
        matches!(self, Place::Postgres { .. })
    }
}

/// CPU ms so far of process `pid` (user and system), with `children`
/// also the CPU of its children that have exited and been waited for,
/// from `/proc/PID/stat` (fields 14–17, in clock ticks of 10 ms).
fn cpu_ms(pid: &str, children: bool) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    let own = ticks(11) + ticks(12);
    (if children { own + ticks(13) + ticks(14) } else { own }) * 10
}

/// CPU ms so far of every process named `postgres` (the server and its
/// backends, with the backends that have exited counted in their parent),
/// read from `/proc`.
fn postgres_cpu_ms() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| cpu_ms(&pid, true))
        .sum()
}

/// CPU ms so far of this process and, on PostgreSQL, of the server.
fn cpu_now(place: &Place) -> (u64, u64) {
    let server = if place.is_server() { postgres_cpu_ms() } else { 0 };
    (cpu_ms(&std::process::id().to_string(), false), server)
}

/// The `n` transfers of a run: `(debit, credit, amount)`, amounts 1–100.
fn transfers(scenario: &str, n: usize, accounts: usize) -> Vec<(usize, usize, i64)> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let amount = 1 + (next() % 100) as i64;
            match scenario {
                "hot" => (0, 1, amount),
                _ => {
                    let from = (next() as usize) % accounts;
                    let to = (from + 1 + (next() as usize) % (accounts - 1)) % accounts;
                    (from, to, amount)
                }
            }
        })
        .collect()
}

/// The funding each account needs so every transfer is accepted.
fn funding(work: &[(usize, usize, i64)], accounts: usize) -> Vec<i64> {
    let mut need = vec![0; accounts];
    for (from, _, amount) in work {
        need[*from] += amount;
    }
    need
}

/// Runs `clients` tasks that take the next of `work` and apply it with
/// `apply`, and times them.
async fn drive<F, Fut>(work: Arc<Vec<(usize, usize, i64)>>, clients: usize, apply: F) -> f64
where
    F: Fn(usize, (usize, usize, i64)) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let cursor = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (work, cursor, apply) = (work.clone(), cursor.clone(), apply.clone());
        tasks.spawn(async move {
            loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                let Some(t) = work.get(i) else { break };
                apply(i, *t).await;
            }
        });
    }
    while let Some(task) = tasks.join_next().await {
        task.unwrap();
    }
    work.len() as f64 / start.elapsed().as_secs_f64()
}

/// failwell's ledger: accounts opened and funded through the store, the
/// transfers through the engine's batcher, as the HTTP API applies them.
async fn failwell(place: &Place, work: &Arc<Vec<(usize, usize, i64)>>, s: &Settings, accounts: usize) -> Run {
    let store: Store = match place {
        Place::Postgres { url, .. } => PostgresStore::open(url, 10).await.unwrap().into(),
        Place::Sqlite { url, .. } => SqliteStore::open(url, Synchronous::Full).await.unwrap().into(),
    };
    let name = |i: usize| format!("acct-{i}");
    let mut opening = tokio::task::JoinSet::new();
    for chunk in (0..accounts).collect::<Vec<_>>().chunks(accounts.div_ceil(16)) {
        let (store, chunk) = (store.clone(), chunk.to_vec());
        opening.spawn(async move {
            for i in chunk {
                store
                    .open_account(NewAccount { id: name(i), unit: "EUR".into(), floor: Some(0) }, 1)
                    .await
                    .unwrap();
            }
        });
    }
    while opening.join_next().await.is_some() {}
    store.open_account(NewAccount { id: "world".into(), unit: "EUR".into(), floor: None }, 1).await.unwrap();
    let funds: Vec<NewTransfer> = funding(work, accounts)
        .into_iter()
        .enumerate()
        .filter(|(_, need)| *need > 0)
        .map(|(i, need)| pay(format!("fund-{i}"), "world".into(), name(i), need))
        .collect();
    for batch in funds.chunks(1_000) {
        store.transfer(batch.to_vec(), 2).await.unwrap();
    }
    let ledger = Transfers::start(store.clone());
    let before = cpu_now(place);
    let per_second = drive(work.clone(), s.clients, move |i, (from, to, amount)| {
        let ledger = ledger.clone();
        async move {
            let result = ledger.transfer(pay(format!("t-{i}"), name(from), name(to), amount)).await.unwrap();
            assert!(matches!(result, TransferResult::Created(_)), "{result:?}");
        }
    })
    .await;
    let cpu = cpu_per_transfer(before, cpu_now(place), work.len());
    // Every account holds what it was funded with and received, less
    // what it paid: the balances add up to what the world account paid.
    let world = store.account("world").await.unwrap().unwrap();
    let mut held = 0;
    let mut after = String::new();
    loop {
        let page = store.accounts(&after, 1_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.id.clone();
        held += page.iter().filter(|a| a.id != "world").map(|a| a.posted).sum::<i64>();
    }
    assert_eq!(held, -world.posted, "the balances add up");
    store.close().await;
    Run { per_second, cpu }
}

fn pay(id: String, debit: String, credit: String, amount: i64) -> NewTransfer {
    NewTransfer { id, debit_account: debit, credit_account: credit, amount, pending: false, timeout_ms: None }
}

fn cpu_per_transfer(before: (u64, u64), after: (u64, u64), n: usize) -> (f64, f64) {
    let per = |ms: u64| ms as f64 * 1000.0 / n as f64;
    (per(after.0 - before.0), per(after.1.saturating_sub(before.1)))
}

/// One naive transfer in `$tx` (a transaction begun by the caller): the
/// debit account's balance read (`$lock`: `FOR UPDATE` where the database
/// has it), both balances updated, the transfer inserted under its unique
/// id.
macro_rules! naive_transfer {
    ($tx:expr, $lock:literal, $i:expr, $from:expr, $to:expr, $amount:expr) => {{
        let balance: i64 =
            sqlx::query_scalar(concat!("SELECT balance FROM naive_accounts WHERE id = $1", $lock))
                .bind(format!("acct-{}", $from))
                .fetch_one(&mut *$tx)
                .await
                .unwrap();
        assert!(balance >= $amount);
        for (id, delta) in [($from, -$amount), ($to, $amount)] {
            sqlx::query("UPDATE naive_accounts SET balance = balance + $2 WHERE id = $1")
                .bind(format!("acct-{id}"))
                .bind(delta)
                .execute(&mut *$tx)
                .await
                .unwrap();
        }
        sqlx::query("INSERT INTO naive_transfers VALUES ($1, $2, $3, $4)")
            .bind(format!("t-{}", $i))
            .bind(format!("acct-{}", $from))
            .bind(format!("acct-{}", $to))
            .bind($amount)
            .execute(&mut *$tx)
            .await
            .unwrap();
    }};
}

/// The naive pattern's tables.
const NAIVE_SCHEMA: [&str; 2] = [
    "CREATE TABLE naive_accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL)",
    "CREATE TABLE naive_transfers (id TEXT PRIMARY KEY, debit TEXT NOT NULL, credit TEXT NOT NULL, \
     amount BIGINT NOT NULL)",
];

/// The naive pattern, on the same database: its own two tables, one
/// transaction per transfer, a connection per client (one on SQLite,
/// which has one writer).
async fn naive(place: &Place, work: &Arc<Vec<(usize, usize, i64)>>, s: &Settings, accounts: usize) -> Run {
    let need = funding(work, accounts);
    let (before, per_second) = match place {
        Place::Postgres { url, .. } => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(s.clients as u32)
                .connect(url)
                .await
                .unwrap();
            for statement in NAIVE_SCHEMA {
                pool.execute(statement).await.unwrap();
            }
            let ids: Vec<String> = (0..accounts).map(|i| format!("acct-{i}")).collect();
            sqlx::query("INSERT INTO naive_accounts SELECT * FROM unnest($1::text[], $2::bigint[])")
                .bind(ids)
                .bind(need)
                .execute(&pool)
                .await
                .unwrap();
            let before = cpu_now(place);
            let per_second = drive(work.clone(), s.clients, move |i, (from, to, amount)| {
                let pool = pool.clone();
                async move {
                    let mut tx = pool.begin().await.unwrap();
                    naive_transfer!(tx, " FOR UPDATE", i, from, to, amount);
                    tx.commit().await.unwrap();
                }
            })
            .await;
            (before, per_second)
        }
        Place::Sqlite { url, .. } => {
            let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
            let options = options
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                .busy_timeout(std::time::Duration::from_secs(60));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .unwrap();
            for statement in NAIVE_SCHEMA {
                pool.execute(statement).await.unwrap();
            }
            let mut tx = pool.begin().await.unwrap();
            for (i, balance) in need.iter().enumerate() {
                sqlx::query("INSERT INTO naive_accounts VALUES ($1, $2)")
                    .bind(format!("acct-{i}"))
                    .bind(balance)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            tx.commit().await.unwrap();
            let before = cpu_now(place);
            let per_second = drive(work.clone(), s.clients, move |i, (from, to, amount)| {
                let pool = pool.clone();
                async move {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                    naive_transfer!(tx, "", i, from, to, amount);
                    tx.commit().await.unwrap();
                }
            })
            .await;
            (before, per_second)
        }
    };
    Run { per_second, cpu: cpu_per_transfer(before, cpu_now(place), work.len()) }
}

fn median_range(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[tokio::main]
async fn main() {
    let s = Settings {
        admin_url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        stores: list("STORES", "postgres,sqlite"),
        scenarios: list("SCENARIOS", "hot,spread"),
        n: env("N", 20_000),
        clients: env("CLIENTS", 64),
        reps: env("REPS", 5),
        accounts: env("ACCOUNTS", 10_000),
    };
    println!(
        "ledger: {} transfers per run from {} clients, {} repetitions, interleaved",
        s.n, s.clients, s.reps
    );
    let mut results: HashMap<(String, String, &str), Vec<Run>> = HashMap::new();
    for rep in 0..s.reps {
        for store in &s.stores {
            for scenario in &s.scenarios {
                let accounts = if scenario == "hot" { 2 } else { s.accounts };
                let work = Arc::new(transfers(scenario, s.n, accounts));
                let order: [&str; 2] =
                    if rep % 2 == 0 { ["failwell", "naive"] } else { ["naive", "failwell"] };
                for who in order {
                    let place = Place::new(store, &s.admin_url).await;
                    let run = match who {
                        "failwell" => failwell(&place, &work, &s, accounts).await,
                        _ => naive(&place, &work, &s, accounts).await,
                    };
                    place.drop().await;
                    println!(
                        "rep {} {store:<8} {scenario:<6} {who:<8} {:>8.0} transfers/s  cpu µs/transfer: bench {:>6.1}, server {:>6.1}",
                        rep + 1,
                        run.per_second,
                        run.cpu.0,
                        run.cpu.1
                    );
                    results.entry((store.clone(), scenario.clone(), who)).or_default().push(run);
                }
            }
        }
    }
    println!("\nmedian (range) over {} repetitions", s.reps);
    for store in &s.stores {
        for scenario in &s.scenarios {
            let of = |who: &str| results[&(store.clone(), scenario.clone(), who)].clone();
            let (f, n) = (of("failwell"), of("naive"));
            let rates = |runs: &[Run]| median_range(&runs.iter().map(|r| r.per_second).collect::<Vec<_>>());
            let ratios: Vec<f64> = f.iter().zip(&n).map(|(a, b)| a.per_second / b.per_second).collect();
            for (who, runs) in [("failwell", &f), ("naive", &n)] {
                let (m, lo, hi) = rates(runs);
                let cpu = |pick: fn(&Run) -> f64| median_range(&runs.iter().map(pick).collect::<Vec<_>>()).0;
                println!(
                    "{store:<8} {scenario:<6} {who:<8} {m:>8.0} ({lo:.0}–{hi:.0}) transfers/s, cpu µs/transfer: bench {:.1}, server {:.1}",
                    cpu(|r| r.cpu.0),
                    cpu(|r| r.cpu.1)
                );
            }
            let (m, lo, hi) = median_range(&ratios);
            println!("{store:<8} {scenario:<6} failwell / naive {m:.2} ({lo:.2}–{hi:.2})");
        }
    }
}
