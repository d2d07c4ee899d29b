//! Every series failwell records, described once: its type, unit and
//! meaning (the `# HELP` and `# TYPE` lines of `GET /metrics`), and, for
//! the labels known when a server starts (its providers and webhook
//! integrations), created at zero so that a dashboard or an alert sees the
//! series before the first event (Prometheus' "avoid missing metrics").
//!
//! Names follow Prometheus' conventions: base units in the name
//! (`_seconds`), counters end in `_total`.

use metrics::{Unit, describe_counter, describe_gauge};

/// A counter or a gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One series name: its kind, its unit (`None`: a count or a ratio) and
/// what it says.
#[derive(Clone, Copy, Debug)]
pub struct Series {
    /// The metric name.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its unit, when it has one.
    pub unit: Option<Unit>,
    /// The `# HELP` text.
    pub help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Series {
    Series { name, kind: Kind::Counter, unit: None, help }
}

const fn gauge(name: &'static str, unit: Option<Unit>, help: &'static str) -> Series {
    Series { name, kind: Kind::Gauge, unit, help }
}

/// Every series failwell records.
pub const SERIES: &[Series] = &[
    counter("failwell_retries_total", "Retries of a call or lookup, by retry policy (provider)."),
    counter(
        "failwell_retry_budget_exhausted_total",
        "Retries refused because the provider's retry budget was spent.",
    ),
    counter("failwell_breaker_transitions_total", "Circuit breaker state changes, by breaker and new state."),
    gauge(
        "failwell_breaker_state",
        None,
        "Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.",
    ),
    counter("failwell_breaker_rejected_total", "Calls refused by an open or probing circuit breaker."),
    counter("failwell_bulkhead_rejected_total", "Calls refused because the bulkhead was full."),
    counter(
        "failwell_deadline_exceeded_total",
        "Retries not started because the operation's deadline would pass.",
    ),
    counter("failwell_attempt_timeouts_total", "Attempts cut off by their timeout."),
    counter(
        "failwell_relay_deferred_total",
        "Messages put back unsent without spending an attempt, by provider and reason.",
    ),
    counter(
        "failwell_throttle_cuts_total",
        "Cuts of a provider's adaptive sending rate after throttling answers.",
    ),
    gauge(
        "failwell_throttle_calls_per_second",
        None,
        "A provider's adaptive sending rate in calls per second; 0 while unlimited.",
    ),
    counter("failwell_cluster_errors_total", "Failed reads or writes of the shared breaker store."),
    counter(
        "failwell_cluster_dropped_total",
        "Breaker changes not shared because the shared store was unreachable.",
    ),
    gauge(
        "failwell_cluster_degraded",
        None,
        "1 while the shared breaker store is unreachable and breakers act alone.",
    ),
    counter(
        "failwell_webhook_received_total",
        "Webhook deliveries stored, by integration and result (new or duplicate).",
    ),
    counter(
        "failwell_webhook_commits_total",
        "Transactions that stored webhook deliveries; received_total over it is deliveries per commit.",
    ),
    counter(
        "failwell_webhook_refused_total",
        "Webhook deliveries refused (nothing stored), by integration and reason.",
    ),
    counter("failwell_forwards_total", "Webhook forwards finished, by integration and result."),
    counter(
        "failwell_comparisons_total",
        "Comparisons of failwell's operations with the provider's records.",
    ),
    counter("failwell_comparison_failures_total", "Comparisons that could not read the provider's records."),
    gauge("failwell_comparison_discrepancies", None, "Discrepancies the provider's latest comparison found."),
    gauge(
        "failwell_comparison_last_run_timestamp_seconds",
        Some(Unit::Seconds),
        "When the provider's latest comparison finished, seconds since the Unix epoch.",
    ),
    counter("failwell_alerts_given_up_total", "Alerts given up after their receiver refused them for good."),
    counter("failwell_outbox_deleted_total", "Finished outbox messages deleted by retention."),
    gauge(
        "failwell_integration_success_ratio",
        None,
        "Share of calls that succeeded over the stats window (NaN without calls).",
    ),
    gauge(
        "failwell_integration_latency_p95_seconds",
        Some(Unit::Seconds),
        "95th percentile of call latency over the stats window (NaN without calls).",
    ),
    gauge("failwell_outbox_depth", None, "Open outbox entries (pending messages)."),
    gauge(
        "failwell_outbox_oldest_age_seconds",
        Some(Unit::Seconds),
        "Age of the oldest open entry; 0 when none is open.",
    ),
    gauge("failwell_operations_unknown", None, "Operations whose outcome is unknown."),
    gauge("failwell_operations_needs_human", None, "Operations that need an operator."),
    gauge("failwell_dead_letters", None, "Dead letters."),
    gauge("failwell_dead_letters_unacknowledged", None, "Dead letters since the last acknowledgement."),
    counter(
        "failwell_ledger_transfers_total",
        "Ledger transfers applied, by result (created, replayed or refused).",
    ),
    counter("failwell_ledger_refused_total", "Ledger transfers refused, by reason (the problem type)."),
    counter(
        "failwell_ledger_holds_ended_total",
        "Ledger holds ended or corrected, by how (posted, voided, expired, reversed or reposted).",
    ),
    counter(
        "failwell_ledger_holds_refused_total",
        "Times a hold could not follow its operation's outcome (tried again on the next sweep).",
    ),
    gauge("failwell_ledger_holds_pending", None, "Ledger holds pending."),
    gauge(
        "failwell_ledger_oldest_hold_age_seconds",
        Some(Unit::Seconds),
        "Age of the oldest pending ledger hold; 0 when none is pending.",
    ),
];

/// Describes every series to the installed recorder (call it once, after
/// installing it).
pub fn describe() {
    for s in SERIES {
        match (s.kind, s.unit) {
            (Kind::Counter, _) => describe_counter!(s.name, s.help),
            (Kind::Gauge, Some(unit)) => describe_gauge!(s.name, unit, s.help),
            (Kind::Gauge, None) => describe_gauge!(s.name, s.help),
        }
    }
}

/// Creates at zero the series whose labels a server knows when it starts:
/// per provider (`providers`, with whether it has a breaker), per webhook
/// integration (`webhooks`, with whether it forwards), and the ledger's.
pub fn start_at_zero<'a>(
    providers: impl IntoIterator<Item = (&'a str, bool)>,
    webhooks: impl IntoIterator<Item = (&'a str, bool)>,
) {
    for name in [
        "failwell_deadline_exceeded_total",
        "failwell_attempt_timeouts_total",
        "failwell_alerts_given_up_total",
        "failwell_outbox_deleted_total",
        "failwell_webhook_commits_total",
        "failwell_ledger_holds_refused_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for result in ["created", "replayed", "refused"] {
        metrics::counter!("failwell_ledger_transfers_total", "result" => result).increment(0);
    }
    for reason in failwell_engine::ledger::REFUSAL_REASONS {
        metrics::counter!("failwell_ledger_refused_total", "reason" => reason).increment(0);
    }
    for how in ["posted", "voided", "expired", "reversed", "reposted"] {
        metrics::counter!("failwell_ledger_holds_ended_total", "how" => how).increment(0);
    }
    for name in ["failwell_ledger_holds_pending", "failwell_ledger_oldest_hold_age_seconds"] {
        metrics::gauge!(name).set(0.0);
    }
    for (provider, breaker) in providers {
        let provider = provider.to_owned();
        metrics::counter!("failwell_retries_total", "policy" => provider.clone()).increment(0);
        for reason in ["breaker_open", "bulkhead_full", "throttled", "retry_budget"] {
            metrics::counter!("failwell_relay_deferred_total", "provider" => provider.clone(), "reason" => reason)
                .increment(0);
        }
        metrics::counter!("failwell_comparisons_total", "provider" => provider.clone()).increment(0);
        metrics::counter!("failwell_comparison_failures_total", "provider" => provider.clone()).increment(0);
        if breaker {
            for to in ["open", "half_open", "closed"] {
                metrics::counter!("failwell_breaker_transitions_total", "breaker" => provider.clone(), "to" => to)
                    .increment(0);
            }
        }
    }
    for (integration, forward) in webhooks {
        let integration = integration.to_owned();
        for result in ["new", "duplicate"] {
            metrics::counter!(
                "failwell_webhook_received_total", "integration" => integration.clone(), "result" => result
            )
            .increment(0);
        }
        if forward {
            for result in ["delivered", "retry", "deferred", "dead_letter"] {
                metrics::counter!(
                    "failwell_forwards_total", "integration" => integration.clone(), "result" => result
                )
                .increment(0);
            }
        }
    }
}
