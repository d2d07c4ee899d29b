//! Shared test helpers: starting a simulator, posting charges, polling with a
//! deadline. No assertions about simulator behaviour live here.

use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::{Profile, SimConfig, Simulator};

/// Starts a simulator on an ephemeral loopback port.
pub(super) async fn start(config: SimConfig) -> Simulator {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Simulator::start(config, listener).await.unwrap()
}

/// Starts a calm simulator with seed 1.
pub(super) async fn start_calm() -> Simulator {
    start(SimConfig::new(Profile::Calm, 1)).await
}

/// A plain client with a 10 s safety timeout.
pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// Sends a form-encoded `POST /v1/charges` (currency `usd`).
pub(super) async fn post_charge(
    client: &reqwest::Client,
    sim: &Simulator,
    key: Option<&str>,
    amount: u64,
    reference: &str,
) -> reqwest::Result<reqwest::Response> {
    let mut request = client.post(format!("{}/v1/charges", sim.base_url())).form(&[
        ("amount", amount.to_string()),
        ("currency", "usd".to_owned()),
        ("reference", reference.to_owned()),
    ]);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await
}

/// Status, `Idempotent-Replayed` presence and JSON body of a response.
pub(super) async fn parts(response: reqwest::Response) -> (u16, bool, Value) {
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let body = response.json::<Value>().await.unwrap();
    (status, replayed, body)
}

/// Polls `check` until it returns `Some`, failing the test after 5 s.
pub(super) async fn poll<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
