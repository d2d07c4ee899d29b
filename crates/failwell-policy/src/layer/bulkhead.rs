//! [`BulkheadLayer`]: a concurrency limit around each call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt};

use super::{Local, Padded, Rejected};
use crate::{Bulkhead, Deadline};

/// Holds a [`Bulkhead`] permit for the whole call; a call that gets none
/// within the bulkhead's bounds fails with [`Rejected::BulkheadFull`].
///
/// A free permit is taken in `call` without waiting; only when the
/// bulkhead is full does the call wait (boxed, bounded by `max_wait`) on a
/// clone of the inner service. `None` passes calls through.
#[derive(Clone, Debug)]
pub struct BulkheadLayer {
    bulkhead: Option<Bulkhead>,
}

impl BulkheadLayer {
    /// A layer over `bulkhead` (none: pass through).
    pub fn new(bulkhead: Option<Bulkhead>) -> Self {
        Self { bulkhead }
    }
}

impl<S> Layer<S> for BulkheadLayer {
    type Service = BulkheadService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BulkheadService { inner, bulkhead: self.bulkhead.clone().map(Local::new) }
    }
}

/// The service of [`BulkheadLayer`].
#[derive(Clone)]
pub struct BulkheadService<S> {
    inner: S,
    bulkhead: Option<Local<Bulkhead>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for BulkheadService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkheadService")
            .field("inner", &self.inner)
            .field("bulkhead", &self.bulkhead.as_deref())
            .finish()
    }
}

/// Returns the permit when the call ends or is dropped.
struct Held(Arc<Padded<Bulkhead>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

type Waiting<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, Req> Service<Req> for BulkheadService<S>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: From<Rejected>,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BulkheadFuture<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Some(bulkhead) = &self.bulkhead else {
            return BulkheadFuture::running(self.inner.call(req), None);
        };
        if bulkhead.take() {
            let held = Held(bulkhead.share());
            return BulkheadFuture::running(self.inner.call(req), Some(held));
        }
        let config = bulkhead.config();
        if config.max_wait.is_zero() || config.max_waiting == 0 {
            return BulkheadFuture {
                state: State::Refused { error: Some(Rejected::BulkheadFull(bulkhead.full()).into()) },
            };
        }
        // The ready service stays here for the next caller; the waiter
        // gets a clone and waits for its readiness after the permit. The
        // wait ends at the call's deadline, if that comes first, and no
        // attempt starts once the deadline has passed.
        let shared = bulkhead.share();
        let service = self.inner.clone();
        let deadline = Deadline::current();
        BulkheadFuture::waiting(Box::pin(async move {
            Deadline::bound(deadline, "the wait for a bulkhead permit", shared.wait())
                .await
                .map_err(Rejected::DeadlineExceeded)?
                .map_err(Rejected::BulkheadFull)?;
            let _held = Held(shared);
            let mut service = service;
            let ready = Deadline::bound(deadline, "the service to become ready", service.ready())
                .await
                .map_err(Rejected::DeadlineExceeded)??;
            if let Some(Err(e)) = deadline.map(|d| d.check_attempt()) {
                return Err(Rejected::DeadlineExceeded(e).into());
            }
            ready.call(req).await
        }))
    }
}

pin_project_lite::pin_project! {
    /// The future of [`BulkheadService`].
    pub struct BulkheadFuture<F, T, E> {
        #[pin]
        state: State<F, T, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, T, E> {
        // Holding a permit (or no bulkhead).
        Running { #[pin] inner: F, held: Option<Held> },
        // The bulkhead was full: waiting within its bounds, then calling.
        Waiting { inner: Waiting<T, E> },
        // Full, and waiting is not allowed.
        Refused { error: Option<E> },
    }
}

impl<F, T, E> BulkheadFuture<F, T, E> {
    fn running(inner: F, held: Option<Held>) -> Self {
        Self { state: State::Running { inner, held } }
    }

    fn waiting(inner: Waiting<T, E>) -> Self {
        Self { state: State::Waiting { inner } }
    }
}

impl<F, T, E> Future for BulkheadFuture<F, T, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Running { inner, held } => {
                let result = std::task::ready!(inner.poll(cx));
                held.take();
                Poll::Ready(result)
            }
            StateProj::Waiting { inner } => inner.as_mut().poll(cx),
            StateProj::Refused { error } => {
                Poll::Ready(Err(error.take().expect("a refused bulkhead future is polled once")))
            }
        }
    }
}
