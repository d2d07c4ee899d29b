//! Operations: `POST /v1/operations` records an intent with an idempotency
//! key and queues its delivery; `GET /v1/operations/{key}` reads it back.
//!
//! Malformed JSON, a missing or reused key and an oversized body are
//! rejected before anything is written; so is an operation whose ledger
//! hold is refused (e.g. `insufficient-funds`).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use failwell_policy::{Answer, OnUnavailable};
use failwell_store::{NewOperation, Operation, Submitted};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::extract::ApiJson;
use super::problem::{Problem, ProblemType};
use super::state::AppState;

/// The longest idempotency key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// The longest business reference (`payload.REFERENCE_FIELD`) the API
/// takes, in bytes: what every store indexes (MySQL's index holds 255
/// characters).
pub const MAX_REFERENCE_BYTES: usize = 255;

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
    /// A ledger hold to make with the operation, in the same transaction:
    /// its outcome posts it (success) or voids it (failure).
    #[serde(default)]
    hold: Option<failwell_store::NewHold>,
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
pub(crate) fn encode_segment(s: &str) -> String {
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Records an intent and queues its delivery: 201 with the new operation,
/// 200 with the stored one when the key was used before with the same
/// request. With a `hold`, the hold is made in the same transaction; a
/// refused hold records neither (422 `insufficient-funds`, …; 409
/// `transfer-id-reused`).
#[utoipa::path(post, path = "/v1/operations", operation_id = "submit_operation", tag = "operations",
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "One key per intent (1–255 visible ASCII bytes), reused on every retry of it")),
    request_body(content = SubmitBody, description = "The operation to deliver"),
    responses(
        (status = 201, description = "Recorded; delivery is queued", body = OperationView),
        (status = 200, description = "The key was used before with the same request: the stored operation", body = OperationView),
        (status = 400, response = Problem), (status = 409, response = Problem), (status = 413, response = Problem),
        (status = 415, response = Problem), (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: ApiJson<SubmitBody>,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let ApiJson(body) = body;
    let payload = payload(&body.payload)?;
    if let Some(hold) = &body.hold {
        super::ledger::no_nul([hold.id.as_str(), &hold.debit_account, &hold.credit_account])?;
    }
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
        Some(Value::String(r)) if !r.trim().is_empty() && r.len() <= MAX_REFERENCE_BYTES => Some(r.clone()),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        None if client.spec().lookup.is_none() => None,
        _ => {
            return Err(Problem::new(
                ProblemType::InvalidReference,
                format!(
                    "`payload.{}` must be a non-empty string of at most {MAX_REFERENCE_BYTES} bytes or an integer: \
                     failwell looks the operation up at the provider by it when an outcome is unknown.",
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
        hold: body.hold,
    };
    let held = op.hold.is_some();
    let submitted = state.store.submit(op, failwell_engine::now_ms()).await;
    if held {
        failwell_engine::ledger::count_hold(&submitted);
    }
    let (status, op) = match submitted? {
        Submitted::Created(op) => {
            state.wake.notify_one();
            (if unavailable.is_some() { StatusCode::ACCEPTED } else { StatusCode::CREATED }, op)
        }
        Submitted::Replayed(op) => (StatusCode::OK, op),
    };
    let view = view(op);
    Ok((status, [(header::LOCATION, view.status_url.clone())], Json(view)).into_response())
}

/// The request's one `Idempotency-Key` (visible ASCII, 1–255 bytes).
/// Errors: 400 `missing-idempotency-key`, `invalid-idempotency-key`.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
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
