//! The admin API under `/admin/v1`, for operators' tools: the four numbers,
//! dead letters (list, show, replay, purge, acknowledge), a reconciliation
//! run, an operation's history and the comparison reports.
//!
//! Every route needs `Authorization: Bearer <token>` with the configured
//! `[admin] token`; a missing or wrong token gets 401 with a problem body and
//! `WWW-Authenticate: Bearer` (RFC 6750), and the token is never logged or
//! echoed. Without `[admin]` every route answers 404 `admin-disabled`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use failwell_store::{Channel, DeadLetterFilter, DeadLetterKind};
use serde::{Deserialize, Serialize};

use super::extract::ApiPath;
use super::problem::{Problem, ProblemType};
use super::state::AppState;
use crate::ops::{self, OpsError};

/// The admin routes (see the module docs), all below `/admin/v1`.
pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/admin/v1/status", get(status))
        .route("/admin/v1/dead-letters", get(list))
        .route("/admin/v1/dead-letters/ack", post(ack))
        .route("/admin/v1/dead-letters/{kind}/{id}", get(show).delete(purge))
        .route("/admin/v1/dead-letters/{kind}/{id}/replay", post(replay))
        .route("/admin/v1/reconcile", post(reconcile))
        .route("/admin/v1/operations/{key}/history", get(history))
        .route("/admin/v1/operations/{key}/resolve", post(resolve))
        .route("/admin/v1/reports", get(reports))
        .route("/admin/v1/reports/{id}", get(report))
        .route("/admin", axum::routing::any(no_route))
        .route("/admin/", axum::routing::any(no_route))
        .route("/admin/{*rest}", axum::routing::any(no_route))
        .method_not_allowed_fallback(super::problem::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state, authenticate))
}

async fn no_route() -> Problem {
    Problem::new(ProblemType::NotFound, "No such route.")
}

/// Checks the bearer token of every request below `/admin/` (whatever its
/// method, and for paths no route takes), before anything else answers it.
async fn authenticate(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path != "/admin" && !path.starts_with("/admin/") {
        return next.run(request).await;
    }
    let Some(token) = &state.admin.token else {
        return Problem::new(
            ProblemType::AdminDisabled,
            "The admin API is off: set [admin] token (e.g. FAILWELL_ADMIN__TOKEN).",
        )
        .into_response();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        // The scheme name is case-insensitive (RFC 9110 §11.1).
        .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token));
    match presented {
        Some(p) if token.matches(p.trim()) => next.run(request).await,
        Some(_) => unauthorized("The bearer token is wrong."),
        None => unauthorized("This route needs `Authorization: Bearer <admin token>`."),
    }
}

fn unauthorized(detail: &str) -> Response {
    let mut response = Problem::new(ProblemType::Unauthorized, detail).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

impl From<OpsError> for Problem {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::Store(e) => e.into(),
            OpsError::Invalid(detail) => Problem::new(ProblemType::InvalidRequest, detail),
            OpsError::Compare(failwell_engine::CompareError::NotConfigured(p)) => Problem::new(
                ProblemType::NotComparable,
                format!("Provider {p:?} has no [compare] (or no [lookup]) configuration."),
            ),
            OpsError::Compare(failwell_engine::CompareError::Store(e)) => e.into(),
            OpsError::Compare(e @ failwell_engine::CompareError::Provider { .. }) => {
                Problem::new(ProblemType::ProviderListFailed, e.to_string())
            }
            OpsError::NotADeadLetter { kind, id } => Problem::new(
                ProblemType::NotADeadLetter,
                format!("{} {id} is not a dead letter.", kind.as_str()),
            ),
            OpsError::NoOperation(_) => {
                Problem::new(ProblemType::OperationNotFound, "No operation has this idempotency key.")
            }
            OpsError::NotOpen(current) => Problem::new(
                ProblemType::OperationNotOpen,
                format!(
                    "The operation is {}: only unknown and needs_human operations are resolved by hand.",
                    current.as_str()
                ),
            ),
            OpsError::NoNote => Problem::with_status(
                ProblemType::InvalidBody,
                StatusCode::BAD_REQUEST,
                "note must say why (it is kept in the history).",
            ),
        }
    }
}

/// The dead-letter kind a path names; 404 `not-found` for another word.
pub(crate) fn kind(s: &str) -> Result<DeadLetterKind, Problem> {
    DeadLetterKind::parse(s).ok_or_else(|| {
        Problem::new(ProblemType::NotFound, format!("{s:?} is not a dead-letter kind (message, forward)."))
    })
}

/// Each integration's four numbers: success rate, p95 latency, open
/// entries and the oldest one's age, dead letters since the last look.
#[utoipa::path(get, path = "/admin/v1/status", operation_id = "admin_status", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "The numbers", body = failwell_store::Stats), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn status(State(state): State<Arc<AppState>>) -> Result<Response, Problem> {
    let stats = ops::stats(&state.store, &state.providers, state.admin.stats_window).await?;
    Ok(Json(stats).into_response())
}

/// `GET /dead-letters` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    kind: Option<String>,
    integration: Option<String>,
    limit: Option<i64>,
}

/// Dead letters, newest first.
#[utoipa::path(get, path = "/admin/v1/dead-letters", operation_id = "list_dead_letters", tag = "admin", security(("admin_token" = [])),
    params(
        ("kind" = Option<failwell_store::DeadLetterKind>, Query, description = "Only messages (calls to providers) or forwards (webhook forwards)"),
        ("integration" = Option<String>, Query, description = "Only this provider or webhook integration"),
        ("limit" = Option<i64>, Query, minimum = 1, description = "At most this many (default 100; more than 1000 lists 1000)")),
    responses((status = 200, description = "Dead letters", body = DeadLetters), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let Query(q) = query.map_err(|e| Problem::new(ProblemType::InvalidQuery, e.body_text()))?;
    let invalid = |detail: String| Problem::new(ProblemType::InvalidQuery, detail);
    let kind =
        match q.kind.as_deref() {
            None => None,
            Some(k) => Some(DeadLetterKind::parse(k).ok_or_else(|| {
                invalid(format!("kind {k:?} is not a dead-letter kind (message, forward)."))
            })?),
        };
    let limit = q.limit.unwrap_or(100);
    if limit < 1 {
        return Err(invalid("limit must be at least 1 (at most 1000 are listed).".into()));
    }
    let limit = limit.min(1000) as u32;
    let filter = DeadLetterFilter { kind, integration: q.integration, since_ms: None };
    let letters = state.store.dead_letters(filter, limit.min(1000)).await?;
    Ok(Json(DeadLetters { dead_letters: letters }).into_response())
}

/// One dead letter with its payload.
#[utoipa::path(get, path = "/admin/v1/dead-letters/{kind}/{id}", operation_id = "get_dead_letter", tag = "admin", security(("admin_token" = [])),
    params(("kind" = failwell_store::DeadLetterKind, Path, description = "Which queue"), ("id" = i64, Path, description = "Its id")),
    responses((status = 200, description = "The dead letter", body = failwell_store::DeadLetter), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    ApiPath((k, id)): ApiPath<(String, i64)>,
) -> Result<Response, Problem> {
    match state.store.dead_letter(kind(&k)?, id).await? {
        Some(letter) => Ok(Json(letter).into_response()),
        None => Err(OpsError::NotADeadLetter { kind: kind(&k)?, id }.into()),
    }
}

/// Puts a dead letter back in its queue, due now, with fresh attempts and
/// the same idempotency key; 409 `hold-ended` when its operation's ledger
/// hold has ended (the replay would take effect without it).
#[utoipa::path(post, path = "/admin/v1/dead-letters/{kind}/{id}/replay", operation_id = "replay_dead_letter", tag = "admin", security(("admin_token" = [])),
    params(("kind" = failwell_store::DeadLetterKind, Path, description = "Which queue"), ("id" = i64, Path, description = "Its id")),
    responses((status = 200, description = "Replayed", body = Done), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 409, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn replay(
    State(state): State<Arc<AppState>>,
    ApiPath((k, id)): ApiPath<(String, i64)>,
) -> Result<Response, Problem> {
    let dead_kind = kind(&k)?;
    ops::replay(&state.store, dead_kind, id, Channel::Api).await?;
    wake(&state, dead_kind);
    Ok(Json(Done { kind: k, id, replayed: Some(true), purged: None }).into_response())
}

/// Wakes the queue a replayed dead letter went back to.
pub(crate) fn wake(state: &AppState, kind: DeadLetterKind) {
    match kind {
        DeadLetterKind::Message => state.wake.notify_one(),
        DeadLetterKind::Forward => state.forward.notify_one(),
    }
}

/// Deletes a dead letter for good (the history keeps that it was).
#[utoipa::path(delete, path = "/admin/v1/dead-letters/{kind}/{id}", operation_id = "purge_dead_letter", tag = "admin", security(("admin_token" = [])),
    params(("kind" = failwell_store::DeadLetterKind, Path, description = "Which queue"), ("id" = i64, Path, description = "Its id")),
    responses((status = 200, description = "Purged", body = Done), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn purge(
    State(state): State<Arc<AppState>>,
    ApiPath((k, id)): ApiPath<(String, i64)>,
) -> Result<Response, Problem> {
    ops::purge(&state.store, kind(&k)?, id, Channel::Api).await?;
    Ok(Json(Done { kind: k, id, replayed: None, purged: Some(true) }).into_response())
}

/// Acknowledges every dead letter so far (the status counts from now).
#[utoipa::path(post, path = "/admin/v1/dead-letters/ack", operation_id = "ack_dead_letters", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "Acknowledged", body = Acknowledged), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn ack(State(state): State<Arc<AppState>>) -> Result<Response, Problem> {
    let now = ops::acknowledge(&state.store, Channel::Api).await?;
    Ok(Json(Acknowledged { acknowledged_at_ms: now }).into_response())
}

/// `POST /reconcile` body (all optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReconcileBody {
    /// Only this provider.
    provider: Option<String>,
    /// The comparison window, ms back from now (default a day, at most 366
    /// days).
    #[schema(minimum = 1, maximum = 31_622_400_000_u64)]
    window_ms: Option<u64>,
}

/// `GET /dead-letters`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct DeadLetters {
    /// Newest first.
    dead_letters: Vec<failwell_store::DeadLetter>,
}

/// A dead letter replayed or purged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Done {
    /// `message` or `forward`.
    kind: String,
    /// Its id.
    id: i64,
    /// Set when it was replayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    replayed: Option<bool>,
    /// Set when it was purged.
    #[serde(skip_serializing_if = "Option::is_none")]
    purged: Option<bool>,
}

/// Dead letters acknowledged.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Acknowledged {
    /// From when the status counts dead letters, ms since the Unix epoch.
    acknowledged_at_ms: i64,
}

/// An operation and its history.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Timeline {
    /// The operation.
    operation: failwell_store::Operation,
    /// Every state change, oldest first.
    history: Vec<failwell_store::HistoryEntry>,
}

/// `GET /reports`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Reports {
    /// Newest first.
    reports: Vec<failwell_store::Report>,
}

/// The default comparison window of an operator's run: the last day.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(86_400);

/// A JSON object body read as `T` (serde would also read a struct from an
/// array); `what` names the request in the problem (400 `invalid-body`).
fn json_object<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, Problem> {
    let invalid = |e: String| {
        Problem::with_status(
            ProblemType::InvalidBody,
            StatusCode::BAD_REQUEST,
            format!("The body is not {what}: {e}"),
        )
    };
    match serde_json::from_slice::<serde_json::Value>(body).map_err(|e| invalid(e.to_string()))? {
        object @ serde_json::Value::Object(_) => {
            serde_json::from_value(object).map_err(|e| invalid(e.to_string()))
        }
        _ => Err(invalid("a JSON object is expected".into())),
    }
}

/// Looks up every unknown operation now and compares failwell's
/// operations with each provider's records over a window.
#[utoipa::path(post, path = "/admin/v1/reconcile", operation_id = "reconcile", tag = "admin", security(("admin_token" = [])),
    request_body(content = Option<ReconcileBody>, description = "All optional: one provider, the window in ms (default a day)"),
    responses((status = 200, description = "What the run found", body = crate::ops::ReconcileRun), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem),
        (status = 413, response = Problem), (status = 502, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn reconcile(
    State(state): State<Arc<AppState>>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body = body?;
    let body: ReconcileBody =
        if body.is_empty() { ReconcileBody::default() } else { json_object(&body, "a reconcile request")? };
    let window = body.window_ms.map_or(DEFAULT_WINDOW, Duration::from_millis);
    let run = ops::reconcile_run(
        &state.store,
        &state.providers,
        state.admin.alerts.as_ref(),
        body.provider.as_deref(),
        window,
        Channel::Api,
    )
    .await?;
    state.wake.notify_one();
    Ok(Json(run).into_response())
}

/// An operation and its history: every state change (who, when, why).
#[utoipa::path(get, path = "/admin/v1/operations/{key}/history", operation_id = "get_operation_history", tag = "admin", security(("admin_token" = [])),
    params(("key" = String, Path, description = "The operation's idempotency key")),
    responses((status = 200, description = "The operation and its history", body = Timeline), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn history(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
) -> Result<Response, Problem> {
    match ops::timeline(&state.store, &key).await? {
        Some((operation, history)) => Ok(Json(Timeline { operation, history }).into_response()),
        None => Err(Problem::new(ProblemType::OperationNotFound, "No operation has this idempotency key.")),
    }
}

/// `POST /operations/{key}/resolve` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// `succeeded` or `failed`.
    #[schema(pattern = "^(succeeded|failed)$")]
    status: String,
    /// The provider's id for the effect, if it has one.
    provider_ref: Option<String>,
    /// Why you know (kept in the history).
    #[schema(pattern = "\\S")]
    note: String,
}

/// Settles an `unknown` or `needs_human` operation by hand (see
/// [`ops::resolve`]); also used by the dashboard.
pub(crate) async fn settle(
    state: &AppState,
    key: &str,
    status: &str,
    provider_ref: Option<String>,
    note: String,
    channel: Channel,
) -> Result<(), Problem> {
    let outcome = match status {
        "succeeded" => failwell_policy::Outcome::Succeeded,
        "failed" => failwell_policy::Outcome::Failed,
        other => {
            return Err(Problem::with_status(
                ProblemType::InvalidBody,
                StatusCode::BAD_REQUEST,
                format!("status {other:?}: succeeded or failed"),
            ));
        }
    };
    Ok(ops::resolve(&state.store, key, outcome, provider_ref, note, channel).await?)
}

/// Settles an `unknown` or `needs_human` operation by hand, after checking
/// with the provider; answered like its history.
#[utoipa::path(post, path = "/admin/v1/operations/{key}/resolve", operation_id = "resolve_operation", tag = "admin", security(("admin_token" = [])),
    params(("key" = String, Path, description = "The operation's idempotency key")),
    request_body(content = ResolveBody, description = "What happened, and why you know"),
    responses((status = 200, description = "Resolved: the operation and its history", body = Timeline), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem),
        (status = 409, response = Problem), (status = 413, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn resolve(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body: ResolveBody = json_object(&body?, "a resolution")?;
    settle(&state, &key, &body.status, body.provider_ref, body.note, Channel::Api).await?;
    // Answered like GET …/history: the operation as it is now.
    history(State(state), ApiPath(key)).await
}

/// `GET /reports` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportsQuery {
    limit: Option<i64>,
}

/// Comparison reports, newest first.
#[utoipa::path(get, path = "/admin/v1/reports", operation_id = "list_reports", tag = "admin", security(("admin_token" = [])),
    params(("limit" = Option<i64>, Query, minimum = 0, description = "At most this many (default 20; more than 200 lists 200)")),
    responses((status = 200, description = "Reports", body = Reports), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn reports(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ReportsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let Query(q) = query.map_err(|e| Problem::new(ProblemType::InvalidQuery, e.body_text()))?;
    let limit = q.limit.unwrap_or(20);
    if limit < 0 {
        return Err(Problem::new(
            ProblemType::InvalidQuery,
            "limit must be at least 0 (at most 200 are listed).",
        ));
    }
    let reports = state.store.reports(limit.min(200) as u32).await?;
    Ok(Json(Reports { reports }).into_response())
}

/// One comparison report.
#[utoipa::path(get, path = "/admin/v1/reports/{id}", operation_id = "get_report", tag = "admin", security(("admin_token" = [])),
    params(("id" = i64, Path, description = "Its id")),
    responses((status = 200, description = "The report", body = failwell_store::Report), (status = 400, response = Problem), (status = 401, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn report(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Response, Problem> {
    match state.store.report(id).await? {
        Some(report) => Ok(Json(report).into_response()),
        None => Err(Problem::new(ProblemType::ReportNotFound, format!("No report {id}."))),
    }
}
