//! [`DeadlineLayer`]: sets the deadline of the whole call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::futures::TaskLocalFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::Rejected;
use crate::Deadline;

/// Gives each call a deadline `budget` from its start (or keeps the
/// caller's, if that is earlier) for every layer and attempt inside; a call
/// whose caller's deadline has already passed is refused with
/// [`Rejected::DeadlineExceeded`] before anything starts. Costs one clock
/// read per call. `None` passes calls through untouched.
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer {
    budget: Option<Duration>,
}

impl DeadlineLayer {
    /// A layer giving each call `budget` (none: pass through).
    pub fn new(budget: Option<Duration>) -> Self {
        Self { budget }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService { inner, budget: self.budget }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Clone, Debug)]
pub struct DeadlineService<S> {
    inner: S,
    budget: Option<Duration>,
}

impl<S, Req> Service<Req> for DeadlineService<S>
where
    S: Service<Req>,
    S::Error: From<Rejected>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = DeadlineFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Some(budget) = self.budget else {
            return DeadlineFuture::Pass { inner: self.inner.call(req) };
        };
        // One clock read for both the new deadline and the check.
        let now = Instant::now();
        let deadline = Deadline::after_from(now, budget).within_current();
        if let Err(e) = deadline.check_attempt_at(now) {
            return DeadlineFuture::Refused { error: Some(Rejected::DeadlineExceeded(e).into()) };
        }
        let inner = deadline.sync_scope(|| self.inner.call(req));
        DeadlineFuture::Scoped { inner: deadline.scope(inner) }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`DeadlineService`].
    #[project = DeadlineProj]
    pub enum DeadlineFuture<F, E> {
        /// No deadline configured.
        Pass { #[pin] inner: F },
        /// Running under the deadline.
        Scoped { #[pin] inner: TaskLocalFuture<Deadline, F> },
        /// Refused before starting.
        Refused { error: Option<E> },
    }
}

impl<F, T, E> Future for DeadlineFuture<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DeadlineProj::Pass { inner } => inner.poll(cx),
            DeadlineProj::Scoped { inner } => inner.poll(cx),
            DeadlineProj::Refused { error } => {
                Poll::Ready(Err(error.take().expect("a refused deadline future is polled once")))
            }
        }
    }
}
