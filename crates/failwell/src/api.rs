//! The HTTP API: submit an operation with an idempotency key, read it back,
//! health.
//!
//! Errors are RFC 9457 problem details (`application/problem+json`) with a
//! stable `type` per problem; internal details (SQL, paths) are logged, never
//! sent. Malformed JSON, a missing or reused key and an oversized body are
//! rejected before anything is written.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use failwell_engine::Providers;
use failwell_policy::layer::{BulkheadLayer, DeadlineLayer, TimeoutLayer};
use failwell_policy::{Answer, Bulkhead, OnUnavailable, PolicyError, Rejected};
use failwell_store::{NewOperation, Operation, Store, Submitted};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tower::ServiceBuilder;

use crate::problem::{Problem, ProblemType};

/// The longest idempotency key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// What the HTTP handlers share.
#[derive(Debug)]
pub struct AppState {
    /// The store.
    pub store: Store,
    /// Configured providers, to refuse unknown ones at the door.
    pub providers: Arc<Providers>,
    /// Wakes the relay when an operation was recorded.
    pub wake: Arc<Notify>,
    /// Configured webhook sources.
    pub webhooks: Arc<crate::inbox::Webhooks>,
    /// Wakes the forwarder when a new event is to be forwarded.
    pub forward: Arc<tokio::sync::Notify>,
    /// The last-known-good answers of read operations.
    pub reads: crate::read::ReadCache,
    /// Renders the process's metrics (`None`: another recorder was
    /// installed first, e.g. by an embedding application).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The group commit that stores webhook events.
    pub ingest: crate::inbox::Ingest,
    /// What the admin API and the dashboard need.
    pub admin: AdminState,
}

/// What the admin API, the dashboard and `GET /metrics` share.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// The bearer token (`None`: the admin API and the dashboard are off).
    pub token: Option<crate::admin::Token>,
    /// Where comparison reports with discrepancies go.
    pub alerts: Option<failwell_engine::AlertSink>,
    /// The window of the success rate and p95 latency.
    pub stats_window: Duration,
}

/// The API router: `POST /v1/operations`, `GET /v1/operations/{key}`,
/// `GET /v1/providers`, `GET /healthz`, …, the admin API and the
/// dashboard, with a request body limit of `max_body_bytes`.
///
/// Every request to the API runs under failwell's own policy layers: a
/// deadline of `limits.request_timeout` (enforced by a timeout layer),
/// inside a bulkhead of `limits.bulkhead`. A request turned away or cut
/// short gets a 503 problem with `Retry-After`; a submission cut short may
/// have been recorded, and resubmitting it with the same key returns it.
/// The operator's routes (`/admin/v1`, `/ui`) are not under them: a
/// `reconcile` may take longer than an API call (it waits out the
/// provider's pauses), and needs the admin token, checked before any
/// other answer, on every path below `/admin/`.
pub fn router(
    state: Arc<AppState>,
    max_body_bytes: usize,
    bulkhead: Bulkhead,
    request_timeout: Duration,
) -> Router {
    let policy = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(overloaded))
        .layer(DeadlineLayer::new(Some(request_timeout)))
        .layer(BulkheadLayer::new(Some(bulkhead)))
        .layer(TimeoutLayer::new(None))
        .map_err(PolicyError::<Infallible>::Inner);
    let api = Router::new()
        .route("/v1/operations", post(submit))
        .route("/v1/operations/{key}", get(show))
        .route("/v1/providers", get(providers))
        .route("/metrics", get(prometheus))
        .route("/v1/events", get(crate::inbox::feed))
        .route("/v1/read/{provider}/{operation}", get(crate::read::read))
        .route("/v1/events/{integration}/{event_id}", get(crate::inbox::event))
        .route(
            "/webhooks/{integration}",
            post(crate::inbox::receive).layer(DefaultBodyLimit::max(webhook_body_limit(&state))),
        )
        .route("/healthz", get(health))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .fallback(|| async { Problem::new(ProblemType::NotFound, "No such route.") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state.clone())
        .layer(policy);
    let operator = crate::admin::router(state.clone())
        .merge(crate::ui::router(state.clone()))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state);
    operator.merge(api).layer(axum::middleware::from_fn(refuse_nul))
}

/// Refuses a path or query that holds U+0000 once decoded (`%00`): no key,
/// name or filter has one, and PostgreSQL's text cannot hold it.
async fn refuse_nul(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let has_nul = |part: &str| part.as_bytes().windows(3).any(|w| w.eq_ignore_ascii_case(b"%00"));
    if has_nul(request.uri().path()) {
        return Problem::new(ProblemType::InvalidPath, "The path holds U+0000 (%00).").into_response();
    }
    if request.uri().query().is_some_and(has_nul) {
        return Problem::new(ProblemType::InvalidQuery, "The query holds U+0000 (%00).").into_response();
    }
    next.run(request).await
}

/// The answer to a method a route does not take (405).
pub(crate) async fn method_not_allowed() -> Problem {
    Problem::new(ProblemType::MethodNotAllowed, "This route does not take that method.")
}

/// The largest body any webhook source accepts (each source checks its own).
fn webhook_body_limit(state: &AppState) -> usize {
    state.webhooks.values().map(|w| w.max_body_bytes).max().unwrap_or(0)
}

/// The answer to a request the API's policy refused or cut short.
async fn overloaded(error: PolicyError<Infallible>) -> Response {
    let (kind, detail) = match error {
        PolicyError::Rejected(Rejected::BulkheadFull(e)) => (
            ProblemType::Overloaded,
            format!("failwell is at its limit of {} requests; try again.", e.max_concurrent),
        ),
        PolicyError::Rejected(other) => (
            ProblemType::RequestTimeout,
            format!("The request took too long ({other}); try again with the same Idempotency-Key."),
        ),
        PolicyError::Inner(never) => match never {},
    };
    Problem::new(kind, detail).with_retry_after(1)
}

/// A JSON body whose rejections are problem details.
pub(crate) struct ApiJson<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .is_some_and(|v| {
                v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
            });
        if !json {
            return Err(Problem::new(
                ProblemType::UnsupportedMediaType,
                "Expected request with `Content-Type: application/json`.",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state).await?;
        // serde reads a struct from an array too; every body here is an
        // object. A body that is not JSON at all (`hello`) is malformed.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|&b| b != b'{') {
            return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                Ok(_) => Problem::new(ProblemType::InvalidBody, "The body must be a JSON object."),
                Err(e) => Problem::new(ProblemType::MalformedJson, format!("The body is not JSON: {e}.")),
            });
        }
        match Json::<T>::from_bytes(&bytes) {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => {
                let kind = match &rejection {
                    JsonRejection::JsonSyntaxError(_) => ProblemType::MalformedJson,
                    _ => ProblemType::InvalidBody,
                };
                Err(Problem::with_status(kind, rejection.status(), rejection.body_text()))
            }
        }
    }
}

/// Path parameters whose rejections (e.g. `abc` for an id) are problem
/// details (`invalid-path`, 400).
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequestParts<S>
    for ApiPath<T>
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Problem> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Self(v)),
            Err(e) => Err(Problem::new(ProblemType::InvalidPath, e.body_text())),
        }
    }
}

/// The body of `POST /v1/operations`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitBody {
    /// A `[providers.NAME]` of the configuration.
    #[schema(min_length = 1)]
    provider: String,
    /// One of its operations.
    #[schema(min_length = 1)]
    operation: String,
    /// The request body to send, a JSON object (numbers and key order are
    /// kept; at most 127 levels deep).
    // Read on its own (`payload()`), so its nesting counts from itself.
    #[schema(value_type = Object)]
    payload: Box<serde_json::value::RawValue>,
}

/// The payload of a submission as a value. Errors (422 `invalid-body`):
/// nested deeper than failwell reads back, or holding a key serde_json's
/// reader reserves (it would not read back as written).
fn payload(raw: &serde_json::value::RawValue) -> Result<Value, Problem> {
    let invalid = |detail: String| Problem::new(ProblemType::InvalidBody, detail);
    if let Some(key) = failwell_store::reserved_key_in(raw.get()) {
        return Err(invalid(format!(
            "`payload` holds the key {key:?}, which serde_json reserves for its own keys."
        )));
    }
    serde_json::from_str(raw.get()).map_err(|e| {
        invalid(format!(
            "`payload` nests arrays and objects deeper than {} levels ({e}).",
            failwell_store::MAX_NESTING
        ))
    })
}

/// An operation as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OperationView {
    #[serde(flatten)]
    operation: Operation,
    /// Where to follow it: `/v1/operations/{key}`.
    status_url: String,
}

/// An operation with its history and the webhook events about it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OperationDetail {
    #[serde(flatten)]
    view: OperationView,
    /// Every call, lookup and skipped attempt, oldest first.
    history: Vec<failwell_store::AttemptRow>,
    /// What each webhook event did to it.
    events: Vec<failwell_store::OperationEvent>,
}

fn view(operation: Operation) -> OperationView {
    let status_url = format!("/v1/operations/{}", encode_segment(&operation.idempotency_key));
    OperationView { operation, status_url }
}

/// Percent-encodes a key for use as one URL path segment (RFC 3986
/// unreserved characters stay as they are).
fn encode_segment(s: &str) -> String {
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Records an intent and queues its delivery: 201 with the new operation,
/// 200 with the stored one when the key was used before with the same
/// request.
#[utoipa::path(post, path = "/v1/operations", operation_id = "submit_operation", tag = "operations",
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "One key per intent (1–255 visible ASCII bytes), reused on every retry of it")),
    request_body(content = SubmitBody, description = "The operation to deliver"),
    responses(
        (status = 201, description = "Recorded; delivery is queued", body = OperationView),
        (status = 200, description = "The key was used before with the same request: the stored operation", body = OperationView),
        (status = 400, response = Problem), (status = 413, response = Problem), (status = 415, response = Problem),
        (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: ApiJson<SubmitBody>,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let ApiJson(body) = body;
    let payload = payload(&body.payload)?;
    let Some(client) = state.providers.get(&body.provider) else {
        return Err(Problem::new(
            ProblemType::UnknownProvider,
            format!("Provider {:?} is not configured.", body.provider),
        ));
    };
    let Some(spec) = client.spec().operations.get(&body.operation) else {
        return Err(Problem::new(
            ProblemType::UnknownOperation,
            format!("Provider {:?} has no operation {:?}.", body.provider, body.operation),
        ));
    };
    if spec.method == reqwest::Method::GET {
        return Err(Problem::new(
            ProblemType::ReadOperation,
            format!(
                "{}.{} is a read: it is answered at once at GET /v1/read/{}/{}?QUERY, never queued.",
                body.provider, body.operation, body.provider, body.operation
            ),
        ));
    }
    if !payload.is_object() {
        return Err(Problem::new(ProblemType::InvalidBody, "`payload` must be a JSON object."));
    }
    // The reference is the one actually sent: the payload's reference field.
    let reference = match payload.get(&spec.reference_field) {
        Some(Value::String(r)) if !r.trim().is_empty() => Some(r.clone()),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        None if client.spec().lookup.is_none() => None,
        _ => {
            return Err(Problem::new(
                ProblemType::InvalidReference,
                format!(
                    "`payload.{}` must be a non-empty string or an integer: failwell looks the operation up \
                     at the provider by it when an outcome is unknown.",
                    spec.reference_field
                ),
            ));
        }
    };
    // The manifest's first answer, while the provider is unavailable: a
    // replay is answered as always; a new `reject` (or `degrade`: every
    // operation failwell delivers is a write) is refused without being
    // recorded; a new `queue` is accepted (202) and waits in the outbox.
    let unavailable = client.unavailable();
    if let Some(wait) = unavailable
        && spec.manifest.on_unavailable != OnUnavailable::Queue
        && state.store.operation(&key).await?.is_none()
    {
        return Ok(Problem::provider_unavailable(wait, |secs| {
            format!(
                "Provider {:?} is unavailable (its circuit breaker is open or its bulkhead full) and operation {:?} \
                 is declared on_unavailable = {:?}: nothing was recorded; try again in {secs} s.",
                body.provider,
                body.operation,
                spec.manifest.on_unavailable.as_str()
            )
        }));
    }
    let op = NewOperation {
        idempotency_key: key,
        provider: body.provider,
        operation: body.operation,
        reference,
        payload,
    };
    let (status, op) = match state.store.submit(op, failwell_engine::now_ms()).await? {
        Submitted::Created(op) => {
            state.wake.notify_one();
            (if unavailable.is_some() { StatusCode::ACCEPTED } else { StatusCode::CREATED }, op)
        }
        Submitted::Replayed(op) => (StatusCode::OK, op),
    };
    let view = view(op);
    Ok((status, [(header::LOCATION, view.status_url.clone())], Json(view)).into_response())
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let missing = || {
        Problem::new(
            ProblemType::MissingIdempotencyKey,
            "The Idempotency-Key header is required: one key per intent, reused on every retry of it.",
        )
    };
    let mut values = headers.get_all("idempotency-key").iter();
    let value = values.next().ok_or_else(missing)?;
    if values.next().is_some() {
        return Err(Problem::new(
            ProblemType::InvalidIdempotencyKey,
            "Send exactly one Idempotency-Key header.",
        ));
    }
    let key = value.to_str().map_err(|_| {
        Problem::new(
            ProblemType::InvalidIdempotencyKey,
            "Idempotency-Key must be visible ASCII (no spaces or control characters).",
        )
    })?;
    let key = key.trim();
    if !key.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Problem::new(
            ProblemType::InvalidIdempotencyKey,
            "Idempotency-Key must be visible ASCII (no spaces or control characters).",
        ));
    }
    if key.is_empty() {
        return Err(missing());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Problem::new(
            ProblemType::InvalidIdempotencyKey,
            format!("Idempotency-Key is longer than {MAX_KEY_BYTES} bytes."),
        ));
    }
    Ok(key.to_string())
}

/// One operation by its idempotency key.
#[utoipa::path(get, path = "/v1/operations/{key}", operation_id = "get_operation", tag = "operations",
    params(("key" = String, Path, description = "The operation's idempotency key")),
    responses(
        (status = 200, description = "The operation, its history and its events", body = OperationDetail),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    key: Result<Path<String>, PathRejection>,
) -> Result<Json<OperationDetail>, Problem> {
    let Path(key) = key.map_err(|e| Problem::new(ProblemType::InvalidPath, e.body_text()))?;
    let Some(op) = state.store.operation(&key).await? else {
        return Err(Problem::new(ProblemType::OperationNotFound, format!("No operation has key {key:?}.")));
    };
    let history = state.store.attempts(op.id).await?;
    let events = state.store.operation_events(op.id).await?;
    Ok(Json(OperationDetail { view: view(op), history, events }))
}

/// `GET /metrics`: every counter and gauge failwell records, in the
/// Prometheus text exposition format (version 0.0.4).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 503, response = Problem)))]
pub(crate) async fn prometheus(State(state): State<Arc<AppState>>) -> Result<Response, Problem> {
    let Some(handle) = &state.metrics else {
        return Err(Problem::new(
            ProblemType::MetricsUnavailable,
            "Another metrics recorder was installed in this process first.",
        ));
    };
    record_stats(&state).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response())
}

/// Sets the gauges of the four numbers per integration from the store, as
/// of this scrape (so every process of one database reports the same):
/// `failwell_integration_success_ratio` and
/// `failwell_integration_latency_p95_seconds` over `[stats] window_ms`
/// (NaN without calls), `failwell_outbox_depth`,
/// `failwell_outbox_oldest_age_seconds` (0 when nothing is open),
/// `failwell_operations_unknown`, `failwell_operations_needs_human`,
/// `failwell_dead_letters` and
/// `failwell_dead_letters_unacknowledged`, each labelled `integration`; and
/// per provider the latest comparison's `failwell_comparison_discrepancies`
/// and `failwell_comparison_last_run_timestamp_seconds`, and each breaker's
/// `failwell_breaker_state` (also set on every transition).
async fn record_stats(state: &AppState) -> Result<(), Problem> {
    let stats = crate::ops::stats(&state.store, &state.providers, state.admin.stats_window).await?;
    for i in &stats.integrations {
        let label = || [("integration", i.integration.clone())];
        metrics::gauge!("failwell_integration_success_ratio", &label())
            .set(i.success_ratio.unwrap_or(f64::NAN));
        metrics::gauge!("failwell_integration_latency_p95_seconds", &label())
            .set(i.p95_ms.map_or(f64::NAN, |ms| ms as f64 / 1e3));
        metrics::gauge!("failwell_outbox_depth", &label()).set(i.depth as f64);
        metrics::gauge!("failwell_outbox_oldest_age_seconds", &label())
            .set(i.oldest_open_age_ms.map_or(0.0, |ms| ms as f64 / 1e3));
        metrics::gauge!("failwell_operations_unknown", &label()).set(i.unknown as f64);
        metrics::gauge!("failwell_operations_needs_human", &label()).set(i.needs_human as f64);
        metrics::gauge!("failwell_dead_letters", &label()).set(i.dead_letters as f64);
        metrics::gauge!("failwell_dead_letters_unacknowledged", &label()).set(i.dead_letters_unacked as f64);
    }
    for (name, client) in state.providers.iter() {
        if let Some(breaker) = &client.guards().breaker {
            metrics::gauge!("failwell_breaker_state", "breaker" => name.clone())
                .set(breaker.state().code() as f64);
        }
    }
    for r in state.store.latest_reports().await? {
        let label = [("provider", r.provider)];
        metrics::gauge!("failwell_comparison_discrepancies", &label).set(r.discrepancies as f64);
        metrics::gauge!("failwell_comparison_last_run_timestamp_seconds", &label)
            .set(r.finished_at_ms as f64 / 1e3);
    }
    Ok(())
}

/// `GET /v1/providers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ProvidersView {
    /// Each configured provider.
    providers: Vec<ProviderView>,
}

/// One provider's guards, as this process sees them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ProviderView {
    /// Its `[providers.NAME]`.
    name: String,
    /// Its circuit breaker, if it has one.
    breaker: Option<BreakerView>,
    /// Its adaptive sending rate, if it has one.
    throttle: Option<ThrottleView>,
    /// Its bulkhead.
    bulkhead: BulkheadView,
    /// Its retry budget.
    retry_budget: BudgetView,
}

/// A circuit breaker's state.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BreakerView {
    /// `closed`, `open`, `half_open`, `forced_open` or `forced_closed`.
    state: &'static str,
    /// How long every call stays paused, ms (0: not paused).
    paused_ms: u64,
    /// How long calls were paused in all, ms.
    paused_total_ms: u64,
}

/// An adaptive sending rate.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ThrottleView {
    /// Calls per second allowed now; `null` while unlimited.
    rate_per_s: Option<f64>,
}

/// A bulkhead's use.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BulkheadView {
    /// Calls in flight.
    in_flight: usize,
    /// Calls allowed in flight at once.
    max_concurrent: usize,
}

/// A retry budget's balance.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BudgetView {
    /// Retries it allows now.
    available: u64,
}

/// Each provider's breaker, bulkhead and retry budget.
#[utoipa::path(get, path = "/v1/providers", operation_id = "list_providers", tag = "providers",
    responses((status = 200, description = "Every configured provider", body = ProvidersView)))]
pub(crate) async fn providers(State(state): State<Arc<AppState>>) -> Json<ProvidersView> {
    let providers = state
        .providers
        .iter()
        .map(|(name, client)| {
            let guards = client.guards();
            ProviderView {
                name: name.clone(),
                breaker: guards.breaker.as_ref().map(|b| BreakerView {
                    state: b.state().as_str(),
                    paused_ms: b.paused_for().map_or(0, |d| d.as_millis() as u64),
                    paused_total_ms: guards.paused_total().as_millis() as u64,
                }),
                throttle: guards.throttle.as_ref().map(|t| ThrottleView { rate_per_s: t.rate() }),
                bulkhead: BulkheadView {
                    in_flight: guards.bulkhead.in_flight(),
                    max_concurrent: guards.bulkhead.config().max_concurrent,
                },
                retry_budget: BudgetView { available: guards.budget.available() },
            }
        })
        .collect();
    Json(ProvidersView { providers })
}

/// `GET /healthz`: the store answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Health {
    /// Always `ok`.
    status: &'static str,
    /// Operations and queues by state.
    operations: failwell_store::Counts,
}

/// The store answers, with its counts.
#[utoipa::path(get, path = "/healthz", operation_id = "health", tag = "health",
    responses((status = 200, description = "The store answers", body = Health), (status = 503, response = Problem)))]
pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Result<Json<Health>, Problem> {
    let counts = state.store.counts().await?;
    Ok(Json(Health { status: "ok", operations: counts }))
}
