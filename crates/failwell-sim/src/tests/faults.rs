//! Fault delivery: pre-commit errors, hanging answers, TCP resets, down mode,
//! the outage window and shutdown with hanging handlers. The schedule itself
//! (which request gets which fault) is covered in `determinism.rs`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::helpers::{client, parts, poll, post_charge, start, start_calm};
use crate::{Fault, Profile, SimConfig};

#[tokio::test]
async fn pre_commit_faults_answer_without_effect() {
    let sim = start_calm().await;
    sim.script("pre", vec![Fault::Error500, Fault::Error502, Fault::Error503, Fault::RateLimited]);
    let client = client();
    let expected = [
        (500, "api_error", "internal_error"),
        (502, "api_error", "bad_gateway"),
        (503, "api_error", "service_unavailable"),
        (429, "rate_limit_error", "rate_limit"),
    ];
    for (status, kind, code) in expected {
        let response = post_charge(&client, &sim, Some("kp"), 1000, "pre").await.unwrap();
        let retry_after = response.headers().get("retry-after").cloned();
        let (got, replayed, body) = parts(response).await;
        assert_eq!((got, replayed), (status, false));
        assert_eq!(body["error"]["type"], kind);
        assert_eq!(body["error"]["code"], code);
        assert_eq!(retry_after.is_some(), status == 429);
        if status == 429 {
            assert_eq!(retry_after.unwrap(), "1");
        }
    }
    assert_eq!(sim.effects().charges, 0);
    // Nothing was stored under the key: the fifth request (past the script) commits.
    let (status, replayed, _) =
        parts(post_charge(&client, &sim, Some("kp"), 1000, "pre").await.unwrap()).await;
    assert_eq!((status, replayed), (200, false));
    let effects = sim.effects();
    assert_eq!(effects.by_reference["pre"].requests, 5);
    assert_eq!(effects.by_reference["pre"].effects, 1);
}

#[tokio::test]
async fn timeout_after_commit_commits_then_hangs() {
    let sim = start_calm().await;
    sim.script("slow", vec![Fault::TimeoutAfterCommit]);
    let client = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().unwrap();
    let err = post_charge(&client, &sim, Some("kt"), 1000, "slow").await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(sim.effects().by_reference["slow"].effects, 1);
}

#[tokio::test]
async fn timeout_after_commit_answers_after_hang() {
    let mut config = SimConfig::new(Profile::Calm, 1);
    config.hang = Duration::from_millis(50);
    let sim = start(config).await;
    sim.script("late", vec![Fault::TimeoutAfterCommit]);
    let started = Instant::now();
    let (status, _, _) = parts(post_charge(&client(), &sim, None, 1000, "late").await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn late_commit_commits_after_the_client_gave_up() {
    let mut config = SimConfig::new(Profile::Calm, 1);
    config.hang = Duration::from_millis(300);
    let sim = start(config).await;
    sim.script("lc", vec![Fault::LateCommit]);
    let client = reqwest::Client::builder().timeout(Duration::from_millis(100)).build().unwrap();
    let err = post_charge(&client, &sim, None, 1000, "lc").await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(sim.effects().charges, 0, "not yet committed when the client gave up");
    poll("the late commit", || async { (sim.effects().charges == 1).then_some(()) }).await;
    assert_eq!(sim.effects().by_reference["lc"].effects, 1);
}

#[tokio::test]
async fn reset_after_commit_resets_the_connection() {
    let sim = start_calm().await;
    sim.script("rst", vec![Fault::ResetAfterCommit, Fault::ResetAfterCommit]);
    let client = client();
    let err = post_charge(&client, &sim, Some("kr"), 1000, "rst").await.unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");
    assert!(err.status().is_none(), "no response expected: {err:?}");
    assert_eq!(sim.effects().by_reference["rst"].effects, 1);

    // On the wire: RST (ECONNRESET), not a FIN and not response bytes.
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let body = "amount=1000&currency=usd&reference=rst";
    let request = format!(
        "POST /v1/charges HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\nidempotency-key: kr2\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = stream.read_to_end(&mut buf).await;
    let err = read.expect_err("expected a connection reset");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err:?}");
    assert!(buf.is_empty(), "no response bytes expected");
    assert_eq!(sim.effects().by_reference["rst"].effects, 2);

    // The key completed when the connection died: a retry replays the charge.
    let (status, replayed, _) =
        parts(post_charge(&client, &sim, Some("kr"), 1000, "rst").await.unwrap()).await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(sim.effects().by_reference["rst"].effects, 2);
}

#[tokio::test]
async fn down_mode_answers_503_everywhere_until_cleared() {
    let sim = start_calm().await;
    let client = client();
    let base = sim.base_url();
    let put = |down: bool| {
        client.put(format!("{base}/_sim/down")).json(&serde_json::json!({ "down": down })).send()
    };
    assert_eq!(put(true).await.unwrap().status(), 200);
    let (status, _, body) = parts(post_charge(&client, &sim, Some("kd"), 1000, "down").await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "service_unavailable");
    let lookup = client.get(format!("{base}/v1/charges?reference=down")).send().await.unwrap();
    assert_eq!(lookup.status(), 503);
    assert_eq!(sim.effects().charges, 0);
    assert_eq!(put(false).await.unwrap().status(), 200);
    let (status, replayed, _) =
        parts(post_charge(&client, &sim, Some("kd"), 1000, "down").await.unwrap()).await;
    assert_eq!((status, replayed), (200, false));
    sim.set_down(true);
    assert_eq!(post_charge(&client, &sim, None, 1000, "down").await.unwrap().status(), 503);
    let bad = client.put(format!("{base}/_sim/down")).body("{\"down\":1}").send().await.unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn outage_profile_fails_then_recovers() {
    let mut config = SimConfig::new(Profile::Outage, 3);
    config.outage = Duration::from_millis(300);
    let sim = start(config).await;
    let client = client();
    let (status, _, _) = parts(post_charge(&client, &sim, Some("ko"), 1000, "out").await.unwrap()).await;
    assert_eq!(status, 503);
    let lookup = client.get(format!("{}/v1/charges/ch_x", sim.base_url())).send().await.unwrap();
    assert_eq!(lookup.status(), 503);
    assert_eq!(sim.effects().charges, 0);
    poll("the outage to end", || async {
        let status = post_charge(&client, &sim, Some("ko"), 1000, "out").await.unwrap().status();
        assert!(status == 503 || status == 200, "{status}");
        (status == 200).then_some(())
    })
    .await;
    assert_eq!(sim.effects().charges, 1);
}

#[tokio::test]
async fn shutdown_does_not_wait_for_hanging_handlers() {
    let sim = start_calm().await;
    sim.script("hang", vec![Fault::TimeoutAfterCommit]);
    let url = sim.base_url();
    let pending = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/charges"))
            .form(&[("amount", "1000"), ("currency", "usd"), ("reference", "hang")])
            .send()
            .await
    });
    poll("the hanging charge to commit", || async { (sim.effects().charges == 1).then_some(()) }).await;
    let started = Instant::now();
    let addr = sim.addr();
    sim.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let result = pending.await.unwrap();
    assert!(result.is_err(), "the open connection must be aborted");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "must stop accepting");
}

#[tokio::test]
async fn reset_before_commit_resets_the_connection_and_charges_nothing() {
    let sim = start_calm().await;
    sim.script("rbc", vec![Fault::ResetBeforeCommit]);
    let client = client();
    let err = post_charge(&client, &sim, Some("kb"), 1000, "rbc").await.unwrap_err();
    assert!(err.status().is_none() && !err.is_timeout(), "no response expected: {err:?}");
    assert_eq!(sim.effects().charges, 0);
    // The key was never used: the retry charges once.
    let (status, replayed, _) =
        parts(post_charge(&client, &sim, Some("kb"), 1000, "rbc").await.unwrap()).await;
    assert_eq!((status, replayed), (200, false));
    assert_eq!(sim.effects().by_reference["rbc"].effects, 1);
}
