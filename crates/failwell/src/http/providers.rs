//! `GET /v1/providers`: each provider's breaker, adaptive rate, bulkhead
//! and retry budget, as this process sees them.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::state::AppState;

/// `GET /v1/providers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ProvidersView {
    /// Each configured provider.
    providers: Vec<ProviderView>,
}

/// One provider's guards, as this process sees them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ProviderView {
    /// Its `[providers.NAME]`.
    name: String,
    /// Its circuit breaker, if it has one.
    breaker: Option<BreakerView>,
    /// Its adaptive sending rate, if it has one.
    throttle: Option<ThrottleView>,
    /// Its bulkhead.
    bulkhead: BulkheadView,
    /// Its retry budget.
    retry_budget: BudgetView,
}

/// A circuit breaker's state.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BreakerView {
    /// `closed`, `open`, `half_open`, `forced_open` or `forced_closed`.
    state: &'static str,
    /// How long every call stays paused, ms (0: not paused).
    paused_ms: u64,
    /// How long calls were paused in all, ms.
    paused_total_ms: u64,
}

/// An adaptive sending rate.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ThrottleView {
    /// Calls per second allowed now; `null` while unlimited.
    rate_per_s: Option<f64>,
}

/// A bulkhead's use.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BulkheadView {
    /// Calls in flight.
    in_flight: usize,
    /// Calls allowed in flight at once.
    max_concurrent: usize,
}

/// A retry budget's balance.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BudgetView {
    /// Retries it allows now.
    available: u64,
}

/// Each provider's breaker, bulkhead and retry budget.
#[utoipa::path(get, path = "/v1/providers", operation_id = "list_providers", tag = "providers",
    responses((status = 200, description = "Every configured provider", body = ProvidersView)))]
pub(crate) async fn providers(State(state): State<Arc<AppState>>) -> Json<ProvidersView> {
    let providers = state
        .providers
        .iter()
        .map(|(name, client)| {
            let guards = client.guards();
            ProviderView {
                name: name.clone(),
                breaker: guards.breaker.as_ref().map(|b| BreakerView {
                    state: b.state().as_str(),
                    paused_ms: b.paused_for().map_or(0, |d| d.as_millis() as u64),
                    paused_total_ms: guards.paused_total().as_millis() as u64,
                }),
                throttle: guards.throttle.as_ref().map(|t| ThrottleView { rate_per_s: t.rate() }),
                bulkhead: BulkheadView {
                    in_flight: guards.bulkhead.in_flight(),
                    max_concurrent: guards.bulkhead.config().max_concurrent,
                },
                retry_budget: BudgetView { available: guards.budget.available() },
            }
        })
        .collect();
    Json(ProvidersView { providers })
}
