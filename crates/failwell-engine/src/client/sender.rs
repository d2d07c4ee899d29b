//! The HTTP side of a provider's client: one call ([`Sender`]) with the
//! timeout model of [`super`], and what the breaker counts as a failure
//! ([`CallClassifier`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use failwell_policy::{
    CallOutcome, Classification, Classifier, Classify, PolicyError, TransportFailure, parse_retry_after,
};
use failwell_store::Operation;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde_json::Value;
use tower::Service;

use super::{CallRequest, CallResult, Reply, TransportError};
use crate::provider::{Encoding, OperationSpec, ProviderSpec};

/// Judges a provider's answers for the breaker: only failures that count as
/// an outage ([`Classifier::counts_as_outage`]) are failures; a declined card
/// is the provider working. With an adaptive rate, a throttling answer is
/// neither: the provider is there and asks to slow down, which the rate
/// (not the breaker) does. The relay owns retries, so nothing is retried
/// here.
#[derive(Clone, Debug)]
pub(super) struct CallClassifier {
    pub(super) classifier: Classifier,
    pub(super) error_code_pointer: String,
    /// What is throttling, when the provider has an adaptive rate.
    pub(super) throttling: Option<crate::PauseRule>,
}

impl Classify<CallRequest, CallResult, PolicyError<Infallible>> for CallClassifier {
    fn classify(
        &self,
        _: &CallRequest,
        result: &Result<CallResult, PolicyError<Infallible>>,
    ) -> Option<Classification> {
        match result {
            Ok(call) if !call.is_success() => {
                Some(self.classifier.classify(call.observed(&self.error_code_pointer)))
            }
            _ => None,
        }
    }

    fn breaker_outcome(&self, result: &Result<CallResult, PolicyError<Infallible>>) -> CallOutcome {
        match result {
            Ok(call) if call.is_success() => CallOutcome::Success,
            Ok(CallResult { response: Ok(reply), .. })
                if self
                    .throttling
                    .as_ref()
                    .is_some_and(|rule| rule.is_throttling(reply.status, reply.retry_after.is_some())) =>
            {
                CallOutcome::Ignored
            }
            // A request that could not be built (a header value no HTTP
            // request can carry) never reached the provider and says
            // nothing about it.
            Ok(CallResult { response: Err(e), .. }) if e.kind == NOT_BUILT => CallOutcome::Ignored,
            Ok(call) if self.classifier.counts_as_outage(call.observed(&self.error_code_pointer)) => {
                CallOutcome::Failure
            }
            Ok(_) => CallOutcome::Success,
            Err(_) => CallOutcome::Ignored,
        }
    }
}

/// The HTTP side of a client: one call, one [`CallResult`].
#[derive(Clone, Debug)]
pub(super) struct Sender {
    pub(super) spec: Arc<ProviderSpec>,
    /// Sends operations and delivers webhooks. It follows no redirect: a
    /// 3xx is the answer (followed, a POST would become a GET elsewhere,
    /// and its 200 would read as the call done).
    pub(super) http: reqwest::Client,
    /// Status lookups and reads (`GET`s, which a redirect leaves `GET`s):
    /// follows up to 10 redirects, reqwest's default.
    pub(super) reads: reqwest::Client,
}

impl Service<CallRequest> for Sender {
    type Response = CallResult;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<CallResult, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CallRequest) -> Self::Future {
        let sender = self.clone();
        Box::pin(async move {
            Ok(match req {
                CallRequest::Send { method, url, key, body, content_type, timeout } => {
                    let request =
                        sender.http.request(method, url).header(CONTENT_TYPE, content_type).body(body);
                    sender.send(request, key, timeout).await
                }
                CallRequest::Lookup { reference } => match sender.lookup(&reference).await {
                    Some(result) => result,
                    None => failed_before_send("the provider has no status lookup".into()),
                },
                CallRequest::Read { url, query } => sender.read(url, &query).await,
                CallRequest::Deliver { path, headers, body, timeout } => {
                    sender.deliver(&path, headers, body, timeout).await
                }
            })
        })
    }
}

impl Sender {
    /// Sends an operation's `request` once, with `key` in the provider's
    /// idempotency header (when it has one), within `min(timeout, provider
    /// timeout)`.
    async fn send(
        &self,
        mut request: reqwest::RequestBuilder,
        key: Option<String>,
        timeout: Duration,
    ) -> CallResult {
        if let (Some(key), Some(header)) = (key, &self.spec.idempotency.header) {
            request = request.header(header.as_str(), key);
        }
        self.execute(request, timeout.min(self.spec.timeouts.total)).await
    }

    async fn lookup(&self, reference: &str) -> Option<CallResult> {
        let lookup = self.spec.lookup.as_ref()?;
        let request = self.reads.get(lookup.url.clone()).query(&[(lookup.query_param.as_str(), reference)]);
        Some(self.execute(request, self.spec.timeouts.total).await)
    }

    async fn read(&self, mut url: Url, query: &str) -> CallResult {
        url.set_query((!query.is_empty()).then_some(query));
        self.execute(self.reads.get(url), self.spec.timeouts.total).await
    }

    async fn deliver(
        &self,
        path: &str,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
        timeout: Duration,
    ) -> CallResult {
        match self.spec.base_url.join(path) {
            Ok(url) => {
                let request = self.http.post(url).headers(headers).body(body);
                self.execute(request, timeout.min(self.spec.timeouts.total)).await
            }
            Err(e) => failed_before_send(format!("invalid URL: {e}")),
        }
    }

    /// Sends `request` and reads the whole answer within `total`, under the
    /// provider's headers and body idle limits (see the module table).
    async fn execute(&self, request: reqwest::RequestBuilder, total: Duration) -> CallResult {
        let started_at_ms = crate::now_ms();
        let start = tokio::time::Instant::now();
        let deadline = start.checked_add(total).unwrap_or_else(far_future);
        let response = async {
            let headers = Phase::new(deadline, total, self.spec.timeouts.headers, "headers_timeout");
            let mut response = headers.run(request.send()).await?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, crate::clock::wall()));
            let mut body = Vec::new();
            loop {
                let idle = Phase::new(deadline, total, self.spec.timeouts.body_idle, "body_idle_timeout");
                match idle.run(response.chunk()).await? {
                    Some(chunk) => body.extend_from_slice(&chunk),
                    None => break,
                }
            }
            Ok::<_, TransportError>(Reply { status, body: serde_json::from_slice(&body).ok(), retry_after })
        }
        .await;
        CallResult { started_at_ms, duration: start.elapsed(), response }
    }
}

/// One wait of a call: for the headers, or for the next body chunk. It ends
/// at its own limit or at the total's deadline, whichever comes first, and
/// names the one that ended it.
struct Phase {
    until: tokio::time::Instant,
    kind: &'static str,
    /// What did not come, and the limit it did not come within: the
    /// message of an expiry, written only then.
    what: &'static str,
    within: Duration,
}

impl Phase {
    /// A wait starting now, limited to `limit` (reported as `kind`) and to
    /// `deadline`, the end of the attempt's `total` (reported as `timeout`).
    fn new(deadline: tokio::time::Instant, total: Duration, limit: Duration, kind: &'static str) -> Self {
        let own = tokio::time::Instant::now().checked_add(limit).unwrap_or(deadline);
        if own < deadline {
            let what = if kind == "headers_timeout" { "no response headers" } else { "no body data" };
            Self { until: own, kind, what, within: limit }
        } else {
            Self { until: deadline, kind: "timeout", what: "no complete response", within: total }
        }
    }

    /// Runs `wait` until this phase ends; its expiry is a failure after send.
    async fn run<T>(
        self,
        wait: impl Future<Output = Result<T, reqwest::Error>>,
    ) -> Result<T, TransportError> {
        match tokio::time::timeout_at(self.until, wait).await {
            Ok(result) => result.map_err(transport_error),
            Err(_) => Err(TransportError {
                failure: TransportFailure::AfterSend,
                kind: self.kind,
                message: format!("{} within {} ms", self.what, self.within.as_millis()),
            }),
        }
    }
}

/// A deadline no call reaches (for a total too large to add to now).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// The request of a call of `spec` for `op` within `timeout`, its body
/// encoded ([`encode`]). Errors with the call's result, nothing sent, when
/// the payload cannot be encoded.
pub(super) fn send_request(
    spec: &OperationSpec,
    op: &Operation,
    timeout: Duration,
) -> Result<CallRequest, CallResult> {
    let (body, content_type) = encode(spec.encoding, &op.payload).map_err(failed_before_send)?;
    Ok(CallRequest::Send {
        method: spec.method.clone(),
        url: spec.url.clone(),
        key: spec.send_key.then(|| op.provider_key.clone()),
        body,
        content_type,
        timeout,
    })
}

/// An operation's payload as its request body, with the body's
/// `Content-Type`: JSON (`application/json`, as serde_json writes it), or
/// form fields (`application/x-www-form-urlencoded`, see [`form_fields`]),
/// as reqwest's `json` and `form` encode them. Errors: the payload cannot
/// be encoded (it is a JSON value, so never in practice), with why.
fn encode(encoding: Encoding, payload: &Value) -> Result<(bytes::Bytes, &'static str), String> {
    Ok(match encoding {
        Encoding::Json => {
            let body =
                serde_json::to_vec(payload).map_err(|e| format!("encoding the payload as JSON: {e}"))?;
            (body.into(), "application/json")
        }
        Encoding::Form => {
            let body = serde_urlencoded::to_string(form_fields(payload))
                .map_err(|e| format!("encoding the payload as form fields: {e}"))?;
            (body.into(), "application/x-www-form-urlencoded")
        }
    })
}

/// Top-level payload fields as form pairs; nested values are sent as JSON text.
fn form_fields(payload: &Value) -> Vec<(String, String)> {
    payload
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                .collect()
        })
        .unwrap_or_default()
}

/// The [`TransportError::kind`] of a request that could not be built, or
/// had nowhere to go: nothing was sent.
const NOT_BUILT: &str = "request";

fn failed_before_send(message: String) -> CallResult {
    CallResult {
        started_at_ms: crate::now_ms(),
        duration: Duration::ZERO,
        response: Err(TransportError { failure: TransportFailure::NotSent, kind: NOT_BUILT, message }),
    }
}

/// Reduces a reqwest error to whether the request can have been sent.
fn transport_error(e: reqwest::Error) -> TransportError {
    let (failure, kind) = if e.is_connect() {
        (TransportFailure::NotSent, "connect")
    } else if e.is_builder() {
        (TransportFailure::NotSent, NOT_BUILT)
    } else if e.is_timeout() {
        (TransportFailure::AfterSend, "timeout")
    } else if e.is_body() || e.is_decode() {
        (TransportFailure::AfterSend, "body")
    } else {
        (TransportFailure::AfterSend, "reset")
    };
    TransportError { failure, kind, message: crate::chain(&e) }
}
