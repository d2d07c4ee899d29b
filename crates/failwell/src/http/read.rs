//! `GET /v1/read/{provider}/{operation}?QUERY`: a read operation (declared
//! with `method = "GET"`) answered at once, through the provider's bulkhead
//! and breaker, never queued.
//!
//! While the provider is unavailable (breaker open, bulkhead full, or the
//! read failing with a provider-side error), the manifest decides: a read
//! declared `on_unavailable = "degrade"` is answered from the last-known-good
//! answer to the same query, if it is at most `max_stale_ms` old, marked
//! stale (`"stale": true`, an `Age` header in seconds and `Warning: 110 -
//! "Response is Stale"` as in RFC 7234 §5.5.1); otherwise, and for
//! `reject`, the answer is 503 `provider-unavailable` with `Retry-After`.
//! The last-known-good answers live in memory: a restart forgets them.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use failwell_engine::reads::Good;
use failwell_policy::{Answer, Classification, OnUnavailable};
use serde_json::Value;

use super::extract::ApiPath;
use super::problem::{Problem, ProblemType};
use super::state::AppState;

/// The provider's answer to a read.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ReadAnswer {
    /// Whether it is an earlier answer kept for a provider now unavailable
    /// (with `Age` and `Warning: 110` headers).
    stale: bool,
    /// Its age in seconds (absent on a refusal passed on).
    #[serde(skip_serializing_if = "Option::is_none")]
    age_s: Option<u64>,
    /// When it was fetched, ms since the Unix epoch (absent on a refusal).
    #[serde(skip_serializing_if = "Option::is_none")]
    fetched_at_ms: Option<i64>,
    /// The provider's HTTP status.
    status: u16,
    /// The provider's JSON body (`null` when it sent none).
    #[schema(value_type = Object)]
    response: Value,
}

/// A read (an operation whose method is GET) answered at once by the
/// provider, with the query passed on; when the provider is unavailable, a
/// kept answer not older than the operation's `max_stale_ms`, else 503. A
/// refusal of the provider's own (e.g. 404) is passed on with its status.
#[utoipa::path(get, path = "/v1/read/{provider}/{operation}", operation_id = "read", tag = "reads",
    params(
        ("provider" = String, Path, description = "A `[providers.NAME]`"),
        ("operation" = String, Path, description = "One of its operations with method GET")),
    responses(
        (status = 200, description = "The provider's answer", body = ReadAnswer),
        (status = "4XX", description = "The provider refused for good: its answer, passed on", body = ReadAnswer),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 422, response = Problem),
        (status = 503, response = Problem)))]
pub(crate) async fn read(
    State(state): State<Arc<AppState>>,
    ApiPath((provider, operation)): ApiPath<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, Problem> {
    let Some(client) = state.providers.get(&provider) else {
        return Err(Problem::with_status(
            ProblemType::UnknownProvider,
            StatusCode::NOT_FOUND,
            format!("No provider {provider:?}."),
        ));
    };
    let Some(spec) = client.spec().operations.get(&operation) else {
        return Err(Problem::with_status(
            ProblemType::UnknownOperation,
            StatusCode::NOT_FOUND,
            format!("Provider {provider:?} has no operation {operation:?}."),
        ));
    };
    if spec.method != reqwest::Method::GET {
        return Err(Problem::new(
            ProblemType::NotARead,
            format!("{provider}.{operation} is a write: submit it with POST /v1/operations."),
        ));
    }
    let query = query.unwrap_or_default();
    let key = (provider.clone(), operation.clone(), query.clone());
    let wait = match client.unavailable() {
        Some(wait) => wait,
        None => match client.read(&spec.url, &query).await {
            Ok(result) => match &result.response {
                Ok(reply) if (200..300).contains(&reply.status) => {
                    let good = Good {
                        status: reply.status,
                        response: reply.body.clone().unwrap_or(Value::Null),
                        at: tokio::time::Instant::now(),
                        at_ms: failwell_engine::now_ms(),
                    };
                    // Kept only where it may be served stale.
                    if spec.max_stale.is_some() {
                        state.reads.put(key, good.clone());
                    }
                    return Ok(answer(&good, false));
                }
                // The provider answered for itself (e.g. 404): pass it on.
                Ok(reply)
                    if client
                        .spec()
                        .classifier
                        .classify(result.observed(&client.spec().error_code_pointer))
                        == Classification::Permanent =>
                {
                    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_GATEWAY);
                    let body = ReadAnswer {
                        stale: false,
                        age_s: None,
                        fetched_at_ms: None,
                        status: reply.status,
                        response: reply.body.clone().unwrap_or(Value::Null),
                    };
                    return Ok((status, Json(body)).into_response());
                }
                Ok(reply) => reply.retry_after.unwrap_or(Duration::from_secs(1)),
                Err(_) => Duration::from_secs(1),
            },
            Err(rejected) => client.wait_after(&rejected).unwrap_or(Duration::from_secs(1)),
        },
    };
    let stale = match (spec.manifest.on_unavailable, spec.max_stale) {
        (OnUnavailable::Degrade, Some(max)) => state.reads.get(&key).filter(|good| good.at.elapsed() <= max),
        _ => None,
    };
    if let Some(good) = stale {
        return Ok(answer(&good, true));
    }
    Ok(Problem::provider_unavailable(wait, |secs| {
        format!(
            "Provider {provider:?} is unavailable and {provider}.{operation} is declared on_unavailable = {:?}{}; \
             try again in {secs} s.",
            spec.manifest.on_unavailable.as_str(),
            if spec.max_stale.is_some() { " with no answer young enough to serve stale" } else { "" }
        )
    }))
}

/// A read's answer: fresh, or stale with its age.
fn answer(good: &Good, stale: bool) -> Response {
    let age_s = good.at.elapsed().as_secs();
    let body = ReadAnswer {
        stale,
        age_s: Some(age_s),
        fetched_at_ms: Some(good.at_ms),
        status: good.status,
        response: good.response.clone(),
    };
    let mut response = (StatusCode::OK, Json(body)).into_response();
    if stale {
        let headers = response.headers_mut();
        headers.insert(header::AGE, HeaderValue::from(age_s));
        headers.insert(header::WARNING, HeaderValue::from_static("110 - \"Response is Stale\""));
    }
    response
}
