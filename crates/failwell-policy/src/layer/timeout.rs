//! [`TimeoutLayer`]: bounds each attempt.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use super::Rejected;
use crate::{Deadline, DeadlineExceeded};

/// Bounds each attempt by `min(timeout, time left before the deadline)`.
/// A timeout gives [`Rejected::TimedOut`]; running into the deadline gives
/// [`Rejected::DeadlineExceeded`].
///
/// The timer is armed only when the attempt first has to wait (its future
/// returns `Pending`), so an attempt that completes at once costs no clock
/// read and no timer; the synchronous work of that first poll is not
/// counted against the timeout. `None` passes calls through.
#[derive(Clone, Copy, Debug)]
pub struct TimeoutLayer {
    timeout: Option<Duration>,
}

impl TimeoutLayer {
    /// A layer bounding each attempt by `timeout` (none: only the deadline,
    /// if there is one).
    pub fn new(timeout: Option<Duration>) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = TimeoutService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TimeoutService { inner, timeout: self.timeout }
    }
}

/// The service of [`TimeoutLayer`].
#[derive(Clone, Debug)]
pub struct TimeoutService<S> {
    inner: S,
    timeout: Option<Duration>,
}

impl<S, Req> Service<Req> for TimeoutService<S>
where
    S: Service<Req>,
    S::Error: From<Rejected>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TimeoutFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        TimeoutFuture {
            inner: self.inner.call(req),
            timeout: self.timeout,
            deadline: Deadline::current(),
            timer: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`TimeoutService`].
    pub struct TimeoutFuture<F> {
        #[pin]
        inner: F,
        timeout: Option<Duration>,
        deadline: Option<Deadline>,
        timer: Option<(Pin<Box<Sleep>>, Expiry)>,
    }
}

/// What ends an attempt that runs out of time.
#[derive(Clone, Copy)]
enum Expiry {
    Timeout(Duration),
    Deadline,
}

impl<F, T, E> Future for TimeoutFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: From<Rejected>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.inner.poll(cx) {
            return Poll::Ready(result);
        }
        if this.timer.is_none() {
            if this.timeout.is_none() && this.deadline.is_none() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let by_timeout = this.timeout.and_then(|t| now.checked_add(t));
            let by_deadline = this.deadline.map(|d| d.instant());
            let (until, expiry) = match (by_timeout, by_deadline) {
                (Some(t), Some(d)) if d < t => (d, Expiry::Deadline),
                (None, Some(d)) => (d, Expiry::Deadline),
                (Some(t), _) => (t, Expiry::Timeout(this.timeout.unwrap_or_default())),
                (None, None) => return Poll::Pending,
            };
            // Already over: no need to wait for the timer driver's next tick.
            if until <= now {
                return Poll::Ready(Err(expire(expiry).into()));
            }
            *this.timer = Some((Box::pin(tokio::time::sleep_until(until)), expiry));
        }
        let Some((timer, expiry)) = this.timer.as_mut() else { return Poll::Pending };
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Err(expire(*expiry).into())),
        }
    }
}

/// The rejection for an attempt that ran out of time, counted and logged.
fn expire(expiry: Expiry) -> Rejected {
    match expiry {
        Expiry::Timeout(t) => {
            tracing::debug!(timeout_ms = t.as_millis() as u64, "attempt timed out");
            metrics::counter!("failwell_attempt_timeouts_total").increment(1);
            Rejected::TimedOut(t)
        }
        Expiry::Deadline => {
            tracing::debug!("attempt ran into the deadline");
            metrics::counter!("failwell_deadline_exceeded_total").increment(1);
            Rejected::DeadlineExceeded(DeadlineExceeded::no_time_for("the attempt in flight"))
        }
    }
}
