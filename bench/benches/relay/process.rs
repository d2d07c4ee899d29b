//! The `failwell serve` processes of a drain.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::Config;
use crate::sink::free_port;

/// One `failwell serve` process and the directory of its config and log.
pub struct Process {
    pub child: Child,
    dir: tempfile::TempDir,
}

pub async fn start_process(binary: &PathBuf, database_url: &str, sink_url: &str, config: Config) -> Process {
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
    pub async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status().await;
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await.is_err() {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            panic!("failwell did not stop within 20 s:\n{log}");
        }
    }
}
