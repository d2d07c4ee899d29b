use std::time::Duration;

use super::*;

fn bulkhead(max_concurrent: usize, max_wait_ms: u64, max_waiting: usize) -> Bulkhead {
    Bulkhead::new(
        "p",
        BulkheadConfig { max_concurrent, max_wait: Duration::from_millis(max_wait_ms), max_waiting },
    )
    .unwrap()
}

#[test]
fn zero_concurrency_is_refused() {
    let err =
        Bulkhead::new("p", BulkheadConfig { max_concurrent: 0, ..BulkheadConfig::default() }).unwrap_err();
    assert_eq!(err.to_string(), "max_concurrent must be at least 1");
}

#[tokio::test(start_paused = true)]
async fn overflow_is_rejected_at_once_when_waiting_is_off() {
    let b = bulkhead(2, 0, 0);
    let p1 = b.try_acquire().unwrap();
    let _p2 = b.acquire().await.unwrap();
    let err = b.acquire().await.unwrap_err();
    assert_eq!((err.max_concurrent, err.waited), (2, false));
    assert!(err.to_string().contains("bulkhead \"p\" is full"), "{err}");
    drop(p1);
    assert!(b.try_acquire().is_some(), "a returned permit is usable again");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_a_returned_permit() {
    let b = bulkhead(1, 1_000, 4);
    let held = b.acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await.map(|_| tokio::time::Instant::now()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = tokio::time::Instant::now();
    drop(held);
    let got_at = waiter.await.unwrap().unwrap();
    assert_eq!(got_at, released_at, "woken when the permit came back, not at max_wait");
    assert_eq!(b.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn waiting_is_bounded_in_time_and_in_number() {
    let b = bulkhead(1, 200, 2);
    let _held = b.acquire().await.unwrap();
    let start = tokio::time::Instant::now();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire().await.map(drop) })
        })
        .collect();
    tokio::task::yield_now().await;
    let third = b.acquire().await.unwrap_err();
    assert!(!third.waited, "the queue of two is full: turned away at once");
    assert_eq!(tokio::time::Instant::now(), start);
    for w in waiters {
        let err = w.await.unwrap().unwrap_err();
        assert!(err.waited);
    }
    assert_eq!(tokio::time::Instant::now() - start, Duration::from_millis(200));
    assert_eq!(b.inner.waiting.load(Ordering::Relaxed), 0, "waiters that gave up are not counted");
}

#[tokio::test]
async fn never_more_than_the_limit_in_flight_under_concurrency() {
    let b = bulkhead(3, 5_000, 1_000);
    let peak = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (b, peak) = (b.clone(), peak.clone());
            tokio::spawn(async move {
                let _permit = b.acquire().await.unwrap();
                peak.fetch_max(b.in_flight(), Ordering::Relaxed);
                tokio::task::yield_now().await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(peak.load(Ordering::Relaxed) <= 3);
    assert_eq!(b.in_flight(), 0);
}
