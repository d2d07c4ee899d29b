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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use failwell_policy::{Outcome, Reported};
use failwell_store::{EventReport, NewEvent, Received, Store, StoredEvent};
use failwell_webhook::{JsonFields, Verifier, VerifyError};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::api::{ApiPath, AppState};
use crate::problem::{Problem, ProblemType};

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
    /// Whether new events are forwarded to the application.
    pub forward: bool,
    /// How events map to the operations ledger (`None`: they do not).
    pub ledger: Option<LedgerMapping>,
}

/// Where an integration's events say which of our operations they are
/// about, what happened to it, and how new the news is
/// (`[webhooks.NAME.ledger]`).
#[derive(Clone, Debug)]
pub struct LedgerMapping {
    /// The provider our operations went to.
    pub provider: String,
    /// JSON pointer to our reference in the event, e.g.
    /// `/data/object/reference`.
    pub reference_pointer: String,
    /// JSON pointer to the object's status, e.g. `/data/object/status`.
    pub status_pointer: String,
    /// JSON pointer to the event's version: an integer, or a string of
    /// digits (provider-side creation time or object version; larger is
    /// newer), e.g. `/created`.
    pub version_pointer: String,
    /// Statuses meaning the provider acted.
    pub succeeded: Vec<String>,
    /// Statuses meaning the provider refused or certainly did not act.
    pub failed: Vec<String>,
    /// Statuses meaning the object is still in progress.
    pub in_progress: Vec<String>,
    /// Event types that report on operations (e.g. `charge.succeeded`);
    /// empty: every type. Other events are recorded as not applicable, so a
    /// refund's `succeeded` never settles the charge it refunds.
    pub types: Vec<String>,
    /// JSON pointer to the event's type, e.g. `/type`.
    pub type_pointer: String,
    /// JSON pointer to the provider's id of the object, e.g.
    /// `/data/object/id` (kept on the operation an event settles).
    pub id_pointer: String,
}

impl LedgerMapping {
    /// What the event `body` reports, or why it reports nothing this
    /// mapping can apply (not JSON, a field missing, an unmapped status).
    pub fn report(&self, body: &[u8]) -> Result<EventReport, String> {
        let event = JsonFields::new(body);
        let field = |pointer: &str| match event.at(pointer) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(format!("not applicable: nothing at {pointer:?}")),
            Err(e) => Err(format!("not applicable: {e}")),
        };
        let text = |pointer: &str| match field(pointer)? {
            Value::String(s) => Ok(s),
            _ => Err(format!("not applicable: {pointer:?} is not a string")),
        };
        if !self.types.is_empty() {
            let kind = text(&self.type_pointer)?;
            if !self.types.contains(&kind) {
                return Err(format!("not applicable: event type {kind:?} is not in types"));
            }
        }
        // A reference may be an integer, as in `POST /v1/operations`.
        let reference = match field(&self.reference_pointer)? {
            Value::String(s) => s,
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(format!(
                    "not applicable: {:?} is not a string or an integer",
                    self.reference_pointer
                ));
            }
        };
        let status = text(&self.status_pointer)?;
        let version = field(&self.version_pointer)?;
        let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
        let version = version
            .as_i64()
            .or_else(|| version.as_str().filter(|v| digits(v)).and_then(|v| v.parse().ok()))
            .ok_or_else(|| format!("not applicable: {:?} is not an integer version", self.version_pointer))?;
        let listed = |list: &[String]| list.contains(&status);
        let reported = if listed(&self.succeeded) {
            Reported::Settled(Outcome::Succeeded)
        } else if listed(&self.failed) {
            Reported::Settled(Outcome::Failed)
        } else if listed(&self.in_progress) {
            Reported::InProgress
        } else {
            return Err(format!("not applicable: status {status:?} is not mapped"));
        };
        let provider_ref = match event.at(&self.id_pointer) {
            Ok(Some(Value::String(id))) => Some(id),
            _ => None,
        };
        Ok(EventReport { provider: self.provider.clone(), reference, reported, version, provider_ref })
    }
}

/// The configured webhook sources, by integration name.
pub type Webhooks = BTreeMap<String, WebhookSource>;

/// Deliveries waiting for the group commit, at most.
const INGEST_QUEUE: usize = 4096;
/// Events committed in one transaction, at most.
const INGEST_BATCH: usize = 256;
/// The longest a delivery waits for others to share its commit.
pub const INGEST_LINGER: Duration = Duration::from_millis(10);
/// The first wait tried when deliveries trickle in one at a time.
const LINGER_PROBE: Duration = Duration::from_millis(2);

/// How long the group commit waits for more deliveries before it commits,
/// learnt from what waiting brought (a feedback rule in the spirit of
/// Nagle's algorithm and PostgreSQL's `commit_delay`).
///
/// Deliveries that trickle in one at a time would each cost a commit (an
/// fsync on SQLite's single writer): after two lone commits in a row the
/// next one waits [`LINGER_PROBE`]. A wait is split in halves; when
/// deliveries still arrived in its second half the next wait doubles (up to
/// [`INGEST_LINGER`]), and when none did it halves (to none below the
/// probe). So a steady stream settles on waits that gather it, while a
/// fixed set of senders that each wait for their answer (who all arrived
/// in the first half) is committed without waiting.
#[derive(Debug, Default)]
struct Linger {
    wait: Duration,
    lone_before: bool,
}

impl Linger {
    /// How long to wait with `waiting` deliveries in hand.
    fn wait_for(&self, waiting: usize) -> Duration {
        if self.wait.is_zero() && waiting == 1 && self.lone_before { LINGER_PROBE } else { self.wait }
    }

    /// Learns from a wait of `waited`: whether deliveries arrived in its
    /// second half.
    fn learn(&mut self, waited: Duration, arrived_late: bool) {
        self.wait = if arrived_late {
            (waited * 2).min(INGEST_LINGER)
        } else if waited / 2 < LINGER_PROBE {
            Duration::ZERO
        } else {
            waited / 2
        };
    }

    /// Notes a commit of `size` deliveries.
    fn committed(&mut self, size: usize) {
        self.lone_before = size == 1;
    }
}

/// Bytes of bodies committed in one transaction, at most (a larger body
/// goes alone): bounds the memory of a group commit and keeps it far below
/// SQLite's 1 GB limit on a bound value.
const INGEST_BATCH_BYTES: usize = 16 << 20;

/// Group commit for webhook events: one writer task stores whatever
/// deliveries arrived together in one transaction, and each delivery is
/// answered once its transaction committed. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Ingest {
    queue: tokio::sync::mpsc::Sender<(NewEvent, oneshot::Sender<Option<Received>>)>,
}

impl Ingest {
    /// Starts the writer task on `store`; it ends when every handle is
    /// dropped. Each transaction counts in `failwell_webhook_commits_total`.
    pub fn start<S: Store>(store: S) -> Self {
        let (queue, mut waiting) =
            tokio::sync::mpsc::channel::<(NewEvent, oneshot::Sender<Option<Received>>)>(INGEST_QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(INGEST_BATCH);
            let mut linger = Linger::default();
            while waiting.recv_many(&mut batch, INGEST_BATCH).await > 0 {
                let wait = linger.wait_for(batch.len());
                if !wait.is_zero() && batch.len() < INGEST_BATCH {
                    let mut gather = |batch: &mut Vec<_>| {
                        while batch.len() < INGEST_BATCH
                            && let Ok(next) = waiting.try_recv()
                        {
                            batch.push(next);
                        }
                    };
                    tokio::time::sleep(wait / 2).await;
                    gather(&mut batch);
                    let half = batch.len();
                    tokio::time::sleep(wait - wait / 2).await;
                    gather(&mut batch);
                    linger.learn(wait, batch.len() > half);
                }
                linger.committed(batch.len());
                let mut arrived = std::mem::take(&mut batch).into_iter().peekable();
                while arrived.peek().is_some() {
                    // At most INGEST_BATCH_BYTES of bodies per transaction
                    // (and always at least one delivery).
                    let mut bytes = 0;
                    let group: Vec<_> = std::iter::from_fn(|| {
                        let next = arrived.next_if(|(event, _)| {
                            bytes == 0 || bytes + event.payload.len() <= INGEST_BATCH_BYTES
                        })?;
                        bytes += next.0.payload.len().max(1);
                        Some(next)
                    })
                    .collect();
                    commit(&store, group).await;
                }
            }
        });
        Self { queue }
    }

    /// Stores `event` in one of the next group commits; `None` when the
    /// store failed.
    pub async fn store(&self, event: NewEvent) -> Option<Received> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((event, reply)).await.ok()?;
        answer.await.ok().flatten()
    }
}

/// Commits one group of deliveries and answers each.
async fn commit<S: Store>(store: &S, group: Vec<(NewEvent, oneshot::Sender<Option<Received>>)>) {
    let (events, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let count = events.len();
    metrics::counter!("failwell_webhook_commits_total").increment(1);
    match store.receive(events, failwell_engine::now_ms()).await {
        Ok(received) => {
            for (reply, r) in replies.into_iter().zip(received) {
                let _ = reply.send(Some(r));
            }
        }
        Err(e) => {
            // Nothing was committed: every delivery gets a 503 and the
            // provider delivers again.
            tracing::error!(error = %e, count, "storing webhook events failed");
            for reply in replies {
                let _ = reply.send(None);
            }
        }
    }
}

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
pub(crate) async fn receive<S: Store>(
    State(state): State<Arc<AppState<S>>>,
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
pub(crate) async fn feed<S: Store>(
    State(state): State<Arc<AppState<S>>>,
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
pub(crate) async fn event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linger_grows_for_a_trickle_and_vanishes_for_senders_that_wait() {
        let ms = Duration::from_millis;
        let mut linger = Linger::default();
        // Deliveries commit at once until two lone commits in a row.
        assert_eq!(linger.wait_for(1), Duration::ZERO);
        linger.committed(1);
        assert_eq!(linger.wait_for(5), Duration::ZERO, "not lone: no probe");
        assert_eq!(linger.wait_for(1), LINGER_PROBE);
        // A trickle: deliveries keep arriving late in every wait.
        let mut waits = Vec::new();
        for _ in 0..5 {
            let wait = linger.wait_for(1);
            waits.push(wait);
            linger.learn(wait, true);
            linger.committed(4);
        }
        assert_eq!(waits, [ms(2), ms(4), ms(8), ms(10), ms(10)]);
        // Senders that all arrived in the first half: the wait shrinks away.
        let mut waits = Vec::new();
        for _ in 0..4 {
            let wait = linger.wait_for(64);
            waits.push(wait);
            if !wait.is_zero() {
                linger.learn(wait, false);
            }
            linger.committed(64);
        }
        assert_eq!(waits, [ms(10), ms(5), Duration::from_micros(2_500), Duration::ZERO]);
    }

    fn mapping(types: &[&str]) -> LedgerMapping {
        LedgerMapping {
            provider: "payments".into(),
            reference_pointer: "/data/object/reference".into(),
            status_pointer: "/data/object/status".into(),
            version_pointer: "/created".into(),
            succeeded: vec!["succeeded".into()],
            failed: vec!["failed".into()],
            in_progress: vec!["pending".into()],
            types: types.iter().map(|t| t.to_string()).collect(),
            type_pointer: "/type".into(),
            id_pointer: "/data/object/id".into(),
        }
    }

    fn event(kind: &str, status: &str, created: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"{kind}","created":{created},"data":{{"object":{{"reference":"o-1","status":"{status}"}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn an_event_reports_what_its_fields_say_or_why_not() {
        let report = mapping(&[]).report(&event("charge.succeeded", "succeeded", "1700000000")).unwrap();
        assert_eq!(
            (report.reference.as_str(), report.reported, report.version),
            ("o-1", Reported::Settled(Outcome::Succeeded), 1_700_000_000)
        );
        let quoted = mapping(&[]).report(&event("charge.pending", "pending", "\"42\"")).unwrap();
        assert_eq!((quoted.reported, quoted.version), (Reported::InProgress, 42));
        let refused = [
            (mapping(&[]).report(b"not json"), "not applicable: the body is not JSON"),
            (
                mapping(&[]).report(&event("x", "refunded", "1")),
                "not applicable: status \"refunded\" is not mapped",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "1.5")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "null")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "\"+3\"")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(br#"{"created":1}"#),
                "not applicable: nothing at \"/data/object/reference\"",
            ),
            (
                mapping(&["charge.succeeded"]).report(&event("refund.succeeded", "succeeded", "1")),
                "not applicable: event type \"refund.succeeded\" is not in types",
            ),
        ];
        for (result, reason) in refused {
            let why = result.unwrap_err();
            assert!(why.starts_with(reason), "{why:?} does not start with {reason:?}");
        }
    }

    #[test]
    fn any_valid_json_event_reports() {
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        let body = format!(
            "\u{feff}{{\"extra\":{deep},\"amount\":1e400,\"type\":\"x\",\"created\":7,\
             \"data\":{{\"object\":{{\"reference\":\"o-1\",\"status\":\"failed\",\"id\":\"ch_1\"}}}}}}"
        );
        let report = mapping(&[]).report(body.as_bytes()).unwrap();
        assert_eq!(
            (report.reference.as_str(), report.reported, report.version, report.provider_ref.as_deref()),
            ("o-1", Reported::Settled(Outcome::Failed), 7, Some("ch_1"))
        );
    }
}
