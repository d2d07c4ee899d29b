//! Test harness: a simulator in-process, the real `failwell serve` as a
//! child process with a generated config file, and polling helpers.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use failwell_sim::{Profile, SimConfig, Simulator};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// How long an operation may take to settle in a test.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_failwell")
}

/// A calm simulator with a short hang (so timed-out requests end quickly).
pub async fn simulator(configure: impl FnOnce(&mut SimConfig)) -> Simulator {
    let mut config = SimConfig::new(Profile::Calm, 7);
    config.hang = Duration::from_secs(3);
    configure(&mut config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Simulator::start(config, listener).await.unwrap()
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A config for the simulator at `sim_url`; `extra` lines go into
/// `[providers.payments]` and replace the defaults of the same key.
pub fn config_text(sim_url: &str, db: &std::path::Path, port: u16, extra: &str) -> String {
    let defaults = [
        ("connect_timeout_ms", "300"),
        ("timeout_ms", "500"),
        ("max_attempts", "5"),
        ("reconcile_after_ms", "100"),
        ("backoff", "{ base_ms = 20, cap_ms = 200, jitter = \"full\" }"),
        ("breaker", "{ open_ms = 300, max_open_ms = 1000 }"),
    ];
    let mut settings = extra.to_string();
    for (key, value) in defaults {
        if !extra.lines().any(|l| l.trim_start().starts_with(&format!("{key} "))) {
            settings.push_str(&format!("\n{key} = {value}"));
        }
    }
    format!(
        "database_url = \"sqlite://{db}\"\nsqlite_synchronous = \"normal\"\nlisten = \"127.0.0.1:{port}\"\n\n\
         [relay]\npoll_interval_ms = 20\nlease_ms = 3000\n\n[reconciler]\ninterval_ms = 50\n\n{provider}",
        db = db.display(),
        provider = failwell::demo::simulator_provider(sim_url, &settings),
    )
}

/// The config `text` with its `database_url` naming `url` (a PostgreSQL or
/// MySQL store) instead of the SQLite file.
pub fn on_database(text: &str, url: &str) -> String {
    text.lines()
        .map(|line| {
            if line.starts_with("database_url = ") {
                format!("database_url = \"{url}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `failwell serve` running as a child process.
pub struct Gateway {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The config file.
    pub config: PathBuf,
    /// Holds the database and config files.
    pub dir: tempfile::TempDir,
    /// HTTP client for the API.
    pub http: reqwest::Client,
}

impl Gateway {
    /// Writes a config for `sim_url` (with `extra` provider lines) and starts
    /// the binary; returns when `/healthz` answers.
    pub async fn start(sim_url: &str, extra: &str) -> Gateway {
        Self::start_with(sim_url, extra, "").await
    }

    /// Like [`start`](Self::start), with `tail` appended to the config
    /// (further top-level sections, e.g. `[webhooks.NAME]`).
    pub async fn start_with(sim_url: &str, extra: &str, tail: &str) -> Gateway {
        Self::start_edited(sim_url, extra, tail, |text| text).await
    }

    /// Like [`start_with`](Self::start_with), with the whole config text
    /// passed through `edit` before it is written.
    pub async fn start_edited(
        sim_url: &str,
        extra: &str,
        tail: &str,
        edit: impl FnOnce(String) -> String,
    ) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("failwell.toml");
        let text = config_text(sim_url, &dir.path().join("failwell.db"), port, extra) + "\n" + tail;
        std::fs::write(&config, edit(text)).unwrap();
        let mut gateway = Gateway {
            child: None,
            base: format!("http://127.0.0.1:{port}"),
            config,
            dir,
            // A request never waits for ever: a hung process fails the test.
            http: reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap(),
        };
        gateway.spawn().await;
        gateway
    }

    /// Starts the binary again on the same config and database.
    pub async fn spawn(&mut self) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("log")).unwrap();
        let child = Command::new(binary())
            .args(["serve", "--config"])
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = self.http.get(format!("{}/healthz", self.base)).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(Instant::now() < deadline, "failwell did not become healthy: {}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the process with SIGKILL (no shutdown of any kind).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    /// Sends SIGTERM and returns the exit status once the process ended.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = child.id().unwrap().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap()
    }

    /// What the process logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// `POST /v1/operations` for a charge.
    pub async fn charge(&self, key: &str, amount: u64) -> reqwest::Response {
        let body = json!({
            "provider": "payments",
            "operation": "charge",
            "payload": {"amount": amount, "currency": "eur", "reference": key},
        });
        self.http
            .post(format!("{}/v1/operations", self.base))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// `GET /v1/operations/{key}` as JSON.
    pub async fn operation(&self, key: &str) -> Value {
        let r = self.http.get(format!("{}/v1/operations/{key}", self.base)).send().await.unwrap();
        assert!(r.status().is_success(), "GET {key}: {}", r.status());
        r.json().await.unwrap()
    }

    /// Polls the operation until its status is `succeeded` or `failed`.
    pub async fn settled(&self, key: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let op = self.operation(key).await;
            if op["status"] == "succeeded" || op["status"] == "failed" {
                return op;
            }
            assert!(Instant::now() < deadline, "{key} did not settle: {op:#}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `GET {path}` on the gateway, as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        self.http.get(format!("{}{path}", self.base)).send().await.unwrap().json().await.unwrap()
    }

    /// The operation counts from `/healthz`.
    pub async fn counts(&self) -> Value {
        let r: Value =
            self.http.get(format!("{}/healthz", self.base)).send().await.unwrap().json().await.unwrap();
        r["operations"].clone()
    }
}

/// The provider calls in an operation's history.
pub fn calls(op: &Value) -> Vec<Value> {
    op["history"].as_array().unwrap().iter().filter(|a| a["kind"] == "call").cloned().collect()
}

/// The status lookups in an operation's history.
pub fn lookups(op: &Value) -> Vec<Value> {
    op["history"].as_array().unwrap().iter().filter(|a| a["kind"] == "lookup").cloned().collect()
}

/// Checks an RFC 9457 problem answer: status, content type, `type`
/// (`urn:failwell:problem:{type_suffix}`) and a detail; returns the body.
pub async fn problem(r: reqwest::Response, status: u16, type_suffix: &str) -> Value {
    assert_eq!(r.status().as_u16(), status);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], format!("urn:failwell:problem:{type_suffix}"), "{body:#}");
    assert_eq!(body["status"], status);
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    body
}

/// A PostgreSQL URL (`DATABASE_URL`) whose connections use a fresh schema
/// of their own.
pub async fn postgres_schema() -> String {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("it_{}", free_port());
    let pool = sqlx::PgPool::connect(&url).await.expect("PostgreSQL at DATABASE_URL");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

/// A fresh database on the MySQL or MariaDB server at `MYSQL_URL` (default
/// `mysql://root@127.0.0.1:3306/test`), dropped when this is dropped (the
/// connections still open on it killed first: a process killed mid-transaction,
/// or a pool of the test's runtime, would hold its tables' locks).
pub struct MySqlDatabase {
    server: String,
    name: String,
    /// The URL whose connections use this database.
    pub url: String,
}

/// A fresh MySQL/MariaDB database for one test; its URL is
/// [`MySqlDatabase::url`].
pub async fn mysql_database() -> MySqlDatabase {
    let server = std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let name = format!("it_{:016x}", rand::random::<u64>());
    let pool = sqlx::MySqlPool::connect(&server).await.expect("MySQL at MYSQL_URL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let mut url = reqwest::Url::parse(&server).expect("MYSQL_URL is a URL");
    url.set_path(&name);
    MySqlDatabase { url: url.into(), server, name }
}

impl Drop for MySqlDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // The test's runtime may be shutting down: a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let pool = sqlx::MySqlPool::connect(&server).await?;
                let open: Vec<i64> =
                    sqlx::query_scalar("SELECT id FROM information_schema.processlist WHERE db = ?")
                        .bind(&name)
                        .fetch_all(&pool)
                        .await?;
                for id in open {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("KILL {id}"))).execute(&pool).await;
                }
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                    .execute(&pool)
                    .await?;
                pool.close().await;
                Ok::<_, sqlx::Error>(())
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("database {} left behind: {e}", self.name);
        }
    }
}
