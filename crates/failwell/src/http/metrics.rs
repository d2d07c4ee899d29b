//! `GET /metrics`: the process's metrics in the Prometheus text format,
//! with the four numbers per integration read from the store at scrape
//! time.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::problem::{Problem, ProblemType};
use super::state::AppState;

/// `GET /metrics`: every counter and gauge failwell records, in the
/// Prometheus text exposition format (version 0.0.4).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 503, response = Problem)))]
pub(crate) async fn prometheus(State(state): State<Arc<AppState>>) -> Result<Response, Problem> {
    let Some(handle) = &state.metrics else {
        return Err(Problem::new(
            ProblemType::MetricsUnavailable,
            "Another metrics recorder was installed in this process first.",
        ));
    };
    record_stats(&state).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response())
}

/// Sets the gauges of the four numbers per integration from the store, as
/// of this scrape (so every process of one database reports the same):
/// `failwell_integration_success_ratio` and
/// `failwell_integration_latency_p95_seconds` over `[stats] window_ms`
/// (NaN without calls), `failwell_outbox_depth`,
/// `failwell_outbox_oldest_age_seconds` (0 when nothing is open),
/// `failwell_operations_unknown`, `failwell_operations_needs_human`,
/// `failwell_dead_letters` and
/// `failwell_dead_letters_unacknowledged`, each labelled `integration`; and
/// per provider the latest comparison's `failwell_comparison_discrepancies`
/// and `failwell_comparison_last_run_timestamp_seconds`, and each breaker's
/// `failwell_breaker_state` (also set on every transition).
async fn record_stats(state: &AppState) -> Result<(), Problem> {
    let stats = crate::ops::stats(&state.store, &state.providers, state.admin.stats_window).await?;
    for i in &stats.integrations {
        let label = || [("integration", i.integration.clone())];
        metrics::gauge!("failwell_integration_success_ratio", &label())
            .set(i.success_ratio.unwrap_or(f64::NAN));
        metrics::gauge!("failwell_integration_latency_p95_seconds", &label())
            .set(i.p95_ms.map_or(f64::NAN, |ms| ms as f64 / 1e3));
        metrics::gauge!("failwell_outbox_depth", &label()).set(i.depth as f64);
        metrics::gauge!("failwell_outbox_oldest_age_seconds", &label())
            .set(i.oldest_open_age_ms.map_or(0.0, |ms| ms as f64 / 1e3));
        metrics::gauge!("failwell_operations_unknown", &label()).set(i.unknown as f64);
        metrics::gauge!("failwell_operations_needs_human", &label()).set(i.needs_human as f64);
        metrics::gauge!("failwell_dead_letters", &label()).set(i.dead_letters as f64);
        metrics::gauge!("failwell_dead_letters_unacknowledged", &label()).set(i.dead_letters_unacked as f64);
    }
    for (name, client) in state.providers.iter() {
        if let Some(breaker) = &client.guards().breaker {
            metrics::gauge!("failwell_breaker_state", "breaker" => name.clone())
                .set(breaker.state().code() as f64);
        }
    }
    for r in state.store.latest_reports().await? {
        let label = [("provider", r.provider)];
        metrics::gauge!("failwell_comparison_discrepancies", &label).set(r.discrepancies as f64);
        metrics::gauge!("failwell_comparison_last_run_timestamp_seconds", &label)
            .set(r.finished_at_ms as f64 / 1e3);
    }
    Ok(())
}
