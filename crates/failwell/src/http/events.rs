//! The event feed (`GET /v1/events`) and one event with its history and
//! forwarding state (`GET /v1/events/{integration}/{event_id}`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use failwell_store::StoredEvent;
use serde_json::Value;

use super::extract::ApiPath;
use super::problem::{Problem, ProblemType};
use super::state::AppState;

/// Payload bytes in one page of the feed, at most (a larger event comes
/// alone): bounds the memory of a page of 1 MiB events.
const FEED_PAGE_BYTES: usize = 8 << 20;

/// The feed's query: `after` (a `seq`, default 0) and `limit` (1–1000,
/// default 100).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FeedQuery {
    #[serde(default)]
    after: i64,
    #[serde(default = "default_limit")]
    limit: u32,
}

fn default_limit() -> u32 {
    100
}

/// A page of the feed.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct FeedPage {
    /// Events in the order first received.
    events: Vec<EventView>,
    /// The `after` of the next page (the last `seq`, or the `after` asked).
    next: i64,
}

/// A stored event. Its body is `payload` when it is UTF-8 text (the exact
/// bytes, as a JSON string), else `payload_base64`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct EventView {
    /// Its place in the order of first receipt (increases, may skip).
    seq: i64,
    /// The integration it came for.
    integration: String,
    /// The provider's event id.
    event_id: String,
    /// When it was first received, ms since the Unix epoch.
    received_at_ms: i64,
    /// The headers kept with it.
    #[schema(value_type = Object)]
    headers: Value,
    /// The body, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    /// The body in base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
}

/// A stored event with what it did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct EventDetail {
    #[serde(flatten)]
    event: EventView,
    /// What it did to the ledger, and each forwarding attempt.
    history: Vec<failwell_store::EventStep>,
    /// Its forwarding; `null` when it is not forwarded.
    forward: Option<ForwardView>,
}

/// An event's forwarding to the application.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ForwardView {
    /// `pending`, `done` or `dead`.
    state: String,
    /// Attempts made.
    attempts: u32,
    /// The last attempt's error.
    last_error: Option<String>,
    /// When the next attempt is due, ms since the Unix epoch.
    due_at_ms: Option<i64>,
}

/// Stored events in the order they were first received, for applications
/// that poll: pass the last `seq` (also `next`) as `after` for the next
/// page. At most 8 MiB of bodies a page (a larger event comes alone).
#[utoipa::path(get, path = "/v1/events", operation_id = "list_events", tag = "events",
    params(
        ("after" = Option<i64>, Query, minimum = 0, description = "The last `seq` seen (default 0)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Events at most (default 100)")),
    responses(
        (status = 200, description = "A page of events", body = FeedPage),
        (status = 400, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn feed(
    State(state): State<Arc<AppState>>,
    query: Result<axum::extract::Query<FeedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FeedPage>, Problem> {
    let axum::extract::Query(query) =
        query.map_err(|e| Problem::new(ProblemType::InvalidQuery, format!("{}.", e.body_text())))?;
    if !(1..=1000).contains(&query.limit) || query.after < 0 {
        return Err(Problem::new(
            ProblemType::InvalidQuery,
            "`limit` must be between 1 and 1000 and `after` at least 0.",
        ));
    }
    let events = state.store.events_after(query.after, query.limit, FEED_PAGE_BYTES).await?;
    let next = events.last().map_or(query.after, |e| e.seq);
    Ok(Json(FeedPage { events: events.into_iter().map(event_view).collect(), next }))
}

/// One stored event with its history after it was stored (what it did to
/// the ledger, each forwarding attempt) and its forwarding state.
#[utoipa::path(get, path = "/v1/events/{integration}/{event_id}", operation_id = "get_event", tag = "events",
    params(
        ("integration" = String, Path, description = "The integration it came for"),
        ("event_id" = String, Path, description = "The provider's event id")),
    responses(
        (status = 200, description = "The event and what it did", body = EventDetail),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn event(
    State(state): State<Arc<AppState>>,
    ApiPath((integration, event_id)): ApiPath<(String, String)>,
) -> Result<Json<EventDetail>, Problem> {
    let Some(record) = state.store.event(&integration, &event_id).await? else {
        return Err(Problem::new(
            ProblemType::NotFound,
            format!("No event {event_id:?} was received for {integration:?}."),
        ));
    };
    let forward = record.forward_state.map(|state| ForwardView {
        state,
        attempts: record.forward_attempts,
        last_error: record.forward_last_error,
        due_at_ms: record.forward_due_at_ms,
    });
    Ok(Json(EventDetail { event: event_view(record.event), history: record.steps, forward }))
}

/// An event as the API shows it.
fn event_view(e: StoredEvent) -> EventView {
    let (payload, payload_base64) = match String::from_utf8(e.payload) {
        Ok(text) => (Some(text), None),
        Err(bytes) => {
            use base64::Engine;
            (None, Some(base64::engine::general_purpose::STANDARD.encode(bytes.into_bytes())))
        }
    };
    EventView {
        seq: e.seq,
        integration: e.integration,
        event_id: e.event_id,
        received_at_ms: e.received_at_ms,
        headers: e.headers,
        payload,
        payload_base64,
    }
}
