//! The relay on PostgreSQL, end to end: messages an application committed
//! to the outbox, delivered by `failwell serve` processes as one HTTP POST
//! each to a local no-op sink, with every outcome recorded (the attempt in
//! the history, the message and its operation settled). Beside it, in the
//! same run and against the same sink and PostgreSQL server, the peer
//! queues of a peers harness (`run.sh http`), when one is given.
//!
//! ```sh
//! cargo build --release -p failwell
//! cargo bench --manifest-path bench/Cargo.toml --bench pg_relay
//! ```
//!
//! Settings (environment):
//! - `DATABASE_URL`: an admin URL of the server (default
//!   `postgres://postgres@127.0.0.1:5432/postgres`); each run creates and
//!   drops the database `bench_failwell` there.
//! - `N` messages per drain (default 50000), `REPS` runs of each
//!   configuration, interleaved (default 3).
//! - `CONFIGS`: failwell's configurations, comma-separated, each
//!   `PROCESSESxCONCURRENCY/BATCH/BULKHEAD`: relay processes, messages
//!   worked at once and per claim by each (`[relay] concurrency` and
//!   `batch_size`), and calls the sink's provider takes at once (its
//!   `bulkhead.max_concurrent`; `max_waiting` is the concurrency, so no
//!   claimed message is deferred for want of a place to wait). failwell's
//!   own defaults are `1x64/64/64`. Without `CONFIGS`: `WORKERS` process
//!   counts (default `1,2,4`), each with `RELAY_CONCURRENCY`, `RELAY_BATCH`
//!   and `SINK_BULKHEAD` (default 64 each).
//! - `SINK=nginx`: deliver to nginx (Debian's `nginx-light`, one worker,
//!   `return 200`, no access log) instead of this process's own sink, so
//!   that no sink code of the project is in the comparison. A drain then
//!   ends when no message is pending, and is checked in the database (every
//!   operation succeeded with exactly one call); there is no latency phase,
//!   and the sink's CPU is nginx's.
//! - `LATENCY_RATE` messages/s and `LATENCY_SECONDS` of the latency phase
//!   (default 1000 for 5 s), `FAILWELL_BIN` (default
//!   `target/release/failwell`).
//! - `PEERS_DIR`: a peers harness directory; without it only failwell is
//!   measured. Its `run.sh http` runs once in every repetition (`REPS=1`,
//!   `PEER_SINK_URL` set to this sink, `PEER_PG_URL` to `DATABASE_URL`, the
//!   same `N`), after failwell's configurations in odd repetitions and
//!   before them in even ones, so that a machine growing faster or slower
//!   during the run favours neither side. Each repetition then reports
//!   failwell's best rate over the best peer's.
//!
//! A drain: the processes start and become healthy on an empty outbox; N
//! messages (about 150 bytes of JSON each) are committed in one
//! transaction; the clock runs from that commit until the sink has had N
//! requests **and** no message is pending. Then every operation must have
//! succeeded and the sink must have seen every message exactly once, or the
//! run fails. The latency phase that follows commits one message per
//! transaction at `LATENCY_RATE` and measures from each commit's return to
//! the message's arrival at the sink (p50/p99).
//!
//! Beside the rate, each drain reports the CPU time spent per delivered
//! message (µs) by the `failwell serve` processes, by the PostgreSQL
//! backends serving them and by this process (the sink), read from
//! `/proc/PID/stat` at the drain's start and end: it moves far less than
//! the rate with what else the machine is doing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use hdrhistogram::Histogram;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const DATABASE: &str = "bench_failwell";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The no-op sink: answers 200 to every POST, counts them, and during the
/// latency phase notes when each `seq` arrived.
#[derive(Default)]
struct Sink {
    requests: AtomicU64,
    /// `seq` → arrivals: a message seen twice is a double delivery.
    seen: Mutex<HashMap<u64, u32>>,
    /// `seq` → first arrival, while `timing` is set.
    arrivals: Mutex<HashMap<u64, Instant>>,
    timing: AtomicBool,
}

impl Sink {
    fn reset(&self) {
        self.requests.store(0, Ordering::SeqCst);
        self.seen.lock().unwrap().clear();
        self.arrivals.lock().unwrap().clear();
    }

    /// `"seq":N` in a JSON body.
    fn seq(body: &[u8]) -> Option<u64> {
        let text = std::str::from_utf8(body).ok()?;
        let at = text.find("\"seq\":")? + 6;
        let digits: String =
            text[at..].chars().skip_while(|c| *c == ' ').take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }
}

async fn hook(State(sink): State<Arc<Sink>>, body: Bytes) -> &'static str {
    let arrived = Instant::now();
    if let Some(seq) = Sink::seq(&body) {
        *sink.seen.lock().unwrap().entry(seq).or_default() += 1;
        if sink.timing.load(Ordering::Relaxed) {
            sink.arrivals.lock().unwrap().entry(seq).or_insert(arrived);
        }
    }
    sink.requests.fetch_add(1, Ordering::Relaxed);
    "{}"
}

/// Starts the sink; returns its `http://127.0.0.1:PORT/hook` URL.
async fn start_sink(sink: Arc<Sink>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(sink);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn database_url(admin: &str, database: &str) -> String {
    let (base, query) = admin.split_once('?').map_or((admin, None), |(b, q)| (b, Some(q)));
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    match query {
        Some(q) => format!("{root}/{database}?{q}"),
        None => format!("{root}/{database}"),
    }
}

async fn admin(url: &str, sql: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `failwell serve` process and the directory of its config and log.
struct Process {
    child: Child,
    dir: tempfile::TempDir,
}

/// One of failwell's configurations (see `CONFIGS`).
#[derive(Clone, Copy, Debug)]
struct Config {
    processes: usize,
    concurrency: u32,
    batch: u32,
    bulkhead: usize,
}

impl Config {
    /// `PROCESSESxCONCURRENCY/BATCH/BULKHEAD`.
    fn parse(text: &str) -> Self {
        let parse = || {
            let (processes, rest) = text.trim().split_once('x')?;
            let mut numbers = rest.split('/');
            let mut next = || numbers.next()?.parse::<u32>().ok();
            Some(Self {
                processes: processes.parse().ok()?,
                concurrency: next()?,
                batch: next()?,
                bulkhead: next()? as usize,
            })
        };
        parse().unwrap_or_else(|| panic!("CONFIGS: {text:?} is not PROCESSESxCONCURRENCY/BATCH/BULKHEAD"))
    }

    /// `CONFIGS`, or `WORKERS` with the three single settings.
    fn from_env() -> Vec<Self> {
        if let Ok(configs) = std::env::var("CONFIGS") {
            return configs.split(',').map(Self::parse).collect();
        }
        env_or("WORKERS", "1,2,4".to_owned())
            .split(',')
            .map(|w| Self {
                processes: w.trim().parse().expect("WORKERS: a comma-separated list of process counts"),
                concurrency: env_or("RELAY_CONCURRENCY", 64),
                batch: env_or("RELAY_BATCH", 64),
                bulkhead: env_or("SINK_BULKHEAD", 64),
            })
            .collect()
    }
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}/{}/{}", self.processes, self.concurrency, self.batch, self.bulkhead)
    }
}

/// nginx from Debian as the sink: one worker answering 200 to everything,
/// on a free port, with its config and pid in a directory of its own.
struct Nginx {
    master: Child,
    /// Its config, pid and error log; removed when the sink is dropped.
    _dir: tempfile::TempDir,
    url: String,
}

impl Nginx {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path().display();
        let config = format!(
            "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{ access_log off; keepalive_requests 100000; client_body_temp_path {d};\n\
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\"; }} }} }}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let master = Command::new("/usr/sbin/nginx")
            .args(["-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start /usr/sbin/nginx: {e} (apt-get install nginx-light)"));
        let url = format!("http://127.0.0.1:{port}/hook");
        let deadline = Instant::now() + Duration::from_secs(10);
        while reqwest::Client::new().post(&url).send().await.is_err() {
            assert!(Instant::now() < deadline, "nginx did not answer");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { master, _dir: dir, url }
    }

    /// The master's and workers' pids.
    fn pids(&self) -> Vec<u32> {
        let master = self.master.id().unwrap_or(0);
        let children =
            std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
        std::iter::once(master).chain(children.split_whitespace().filter_map(|p| p.parse().ok())).collect()
    }
}

async fn start_process(binary: &PathBuf, database_url: &str, sink_url: &str, config: Config) -> Process {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = sink_url.trim_end_matches("/hook");
    let Config { concurrency, batch, bulkhead, .. } = config;
    let config = format!(
        "database_url = \"{database_url}\"\nlisten = \"127.0.0.1:{port}\"\n\n\
         [relay]\nconcurrency = {concurrency}\nbatch_size = {batch}\n\n\
         [providers.sink]\nbase_url = \"{base}\"\ntimeout_ms = 10000\nbulkhead = {{ max_concurrent = {bulkhead}, max_waiting = {concurrency} }}\n\n\
         [providers.sink.operations.post]\nmethod = \"POST\"\npath = \"/hook\"\nencoding = \"json\"\nreference_field = \"order_id\"\nduplicate_severity = \"harmless\"\ndisagreement = {{ reconcile = \"none\" }}\n"
    );
    std::fs::write(dir.path().join("failwell.toml"), config).unwrap();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(binary)
        .args(["serve", "--config"])
        .arg(dir.path().join("failwell.toml"))
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {}: {e} (build it: cargo build --release -p failwell)", binary.display())
        });
    let health = format!("http://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if reqwest::get(&health).await.is_ok_and(|r| r.status().is_success()) {
            return Process { child, dir };
        }
        let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "failwell did not become healthy:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Process {
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status().await;
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await.is_err() {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            panic!("failwell did not stop within 20 s:\n{log}");
        }
    }
}

/// The enqueue of `from..to` as the outbox contract's plain SQL.
const ENQUEUE: &str = "INSERT INTO failwell_outbox (provider, operation, payload) \
    SELECT 'sink', 'post', jsonb_build_object('order_id', 'ORD-0000000001', 'customer', 'C-12345', \
      'amount_cents', 129900, 'currency', 'EUR', 'note', repeat('y', 40), 'seq', g) \
    FROM generate_series($1::bigint, $2::bigint - 1) g";

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox WHERE state = 'pending'").fetch_one(pool).await.unwrap()
}

/// What one configuration measured.
struct Run {
    /// Messages/s committed through the outbox contract (one transaction).
    enqueue_msgs_s: f64,
    drain_msgs_s: f64,
    /// CPU time per delivered message during the drain (µs).
    cpu: Cpu,
    latency: Histogram<u64>,
}

/// CPU time (µs) per message delivered in a drain, by who spent it: the
/// `failwell serve` processes, the PostgreSQL backends serving them, and
/// this process (the sink, and the checks polling the outbox).
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    failwell: f64,
    postgres: f64,
    sink: f64,
}

/// `application_name` of this benchmark's own connections, whose backends
/// are not counted as the relay's.
const BENCH_APPLICATION: &str = "failwell-bench";

/// CPU time (ms, user and system, all threads) process `pid` has used, from
/// `/proc/PID/stat` (Linux, in USER_HZ ticks of 10 ms); 0 once it is gone.
fn cpu_ms(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) * 10
}

/// CPU used so far (ms) by each process that counts, keyed by pid, with its
/// place in [`Cpu`] (0 failwell, 1 PostgreSQL, 2 the sink: this process,
/// or the `sink` processes when given).
async fn cpu_now(pool: &PgPool, processes: &[Process], sink: &[u32]) -> HashMap<u32, (usize, u64)> {
    let backends: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name <> $1",
    )
    .bind(BENCH_APPLICATION)
    .fetch_all(pool)
    .await
    .unwrap();
    let failwell = processes.iter().filter_map(|p| p.child.id()).map(|pid| (pid, 0));
    let postgres = backends.into_iter().map(|pid| (pid as u32, 1));
    let sink: Vec<u32> = if sink.is_empty() { vec![std::process::id()] } else { sink.to_vec() };
    failwell
        .chain(postgres)
        .chain(sink.into_iter().map(|pid| (pid, 2)))
        .map(|(pid, who)| (pid, (who, cpu_ms(pid))))
        .collect()
}

impl Cpu {
    /// What was spent between two [`cpu_now`] readings, per message of `n`
    /// (a process first seen at the end counts from 0).
    fn between(start: &HashMap<u32, (usize, u64)>, end: &HashMap<u32, (usize, u64)>, n: u64) -> Self {
        let mut ms = [0u64; 3];
        for (pid, (who, at_end)) in end {
            ms[*who] += at_end.saturating_sub(start.get(pid).map_or(0, |(_, at_start)| *at_start));
        }
        let per_msg = |ms: u64| ms as f64 * 1000.0 / n as f64;
        Self { failwell: per_msg(ms[0]), postgres: per_msg(ms[1]), sink: per_msg(ms[2]) }
    }
}

/// One repetition of the peers harness's `run.sh http` (REPS=1) against
/// this sink and server: each peer configuration's name and drain rate
/// (jobs/s). Panics when a peer run fails.
async fn run_peers(dir: &std::path::Path, sink_url: &str, admin_url: &str, n: u64) -> Vec<(String, f64)> {
    let output = Command::new("bash")
        .arg(dir.join("run.sh"))
        .arg("http")
        .env("PEER_SINK_URL", sink_url)
        .env("PEER_PG_URL", admin_url)
        .env("N", n.to_string())
        .env("REPS", "1")
        .stderr(Stdio::inherit())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    print!("{text}");
    assert!(output.status.success(), "the peers harness failed");
    text.lines()
        .filter_map(|line| {
            let name = line.strip_prefix("summary ")?.split_whitespace().next()?;
            let rate = line.split_once("median_drain_jobs_s=")?.1.split_whitespace().next()?.parse().ok()?;
            Some((name.to_owned(), rate))
        })
        .collect()
}

/// One drain of `n` messages by `config`'s processes, then (with our own
/// sink) the latency phase.
async fn run(
    binary: &PathBuf,
    admin_url: &str,
    (sink, sink_url): (&Arc<Sink>, &str),
    nginx: Option<&Nginx>,
    config: Config,
    n: u64,
) -> Run {
    let sink_pids = nginx.map_or(Vec::new(), Nginx::pids);
    admin(admin_url, &format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")).await;
    admin(admin_url, &format!("CREATE DATABASE {DATABASE}")).await;
    let url = database_url(admin_url, DATABASE);
    let mut processes = Vec::new();
    for _ in 0..config.processes {
        processes.push(start_process(binary, &url, sink_url, config).await);
    }
    let options: PgConnectOptions = url.parse().unwrap();
    let pool = PgPool::connect_with(options.application_name(BENCH_APPLICATION)).await.unwrap();
    sink.reset();

    let enqueue_started = Instant::now();
    let mut tx = pool.begin().await.unwrap();
    for from in (0..n).step_by(5_000) {
        sqlx::query(ENQUEUE)
            .bind(from as i64)
            .bind((from + 5_000).min(n) as i64)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let enqueue = enqueue_started.elapsed();
    let started = Instant::now();
    let cpu_at_start = cpu_now(&pool, &processes, &sink_pids).await;
    while nginx.is_none() && sink.requests.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(started.elapsed() < Duration::from_secs(600), "the drain took over 10 minutes");
    }
    while pending(&pool).await > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(started.elapsed() < Duration::from_secs(600), "the drain took over 10 minutes");
    }
    let drain = started.elapsed();
    let cpu = Cpu::between(&cpu_at_start, &cpu_now(&pool, &processes, &sink_pids).await, n);
    check(&pool, nginx.is_none().then_some(&**sink), n, "the drain").await;
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
    if nginx.is_none() {
        latency_phase(&pool, sink, n, &mut latency).await;
    }
    pool.close().await;
    for process in processes {
        process.stop().await;
    }
    admin(admin_url, &format!("DROP DATABASE {DATABASE}")).await;
    Run {
        enqueue_msgs_s: n as f64 / enqueue.as_secs_f64(),
        drain_msgs_s: n as f64 / drain.as_secs_f64(),
        cpu,
        latency,
    }
}

/// The latency phase after a drain of `n`: one message per transaction at
/// `LATENCY_RATE` for `LATENCY_SECONDS`, each from its commit to its
/// arrival at our sink, into `latency` (µs).
async fn latency_phase(pool: &PgPool, sink: &Arc<Sink>, n: u64, latency: &mut Histogram<u64>) {
    let rate: u64 = env_or("LATENCY_RATE", 1_000);
    let count = rate * env_or::<u64>("LATENCY_SECONDS", 5);
    sink.timing.store(true, Ordering::SeqCst);
    let commits = Arc::new(Mutex::new(HashMap::with_capacity(count as usize)));
    let paced_start = Instant::now();
    let enqueuers: Vec<_> = (0..4u64)
        .map(|lane| {
            let (pool, commits) = (pool.clone(), commits.clone());
            tokio::spawn(async move {
                for seq in (n + lane..n + count).step_by(4) {
                    let due = paced_start + Duration::from_secs_f64((seq - n) as f64 / rate as f64);
                    tokio::time::sleep_until(due.into()).await;
                    sqlx::query(ENQUEUE).bind(seq as i64).bind(seq as i64 + 1).execute(&pool).await.unwrap();
                    commits.lock().unwrap().insert(seq, Instant::now());
                }
            })
        })
        .collect();
    for enqueuer in enqueuers {
        enqueuer.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while sink.arrivals.lock().unwrap().len() < count as usize {
        assert!(Instant::now() < deadline, "the latency phase's messages did not all arrive within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sink.timing.store(false, Ordering::SeqCst);
    while pending(pool).await > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check(pool, Some(sink), n + count, "the latency phase").await;
    let arrivals = sink.arrivals.lock().unwrap();
    for (seq, committed) in commits.lock().unwrap().iter() {
        let us = arrivals[seq].saturating_duration_since(*committed).as_micros() as u64;
        latency.record(us.max(1)).unwrap();
    }
}

/// Every one of the `total` messages succeeded with one call, and reached
/// our sink (when it is the sink) once.
async fn check(pool: &PgPool, sink: Option<&Sink>, total: u64, what: &str) {
    let succeeded: i64 = sqlx::query_scalar("SELECT count(*) FROM operations WHERE status = 'succeeded'")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(succeeded as u64, total, "{what}: operations that succeeded");
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts WHERE kind = 'call'")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(calls as u64, total, "{what}: calls made");
    let Some(sink) = sink else { return };
    let seen = sink.seen.lock().unwrap();
    let twice = seen.values().filter(|n| **n > 1).count();
    assert_eq!((seen.len() as u64, twice), (total, 0), "{what}: messages the sink saw, and saw twice");
}

fn median_range(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    format!("{median:>7.0} ({:.0}–{:.0})", values[0], values[values.len() - 1])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench` asks every bench binary for its list
    }
    let admin_url: String = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let n: u64 = env_or("N", 50_000);
    let reps: usize = env_or("REPS", 3);
    let configs = Config::from_env();
    let binary = std::env::var_os("FAILWELL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/failwell")));
    let sink = Arc::new(Sink::default());
    let nginx = match std::env::var("SINK").as_deref() {
        Ok("nginx") => Some(Nginx::start().await),
        Ok(other) => panic!("SINK: {other:?}; only \"nginx\", or unset for this process's own sink"),
        Err(_) => None,
    };
    let sink_url = match &nginx {
        Some(nginx) => nginx.url.clone(),
        None => start_sink(sink.clone()).await,
    };
    println!("sink {sink_url}, N = {n}, {reps} runs of each configuration, interleaved");

    let peers_dir = std::env::var_os("PEERS_DIR").map(PathBuf::from);
    let mut results: Vec<(Vec<f64>, Histogram<u64>, Vec<Cpu>)> = configs
        .iter()
        .map(|_| (Vec::new(), Histogram::new_with_bounds(1, 600_000_000, 3).unwrap(), Vec::new()))
        .collect();
    // Peer name → its drain rate in each repetition.
    let mut peers: Vec<(String, Vec<f64>)> = Vec::new();
    // Per repetition: failwell's best configuration / the best peer.
    let mut leads = Vec::new();
    for rep in 1..=reps {
        // Odd repetitions measure failwell first, even ones the peers first,
        // so that a machine getting faster or slower favours neither.
        let peers_first = rep % 2 == 0;
        let mut rep_peers = Vec::new();
        if peers_first && let Some(dir) = &peers_dir {
            rep_peers = run_peers(dir, &sink_url, &admin_url, n).await;
        }
        let mut best = 0f64;
        for (i, config) in configs.iter().enumerate() {
            let r = run(&binary, &admin_url, (&sink, &sink_url), nginx.as_ref(), *config, n).await;
            println!(
                "rep={rep} failwell config={config} enqueue_msgs_s={:.0} drain_msgs_s={:.0} latency_p50_ms={:.2} \
                 latency_p99_ms={:.2} cpu_us_per_msg failwell={:.0} postgres={:.0} sink={:.0}",
                r.enqueue_msgs_s,
                r.drain_msgs_s,
                r.latency.value_at_quantile(0.5) as f64 / 1000.0,
                r.latency.value_at_quantile(0.99) as f64 / 1000.0,
                r.cpu.failwell,
                r.cpu.postgres,
                r.cpu.sink,
            );
            best = best.max(r.drain_msgs_s);
            results[i].0.push(r.drain_msgs_s);
            results[i].1.add(&r.latency).unwrap();
            results[i].2.push(r.cpu);
        }
        if !peers_first && let Some(dir) = &peers_dir {
            rep_peers = run_peers(dir, &sink_url, &admin_url, n).await;
        }
        let best_peer = rep_peers.iter().map(|(_, rate)| *rate).fold(0f64, f64::max);
        for (name, rate) in rep_peers {
            match peers.iter_mut().find(|(known, _)| *known == name) {
                Some((_, rates)) => rates.push(rate),
                None => peers.push((name, vec![rate])),
            }
        }
        if best_peer > 0.0 {
            println!("rep={rep} failwell's best / the best peer = {:.2}", best / best_peer);
            leads.push(best / best_peer);
        }
    }

    println!(
        "\nsummary, messages/s delivered end to end (median of {reps}, range), commit-to-delivery latency, \
         CPU per message in the drain (median µs: failwell, PostgreSQL, sink):"
    );
    for (config, (rates, latency, cpu)) in configs.iter().zip(results.iter_mut()) {
        let median = |of: fn(&Cpu) -> f64| {
            let mut values: Vec<f64> = cpu.iter().map(of).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        println!(
            "failwell {config}: {} msgs/s   p50 {:.2} ms  p99 {:.2} ms   cpu {:.0} / {:.0} / {:.0} µs",
            median_range(rates),
            latency.value_at_quantile(0.5) as f64 / 1000.0,
            latency.value_at_quantile(0.99) as f64 / 1000.0,
            median(|c| c.failwell),
            median(|c| c.postgres),
            median(|c| c.sink),
        );
    }
    for (name, rates) in &mut peers {
        println!("peer {name:<10}: {} msgs/s", median_range(rates));
    }
    if !leads.is_empty() {
        println!(
            "failwell's best configuration / the best peer, per repetition: {}",
            leads.iter().map(|l| format!("{l:.2}")).collect::<Vec<_>>().join(", ")
        );
    }
}
