//! The sinks a drain delivers to: this process's own no-op HTTP handler,
//! or nginx from Debian's packages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// The no-op sink: answers 200 to every POST, counts them, and during the
/// latency phase notes when each `seq` arrived.
#[derive(Default)]
pub struct Sink {
    pub requests: AtomicU64,
    /// `seq` → arrivals: a message seen twice is a double delivery.
    pub seen: Mutex<HashMap<u64, u32>>,
    /// `seq` → first arrival, while `timing` is set.
    pub arrivals: Mutex<HashMap<u64, Instant>>,
    pub timing: AtomicBool,
}

impl Sink {
    pub fn reset(&self) {
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
pub async fn start_sink(sink: Arc<Sink>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(sink);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// nginx from Debian as the sink: one worker answering 200 to everything,
/// on a free port, with its config and pid in a directory of its own.
pub struct Nginx {
    master: Child,
    /// Its config, pid and error log; removed when the sink is dropped.
    _dir: tempfile::TempDir,
    pub url: String,
}

impl Nginx {
    pub async fn start() -> Self {
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
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
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
    pub fn pids(&self) -> Vec<u32> {
        let master = self.master.id().unwrap_or(0);
        let children =
            std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
        std::iter::once(master).chain(children.split_whitespace().filter_map(|p| p.parse().ok())).collect()
    }
}

impl Drop for Nginx {
    /// Stops nginx as its manual says (`SIGTERM` to the master, which stops
    /// its workers); killing the master alone would leave the worker running.
    fn drop(&mut self) {
        if let Some(pid) = self.master.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
    }
}
