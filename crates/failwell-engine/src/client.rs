//! The HTTP client for one provider: sends an operation or a status lookup
//! with explicit timeouts and reduces what happened to facts the policy can
//! classify.
//!
//! It never retries and never decides anything: one call, one
//! [`CallResult`].
//!
//! One timeout model for every call (operations and lookups), with the
//! provider's limits from [`ProviderSpec`]:
//!
//! | limit | measured | on expiry: `kind`, failure |
//! |---|---|---|
//! | `connect_timeout` | establishing the connection | `connect`, not sent |
//! | `headers_timeout` | from the start of the call to the response headers | `headers_timeout`, after send |
//! | `body_idle_timeout` | the longest pause between two body chunks | `body_idle_timeout`, after send |
//! | total (`timeout`, or less when the caller's deadline is nearer) | from the start of the call to the last body byte | `timeout`, after send |
//!
//! Every phase ends at the total's deadline at the latest; when a phase's own
//! limit would end at or after that deadline, an expiry is reported as the
//! total (`timeout`), so with the defaults (headers and body idle limits
//! equal to `timeout`) a hanging provider reads `timeout`. A connect taking
//! longer than `headers_timeout` is reported as `headers_timeout` (after
//! send): failwell cannot tell that phase apart, and treating it as possibly
//! sent is the safe side.

use std::time::{Duration, Instant, SystemTime};

use failwell_policy::{Observed, TransportFailure, parse_retry_after};
use failwell_store::Operation;
use reqwest::header::RETRY_AFTER;
use serde_json::Value;

use crate::provider::{Encoding, OperationSpec, ProviderSpec};

/// A provider's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// The body, when it is JSON.
    pub body: Option<Value>,
    /// The parsed `Retry-After` header.
    pub retry_after: Option<Duration>,
}

/// A call that got no complete answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportError {
    /// Whether the request can have reached the provider.
    pub failure: TransportFailure,
    /// Short kind: `connect`, `request`, `headers_timeout`,
    /// `body_idle_timeout`, `timeout` (the total), `body`, `reset`.
    pub kind: &'static str,
    /// The error with its causes.
    pub message: String,
}

/// The facts of one HTTP call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult {
    /// Start, ms since epoch.
    pub started_at_ms: i64,
    /// Wall time of the call.
    pub duration: Duration,
    /// What came back.
    pub response: Result<Reply, TransportError>,
}

impl CallResult {
    /// Whether the provider answered 2xx.
    pub fn is_success(&self) -> bool {
        matches!(&self.response, Ok(r) if (200..300).contains(&r.status))
    }

    /// The call reduced to what classification needs; `error_code_pointer`
    /// finds the provider's error code in a JSON error body.
    pub fn observed<'a>(&'a self, error_code_pointer: &str) -> Observed<'a> {
        match &self.response {
            Ok(r) => Observed::Response {
                status: r.status,
                error_code: r
                    .body
                    .as_ref()
                    .and_then(|b| b.pointer(error_code_pointer))
                    .and_then(Value::as_str),
                retry_after: r.retry_after,
            },
            Err(e) => Observed::Transport(e.failure),
        }
    }

    /// A one-line description for history and logs, e.g. `HTTP 503
    /// (rate_limit)` or `timeout: operation timed out`.
    pub fn describe(&self, error_code_pointer: &str) -> String {
        match &self.response {
            Ok(r) => {
                let code =
                    r.body.as_ref().and_then(|b| b.pointer(error_code_pointer)).and_then(Value::as_str);
                match code {
                    Some(code) => format!("HTTP {} ({code})", r.status),
                    None => format!("HTTP {}", r.status),
                }
            }
            Err(e) => format!("{}: {}", e.kind, e.message),
        }
    }
}

/// The client for one provider.
#[derive(Clone, Debug)]
pub struct ProviderClient {
    spec: ProviderSpec,
    http: reqwest::Client,
}

impl ProviderClient {
    /// Builds the client: connection pool with the provider's connect
    /// timeout (the other limits apply per call, see the module table).
    /// Errors when the TLS backend cannot be initialised.
    pub fn new(spec: ProviderSpec) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(spec.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { spec, http })
    }

    /// The provider's description.
    pub fn spec(&self) -> &ProviderSpec {
        &self.spec
    }

    /// Sends `op` once, with its idempotency key (when the provider takes
    /// one) and a total timeout of `min(timeout, provider timeout)`: the
    /// caller passes the time left before the operation's deadline. The
    /// provider's connect, headers and body idle limits apply within it.
    pub async fn call(&self, spec: &OperationSpec, op: &Operation, timeout: Duration) -> CallResult {
        let url = self.spec.base_url.join(&spec.path);
        let mut request = match url {
            Ok(url) => self.http.request(spec.method.clone(), url),
            Err(e) => return failed_before_send(format!("invalid URL: {e}")),
        };
        if let Some(header) = &self.spec.idempotency.header {
            request = request.header(header.as_str(), op.provider_key.as_str());
        }
        request = match spec.encoding {
            Encoding::Json => request.json(&op.payload),
            Encoding::Form => request.form(&form_fields(&op.payload)),
        };
        self.execute(request, timeout.min(self.spec.timeout)).await
    }

    /// Looks our reference up at the provider (reconciliation), under the
    /// same limits as a call with the provider's whole `timeout` as total.
    /// `None` when the provider has no lookup configured.
    pub async fn lookup(&self, reference: &str) -> Option<CallResult> {
        let lookup = self.spec.lookup.as_ref()?;
        let url = match self.spec.base_url.join(&lookup.path) {
            Ok(url) => url,
            Err(e) => return Some(failed_before_send(format!("invalid URL: {e}"))),
        };
        let request = self.http.get(url).query(&[(lookup.query_param.as_str(), reference)]);
        Some(self.execute(request, self.spec.timeout).await)
    }

    /// Sends `request` and reads the whole answer within `total`, under the
    /// provider's headers and body idle limits (see the module table).
    async fn execute(&self, request: reqwest::RequestBuilder, total: Duration) -> CallResult {
        let started_at_ms = crate::now_ms();
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start).checked_add(total).unwrap_or_else(far_future);
        let response = async {
            let headers = Phase::new(deadline, total, self.spec.headers_timeout, "headers_timeout");
            let mut response = headers.run(request.send()).await?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let mut body = Vec::new();
            loop {
                let idle = Phase::new(deadline, total, self.spec.body_idle_timeout, "body_idle_timeout");
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
    message: String,
}

impl Phase {
    /// A wait starting now, limited to `limit` (reported as `kind`) and to
    /// `deadline`, the end of the attempt's `total` (reported as `timeout`).
    fn new(deadline: tokio::time::Instant, total: Duration, limit: Duration, kind: &'static str) -> Self {
        let own = tokio::time::Instant::now().checked_add(limit).unwrap_or(deadline);
        if own < deadline {
            let what = if kind == "headers_timeout" { "no response headers" } else { "no body data" };
            Self { until: own, kind, message: format!("{what} within {} ms", limit.as_millis()) }
        } else {
            let message = format!("no complete response within {} ms", total.as_millis());
            Self { until: deadline, kind: "timeout", message }
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
                message: self.message,
            }),
        }
    }
}

/// A deadline no call reaches (for a total too large to add to now).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365 * 30)
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

fn failed_before_send(message: String) -> CallResult {
    CallResult {
        started_at_ms: crate::now_ms(),
        duration: Duration::ZERO,
        response: Err(TransportError { failure: TransportFailure::NotSent, kind: "request", message }),
    }
}

/// Reduces a reqwest error to whether the request can have been sent.
fn transport_error(e: reqwest::Error) -> TransportError {
    let (failure, kind) = if e.is_connect() {
        (TransportFailure::NotSent, "connect")
    } else if e.is_builder() {
        (TransportFailure::NotSent, "request")
    } else if e.is_timeout() {
        (TransportFailure::AfterSend, "timeout")
    } else if e.is_body() || e.is_decode() {
        (TransportFailure::AfterSend, "body")
    } else {
        (TransportFailure::AfterSend, "reset")
    };
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    TransportError { failure, kind, message }
}

#[cfg(test)]
mod tests;
