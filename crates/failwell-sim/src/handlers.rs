//! HTTP routes of the simulator: `/v1/charges` (create, get, list) with fault
//! injection and idempotency, and the `/_sim` control routes.
//!
//! Handlers sequence the steps (count, latency, pre-commit faults, idempotency
//! and commit, webhook emission, post-commit faults); the decisions themselves
//! live in `state.rs` and `config.rs`, webhook delivery in `webhooks.rs`. Connection resets are only *requested* here: the accept loop
//! in `server.rs` performs them. Nothing here listens on sockets.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::{Bytes, to_bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::json;

use crate::api::Reply;
use crate::config::Fault;
use crate::params::{RawFields, decode_form};
use crate::reset::ConnReset;
use crate::state::{Admission, ChargeParams, ListFilter, SimState};

/// Largest accepted request body, bytes.
const BODY_LIMIT: usize = 64 * 1024;

/// The simulator's router, with its state applied.
pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/v1/charges", post(create_charge).get(list_charges))
        .route("/v1/charges/{id}", get(get_charge))
        .route("/_sim/effects", get(effects))
        .route("/_sim/script/{reference}", put(put_script))
        .route("/_sim/down", put(put_down))
        .route("/_sim/charges/{id}", axum::routing::patch(patch_charge))
        .fallback(not_found)
        .with_state(state)
}

fn unavailable() -> Reply {
    Reply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "api_error",
        "service_unavailable",
        "The service is temporarily unavailable.",
    )
}

/// A `429 rate_limit` answer with `Retry-After: retry_after_secs`.
fn rate_limited(retry_after_secs: u64) -> Response {
    let mut response =
        Reply::error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "rate_limit", "Too many requests.")
            .into_response();
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

/// The answer of a pre-commit fault, if `fault` is one.
fn pre_commit_reply(state: &SimState, fault: Fault) -> Option<Response> {
    let reply = match fault {
        Fault::Ok | Fault::TimeoutAfterCommit | Fault::ResetAfterCommit | Fault::LateCommit => return None,
        Fault::ResetBeforeCommit => return Some(StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        Fault::Error500 => Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "internal_error",
            "An internal error occurred.",
        ),
        Fault::Error502 => Reply::error(StatusCode::BAD_GATEWAY, "api_error", "bad_gateway", "Bad gateway."),
        Fault::Error503 => unavailable(),
        Fault::RateLimited => {
            state.count_rate_limited();
            return Some(rate_limited(state.config.retry_after_secs));
        }
    };
    Some(reply.into_response())
}

async fn create_charge(State(state): State<Arc<SimState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // 0. The rate-limit mode: refused before anything is counted per order.
    if let Err(retry_after) = state.admit_rate(&parts.headers, true) {
        return rate_limited(retry_after);
    }
    let content_type = parts.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    let raw = match to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => RawFields::parse(content_type, &bytes),
        Err(_) => Err(Reply::invalid(
            "parameter_invalid",
            "body",
            "The request body could not be read or is too large.",
        )),
    };
    // 1. Count and pick the fault; 2. latency.
    let reference = raw.as_ref().ok().and_then(RawFields::reference);
    let (fault, latency) = state.begin_charge(reference);
    tokio::time::sleep(latency).await;
    // 3. Pre-commit faults: nothing stored, no effect.
    if state.refuse() {
        return unavailable().into_response();
    }
    if fault == Fault::ResetBeforeCommit {
        reset_connection(&parts).await;
    }
    if let Some(response) = pre_commit_reply(&state, fault) {
        return response;
    }
    // 4. Validation, idempotency check and commit.
    let params = match raw.and_then(|raw| raw.validate()) {
        Ok(params) => params,
        Err(reply) => return reply.into_response(),
    };
    if fault == Fault::LateCommit {
        // The provider keeps working after the client gave up: the rest runs
        // detached from this request, so a disconnect does not cancel it.
        let late = tokio::spawn(async move {
            tokio::time::sleep(state.config.hang).await;
            commit_and_answer(state, key, params, Fault::Ok, parts).await
        });
        return late.await.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    commit_and_answer(state, key, params, fault, parts).await
}

/// Steps 4 and 5: the idempotency check and commit, then post-commit faults.
async fn commit_and_answer(
    state: Arc<SimState>,
    key: Option<String>,
    params: ChargeParams,
    fault: Fault,
    parts: axum::http::request::Parts,
) -> Response {
    let hold = matches!(fault, Fault::TimeoutAfterCommit | Fault::ResetAfterCommit);
    let (reply, replayed, _guard) = match state.admit(key.as_deref(), &params, hold) {
        Admission::Fresh(charge, reply, guard) => {
            // Right at the commit, before any post-commit fault: when the answer
            // is lost, the webhooks still tell the truth.
            if let Some(webhooks) = &state.webhooks {
                webhooks.emit(&state.config, &charge);
            }
            (reply, false, guard)
        }
        Admission::Replay(reply) => (reply, true, None),
        Admission::Reused => {
            return Reply::error(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                "idempotency_key_reused",
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            )
            .into_response();
        }
        Admission::InUse => {
            return Reply::error(
                StatusCode::CONFLICT,
                "idempotency_error",
                "idempotency_key_in_use",
                "There is currently another in-progress request using this Idempotency-Key.",
            )
            .into_response();
        }
    };
    // 5. Post-commit faults (also applied to replays): the answer is lost.
    match fault {
        Fault::TimeoutAfterCommit => tokio::time::sleep(state.config.hang).await,
        Fault::ResetAfterCommit => reset_connection(&parts).await,
        _ => {}
    }
    let mut response = if replayed { reply.replayed() } else { reply.into_response() };
    if let Some(key) = key.and_then(|k| HeaderValue::from_str(&k).ok()) {
        response.headers_mut().insert("idempotency-key", key);
    }
    response
}

/// The rate-limit mode, lookup latency, then 503 if down or in the outage
/// window.
async fn lookup_gate(state: &SimState, headers: &HeaderMap) -> Result<(), Response> {
    state.admit_rate(headers, false).map_err(rate_limited)?;
    tokio::time::sleep(state.next_lookup_latency()).await;
    if state.refuse() {
        return Err(unavailable().into_response());
    }
    Ok(())
}

async fn get_charge(
    State(state): State<Arc<SimState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(response) = lookup_gate(&state, &headers).await {
        return response;
    }
    match state.charge(&id) {
        Some(charge) => Json(charge).into_response(),
        None => no_such_charge(&id),
    }
}

/// Stripe's 404 for a charge id it does not know.
fn no_such_charge(id: &str) -> Response {
    Reply::error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "resource_missing",
        &format!("No such charge: '{id}'"),
    )
    .into_response()
}

async fn list_charges(
    State(state): State<Arc<SimState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(response) = lookup_gate(&state, &headers).await {
        return response;
    }
    let query = decode_form(query.unwrap_or_default().as_bytes());
    // The first parameter that is not a number, by name.
    let number = |name: &'static str| match query.get(name) {
        None => Ok(None),
        Some(v) => v.parse::<u64>().map(Some).map_err(|_| name),
    };
    let (from, to, limit) = match (number("created[gte]"), number("created[lt]"), number("limit")) {
        (Ok(from), Ok(to), Ok(limit)) => (from, to, limit),
        (Err(name), _, _) | (_, Err(name), _) | (_, _, Err(name)) => {
            return Reply::invalid(
                "parameter_invalid",
                name,
                &format!("{name} must be a non-negative integer"),
            )
            .into_response();
        }
    };
    let limit = match limit {
        None => None,
        Some(n @ 1..=100) => Some(n as usize),
        Some(_) => {
            return Reply::invalid("parameter_invalid", "limit", "limit must be between 1 and 100")
                .into_response();
        }
    };
    let filter = ListFilter {
        reference: query.get("reference").map(String::as_str),
        created_from: from,
        created_to: to,
        starting_after: query.get("starting_after").map(String::as_str),
    };
    let (data, has_more) = state.list(&filter, limit);
    Json(json!({ "object": "list", "data": data, "has_more": has_more })).into_response()
}

async fn effects(State(state): State<Arc<SimState>>) -> Response {
    Json(state.effects()).into_response()
}

fn bad_control_body(err: serde_json::Error) -> Response {
    Reply::error(StatusCode::BAD_REQUEST, "invalid_request_error", "parameter_invalid", &err.to_string())
        .into_response()
}

async fn put_script(
    State(state): State<Arc<SimState>>,
    Path(reference): Path<String>,
    body: Bytes,
) -> Response {
    match serde_json::from_slice::<Vec<Fault>>(&body) {
        Ok(faults) => {
            state.set_script(&reference, faults.clone());
            Json(json!({ "reference": reference, "script": faults })).into_response()
        }
        Err(err) => bad_control_body(err),
    }
}

/// Resets the request's TCP connection (RST, no response bytes); the
/// connection task drops the request's future when it does. Without the
/// connection's reset handle (not served by [`crate::Simulator`]), returns
/// and the caller answers 500.
async fn reset_connection(parts: &axum::http::request::Parts) {
    if let Some(reset) = parts.extensions.get::<ConnReset>() {
        reset.trigger();
        std::future::pending::<()>().await;
    }
}

/// `PATCH /_sim/charges/{id}` body: the record's new amount and/or status,
/// changed silently (no webhook, no effect counted), as a provider-side
/// error or a fraud would.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TamperBody {
    amount: Option<u64>,
    status: Option<String>,
}

async fn patch_charge(State(state): State<Arc<SimState>>, Path(id): Path<String>, body: Bytes) -> Response {
    let body = match serde_json::from_slice::<TamperBody>(&body) {
        Ok(body) => body,
        Err(err) => return bad_control_body(err),
    };
    let status = match body.status.as_deref() {
        None => None,
        Some("succeeded") => Some("succeeded"),
        Some("failed") => Some("failed"),
        Some(other) => {
            return Reply::invalid(
                "parameter_invalid",
                "status",
                &format!("status {other:?} is not succeeded or failed"),
            )
            .into_response();
        }
    };
    match state.tamper(&id, body.amount, status) {
        Some(charge) => Json(charge).into_response(),
        None => no_such_charge(&id),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DownBody {
    down: bool,
}

async fn put_down(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    match serde_json::from_slice::<DownBody>(&body) {
        Ok(DownBody { down }) => {
            state.set_down(down);
            Json(json!({ "down": down })).into_response()
        }
        Err(err) => bad_control_body(err),
    }
}

async fn not_found() -> Response {
    Reply::error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unrecognized_request_url",
        "Unrecognized request URL.",
    )
    .into_response()
}
