//! The HTTP client for one provider: sends an operation or a status lookup
//! with explicit timeouts and reduces what happened to facts the policy can
//! classify.
//!
//! It never retries and never decides anything: one call, one
//! [`CallResult`]. The total timeout covers the response body, not just the
//! headers.

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
    /// Short kind: `connect`, `timeout`, `body`, `reset`.
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
    /// timeout. Errors when the TLS backend cannot be initialised.
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
    /// one) and a total timeout of `timeout` (at most the provider's).
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
        self.execute(request.timeout(timeout.min(self.spec.timeout))).await
    }

    /// Looks our reference up at the provider (reconciliation). `None` when
    /// the provider has no lookup configured.
    pub async fn lookup(&self, reference: &str) -> Option<CallResult> {
        let lookup = self.spec.lookup.as_ref()?;
        let url = match self.spec.base_url.join(&lookup.path) {
            Ok(url) => url,
            Err(e) => return Some(failed_before_send(format!("invalid URL: {e}"))),
        };
        let request =
            self.http.get(url).query(&[(lookup.query_param.as_str(), reference)]).timeout(self.spec.timeout);
        Some(self.execute(request).await)
    }

    async fn execute(&self, request: reqwest::RequestBuilder) -> CallResult {
        let started_at_ms = crate::now_ms();
        let start = Instant::now();
        let response = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>(Reply { status, body: serde_json::from_slice(&bytes).ok(), retry_after })
        }
        .await
        .map_err(transport_error);
        CallResult { started_at_ms, duration: start.elapsed(), response }
    }
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
