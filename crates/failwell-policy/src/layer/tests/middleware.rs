//! The reqwest middleware against a real loopback server, in real time.

use std::time::{Duration, SystemTime};

use reqwest_middleware::ClientBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::{
    Backoff, BreakerConfig, BreakerState, Bulkhead, BulkheadConfig, CallOutcome, Class, Classifier, Jitter,
};

/// One scripted answer: raw bytes to write, then whether to stall forever.
#[derive(Clone)]
struct Answer {
    head: String,
    stall: bool,
}

fn answer(status: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    Answer { head, stall: false }
}

/// Headers promising a body of 100 bytes, then nothing.
fn stalled_body() -> Answer {
    Answer { head: "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":".into(), stall: true }
}

/// A server answering request n with `script[n]` (the last repeats),
/// recording when each request arrived.
async fn server(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<SystemTime>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/charges", listener.local_addr().unwrap());
    let arrivals: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let seen = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (seen, script) = (seen.clone(), script.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut filled = 0;
                loop {
                    let Ok(n) = socket.read(&mut buf[filled..]).await else { return };
                    if n == 0 {
                        return;
                    }
                    filled += n;
                    let text = String::from_utf8_lossy(&buf[..filled]).to_string();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if filled < end + 4 + length {
                        continue;
                    }
                    filled = 0;
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(crate::clock::wall());
                        seen.len() - 1
                    };
                    let a = &script[n.min(script.len() - 1)];
                    if socket.write_all(a.head.as_bytes()).await.is_err() {
                        return;
                    }
                    if a.stall {
                        std::future::pending::<()>().await;
                    }
                }
            });
        }
    });
    (url, arrivals)
}

fn client(policy: Policy<InProcess, HttpClassifier>) -> reqwest_middleware::ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new()).with(PolicyMiddleware::new(policy)).build()
}

fn classifier() -> HttpClassifier {
    let codes = [("card_declined".to_owned(), Class::Permanent)].into();
    HttpClassifier::new(Classifier::new(Default::default(), codes))
        .idempotency_header("Idempotency-Key")
        .unwrap()
        .error_code_pointer("/error/code")
}

fn quick_retry(attempts: u32) -> Retry {
    Retry::new("test", attempts, Backoff::try_new(ms(10), ms(20), Jitter::Full).unwrap()).unwrap()
}

#[tokio::test]
async fn a_retry_after_date_is_honoured_never_early() {
    // HTTP dates have whole seconds: ask for the second after next.
    let date = crate::clock::wall() + Duration::from_secs(2);
    let (url, arrivals) = server(vec![
        answer("503 Service Unavailable", &[("retry-after", &httpdate::fmt_http_date(date))], ""),
        answer("200 OK", &[], "{}"),
    ])
    .await;
    let policy = Policy::new().classify(classifier()).retry(quick_retry(3));
    let response = client(policy).get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2);
    let asked = httpdate::parse_http_date(&httpdate::fmt_http_date(date)).unwrap();
    assert!(arrivals[1] >= asked, "retried {:?} before the date", asked.duration_since(arrivals[1]));
}

#[tokio::test]
async fn a_keyless_post_is_not_retried_after_a_502_but_a_keyed_one_is() {
    let script = vec![answer("502 Bad Gateway", &[], ""), answer("201 Created", &[], "{\"id\":\"ch_1\"}")];
    let policy = Policy::new().classify(classifier()).retry(quick_retry(3));

    let (url, arrivals) = server(script.clone()).await;
    let response = client(policy.clone()).post(&url).body("amount=100").send().await.unwrap();
    assert_eq!(response.status(), 502, "an unkeyed write may have acted: returned, not retried");
    assert_eq!(arrivals.lock().unwrap().len(), 1);

    let (url, arrivals) = server(script).await;
    let response =
        client(policy).post(&url).header("Idempotency-Key", "k1").body("amount=100").send().await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.text().await.unwrap(), "{\"id\":\"ch_1\"}", "the body is handed back whole");
    assert_eq!(arrivals.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_stalled_body_times_the_attempt_out() {
    let (url, arrivals) = server(vec![stalled_body(), answer("200 OK", &[], "{\"ok\":true}")]).await;
    let policy = Policy::new().classify(classifier()).retry(quick_retry(2)).attempt_timeout(ms(300));
    let started = tokio::time::Instant::now();
    let response = client(policy).get(&url).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "{\"ok\":true}");
    assert_eq!(arrivals.lock().unwrap().len(), 2, "the stalled attempt timed out and was retried");
    assert!(started.elapsed() >= ms(300));

    let (url, _) = server(vec![stalled_body()]).await;
    let policy = Policy::new().classify(classifier()).attempt_timeout(ms(200));
    let err = client(policy).get(&url).send().await.unwrap_err();
    assert_eq!(err.to_string(), "the attempt timed out after 200 ms");
}

#[tokio::test]
async fn a_declined_card_is_permanent_and_not_an_outage() {
    let declined = answer("402 Payment Required", &[], "{\"error\":{\"code\":\"card_declined\"}}");
    let (url, arrivals) = server(vec![declined]).await;
    let config =
        BreakerConfig { consecutive_failures: Some(2), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let policy = Policy::new().classify(classifier()).breaker(breaker.clone()).retry(quick_retry(3));
    let client = client(policy);
    for _ in 0..3 {
        let response = client.post(&url).header("Idempotency-Key", "k").send().await.unwrap();
        assert_eq!(response.status(), 402);
    }
    assert_eq!(arrivals.lock().unwrap().len(), 3, "one attempt each");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test]
async fn an_unreachable_provider_opens_the_breaker_and_calls_stop() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let config =
        BreakerConfig { consecutive_failures: Some(2), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let policy = Policy::new().classify(classifier()).breaker(breaker.clone());
    let client = client(policy);
    for _ in 0..2 {
        let err = client.get(&url).send().await.unwrap_err();
        assert!(matches!(err, reqwest_middleware::Error::Reqwest(ref e) if e.is_connect()), "{err}");
    }
    let err = client.get(&url).send().await.unwrap_err();
    assert!(err.to_string().starts_with("circuit breaker \"test\" is open"), "{err}");
}

#[tokio::test]
async fn a_probe_that_never_reached_the_provider_does_not_close_the_breaker() {
    let (url, arrivals) = server(vec![answer("200 OK", &[], "{}")]).await;
    let config = BreakerConfig {
        consecutive_failures: Some(1),
        failure_rate: None,
        open_for: ms(50),
        ..BreakerConfig::default()
    };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    breaker.try_acquire().unwrap().record(CallOutcome::Failure);
    tokio::time::sleep(ms(60)).await;
    let bulkhead =
        Bulkhead::new("test", BulkheadConfig { max_concurrent: 1, max_wait: ms(5_000), max_waiting: 4 })
            .unwrap();
    let held = bulkhead.try_acquire().unwrap();
    let policy =
        Policy::new().classify(classifier()).deadline(ms(200)).bulkhead(bulkhead).breaker(breaker.clone());
    let err = client(policy).get(&url).send().await.unwrap_err();
    assert_eq!(err.to_string(), "deadline exceeded: no time left for the wait for a bulkhead permit");
    assert_eq!(arrivals.lock().unwrap().len(), 0);
    assert_ne!(breaker.state(), BreakerState::Closed, "nothing was learned about the provider");
    drop(held);
}

#[tokio::test]
async fn a_deadline_cut_is_reported_as_the_deadline() {
    let (url, _) = server(vec![stalled_body()]).await;
    let policy = Policy::new().classify(classifier()).deadline(ms(200)).attempt_timeout(ms(5_000));
    let err = client(policy).get(&url).send().await.unwrap_err();
    assert_eq!(err.to_string(), "deadline exceeded: no time left for the attempt in flight");
}

#[tokio::test]
async fn a_body_above_the_limit_fails_once_and_is_not_an_outage() {
    let (url, arrivals) = server(vec![answer("200 OK", &[], &"x".repeat(2_000))]).await;
    let config =
        BreakerConfig { consecutive_failures: Some(1), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let policy = Policy::new().classify(classifier()).breaker(breaker.clone()).retry(quick_retry(3));
    let middleware = PolicyMiddleware::new(policy).max_body_bytes(1_000);
    let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let err = client.get(&url).send().await.unwrap_err();
    assert_eq!(err.to_string(), "the response body exceeds 1000 bytes");
    assert_eq!(arrivals.lock().unwrap().len(), 1, "no retry makes the answer smaller");
    assert_eq!(breaker.state(), BreakerState::Closed, "the provider answered");
}

#[tokio::test]
async fn the_phase_timeouts_bound_headers_and_body_pauses() {
    let (url, arrivals) = server(vec![stalled_body(), answer("200 OK", &[], "{}")]).await;
    let policy = Policy::new().classify(classifier()).retry(quick_retry(2)).attempt_timeout(ms(5_000));
    let middleware = PolicyMiddleware::new(policy).phase_timeouts(ms(1_000), ms(150));
    let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let started = tokio::time::Instant::now();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(arrivals.lock().unwrap().len(), 2, "the stalled body ended the first attempt");
    assert!(started.elapsed() < ms(2_000), "the body idle limit, not the 5 s attempt timeout");
}
