//! failwell's HTTP edge: one router ([`router`]) over one state
//! ([`AppState`]), one module per resource. Errors are RFC 9457 problem
//! details ([`problem`]); path and body extractors whose rejections are
//! problems are in `extract.rs`.
//!
//! Resources: operations (`/v1/operations`), the balance ledger
//! (`/v1/ledger`), reads (`/v1/read`), webhooks
//! (`/webhooks`), the event feed (`/v1/events`), providers, health and
//! metrics, the admin API (`/admin/v1`), the dashboard (`/ui`) and the
//! OpenAPI document (`/openapi.json`). Handlers call the engine and the
//! store; operator actions go through [`crate::ops`], shared with the CLI.

pub mod admin;
mod events;
mod extract;
mod health;
mod ledger;
mod metrics;
pub mod openapi;
mod operations;
pub mod problem;
mod providers;
mod read;
mod state;
mod token;
pub mod ui;
mod webhooks;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use failwell_policy::layer::{BulkheadLayer, DeadlineLayer, TimeoutLayer};
use failwell_policy::{Bulkhead, PolicyError, Rejected};
use tower::ServiceBuilder;

pub use operations::MAX_KEY_BYTES;
use problem::{Problem, ProblemType};
pub use state::{AdminState, AppState};
pub use token::{MIN_TOKEN_CHARS, Token, WeakToken};

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
        .route("/v1/operations", post(operations::submit))
        .route("/v1/operations/{key}", get(operations::show))
        .route("/v1/ledger/accounts", post(ledger::accounts::open).get(ledger::accounts::list))
        .route("/v1/ledger/accounts/{id}", get(ledger::accounts::show))
        .route("/v1/ledger/transfers", post(ledger::transfers::create))
        .route(
            "/v1/ledger/transfers/batch",
            post(ledger::transfers::batch).layer(DefaultBodyLimit::max(ledger::transfers::BATCH_BODY_BYTES)),
        )
        .route("/v1/ledger/transfers/{id}", get(ledger::transfers::show))
        .route("/v1/ledger/transfers/{id}/post", post(ledger::transfers::post))
        .route("/v1/ledger/transfers/{id}/void", post(ledger::transfers::void))
        .route("/v1/providers", get(providers::providers))
        .route("/metrics", get(metrics::prometheus))
        .route("/v1/events", get(events::feed))
        .route("/v1/read/{provider}/{operation}", get(read::read))
        .route("/v1/events/{integration}/{event_id}", get(events::event))
        .route(
            "/webhooks/{integration}",
            post(webhooks::receive).layer(DefaultBodyLimit::max(webhook_body_limit(&state))),
        )
        .route("/healthz", get(health::health))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(|| async { Problem::new(ProblemType::NotFound, "No such route.") })
        .method_not_allowed_fallback(problem::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state.clone())
        .layer(policy);
    let operator = admin::router(state.clone())
        .merge(ui::router(state.clone()))
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
