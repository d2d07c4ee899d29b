//! The timeout model against real loopback servers speaking raw HTTP/1.1.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use failwell_policy::{
    Backoff, BulkheadConfig, Classifier, IdempotencyPolicy, Jitter, Manifest, Offers, RetryBudgetConfig,
    RetryPolicy, Timeouts, TransportFailure,
};
use failwell_store::Operation;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::*;
use crate::provider::{Encoding, LookupSpec, OperationSpec, ProviderSpec};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// How the test server answers every request.
#[derive(Clone, Copy, Debug)]
enum Behavior {
    /// Reads the request and never answers.
    NoHeaders,
    /// Sends the headers and one body byte of ten, then nothing.
    StallBody,
    /// Sends the headers, then one body byte every 50 ms, for ever.
    Trickle,
    /// Answers 200 with a JSON body.
    Ok,
    /// Answers 302 to `/elsewhere`, and 200 at `/elsewhere`.
    Redirect,
}

/// A loopback HTTP/1.1 server; the raw requests it read are kept.
struct Server {
    base_url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn serve(behavior: Behavior) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(answer(stream, behavior, seen.clone()));
        }
    });
    Server { base_url, requests }
}

async fn answer(mut stream: TcpStream, behavior: Behavior, seen: Arc<Mutex<Vec<String>>>) {
    stream.set_nodelay(true).unwrap();
    let request = read_request(&mut stream).await;
    let elsewhere = request.split_whitespace().nth(1) == Some("/elsewhere");
    seen.lock().unwrap().push(request);
    let never = || tokio::time::sleep(Duration::from_secs(3_600));
    match behavior {
        Behavior::NoHeaders => never().await,
        Behavior::StallBody => {
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{").await.unwrap();
            never().await;
        }
        Behavior::Trickle => {
            stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n").await.unwrap();
            loop {
                if stream.write_all(b" ").await.is_err() {
                    return;
                }
                tokio::time::sleep(ms(50)).await;
            }
        }
        Behavior::Redirect if !elsewhere => {
            // Closed after, so a redirect followed opens a connection.
            let head = "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            stream.write_all(head.as_bytes()).await.unwrap();
        }
        Behavior::Ok | Behavior::Redirect => {
            let body = r#"{"id":"ch_1"}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(body.as_bytes()).await.unwrap();
            never().await;
        }
    }
}

/// Reads one request: the head, then `content-length` bytes of body.
async fn read_request(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before sending a whole head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before sending the whole body");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn provider_client(
    base_url: &str,
    headers: Duration,
    body_idle: Duration,
    total: Duration,
) -> ProviderClient {
    let backoff = Backoff::try_new(ms(100), ms(1_000), Jitter::None).unwrap();
    let retry = RetryPolicy::try_new(3, backoff, Duration::from_secs(60), Duration::from_secs(10)).unwrap();
    let idempotency =
        IdempotencyPolicy { header: Some("Idempotency-Key".to_string()), key_ttl: Duration::from_secs(100) };
    let offers =
        Offers { key_header: idempotency.header.is_some(), lookup: true, max_attempts: 3, read: false };
    let operations = BTreeMap::from([(
        "charge".to_string(),
        OperationSpec {
            method: reqwest::Method::POST,
            url: format!("{base_url}/v1/charges").parse().unwrap(),
            encoding: Encoding::Json,
            reference_field: "reference".into(),
            manifest: Manifest::default_for(offers),
            retry: retry.clone(),
            idempotency: idempotency.clone(),
            send_key: offers.key_header,
            max_stale: None,
        },
    )]);
    ProviderClient::new(ProviderSpec {
        name: "payments".into(),
        base_url: base_url.parse().unwrap(),
        timeouts: Timeouts { connect: ms(100), headers, body_idle, total },
        breaker: None,
        cluster_rule: Default::default(),
        pause: Default::default(),
        throttle: None,
        bulkhead: BulkheadConfig::default(),
        retry_budget: RetryBudgetConfig::default(),
        retry,
        idempotency,
        classifier: Classifier::default(),
        error_code_pointer: "/error/code".into(),
        id_pointer: "/id".into(),
        reconcile_after: ms(500),
        lookup: Some(LookupSpec {
            url: format!("{base_url}/v1/charges").parse().unwrap(),
            query_param: "reference".into(),
            list_pointer: "/data".into(),
            status_pointer: "/status".into(),
            succeeded: vec!["succeeded".into()],
            failed: vec!["failed".into()],
        }),
        compare: None,
        operations,
    })
    .unwrap()
}

fn operation() -> Operation {
    crate::fixtures::operation()
}

/// Calls the `charge` operation with `timeout` as the caller's bound.
async fn charge(client: &ProviderClient, timeout: Duration) -> (CallResult, Duration) {
    let spec = client.spec().operations["charge"].clone();
    let start = Instant::now();
    let result = client.call(&spec, &operation(), timeout).await.unwrap();
    (result, start.elapsed())
}

fn transport(result: &CallResult) -> &TransportError {
    result.response.as_ref().expect_err("the call must fail")
}

#[tokio::test]
async fn stalled_body_ends_with_body_idle_timeout() {
    let server = serve(Behavior::StallBody).await;
    let client = provider_client(&server.base_url, ms(500), ms(150), ms(3_000));
    let (result, elapsed) = charge(&client, ms(3_000)).await;
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("body_idle_timeout", TransportFailure::AfterSend), "{error:?}");
    assert_eq!(error.message, "no body data within 150 ms");
    assert!(elapsed >= ms(150) && elapsed < ms(1_500), "{elapsed:?}");
    assert_eq!(server.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn missing_headers_end_with_headers_timeout() {
    let server = serve(Behavior::NoHeaders).await;
    let client = provider_client(&server.base_url, ms(150), ms(500), ms(3_000));
    let (result, elapsed) = charge(&client, ms(3_000)).await;
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("headers_timeout", TransportFailure::AfterSend), "{error:?}");
    assert_eq!(error.message, "no response headers within 150 ms");
    assert!(elapsed >= ms(150) && elapsed < ms(1_500), "{elapsed:?}");
}

#[tokio::test]
async fn trickling_body_ends_with_the_total_timeout() {
    let server = serve(Behavior::Trickle).await;
    // every gap (50 ms) is well below the idle limit; the whole body never ends
    let client = provider_client(&server.base_url, ms(300), ms(300), ms(400));
    let (result, elapsed) = charge(&client, ms(5_000)).await;
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("timeout", TransportFailure::AfterSend), "{error:?}");
    assert_eq!(error.message, "no complete response within 400 ms");
    assert!(elapsed >= ms(400) && elapsed < ms(800), "{elapsed:?}");
}

#[tokio::test]
async fn the_callers_shorter_bound_is_the_total() {
    let server = serve(Behavior::NoHeaders).await;
    // the headers limit is longer than what is left before the deadline
    let client = provider_client(&server.base_url, ms(2_000), ms(2_000), ms(3_000));
    let (result, elapsed) = charge(&client, ms(150)).await;
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("timeout", TransportFailure::AfterSend), "{error:?}");
    assert!(elapsed >= ms(150) && elapsed < ms(1_500), "{elapsed:?}");
}

#[tokio::test]
async fn limits_equal_to_the_total_report_the_total() {
    let server = serve(Behavior::NoHeaders).await;
    let client = provider_client(&server.base_url, ms(200), ms(200), ms(200));
    let (result, _) = charge(&client, ms(200)).await;
    assert_eq!(transport(&result).kind, "timeout");
    let server = serve(Behavior::StallBody).await;
    let client = provider_client(&server.base_url, ms(200), ms(200), ms(200));
    let (result, _) = charge(&client, ms(200)).await;
    assert_eq!(transport(&result).kind, "timeout");
}

#[tokio::test]
async fn a_normal_answer_is_read_whole() {
    let server = serve(Behavior::Ok).await;
    let client = provider_client(&server.base_url, ms(300), ms(300), ms(500));
    let (result, _) = charge(&client, ms(500)).await;
    let reply = result.response.as_ref().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, Some(json!({"id": "ch_1"})));
    assert!(result.is_success());
    let requests = server.requests.lock().unwrap();
    assert!(requests[0].starts_with("POST /v1/charges HTTP/1.1"), "{}", requests[0]);
    assert!(requests[0].to_lowercase().contains("idempotency-key: fw_key"), "{}", requests[0]);
}

/// A redirect is the provider's answer, not followed: following it would
/// turn the POST into a GET elsewhere, whose 200 would read as a charge
/// made. A 3xx is not a success; by default it is ambiguous.
#[tokio::test]
async fn a_redirect_is_an_answer_and_not_followed() {
    let server = serve(Behavior::Redirect).await;
    let client = provider_client(&server.base_url, ms(300), ms(300), ms(500));
    let (result, _) = charge(&client, ms(500)).await;
    assert_eq!(result.response.as_ref().unwrap().status, 302);
    assert!(!result.is_success());
    assert_eq!(
        client.spec().classifier.classify(result.observed("/error/code")),
        failwell_policy::Classification::Ambiguous
    );
    assert_eq!(server.requests.lock().unwrap().len(), 1, "the redirect was followed");
}

/// A status lookup (a `GET`, which a redirect leaves a `GET`) follows
/// the provider's redirect.
#[tokio::test]
async fn a_lookup_follows_a_redirect() {
    let server = serve(Behavior::Redirect).await;
    let client = provider_client(&server.base_url, ms(300), ms(300), ms(500));
    let result = client.lookup("order-1").await.unwrap().unwrap();
    assert_eq!(result.response.as_ref().unwrap().status, 200);
    let requests = server.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].starts_with("GET /elsewhere HTTP/1.1"), "{}", requests[1]);
}

/// The payload goes out as its operation encodes it, with the matching
/// `Content-Type`: JSON as written, or top-level form fields with nested
/// values as JSON text.
#[tokio::test]
async fn the_payload_is_sent_as_its_operation_encodes_it() {
    let server = serve(Behavior::Ok).await;
    let mut op = operation();
    op.payload = json!({"amount": 100, "reference": "order 1&2", "metadata": {"tier": "gold"}});
    for (encoding, content_type, body) in [
        (
            Encoding::Json,
            "application/json",
            r#"{"amount":100,"reference":"order 1&2","metadata":{"tier":"gold"}}"#,
        ),
        (
            Encoding::Form,
            "application/x-www-form-urlencoded",
            "amount=100&reference=order+1%262&metadata=%7B%22tier%22%3A%22gold%22%7D",
        ),
    ] {
        // A client of its own: the server answers one request a connection.
        let client = provider_client(&server.base_url, ms(300), ms(300), ms(500));
        let spec = OperationSpec { encoding, ..client.spec().operations["charge"].clone() };
        let result = client.call(&spec, &op, ms(500)).await.unwrap();
        assert!(result.is_success(), "{encoding:?}: {result:?}");
        let request = server.requests.lock().unwrap().pop().unwrap();
        let (head, sent) = request.split_once("\r\n\r\n").unwrap();
        assert!(head.to_lowercase().contains(&format!("content-type: {content_type}\r\n")), "{head}");
        assert!(head.to_lowercase().contains("idempotency-key: fw_key"), "{head}");
        assert_eq!(sent, body);
    }
}

#[tokio::test]
async fn lookup_uses_the_same_limits() {
    let server = serve(Behavior::StallBody).await;
    let client = provider_client(&server.base_url, ms(500), ms(150), ms(3_000));
    let result = client.lookup("order-1").await.unwrap().unwrap();
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("body_idle_timeout", TransportFailure::AfterSend), "{error:?}");
    let server = serve(Behavior::NoHeaders).await;
    let client = provider_client(&server.base_url, ms(150), ms(500), ms(3_000));
    let result = client.lookup("order-1").await.unwrap().unwrap();
    assert_eq!(transport(&result).kind, "headers_timeout");
    let server = serve(Behavior::Ok).await;
    let client = provider_client(&server.base_url, ms(300), ms(300), ms(500));
    let result = client.lookup("order-1").await.unwrap().unwrap();
    assert_eq!(result.response.as_ref().unwrap().status, 200);
    let requests = server.requests.lock().unwrap();
    assert!(requests[0].starts_with("GET /v1/charges?reference=order-1 HTTP/1.1"), "{}", requests[0]);
}

#[tokio::test]
async fn connect_refused_is_not_sent() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = provider_client(&format!("http://127.0.0.1:{port}"), ms(300), ms(300), ms(500));
    let (result, _) = charge(&client, ms(500)).await;
    let error = transport(&result);
    assert_eq!((error.kind, error.failure), ("connect", TransportFailure::NotSent), "{error:?}");
}
