use std::time::Duration;

use super::*;

fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
    RetryBudget::new("p", RetryBudgetConfig { ratio, min_per_second, ttl: Duration::from_secs(10) }).unwrap()
}

fn drain(b: &RetryBudget) -> u32 {
    let mut n = 0;
    while b.try_withdraw() {
        n += 1;
        assert!(n < 1_000_000, "the budget never ran out");
    }
    n
}

#[test]
fn invalid_parameters_are_refused() {
    let bad =
        |ratio, ttl| RetryBudget::new("p", RetryBudgetConfig { ratio, min_per_second: 0, ttl }).unwrap_err();
    assert_eq!(bad(-0.1, Duration::from_secs(10)), RetryBudgetConfigError::Ratio(-0.1));
    assert_eq!(bad(f64::NAN, Duration::from_secs(10)).to_string(), "ratio must be between 0 and 10, got NaN");
    assert_eq!(bad(0.2, Duration::from_millis(10)), RetryBudgetConfigError::Ttl(10));
}

#[tokio::test(start_paused = true)]
async fn retries_are_a_ratio_of_requests_plus_the_reserve() {
    let b = budget(0.2, 1);
    for _ in 0..1_000 {
        b.deposit();
    }
    assert_eq!(b.available(), 210);
    assert_eq!(drain(&b), 210, "20 % of 1000 requests plus 1/s over 10 s");
    b.deposit();
    b.deposit();
    b.deposit();
    b.deposit();
    b.deposit();
    assert_eq!(drain(&b), 1, "five more requests earn one more retry");
}

#[tokio::test(start_paused = true)]
async fn deposits_and_withdrawals_expire_after_the_ttl() {
    let b = budget(0.5, 0);
    (0..100).for_each(|_| b.deposit());
    assert_eq!(drain(&b), 50);
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(b.available(), 0, "the deposits expired with the withdrawals");
    (0..10).for_each(|_| b.deposit());
    assert_eq!(drain(&b), 5);
}

#[tokio::test(start_paused = true)]
async fn deposits_are_never_counted_as_younger_than_they_are() {
    let b = budget(1.0, 0);
    // 63 deposits at 0 s, folded only at 9.99 s: dated 0 s, so gone at 15 s.
    (0..63).for_each(|_| b.deposit());
    tokio::time::advance(Duration::from_millis(9_990)).await;
    assert_eq!(b.available(), 63);
    tokio::time::advance(Duration::from_millis(5_010)).await;
    assert_eq!(b.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_withdrawal_counts_for_a_whole_ttl() {
    let b = budget(0.0, 10);
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(drain(&b), 100);
    tokio::time::advance(Duration::from_millis(9_001)).await;
    assert_eq!(b.available(), 0, "the withdrawals of 9.001 s ago still count");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(drain(&b), 100);
}

#[tokio::test(start_paused = true)]
async fn a_refund_gives_a_retry_back() {
    let b = budget(0.0, 1);
    assert_eq!(drain(&b), 10);
    b.refund();
    assert_eq!(drain(&b), 1);
}

#[test]
fn deposits_from_many_threads_all_count() {
    let b = budget(1.0, 0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| (0..10_000).for_each(|_| b.deposit()));
        }
    });
    assert_eq!(b.available(), 40_000);
}

#[tokio::test(start_paused = true)]
async fn deposits_after_a_long_idle_spell_count_in_full() {
    let b = budget(0.5, 0);
    tokio::time::advance(Duration::from_secs(3_600)).await;
    (0..100).for_each(|_| b.deposit());
    assert_eq!(b.available(), 50, "the deposits are recent, whatever the idle time before them");
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_deposits_long_ago_has_expired() {
    let b = budget(1.0, 0);
    (0..128).for_each(|_| b.deposit());
    tokio::time::advance(Duration::from_secs(15)).await;
    assert_eq!(b.available(), 0, "128 deposits, folded by 64 as they were made, all older than the ttl");
}
