//! `GET /healthz`: the store answers, with its counts.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::problem::Problem;
use super::state::AppState;

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
