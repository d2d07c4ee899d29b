use std::time::Duration;

use super::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_is_the_smaller_of_total_and_time_left() {
    let t = Timeouts { connect: ms(100), headers: ms(500), body_idle: ms(500), total: ms(1_000) };
    assert_eq!(t.attempt(None), Ok(ms(1_000)));
    let d = Deadline::after(ms(3_000));
    assert_eq!(t.attempt(Some(d)), Ok(ms(1_000)));
    tokio::time::advance(ms(2_400)).await;
    assert_eq!(t.attempt(Some(d)), Ok(ms(600)));
    tokio::time::advance(ms(600)).await;
    let err = t.attempt(Some(d)).unwrap_err();
    assert_eq!(err.to_string(), "deadline exceeded: no time left for an attempt");
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_the_deadline_cannot_fit_is_refused() {
    let d = Deadline::after(ms(1_000));
    assert!(d.check_wait(ms(999), "the backoff before a retry").is_ok());
    let err = d.check_wait(ms(1_000), "the provider's Retry-After").unwrap_err();
    assert_eq!(err.what, "the provider's Retry-After");
    assert_eq!((err.needed, err.left), (ms(1_000), ms(1_000)));
}

#[tokio::test(start_paused = true)]
async fn nested_deadlines_only_shorten() {
    assert_eq!(Deadline::current(), None);
    let outer = Deadline::after(ms(1_000));
    outer
        .scope(async move {
            assert_eq!(Deadline::current(), Some(outer));
            assert_eq!(Deadline::after(ms(5_000)).within_current(), outer);
            let inner = Deadline::after(ms(10));
            assert_eq!(inner.within_current(), inner);
        })
        .await;
    assert_eq!(Deadline::current(), None);
}

#[test]
fn timeouts_are_validated() {
    let ok = Timeouts { connect: ms(1), headers: ms(10), body_idle: ms(10), total: ms(10) };
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(Timeouts { connect: ms(0), ..ok }.validate(), Err(TimeoutsError::Zero("connect")));
    assert_eq!(
        Timeouts { body_idle: ms(11), ..ok }.validate().unwrap_err().to_string(),
        "body_idle (11 ms) must not exceed total (10 ms)"
    );
}

#[test]
fn a_huge_budget_saturates() {
    let d = Deadline::after(Duration::MAX);
    assert!(d.remaining() > Duration::from_secs(365 * 86_400));
}

mod layer {
    use std::convert::Infallible;

    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::layer::{DeadlineLayer, PolicyError, Rejected};

    type Error = PolicyError<Infallible>;

    #[tokio::test(start_paused = true)]
    async fn each_call_gets_its_budget_within_the_callers_deadline() {
        let service = DeadlineLayer::new(Some(ms(1_000)))
            .layer(service_fn(|_: ()| async { Ok::<_, Error>(Deadline::current().map(|d| d.remaining())) }));
        assert_eq!(service.clone().oneshot(()).await.unwrap(), Some(ms(1_000)));
        let outer = Deadline::after(ms(300));
        assert_eq!(outer.scope(service.oneshot(())).await.unwrap(), Some(ms(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_with_no_time_left_is_refused_before_it_starts() {
        let service = |budget| {
            DeadlineLayer::new(Some(budget)).layer(service_fn(
                |_: ()| -> std::future::Ready<Result<(), Error>> {
                    unreachable!("a refused call must not start")
                },
            ))
        };
        let refused = |e: Error| {
            matches!(e, PolicyError::Rejected(Rejected::DeadlineExceeded(e))
                if e.what == "an attempt" && e.needed.is_zero() && e.left.is_zero())
        };
        let outer = Deadline::after(ms(10));
        tokio::time::advance(ms(10)).await;
        assert!(refused(outer.scope(service(ms(1_000)).oneshot(())).await.unwrap_err()));
        assert!(refused(service(Duration::ZERO).oneshot(()).await.unwrap_err()));
    }
}
