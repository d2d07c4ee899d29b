//! The webhook inbox's front door: `POST /webhooks/{integration}` verifies
//! a delivery's signature over the raw body and stores the event before
//! answering, once per `(integration, event id)`.
//!
//! A delivery is answered `200` only after its event is committed; a
//! duplicate is answered `200` too and writes nothing; a store failure is a
//! `503`, so the provider delivers again. Refused deliveries store nothing
//! and each refusal has its own problem type and metric label.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use failwell_store::{NewEvent, Received, Store};
use failwell_webhook::{Verifier, VerifyError};
use serde_json::{Value, json};

use crate::api::{AppState, Problem};

/// One configured webhook source (`[webhooks.NAME]`).
#[derive(Clone, Debug)]
pub struct WebhookSource {
    /// The signature check.
    pub verifier: Verifier,
    /// JSON pointer to the event id in the body, for schemes whose headers
    /// carry none (Stripe: `/id`).
    pub event_id_pointer: String,
    /// The largest body accepted, in bytes (413 past it).
    pub max_body_bytes: usize,
}

/// The configured webhook sources, by integration name.
pub type Webhooks = BTreeMap<String, WebhookSource>;

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

/// `POST /webhooks/{integration}`.
pub(crate) async fn receive<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Path(integration): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let Some(source) = state.webhooks.get(&integration) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-integration",
            format!("No webhook integration {integration:?} is configured."),
        ));
    };
    let refused = |reason: &'static str| {
        metrics::counter!("failwell_webhook_refused_total", "integration" => integration.clone(), "reason" => reason)
            .increment(1);
    };
    let body = match body {
        Ok(body) if body.len() <= source.max_body_bytes => body,
        _ => {
            refused("body_too_large");
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                format!("The body exceeds {} bytes.", source.max_body_bytes),
            ));
        }
    };
    let verified = source.verifier.verify(&headers, &body, SystemTime::now()).map_err(|e| {
        refused(e.kind());
        signature_problem(&e)
    })?;
    let event_id = match verified.event_id {
        Some(id) => id,
        None => serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.pointer(&source.event_id_pointer).and_then(Value::as_str).map(str::to_owned))
            .ok_or_else(|| {
                refused("missing_event_id");
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "missing-event-id",
                    format!("The body has no event id at {:?}.", source.event_id_pointer),
                )
            })?,
    };
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
    };
    let received = state.store.receive(event, failwell_engine::now_ms()).await?;
    metrics::counter!(
        "failwell_webhook_received_total",
        "integration" => integration.clone(),
        "result" => match received { Received::New => "new", Received::Duplicate => "duplicate" }
    )
    .increment(1);
    Ok((StatusCode::OK, Json(json!({"event_id": event_id, "received": received}))).into_response())
}

fn signature_problem(e: &VerifyError) -> Problem {
    let (status, slug) = match e {
        VerifyError::MissingHeader(_) => (StatusCode::BAD_REQUEST, "missing-signature-header"),
        VerifyError::MalformedHeader { .. } => (StatusCode::BAD_REQUEST, "malformed-signature-header"),
        VerifyError::NoMatchingSignature => (StatusCode::UNAUTHORIZED, "invalid-signature"),
        VerifyError::StaleTimestamp { .. } => (StatusCode::UNAUTHORIZED, "stale-timestamp"),
        VerifyError::FutureTimestamp { .. } => (StatusCode::UNAUTHORIZED, "future-timestamp"),
    };
    Problem::new(status, slug, format!("{e}."))
}
