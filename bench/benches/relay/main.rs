//! The relay on PostgreSQL and on MySQL/MariaDB, end to end: messages an application committed
//! to the outbox, delivered by `failwell serve` processes as one HTTP POST
//! each to a local no-op sink, with every outcome recorded (the attempt in
//! the history, the message and its operation settled). Beside it, in the
//! same run and against the same sink and PostgreSQL server, the peer
//! queues of a peers harness (`run.sh http`), when one is given.
//!
//! ```sh
//! cargo build --release -p failwell
//! cargo bench --manifest-path bench/Cargo.toml --bench relay
//! ```
//!
//! Settings (environment):
//! - `DATABASE_URL`: an admin URL of the server (default
//!   `postgres://postgres@127.0.0.1:5432/postgres`); each run creates and
//!   drops the database `bench_failwell` there. `MYSQL_URL` the same for
//!   MySQL or MariaDB (default `mysql://root@127.0.0.1:3306/test`).
//! - `STORES`: the databases each configuration drains on, in turn,
//!   comma-separated: `postgres` (the default), `mysql`. On PostgreSQL the
//!   messages are committed through the outbox contract's plain SQL
//!   (`failwell_enqueue`, 50,000 intents a statement), on MySQL through
//!   failwell's Rust API (`Outbox::enqueue`), each time in one transaction.
//! - `COMMIT_LIMIT=1`: in every repetition, before the drains, measure each
//!   store's server's limit for single-row commits (one-row `INSERT`s, each
//!   its own transaction, for 5 s from 1 and from 16 connections).
//! - `N` messages per drain (default 50000), `REPS` runs of each
//!   configuration, interleaved (default 3).
//! - `CONFIGS`: failwell's configurations, comma-separated, each
//!   `PROCESSESxCONCURRENCY/BATCH/BULKHEAD`: relay processes, messages
//!   worked at once and per claim by each (`[relay] concurrency` and
//!   `batch_size`), and calls the sink's provider takes at once (its
//!   `bulkhead.max_concurrent`; `max_waiting` is the concurrency, so no
//!   claimed message is deferred for want of a place to wait). failwell's
//!   own defaults are `1x128/128/64`. Without `CONFIGS`: `WORKERS` process
//!   counts (default `1,2,4`), each with `RELAY_CONCURRENCY`, `RELAY_BATCH`
//!   and `SINK_BULKHEAD` (default 128, 128 and 64, failwell's defaults).
//! - `SINK=nginx`: deliver to nginx (Debian's `nginx-light`, one worker,
//!   `return 200`, no access log) instead of this process's own sink, so
//!   that no sink code of the project is in the comparison. A drain then
//!   ends when no message is pending, and is checked in the database (every
//!   operation succeeded with exactly one call); there is no latency phase,
//!   and the sink's CPU is nginx's.
//! - `BACKLOG=1`: start failwell's processes only once the messages are
//!   committed and `ANALYZE` has counted them, as after an outage, instead
//!   of before the enqueue (a first start and stop migrates the database).
//!   The drain is timed from the processes' start.
//! - `INSERT_LATENCY=N`: after each drain on PostgreSQL, N single-row
//!   transactions through the outbox contract (an `INSERT` into the view
//!   `failwell_outbox`) alternating with N into a
//!   plain queue table (pgmq's layout), each timed from `BEGIN` to its
//!   `COMMIT`'s return: p50 and p99 of both.
//! - `LATENCY_RATE` messages/s and `LATENCY_SECONDS` of the latency phase
//!   (default 1000 for 5 s), `FAILWELL_BIN` (default
//!   `target/release/failwell`).
//! - `AWA_WORKERS=N`: awa 0.6 as a peer (`bench/awa`, a project of its own,
//!   built by `cargo run` at its first run), its queue running N handlers
//!   at once, each POSTing a job to this sink with awa's HTTP worker; once
//!   in every repetition, where the peers harness runs, with its rates, CPU
//!   per message (awa's process and its PostgreSQL backends) and WAL.
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
//! message (µs) by the `failwell serve` processes, by the database server
//! (PostgreSQL's backends serving them; MySQL's whole server process) and by this process (the sink), read from
//! `/proc/PID/stat` at the drain's start and end: it moves far less than
//! the rate with what else the machine is doing.
//! On PostgreSQL it also reports the WAL written per message by the
//! enqueue and by the drain (`pg_current_wal_lsn` before and after each:
//! the whole server's WAL, so nothing else should write to it meanwhile),
//! and the checkpoints PostgreSQL started during the drain
//! (`checkpoints_in_drain`): after a checkpoint, the first change of each
//! page writes the whole page, so such a drain writes more WAL.

mod cpu;
mod proc_stat;
mod process;
mod sink;
mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::process::Command;

use cpu::{Cpu, cpu_now};
use process::start_process;
use sink::{Nginx, Sink, start_sink};
use store::{Db, Server};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One of failwell's configurations (see `CONFIGS`).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub processes: usize,
    pub concurrency: u32,
    pub batch: u32,
    pub bulkhead: usize,
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
                concurrency: env_or("RELAY_CONCURRENCY", 128),
                batch: env_or("RELAY_BATCH", 128),
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

/// What one configuration measured.
struct Run {
    /// Messages/s committed through the outbox contract (one transaction).
    enqueue_msgs_s: f64,
    drain_msgs_s: f64,
    /// CPU time per delivered message during the drain (µs).
    cpu: Cpu,
    /// WAL bytes per message written by the enqueue and by the drain
    /// (PostgreSQL only).
    wal: Option<(f64, f64)>,
    /// Checkpoints PostgreSQL started during the drain (PostgreSQL only).
    checkpoints: Option<u64>,
    /// With `INSERT_LATENCY`: single-row transactions' latency (µs) through
    /// the contract and into a plain queue table.
    inserts: Option<(Histogram<u64>, Histogram<u64>)>,
    latency: Histogram<u64>,
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

/// The peers of one repetition (the harness in `PEERS_DIR`, awa with
/// `AWA_WORKERS`), each with its drain rate.
async fn run_all_peers(
    rep: usize,
    peers_dir: Option<&std::path::Path>,
    (sink_url, admin_url): (&str, &str),
    n: u64,
) -> Vec<(String, f64)> {
    let mut rates = match peers_dir {
        Some(dir) => run_peers(dir, sink_url, admin_url, n).await,
        None => Vec::new(),
    };
    if let Ok(workers) = std::env::var("AWA_WORKERS") {
        let output = Command::new("cargo")
            .args(["run", "--quiet", "--release", "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/awa/Cargo.toml"))
            .env("DATABASE_URL", admin_url)
            .env("PEER_SINK_URL", sink_url)
            .env("N", n.to_string())
            .env("AWA_WORKERS", &workers)
            .stderr(Stdio::inherit())
            .output()
            .await
            .unwrap();
        assert!(output.status.success(), "the awa peer failed");
        let line = String::from_utf8_lossy(&output.stdout);
        println!("rep={rep} awa {}", line.trim());
        let result: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        rates.push((format!("awa-{workers}"), result["drain_jobs_s"].as_f64().unwrap()));
    }
    rates
}

/// One drain of `n` messages by `config`'s processes on `server`, then
/// (with our own sink) the latency phase.
async fn run(
    binary: &PathBuf,
    server: &Server,
    (sink, sink_url): (&Arc<Sink>, &str),
    nginx: Option<&Nginx>,
    config: Config,
    n: u64,
) -> Run {
    let sink_pids = nginx.map_or(Vec::new(), Nginx::pids);
    server.recreate().await;
    let url = server.database_url();
    let backlog = env_or("BACKLOG", 0) == 1;
    let mut processes = Vec::new();
    if backlog {
        // failwell migrates the database as it starts.
        start_process(binary, &url, sink_url, config).await.stop().await;
    } else {
        for _ in 0..config.processes {
            processes.push(start_process(binary, &url, sink_url, config).await);
        }
    }
    let db = server.connect().await;
    sink.reset();

    let wal_at_start = db.wal_position().await;
    let enqueue_started = Instant::now();
    db.enqueue(0, n).await;
    let enqueue = enqueue_started.elapsed();
    if backlog {
        db.analyze().await;
    }
    let wal_enqueued = db.wal_position().await;
    let checkpoints_at_start = db.checkpoints().await;
    let started = Instant::now();
    if backlog {
        for _ in 0..config.processes {
            processes.push(start_process(binary, &url, sink_url, config).await);
        }
    }
    let cpu_at_start = cpu_now(&db, &processes, &sink_pids).await;
    while nginx.is_none() && sink.requests.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(started.elapsed() < Duration::from_secs(600), "the drain took over 10 minutes");
    }
    while db.any_pending().await {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(started.elapsed() < Duration::from_secs(600), "the drain took over 10 minutes");
    }
    let drain = started.elapsed();
    let cpu = Cpu::between(&cpu_at_start, &cpu_now(&db, &processes, &sink_pids).await, n);
    let wal = match (wal_at_start, wal_enqueued, db.wal_position().await) {
        (Some(start), Some(enqueued), Some(end)) => {
            Some(((enqueued - start) as f64 / n as f64, (end - enqueued) as f64 / n as f64))
        }
        _ => None,
    };
    let checkpoints = checkpoints_at_start.zip(db.checkpoints().await).map(|(start, end)| end - start);
    check(&db, nginx.is_none().then_some(&**sink), n, "the drain").await;
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
    if nginx.is_none() {
        latency_phase(&db, sink, n, &mut latency).await;
    }
    let inserts = match env_or("INSERT_LATENCY", 0usize) {
        0 => None,
        count => db.insert_latency(count).await,
    };
    db.close().await;
    for process in processes {
        process.stop().await;
    }
    server.drop_database().await;
    Run {
        enqueue_msgs_s: n as f64 / enqueue.as_secs_f64(),
        drain_msgs_s: n as f64 / drain.as_secs_f64(),
        cpu,
        wal,
        checkpoints,
        latency,
        inserts,
    }
}

/// The latency phase after a drain of `n`: one message per transaction at
/// `LATENCY_RATE` for `LATENCY_SECONDS`, each from its commit to its
/// arrival at our sink, into `latency` (µs).
async fn latency_phase(db: &Db, sink: &Arc<Sink>, n: u64, latency: &mut Histogram<u64>) {
    let rate: u64 = env_or("LATENCY_RATE", 1_000);
    let count = rate * env_or::<u64>("LATENCY_SECONDS", 5);
    sink.timing.store(true, Ordering::SeqCst);
    let commits = Arc::new(Mutex::new(HashMap::with_capacity(count as usize)));
    let paced_start = Instant::now();
    let enqueuers: Vec<_> = (0..4u64)
        .map(|lane| {
            let (db, commits) = (db.clone(), commits.clone());
            tokio::spawn(async move {
                for seq in (n + lane..n + count).step_by(4) {
                    let due = paced_start + Duration::from_secs_f64((seq - n) as f64 / rate as f64);
                    tokio::time::sleep_until(due.into()).await;
                    db.enqueue(seq, seq + 1).await;
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
    while db.any_pending().await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check(db, Some(sink), n + count, "the latency phase").await;
    let arrivals = sink.arrivals.lock().unwrap();
    for (seq, committed) in commits.lock().unwrap().iter() {
        let us = arrivals[seq].saturating_duration_since(*committed).as_micros() as u64;
        latency.record(us.max(1)).unwrap();
    }
}

/// Every one of the `total` messages succeeded with one call, and reached
/// our sink (when it is the sink) once.
async fn check(db: &Db, sink: Option<&Sink>, total: u64, what: &str) {
    let (succeeded, calls) = db.outcomes().await;
    assert_eq!(succeeded as u64, total, "{what}: operations that succeeded");
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

/// `STORES`: the servers each configuration drains on.
fn servers(admin_url: &str) -> Vec<Server> {
    let mysql_url = env_or("MYSQL_URL", "mysql://root@127.0.0.1:3306/test".to_owned());
    env_or("STORES", "postgres".to_owned())
        .split(',')
        .map(|name| match name.trim() {
            "postgres" => Server::Postgres(admin_url.to_owned()),
            "mysql" => Server::MySql(mysql_url.clone()),
            other => panic!("STORES: {other:?} is neither postgres nor mysql"),
        })
        .collect()
}

/// Each server's limit for single-row commits, from 1 and 16 connections.
async fn commit_limits(servers: &[Server], rep: usize, limits: &mut HashMap<String, Vec<f64>>) {
    for server in servers {
        for connections in [1, 16] {
            let rate = server.commit_limit(connections, 5).await;
            println!(
                "rep={rep} store={} single_row_commits_s connections={connections} rate={rate:.0}",
                server.name()
            );
            limits
                .entry(format!("{} from {connections:>2} connections", server.name()))
                .or_default()
                .push(rate);
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench` asks every bench binary for its list
    }
    let admin_url: String = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let servers = servers(&admin_url);
    let n: u64 = env_or("N", 50_000);
    let reps: usize = env_or("REPS", 3);
    let measure_commits = env_or("COMMIT_LIMIT", 0) == 1;
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
    // Every (server, configuration), in the order each repetition runs them.
    let runs: Vec<(&Server, Config)> =
        configs.iter().flat_map(|config| servers.iter().map(move |server| (server, *config))).collect();
    // Per (server, configuration): drain rates, latency, CPU, and per run
    // [enqueue msgs/s, enqueue WAL bytes/msg, drain WAL bytes/msg].
    #[allow(clippy::type_complexity)]
    let mut results: Vec<(Vec<f64>, Histogram<u64>, Vec<Cpu>, Vec<[f64; 3]>)> = runs
        .iter()
        .map(|_| (Vec::new(), Histogram::new_with_bounds(1, 600_000_000, 3).unwrap(), Vec::new(), Vec::new()))
        .collect();
    let mut limits: HashMap<String, Vec<f64>> = HashMap::new();
    // Peer name → its drain rate in each repetition.
    let mut peers: Vec<(String, Vec<f64>)> = Vec::new();
    // Per repetition: failwell's best configuration on PostgreSQL / the best peer.
    let mut leads = Vec::new();
    for rep in 1..=reps {
        if measure_commits {
            commit_limits(&servers, rep, &mut limits).await;
        }
        // Odd repetitions measure failwell first, even ones the peers first,
        // so that a machine getting faster or slower favours neither.
        let peers_first = rep % 2 == 0;
        let mut rep_peers = Vec::new();
        if peers_first {
            rep_peers = run_all_peers(rep, peers_dir.as_deref(), (&sink_url, &admin_url), n).await;
        }
        let mut best = 0f64;
        for (i, (server, config)) in runs.iter().enumerate() {
            let r = run(&binary, server, (&sink, &sink_url), nginx.as_ref(), *config, n).await;
            println!(
                "rep={rep} store={} failwell config={config} enqueue_msgs_s={:.0} drain_msgs_s={:.0} \
                 latency_p50_ms={:.2} latency_p99_ms={:.2} cpu_us_per_msg failwell={:.0} database={:.0} sink={:.0} \
                 wal_bytes_per_msg enqueue={:.0} drain={:.0} checkpoints_in_drain={}",
                server.name(),
                r.enqueue_msgs_s,
                r.drain_msgs_s,
                r.latency.value_at_quantile(0.5) as f64 / 1000.0,
                r.latency.value_at_quantile(0.99) as f64 / 1000.0,
                r.cpu.failwell,
                r.cpu.database,
                r.cpu.sink,
                r.wal.map_or(f64::NAN, |w| w.0),
                r.wal.map_or(f64::NAN, |w| w.1),
                r.checkpoints.map_or_else(|| "-".to_owned(), |c| c.to_string()),
            );
            if let Some((contract, plain)) = &r.inserts {
                let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
                println!(
                    "rep={rep} store={} single-row transactions ({}): contract p50 {:.3} ms p99 {:.3} ms, \
                     plain queue table p50 {:.3} ms p99 {:.3} ms, ratio p50 {:.2} p99 {:.2}",
                    server.name(),
                    contract.len(),
                    ms(contract, 0.5),
                    ms(contract, 0.99),
                    ms(plain, 0.5),
                    ms(plain, 0.99),
                    ms(contract, 0.5) / ms(plain, 0.5),
                    ms(contract, 0.99) / ms(plain, 0.99),
                );
            }
            if matches!(server, Server::Postgres(_)) {
                best = best.max(r.drain_msgs_s);
            }
            results[i].0.push(r.drain_msgs_s);
            results[i].1.add(&r.latency).unwrap();
            results[i].2.push(r.cpu);
            let (wal_enqueue, wal_drain) = r.wal.unwrap_or((f64::NAN, f64::NAN));
            results[i].3.push([r.enqueue_msgs_s, wal_enqueue, wal_drain]);
        }
        if !peers_first {
            rep_peers = run_all_peers(rep, peers_dir.as_deref(), (&sink_url, &admin_url), n).await;
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
         CPU per message in the drain (median µs: failwell, database server, sink), \
         enqueue through the contract (median msgs/s) and WAL per message (median bytes: enqueue, drain):"
    );
    fn middle(mut values: Vec<f64>) -> f64 {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    }
    for ((server, config), (rates, latency, cpu, more)) in runs.iter().zip(results.iter_mut()) {
        let median = |of: fn(&Cpu) -> f64| middle(cpu.iter().map(of).collect());
        let more_median = |i: usize| middle(more.iter().map(|m| m[i]).collect());
        println!(
            "failwell {config} on {:<8}: {} msgs/s   p50 {:.2} ms  p99 {:.2} ms   cpu {:.0} / {:.0} / {:.0} µs   \
             enqueue {:.0} msgs/s   wal {:.0} / {:.0} B",
            server.name(),
            median_range(rates),
            latency.value_at_quantile(0.5) as f64 / 1000.0,
            latency.value_at_quantile(0.99) as f64 / 1000.0,
            median(|c| c.failwell),
            median(|c| c.database),
            median(|c| c.sink),
            more_median(0),
            more_median(1),
            more_median(2),
        );
    }
    let mut limits: Vec<_> = limits.into_iter().collect();
    limits.sort_by(|a, b| a.0.cmp(&b.0));
    for (what, rates) in &mut limits {
        println!("single-row commits/s, {what}: {}", median_range(rates));
    }
    for (name, rates) in &mut peers {
        println!("peer {name:<10}: {} msgs/s", median_range(rates));
    }
    if !leads.is_empty() {
        println!(
            "failwell's best configuration on PostgreSQL / the best peer, per repetition: {}",
            leads.iter().map(|l| format!("{l:.2}")).collect::<Vec<_>>().join(", ")
        );
    }
}
