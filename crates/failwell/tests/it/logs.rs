//! failwell's logs fit their destination: plain lines in a file or a pipe,
//! one JSON object per line when asked.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{Gateway, binary, simulator};

#[tokio::test]
async fn logs_are_plain_in_a_file_and_json_when_asked() {
    let sim = simulator(|_| {}).await;
    let mut gateway = Gateway::start(&sim.base_url(), "").await;
    gateway.terminate().await;
    let text = gateway.log();
    assert!(text.contains("failwell is serving"), "{text}");
    assert!(!text.contains('\x1b'), "no colour codes in a file: {text:?}");

    let mut serve = tokio::process::Command::new(binary())
        .args(["serve", "--config"])
        .arg(&gateway.config)
        .env("FAILWELL_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stderr.take().unwrap()).lines();
    let serving = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("failwell logged that it serves");
            let entry: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if entry["fields"]["message"] == "failwell is serving" {
                return entry;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(serving["level"], "INFO", "{serving}");
    serve.kill().await.unwrap();

    let refused =
        std::process::Command::new(binary()).args(["status", "--log-format", "yaml"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid value 'yaml'"));
}
