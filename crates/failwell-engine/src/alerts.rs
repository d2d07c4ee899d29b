//! What failwell tells an operator on its own: comparison reports with
//! discrepancies, and an integration whose oldest open entry is too old,
//! sent to an alert sink; and the schedule the comparisons run on.
//!
//! The sink is a generic JSON webhook that Slack's incoming webhooks also
//! take: `POST {"text": "<readable>", "failwell": {<details>}}`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use failwell_store::Store;
use reqwest::Url;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::compare::{CompareError, Compared, compare, until};
use crate::provider::Providers;

/// Where alerts go: a URL that takes a JSON `POST`.
#[derive(Clone, Debug)]
pub struct AlertSink {
    url: Url,
    http: reqwest::Client,
}

/// Attempts per alert, and the wait before the second (doubling after).
const SEND_ATTEMPTS: u32 = 3;
const FIRST_WAIT: Duration = Duration::from_millis(500);

impl AlertSink {
    /// A sink posting to `url`, each attempt limited to `timeout`. Errors:
    /// the HTTP client cannot be built.
    pub fn new(url: Url, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Self { url, http })
    }

    /// Posts `{"text": text, "failwell": details}`; an answer other than 2xx
    /// or a transport error is tried again, up to 3 attempts 0.5 s then 1 s
    /// apart. Errors: the last attempt's failure, as a sentence (the URL is
    /// not in it: a Slack webhook URL is a secret).
    pub async fn send(&self, text: &str, details: Value) -> Result<(), String> {
        let body = json!({ "text": text, "failwell": details });
        let mut wait = FIRST_WAIT;
        let mut last = String::new();
        for attempt in 1..=SEND_ATTEMPTS {
            match self.http.post(self.url.clone()).json(&body).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("the alert sink answered HTTP {}", r.status().as_u16()),
                Err(e) => last = format!("the alert sink could not be reached: {}", chain(&e.without_url())),
            }
            if attempt < SEND_ATTEMPTS {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
        Err(last)
    }
}

/// An error with its causes, `outer: inner: …` (reqwest's own message
/// names no cause, e.g. a timeout).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Compares `provider` over `[from_ms, to_ms)` ([`compare`]) and, when
/// discrepancies were found, sends the report to `sink` and records the
/// sink's answer with the report. Errors: as [`compare`]; a sink that
/// cannot be reached is recorded with the report and logged, not returned.
pub async fn compare_and_alert<S: Store>(
    store: &S,
    providers: &Providers,
    sink: Option<&AlertSink>,
    provider: &str,
    window: (i64, i64),
    actor: &str,
) -> Result<Compared, CompareError> {
    let client = providers.get(provider).ok_or_else(|| CompareError::NotConfigured(provider.to_owned()))?;
    let compared = compare(store, client, window.0, window.1, actor).await?;
    let found = compared.report.discrepancies.len();
    metrics::counter!("failwell_comparisons_total", "provider" => provider.to_owned()).increment(1);
    if found > 0 {
        tracing::warn!(
            provider,
            report = compared.report_id,
            discrepancies = found,
            "the comparison found discrepancies"
        );
        if let Some(sink) = sink {
            let mut details = compared.report.report.clone();
            details["report_id"] = json!(compared.report_id);
            details["kind"] = json!("comparison");
            let text = format!("failwell report {}: {}", compared.report_id, compared.report.text);
            let result = sink.send(&text, details).await.map(|()| crate::now_ms());
            if let Err(e) = &result {
                tracing::error!(provider, report = compared.report_id, error = %e, "the report was not sent to the alert sink");
            }
            store.report_alerted(compared.report_id, result).await?;
        }
    }
    Ok(compared)
}

/// Runs every provider's scheduled comparison (`compare.schedule`) until
/// `shutdown`: sleeps until the next run of any of them, runs the ones due
/// and alerts on discrepancies. A comparison that fails (after its page
/// reads were retried) is logged, counted in
/// `failwell_comparison_failures_total{provider}` and sent to the alert
/// sink; it runs again at its next time.
pub async fn run_schedule<S: Store>(
    store: S,
    providers: Arc<Providers>,
    sink: Option<AlertSink>,
    shutdown: CancellationToken,
) {
    let scheduled: Vec<(String, crate::compare::Schedule)> = providers
        .iter()
        .filter_map(|(name, c)| Some((name.clone(), c.spec().compare.as_ref()?.schedule?)))
        .collect();
    if scheduled.is_empty() {
        return;
    }
    let mut after = crate::now_ms();
    loop {
        let next = scheduled.iter().map(|(_, s)| s.next_run(after)).min().unwrap_or(i64::MAX);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(until(next)) => {}
        }
        for (name, schedule) in scheduled.iter().filter(|(_, s)| s.next_run(after) == next) {
            let window = schedule.window(next);
            // Every process runs the schedule: the first to claim the
            // window compares it, the others skip it.
            match store.claim_comparison(name, window, crate::now_ms()).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(provider = %name, "the scheduled comparison ran elsewhere");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(provider = %name, error = %e, "cannot claim the scheduled comparison; running it")
                }
            }
            if let Err(e) =
                compare_and_alert(&store, &providers, sink.as_ref(), name, window, "schedule").await
            {
                tracing::error!(provider = %name, error = %e, "the scheduled comparison failed");
                metrics::counter!("failwell_comparison_failures_total", "provider" => name.clone())
                    .increment(1);
                if let Some(sink) = &sink {
                    let text = format!("failwell: the scheduled comparison of {name} failed: {e}");
                    let details = json!({
                        "kind": "comparison_failed",
                        "provider": name,
                        "window": { "from_ms": window.0, "to_ms": window.1 },
                        "error": e.to_string(),
                    });
                    if let Err(e) = sink.send(&text, details).await {
                        tracing::error!(provider = %name, error = %e, "the comparison failure was not sent to the alert sink");
                    }
                }
            }
        }
        after = next;
    }
}

/// The oldest-open-entry alert: raised once when an integration's oldest
/// open entry (outbox message or forward) grows older than `threshold`,
/// and resolved once when it is younger again (or has gone). Which alerts
/// fire is kept in the store, so a restarted process resolves an alert an
/// earlier one raised, and of several processes sharing a store only the
/// one that records a transition first sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgeAlert {
    /// The age that raises the alert.
    pub threshold: Duration,
    /// How often the ages are read.
    pub interval: Duration,
}

/// Watches every integration's oldest open entry until `shutdown` (see
/// [`AgeAlert`]); `known` are the configured providers.
pub async fn watch_age<S: Store>(
    store: S,
    known: Vec<String>,
    rule: AgeAlert,
    sink: AlertSink,
    shutdown: CancellationToken,
) {
    const KIND: &str = "oldest_open_age";
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(rule.interval) => {}
        }
        // Raised here, by an earlier process or by another one sharing the
        // store, and not resolved: firing.
        let firing: BTreeSet<String> = match store.firing_alerts(KIND).await {
            Ok(subjects) => subjects.into_iter().collect(),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the firing alerts");
                continue;
            }
        };
        // Only the ages are read: an empty call window skips the call scan.
        let stats = match store.stats(crate::now_ms(), 0, &known).await {
            Ok(stats) => stats,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the oldest open entries");
                continue;
            }
        };
        for i in &stats.integrations {
            let age = Duration::from_millis(i.oldest_open_age_ms.unwrap_or(0).max(0) as u64);
            let old = age > rule.threshold;
            if old == firing.contains(&i.integration) {
                continue;
            }
            let (status, text) = if old {
                (
                    "firing",
                    format!(
                        "failwell: the oldest open entry of {} is {} s old (threshold {} s); {} open",
                        i.integration,
                        age.as_secs(),
                        rule.threshold.as_secs(),
                        i.depth
                    ),
                )
            } else {
                (
                    "resolved",
                    format!(
                        "failwell: the oldest open entry of {} is back under {} s",
                        i.integration,
                        rule.threshold.as_secs()
                    ),
                )
            };
            let details = json!({
                "kind": "oldest_open_age",
                "status": status,
                "integration": i.integration,
                "oldest_open_age_seconds": age.as_secs_f64(),
                "threshold_seconds": rule.threshold.as_secs_f64(),
                "depth": i.depth,
            });
            // Recorded first: a process that finds it already recorded
            // leaves the sending to the one that did.
            match store.set_alert(KIND, &i.integration, old, crate::now_ms()).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot record the alert");
                    continue;
                }
            }
            match sink.send(&text, details).await {
                Ok(()) => {
                    tracing::warn!(integration = %i.integration, status, "oldest open entry alert sent")
                }
                Err(e) => {
                    tracing::error!(integration = %i.integration, error = %e, "oldest open entry alert not sent");
                    // Not sent: undone, so the next look tries again.
                    if let Err(e) = store.set_alert(KIND, &i.integration, !old, crate::now_ms()).await {
                        tracing::error!(error = %e, "cannot undo the alert's record");
                    }
                }
            }
        }
    }
}
