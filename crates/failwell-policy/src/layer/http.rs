//! HTTP: the classifier for `reqwest` calls, and the policy as a
//! `reqwest-middleware` middleware.

use std::time::Duration;

use http::Extensions;
use reqwest::header::{HeaderName, RETRY_AFTER};
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{Middleware, Next};

use super::{Policy, Rejected};
use crate::{
    BreakerStore, CallOutcome, Classification, Classifier, Deadline, DeadlineExceeded, InProcess, Observed,
    TransportFailure, is_repeatable, parse_retry_after,
};

/// Classifies HTTP calls with a provider's [`Classifier`]: status and
/// `Retry-After` of a response, or whether a failed request can have been
/// sent. A request is repeatable when its method is idempotent or it carries
/// the idempotency header; only then are timeouts, resets and 5xx answers
/// retryable (see [`Classifier::classify_request`]). With an error-code
/// pointer, the provider's error code is read from a JSON error body, so
/// code overrides (e.g. `card_declined` → permanent) apply.
#[derive(Clone, Debug, Default)]
pub struct HttpClassifier {
    classifier: Classifier,
    idempotency_header: Option<HeaderName>,
    error_code_pointer: Option<String>,
}

impl HttpClassifier {
    /// A classifier with the provider's rules.
    pub fn new(classifier: Classifier) -> Self {
        Self { classifier, idempotency_header: None, error_code_pointer: None }
    }

    /// Where the provider's error code sits in a JSON error body, as a JSON
    /// pointer (RFC 6901), e.g. `/error/code`.
    pub fn error_code_pointer(mut self, pointer: &str) -> Self {
        self.error_code_pointer = Some(pointer.to_owned());
        self
    }

    /// Requests carrying this header (e.g. `Idempotency-Key`) are
    /// repeatable whatever their method. Errors when `name` is not a valid
    /// header name.
    pub fn idempotency_header(mut self, name: &str) -> Result<Self, reqwest::header::InvalidHeaderName> {
        self.idempotency_header = Some(HeaderName::from_bytes(name.as_bytes())?);
        Ok(self)
    }

    /// Whether `request` may be sent again without risking a second effect.
    pub fn repeatable(&self, request: &Request) -> bool {
        let keyed = self.idempotency_header.as_ref().is_some_and(|h| request.headers().contains_key(h));
        is_repeatable(request.method().as_str(), keyed)
    }

    /// `None` for a 1xx–3xx answer, else the classification of its status,
    /// its `Retry-After` and the error code in its `body`.
    pub fn classify_response(
        &self,
        response: &Response,
        body: &[u8],
        repeatable: bool,
    ) -> Option<Classification> {
        let status = response.status().as_u16();
        if status < 400 {
            return None;
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, crate::clock::wall()));
        let json = self
            .error_code_pointer
            .as_ref()
            .and_then(|_| serde_json::from_slice::<serde_json::Value>(body).ok());
        let error_code = json
            .as_ref()
            .zip(self.error_code_pointer.as_deref())
            .and_then(|(json, pointer)| json.pointer(pointer))
            .and_then(serde_json::Value::as_str);
        Some(
            self.classifier
                .classify_request(Observed::Response { status, error_code, retry_after }, repeatable),
        )
    }

    /// The classification of a call that got no answer.
    pub fn classify_failure(&self, failure: TransportFailure, repeatable: bool) -> Classification {
        self.classifier.classify_request(Observed::Transport(failure), repeatable)
    }

    /// Whether an answer with this status counts against the provider's
    /// health ([`Classifier::counts_as_outage`]).
    pub fn is_outage(&self, status: u16) -> bool {
        status >= 400
            && self.classifier.counts_as_outage(Observed::Response {
                status,
                error_code: None,
                retry_after: None,
            })
    }
}

/// The same policy as a [`Policy`] layer, for a
/// `reqwest_middleware::ClientWithMiddleware`: deadline, bulkhead, breaker,
/// retries with budget and per-attempt timeout, in that order, classified by
/// an [`HttpClassifier`]. Each attempt's timeout covers the whole response,
/// body included: the body is read within the attempt and handed back
/// buffered. A request whose body cannot be cloned (a stream) is sent once.
/// Rejections come back as `reqwest_middleware::Error::Middleware` holding
/// a [`Rejected`].
#[derive(Debug)]
pub struct PolicyMiddleware<B: BreakerStore = InProcess> {
    policy: Policy<B, HttpClassifier>,
    limits: BodyLimits,
}

impl<B: BreakerStore> Clone for PolicyMiddleware<B> {
    fn clone(&self) -> Self {
        Self { policy: self.policy.clone(), limits: self.limits }
    }
}

impl<B: BreakerStore> PolicyMiddleware<B> {
    /// The middleware for `policy`, reading response bodies of up to 16 MiB.
    pub fn new(policy: Policy<B, HttpClassifier>) -> Self {
        Self { policy, limits: BodyLimits { headers: None, body_idle: None, max_bytes: 16 << 20 } }
    }

    /// The largest response body read into memory, in bytes (default 16 MiB);
    /// a larger one fails the attempt.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.limits.max_bytes = max;
        self
    }

    /// The phases of each attempt, as in [`Timeouts`](crate::Timeouts): at
    /// most `headers` from sending to the response headers, at most
    /// `body_idle` between two chunks of the body (the policy's
    /// `attempt_timeout` is the total; the connect timeout belongs to the
    /// `reqwest::Client`). An expiry is [`Rejected::TimedOut`] after
    /// sending, so an unkeyed write is not retried.
    pub fn phase_timeouts(mut self, headers: Duration, body_idle: Duration) -> Self {
        self.limits.headers = Some(headers);
        self.limits.body_idle = Some(body_idle);
        self
    }

    /// The attempts of one call: the result of the last one, and what it
    /// means for the breaker ([`CallOutcome::Ignored`] when no attempt was
    /// made at all).
    async fn attempts(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> (reqwest_middleware::Result<Response>, CallOutcome) {
        let policy = &self.policy;
        if let Some(retry) = &policy.retry {
            retry.start();
        }
        let repeatable = policy.classify.repeatable(&request);
        let mut attempt = 1;
        let mut previous_delay = Duration::ZERO;
        let mut outcome = CallOutcome::Ignored;
        loop {
            let deadline = Deadline::current();
            // The attempt's bound, and whether it is the deadline's.
            let bound = match deadline.map(|d| d.check_attempt()) {
                Some(Err(e)) => return (Err(rejected(e.into())), outcome),
                Some(Ok(left)) => match policy.attempt_timeout {
                    Some(t) if t < left => Some((t, false)),
                    _ => Some((left, true)),
                },
                None => policy.attempt_timeout.map(|t| (t, false)),
            };
            let copy = request.try_clone();
            let call = buffered(next.clone(), request, extensions, &self.limits);
            let result = match bound {
                Some((t, by_deadline)) => tokio::time::timeout(t, call).await.unwrap_or_else(|_| {
                    Err(rejected(if by_deadline {
                        Rejected::DeadlineExceeded(DeadlineExceeded::no_time_for("the attempt in flight"))
                    } else {
                        Rejected::TimedOut(t)
                    }))
                }),
                None => call.await,
            };
            let classification = match &result {
                Ok((response, body)) => {
                    let outage = policy.classify.is_outage(response.status().as_u16());
                    outcome = if outage { CallOutcome::Failure } else { CallOutcome::Success };
                    policy.classify.classify_response(response, body, repeatable)
                }
                // The provider answered; the answer is just larger than this
                // client takes. Not an outage, and no retry will shrink it.
                Err(reqwest_middleware::Error::Middleware(e))
                    if e.downcast_ref::<BodyTooLarge>().is_some() =>
                {
                    outcome = CallOutcome::Success;
                    Some(Classification::Permanent)
                }
                Err(e) => {
                    let failure = match e {
                        reqwest_middleware::Error::Reqwest(e) if e.is_connect() || e.is_builder() => {
                            TransportFailure::NotSent
                        }
                        _ => TransportFailure::AfterSend,
                    };
                    outcome = CallOutcome::Failure;
                    Some(policy.classify.classify_failure(failure, repeatable))
                }
            };
            let result = result.map(|(response, _)| response);
            let (Some(classification), Some(retry), Some(copy)) = (classification, &policy.retry, copy)
            else {
                return (result, outcome);
            };
            let step =
                retry.after_failure(attempt, previous_delay, classification, deadline, &mut rand::rng());
            match step {
                super::Step::Return => return (result, outcome),
                super::Step::DeadlineExceeded(e) => return (Err(rejected(e.into())), outcome),
                super::Step::Retry(delay) => {
                    drop(result);
                    tokio::time::sleep(delay).await;
                    previous_delay = delay;
                    attempt += 1;
                    request = copy;
                }
            }
        }
    }
}

/// Sends `request` and reads the whole body, so that a timeout around this
/// covers the body too; the response is rebuilt around the buffered body.
async fn buffered(
    next: Next<'_>,
    request: Request,
    extensions: &mut Extensions,
    limits: &BodyLimits,
) -> reqwest_middleware::Result<(Response, bytes::Bytes)> {
    let mut response = within(limits.headers, next.run(request, extensions)).await?;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = within(limits.body_idle, response.chunk()).await? {
        if body.len() + chunk.len() > limits.max_bytes {
            return Err(reqwest_middleware::Error::middleware(BodyTooLarge(limits.max_bytes)));
        }
        body.extend_from_slice(&chunk);
    }
    let body = body.freeze();
    let mut rebuilt = http::Response::builder()
        .status(response.status())
        .version(response.version())
        .url(response.url().clone());
    if let Some(headers) = rebuilt.headers_mut() {
        *headers = response.headers().clone();
    }
    let rebuilt = rebuilt.body(body.clone()).map_err(reqwest_middleware::Error::middleware)?;
    Ok((Response::from(rebuilt), body))
}

/// Runs one phase of an attempt within `limit` (none: unbounded); its
/// expiry is [`Rejected::TimedOut`].
async fn within<T, E: Into<reqwest_middleware::Error>>(
    limit: Option<Duration>,
    phase: impl std::future::Future<Output = Result<T, E>>,
) -> reqwest_middleware::Result<T> {
    match limit {
        Some(limit) => match tokio::time::timeout(limit, phase).await {
            Ok(result) => result.map_err(Into::into),
            Err(_) => Err(rejected(Rejected::TimedOut(limit))),
        },
        None => phase.await.map_err(Into::into),
    }
}

/// The middleware's limits on reading one response.
#[derive(Clone, Copy, Debug)]
struct BodyLimits {
    headers: Option<Duration>,
    body_idle: Option<Duration>,
    max_bytes: usize,
}

/// A response body above [`PolicyMiddleware::max_body_bytes`].
#[derive(Debug, thiserror::Error)]
#[error("the response body exceeds {0} bytes")]
pub struct BodyTooLarge(pub usize);

fn rejected(r: Rejected) -> reqwest_middleware::Error {
    reqwest_middleware::Error::middleware(r)
}

#[async_trait::async_trait]
impl<B: BreakerStore> Middleware for PolicyMiddleware<B> {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let policy = &self.policy;
        let deadline = match policy.deadline {
            Some(budget) => Some(Deadline::after(budget).within_current()),
            None => Deadline::current(),
        };
        let run = async {
            let _held = match &policy.bulkhead {
                Some(bulkhead) => Some(
                    Deadline::bound(deadline, "the wait for a bulkhead permit", bulkhead.acquire())
                        .await
                        .map_err(|e| rejected(e.into()))?
                        .map_err(|e| rejected(e.into()))?,
                ),
                None => None,
            };
            let Some(breaker) = &policy.breaker else {
                return self.attempts(request, extensions, next).await.0;
            };
            let permit = breaker.try_acquire().map_err(|e| rejected(e.into()))?;
            let (result, outcome) = if permit.is_probe() {
                let timeout = breaker.store().probe_timeout();
                tokio::time::timeout(timeout, self.attempts(request, extensions, next))
                    .await
                    .unwrap_or_else(|_| (Err(rejected(Rejected::TimedOut(timeout))), CallOutcome::Failure))
            } else {
                self.attempts(request, extensions, next).await
            };
            permit.record(outcome);
            result
        };
        match deadline {
            Some(d) => {
                if let Err(e) = d.check_attempt() {
                    return Err(rejected(e.into()));
                }
                d.scope(run).await
            }
            None => run.await,
        }
    }
}
