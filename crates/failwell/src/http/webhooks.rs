//! The webhook inbox's front door: `POST /webhooks/{integration}` verifies
//! a delivery's signature over the raw body and stores the event before
//! answering, once per `(integration, event id)`.
//!
//! A delivery is answered `200` only after its event is committed; a
//! duplicate is answered `200` too and writes nothing; a store failure is a
//! `503`, so the provider delivers again. Deliveries that arrive together
//! are committed together ([`Ingest`], a group commit), so one fsync serves
//! many of them; when deliveries trickle in one at a time, a delivery waits
//! at most [`INGEST_LINGER`] for others to share its commit (see `Linger`). Refused deliveries store nothing
//! and each refusal has its own problem type and metric label.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use failwell_store::{NewEvent, Received};
use failwell_webhook::{JsonFields, VerifyError};
use serde_json::{Value, json};

use super::problem::{Problem, ProblemType};
use super::state::AppState;

/// Headers kept with each event (when present): the signature headers of
/// every scheme, the provider's ids, and the content type.
const KEPT_HEADERS: [&str; 10] = [
    "content-type",
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-hub-signature-256",
    "x-github-delivery",
    "x-github-event",
    "x-shopify-hmac-sha256",
    "x-shopify-webhook-id",
];

/// What `POST /webhooks/{integration}` stored.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ReceivedView {
    /// The provider's event id.
    event_id: String,
    /// `new` the first time, `duplicate` for every further delivery.
    received: Received,
}

/// A provider's signed webhook delivery: stored once, byte for byte, then
/// applied to the ledger and forwarded as the integration says.
#[utoipa::path(post, path = "/webhooks/{integration}", operation_id = "receive_webhook", tag = "events",
    params(("integration" = String, Path, description = "A `[webhooks.NAME]` of the configuration")),
    request_body(content = String, description = "The delivery exactly as the provider signed it", content_type = "application/json"),
    responses(
        (status = 200, description = "Stored (or already stored)", body = ReceivedView),
        (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem),
        (status = 413, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn receive(
    State(state): State<Arc<AppState>>,
    Path(integration): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let Some(source) = state.webhooks.get(&integration) else {
        return Err(Problem::new(
            ProblemType::UnknownIntegration,
            format!("No webhook integration {integration:?} is configured."),
        ));
    };
    let refused = |reason: &'static str| {
        tracing::info!(%integration, reason, "webhook delivery refused; nothing stored");
        metrics::counter!("failwell_webhook_refused_total", "integration" => integration.clone(), "reason" => reason)
            .increment(1);
    };
    let body = match body {
        Ok(body) if body.len() <= source.max_body_bytes => body,
        Err(e) if e.status() != StatusCode::PAYLOAD_TOO_LARGE => {
            refused("invalid_body");
            return Err(Problem::with_status(
                ProblemType::InvalidBody,
                StatusCode::BAD_REQUEST,
                format!("{}.", e.body_text()),
            ));
        }
        _ => {
            refused("body_too_large");
            return Err(Problem::new(
                ProblemType::BodyTooLarge,
                format!("The body exceeds {} bytes.", source.max_body_bytes),
            ));
        }
    };
    let verified = source.verifier.verify(&headers, &body, failwell_engine::clock::wall()).map_err(|e| {
        refused(e.kind());
        signature_problem(&e)
    })?;
    let event_id = match verified.event_id {
        Some(id) => id,
        None => {
            let pointer = &source.event_id_pointer;
            let missing = match JsonFields::new(&body).at(pointer) {
                Ok(Some(Value::String(id))) => Ok(id),
                Ok(Some(other)) => Err(format!("The event id at {pointer:?} is not a string but {other}.")),
                Ok(None) => Err(format!("The body has no event id at {pointer:?}.")),
                Err(e) => Err(format!("The body has no event id at {pointer:?}: {e}.")),
            };
            missing.map_err(|detail| {
                refused("missing_event_id");
                Problem::new(ProblemType::MissingEventId, detail)
            })?
        }
    };
    // The id is a key in URLs (`/v1/events/{integration}/{id}`) and the
    // `webhook-id` of every forward: visible ASCII, like every provider's.
    if event_id.is_empty() || event_id.len() > 255 || !event_id.bytes().all(|b| b.is_ascii_graphic()) {
        refused("invalid_event_id");
        return Err(Problem::new(
            ProblemType::InvalidEventId,
            format!(
                "The event id {:?}{} is empty, longer than 255 bytes, or not visible ASCII.",
                event_id.chars().take(64).collect::<String>(),
                if event_id.chars().count() > 64 { "…" } else { "" }
            ),
        ));
    }
    let kept: serde_json::Map<String, Value> = KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            headers.get(*name).and_then(|v| v.to_str().ok()).map(|v| (name.to_string(), json!(v)))
        })
        .collect();
    let event = NewEvent {
        integration: integration.clone(),
        event_id: event_id.clone(),
        payload: body.to_vec(),
        headers: Value::Object(kept),
        report: source.ledger.as_ref().map(|ledger| ledger.report(&body)),
        forward: source.forward,
    };
    let Some(received) = state.ingest.store(event).await else {
        return Err(Problem::new(ProblemType::StoreUnavailable, "The store is unavailable; deliver again."));
    };
    if received == Received::New && source.forward {
        state.forward.notify_one();
    }
    metrics::counter!(
        "failwell_webhook_received_total",
        "integration" => integration.clone(),
        "result" => match received { Received::New => "new", Received::Duplicate => "duplicate" }
    )
    .increment(1);
    Ok((StatusCode::OK, Json(ReceivedView { event_id, received })).into_response())
}

fn signature_problem(e: &VerifyError) -> Problem {
    let kind = match e {
        VerifyError::MissingHeader(_) => ProblemType::MissingSignatureHeader,
        VerifyError::MalformedHeader { .. } => ProblemType::MalformedSignatureHeader,
        VerifyError::NoMatchingSignature => ProblemType::InvalidSignature,
        VerifyError::StaleTimestamp { .. } => ProblemType::StaleTimestamp,
        VerifyError::FutureTimestamp { .. } => ProblemType::FutureTimestamp,
    };
    Problem::new(kind, format!("{e}."))
}
