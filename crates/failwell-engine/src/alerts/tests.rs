use super::*;

#[test]
fn a_failed_send_is_sent_again_after_30_s_doubling_up_to_10_min() {
    let waits: Vec<i64> = (1..=8).map(retry_delay_ms).collect();
    assert_eq!(waits, [30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000, 600_000]);
    assert_eq!(retry_delay_ms(0), 30_000);
    assert_eq!(retry_delay_ms(u32::MAX), 600_000);
}

#[test]
fn the_attempts_of_one_send_are_half_a_second_then_a_second_apart() {
    let waits = attempt_waits();
    assert_eq!((waits.ceiling(0), waits.ceiling(1)), (Duration::from_millis(500), Duration::from_secs(1)));
    let sink = AlertSink::new("http://127.0.0.1:9/".parse().unwrap(), Duration::from_secs(5)).unwrap();
    assert_eq!(sink.lease_ms(), 3 * 5_000 + 1_500 + 2_000);
}

#[test]
fn only_a_4xx_other_than_408_409_and_429_is_refused_for_good() {
    let answered = |status| classify(Observed::Response { status, error_code: None, retry_after: None });
    for status in [400, 401, 403, 404, 410, 413, 422] {
        assert_eq!(answered(status), Classification::Permanent, "{status}");
    }
    for status in [301, 408, 409, 429, 500, 502, 503, 504] {
        assert_ne!(answered(status), Classification::Permanent, "{status}");
    }
    for failure in [TransportFailure::NotSent, TransportFailure::AfterSend] {
        assert_ne!(classify(Observed::Transport(failure)), Classification::Permanent, "{failure:?}");
    }
}

/// A redirect is the sink's answer, never followed: followed, the POST
/// would become a GET elsewhere, whose 200 would mark the alert sent.
#[tokio::test]
async fn a_redirect_from_the_sink_is_not_followed() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let followed = Arc::new(AtomicUsize::new(0));
    let seen = followed.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap() == 1 {
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).to_lowercase();
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            let mut body = vec![0u8; length];
            stream.read_exact(&mut body).await.unwrap();
            let answer = if head.starts_with(b"GET /elsewhere") {
                seen.fetch_add(1, Ordering::SeqCst);
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            } else {
                "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            };
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let sink = AlertSink::new(url.parse().unwrap(), Duration::from_secs(5)).unwrap();
    let refused = sink.send("an alert", json!({})).await.unwrap_err();
    assert!(refused.error.contains("HTTP 302"), "{}", refused.error);
    assert_eq!(followed.load(Ordering::SeqCst), 0);
}
