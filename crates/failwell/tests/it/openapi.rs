//! The OpenAPI document: the one served at `GET /openapi.json`, the one
//! `failwell openapi` prints and `docs/openapi.json` are the same; and the
//! API, fuzzed by schemathesis from that document against a real `failwell
//! serve` on SQLite and on PostgreSQL, answers no 5xx, nothing the document
//! does not declare (every error a problem+json), and stays healthy.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::helpers::{Gateway, binary, postgres_schema, simulator};

const TOKEN: &str = "schemathesis-admin-token-0123456789abcdef";

const TAIL: &str = r#"
[admin]
token = "schemathesis-admin-token-0123456789abcdef"

[webhooks.stripe]
scheme = "stripe"
secrets = ["whsec_test"]
"#;

fn committed() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn the_served_printed_and_committed_documents_are_one() {
    let sim = simulator(|_| {}).await;
    let gateway = Gateway::start_with(&sim.base_url(), "", TAIL).await;
    let served = gateway.get_json("/openapi.json").await;
    let printed = Command::new(binary()).arg("openapi").output().unwrap();
    let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(served, printed);
    assert_eq!(
        served,
        committed(),
        "docs/openapi.json is out of date: run `cargo run -p failwell -- openapi > docs/openapi.json`"
    );
    assert_eq!(served["openapi"], "3.1.0");
    // Every error answer is a problem detail.
    for (path, operations) in served["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                if status.starts_with(['4', '5']) && status != "4XX" {
                    assert_eq!(
                        response["$ref"], "#/components/responses/Problem",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
}

/// schemathesis, pinned in `schemathesis/requirements.txt`, installed in a
/// virtual environment under the test's temporary directory on first use
/// (once: the tests of both stores ask at the same time; what an
/// interrupted install left is removed first).
fn schemathesis() -> PathBuf {
    static READY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schemathesis-venv");
            let program = venv.join("bin/schemathesis");
            if program.exists() {
                return program;
            }
            if venv.exists() {
                std::fs::remove_dir_all(&venv).unwrap();
            }
            let run = |program: &str, args: &[&str]| {
                let status = Command::new(program)
                    .args(args)
                    .status()
                    .unwrap_or_else(|e| panic!("{program} is needed to install schemathesis: {e}"));
                assert!(status.success(), "{program} {args:?} failed");
            };
            run("python3", &["-m", "venv", venv.to_str().unwrap()]);
            let requirements =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/schemathesis/requirements.txt");
            run(
                venv.join("bin/pip").to_str().unwrap(),
                &["install", "-q", "-r", requirements.to_str().unwrap()],
            );
            program
        })
        .clone()
}

/// Fuzzes every operation of the document, bounded in examples and time;
/// returns how many cases ran.
async fn fuzz(postgres: bool) -> u64 {
    let sim = simulator(|_| {}).await;
    let url = if postgres { Some(postgres_schema().await) } else { None };
    let gateway = Gateway::start_edited(&sim.base_url(), "", TAIL, move |text| match &url {
        Some(url) => text
            .lines()
            .map(|l| {
                if l.starts_with("database_url = ") { format!("database_url = \"{url}\"") } else { l.into() }
            })
            .collect::<Vec<_>>()
            .join("\n"),
        None => text,
    })
    .await;
    let program = schemathesis();
    let base = gateway.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(program)
            .args(["run", &format!("{base}/openapi.json")])
            .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
            .args(["--max-examples", "25", "--max-time", "60", "--seed", "1"])
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "schemathesis found failures:\n{report}\n{}", gateway.log());
    let health = gateway.http.get(format!("{}/healthz", gateway.base)).send().await.unwrap();
    assert_eq!(health.status(), 200, "healthy afterwards");
    // "Test cases:\n  10042 generated, 10042 passed, 10 skipped"
    let cases = report
        .lines()
        .find_map(|l| l.trim().split_once(" generated, ").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or_else(|| panic!("no case count in\n{report}"));
    println!("schemathesis ({}): {cases} cases", if postgres { "PostgreSQL" } else { "SQLite" });
    assert!(cases > 1000, "{cases} cases:\n{report}");
    cases
}

#[tokio::test]
async fn schemathesis_finds_nothing_on_sqlite() {
    fuzz(false).await;
}

#[tokio::test]
async fn schemathesis_finds_nothing_on_postgres() {
    fuzz(true).await;
}
