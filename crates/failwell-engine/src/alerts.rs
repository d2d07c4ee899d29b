//! What failwell tells an operator on its own: comparison reports with
//! discrepancies, and an integration whose oldest open entry is too old,
//! sent to an alert sink; and the schedule the comparisons run on.
//!
//! The sink is a generic JSON webhook that Slack's incoming webhooks also
//! take: `POST {"text": "<readable>", "failwell": {<details>}}`.
//!
//! Alerts go through an outbox in the store: each is queued in the
//! transaction that records what it reports (the comparison report, the
//! alert raised or resolved), then sent ([`deliver`]) and marked sent. An
//! alert whose send failed is sent again later (30 s, doubling, at most
//! every 10 min), and one whose sender died is sent by the next process
//! that looks once its lease has run out ([`send_queued`]): at least once,
//! in order per kind and subject. The sink's answers are classified and the
//! waits computed by `failwell_policy` ([`Classifier`], [`Backoff`]), as a
//! provider's are; this module has no rule of its own about them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use failwell_policy::{Backoff, Classification, Classifier, Jitter, Observed, TransportFailure};
use failwell_store::{AlertBody, AlertClaim, AlertSent, NewAlert, Report, Store, StoreError};
use reqwest::Url;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::client::Providers;
use crate::compare::{CompareError, Compared, compare, until};

/// Where alerts go: a URL that takes a JSON `POST`.
#[derive(Clone, Debug)]
pub struct AlertSink {
    url: Url,
    http: reqwest::Client,
    timeout: Duration,
}

/// Attempts per send of an alert.
const SEND_ATTEMPTS: u32 = 3;

/// The waits between the attempts of one send: 0.5 s, then 1 s.
fn attempt_waits() -> Backoff {
    Backoff::try_new(Duration::from_millis(500), Duration::from_secs(1), Jitter::None).expect("0.5 s ≤ 1 s")
}

/// The wait before a queued alert is sent again: 30 s after its first
/// failed send, doubling, at most 10 min.
fn resend_waits() -> Backoff {
    Backoff::try_new(Duration::from_secs(30), Duration::from_secs(600), Jitter::None).expect("30 s ≤ 10 min")
}

/// The sink's answer (a status other than 2xx, or none) by
/// `failwell_policy`'s default rules. An alert is repeatable: it is sent at
/// least once, and a receiver tells a repeat by its `alert_id`. So only a
/// permanent refusal (a 4xx other than 408, 409 and 429) ends the sends.
fn classify(observed: Observed<'_>) -> Classification {
    Classifier::default().classify_request(observed, true)
}

impl AlertSink {
    /// A sink posting to `url`, each attempt limited to `timeout`. Errors:
    /// the HTTP client cannot be built.
    pub fn new(url: Url, timeout: Duration) -> Result<Self, reqwest::Error> {
        // A redirect is the sink's answer: followed, the POST would become
        // a GET elsewhere, whose 200 would mark the alert sent.
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { url, http, timeout })
    }

    /// How long a claimed alert stays with its sender (ms): longer than
    /// [`Self::send`] can take (3 attempts of `timeout` and the waits
    /// between them), plus 2 s to record the outcome.
    fn lease_ms(&self) -> i64 {
        let waits: Duration = (0..SEND_ATTEMPTS - 1).map(|n| attempt_waits().ceiling(n)).sum();
        let longest = self.timeout * SEND_ATTEMPTS + waits + Duration::from_secs(2);
        i64::try_from(longest.as_millis()).unwrap_or(i64::MAX)
    }

    /// Posts `{"text": text, "failwell": details}`; an answer other than 2xx
    /// or a transport error is tried again, up to 3 attempts 0.5 s then 1 s
    /// apart, except a refusal for good (a 4xx other than 408, 409 and 429:
    /// see [`classify`]). Errors: the last attempt's failure (its sentence
    /// does not name the URL: a Slack webhook URL is a secret).
    pub async fn send(&self, text: &str, details: Value) -> Result<(), SinkRefusal> {
        let body = json!({ "text": text, "failwell": details });
        let waits = attempt_waits();
        let mut attempt = 0;
        loop {
            let (error, observed) = match self.http.post(self.url.clone()).json(&body).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => {
                    let status = r.status().as_u16();
                    let observed = Observed::Response { status, error_code: None, retry_after: None };
                    (format!("the alert sink answered HTTP {status}"), observed)
                }
                Err(e) => {
                    let failure = match e.is_connect() || e.is_builder() {
                        true => TransportFailure::NotSent,
                        false => TransportFailure::AfterSend,
                    };
                    let error =
                        format!("the alert sink could not be reached: {}", crate::chain(&e.without_url()));
                    (error, Observed::Transport(failure))
                }
            };
            let for_good = classify(observed) == Classification::Permanent;
            if for_good || attempt + 1 == SEND_ATTEMPTS {
                return Err(SinkRefusal { error, for_good });
            }
            tokio::time::sleep(waits.ceiling(attempt)).await;
            attempt += 1;
        }
    }
}

/// Why the alert sink did not take an alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkRefusal {
    /// What happened, as a sentence.
    pub error: String,
    /// The sink refused it for good (a 4xx other than 408, 409 and 429,
    /// classified permanent by `failwell_policy`): sending it again would
    /// not help.
    pub for_good: bool,
}

impl std::fmt::Display for SinkRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

/// Compares `provider` over `[from_ms, to_ms)` ([`compare`]) and, when
/// discrepancies were found and there is a `sink`, queues the report for it
/// with the report and sends it ([`deliver`]). Errors: as [`compare`]; a
/// sink that cannot be reached is recorded with the report and logged, not
/// returned (the report is sent again later).
pub async fn compare_and_alert(
    store: &Store,
    providers: &Providers,
    sink: Option<&AlertSink>,
    provider: &str,
    window: (i64, i64),
    actor: &str,
) -> Result<Compared, CompareError> {
    let client = providers.get(provider).ok_or_else(|| CompareError::NotConfigured(provider.to_owned()))?;
    let compared = compare(store, client, window, actor, sink.is_some()).await?;
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
            deliver(store, sink, AlertClaim::Report(compared.report_id)).await?;
        }
    }
    Ok(compared)
}

/// Queued alerts one [`deliver`] sends at most.
const ALERTS_AT_ONCE: usize = 16;

/// Sends of one alert before it is given up (about 2 hours of retries).
const MAX_ALERT_SENDS: u32 = 16;

/// The longest alert text sent (bytes); a longer report is cut, and its
/// details keep the first [`ALERT_DISCREPANCIES`] discrepancies: the whole
/// report is in `failwell` (`/ui/reports/ID`, `GET /admin/v1/reports/ID`).
const ALERT_TEXT_BYTES: usize = 3_000;
const ALERT_DISCREPANCIES: usize = 50;

/// Sends queued alerts to `sink` one at a time, each claimed for one
/// send's lease, and records each outcome while the claim still holds it;
/// one the sink did not take is due again after [`retry_delay_ms`]. With
/// [`AlertClaim::Due`], up to [`ALERTS_AT_ONCE`] of them; with
/// [`AlertClaim::Report`], that report's alert if it is due. Returns how
/// many the sink took. Errors: the store failed.
pub async fn deliver(store: &Store, sink: &AlertSink, claim: AlertClaim) -> Result<usize, StoreError> {
    let rounds = if claim == AlertClaim::Due { ALERTS_AT_ONCE } else { 1 };
    let mut taken = 0;
    for _ in 0..rounds {
        let Some(alert) = store.claim_alert(claim, crate::now_ms(), sink.lease_ms()).await? else {
            break;
        };
        let (text, details) = match &alert.body {
            AlertBody::Message { text, details } => (text.clone(), details.clone()),
            AlertBody::Report(id) => match store.report(*id).await? {
                Some(report) => report_alert(&report),
                None => (
                    format!("failwell report {id} (not found)"),
                    json!({ "kind": "comparison", "report_id": id }),
                ),
            },
        };
        let mut details = details;
        if let Some(fields) = details.as_object_mut() {
            // So a receiver can tell a repeat (sent at least once) and a
            // late alert from a current one.
            fields.insert("alert_id".into(), json!(alert.id));
            fields.insert("raised_at".into(), json!(crate::compare::rfc3339(alert.raised_at_ms)));
        }
        let sent = match sink.send(&text, details).await {
            Ok(()) => {
                taken += 1;
                AlertSent::At(crate::now_ms())
            }
            Err(refusal) if refusal.for_good || alert.attempts >= MAX_ALERT_SENDS => {
                tracing::error!(alert = alert.id, attempts = alert.attempts, error = %refusal, "an alert was given up: the alert sink refused it");
                metrics::counter!("failwell_alerts_given_up_total").increment(1);
                AlertSent::GivenUp { error: refusal.error, at_ms: crate::now_ms() }
            }
            Err(refusal) => {
                let retry_at_ms = crate::now_ms() + retry_delay_ms(alert.attempts);
                tracing::error!(alert = alert.id, attempts = alert.attempts, error = %refusal, "an alert was not sent; it is sent again later");
                AlertSent::Failed { error: refusal.error, retry_at_ms }
            }
        };
        if !store.alert_sent(&alert, sent).await? {
            tracing::warn!(alert = alert.id, "an alert's send outlived its lease; another sender has it");
        }
    }
    Ok(taken)
}

/// The wait before sending an alert again after `attempts` failed sends
/// (ms): 30 s, doubling, at most 10 min ([`resend_waits`]).
fn retry_delay_ms(attempts: u32) -> i64 {
    resend_waits().ceiling(attempts.saturating_sub(1)).as_millis() as i64
}

/// A comparison report as an alert: `failwell report ID: <its text>`, and
/// its JSON with `report_id` and `kind = "comparison"`.
fn report_alert(report: &Report) -> (String, Value) {
    let mut details = report.report.clone();
    details["report_id"] = json!(report.id);
    details["kind"] = json!("comparison");
    if let Some(all) = details.get_mut("discrepancies").and_then(Value::as_array_mut)
        && all.len() > ALERT_DISCREPANCIES
    {
        let total = all.len();
        all.truncate(ALERT_DISCREPANCIES);
        details["discrepancies_total"] = json!(total);
    }
    let mut text = format!("failwell report {}: {}", report.id, report.text);
    if text.len() > ALERT_TEXT_BYTES {
        let mut cut = ALERT_TEXT_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!("\n… (cut: the whole report is failwell report {})", report.id));
    }
    (text, details)
}

/// Sends queued alerts until `shutdown`: each second, whatever is due
/// (alerts whose send failed, and those of processes sharing the store
/// that died while sending or before).
pub async fn send_queued(store: Store, sink: AlertSink, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if let Err(e) = deliver(&store, &sink, AlertClaim::Due).await {
            tracing::error!(error = %e, "cannot send the queued alerts");
        }
    }
}

/// How long a scheduled comparison's window stays claimed by the process
/// that runs it (ms); a run not finished by then (its process died) is
/// taken over by the next process that looks.
pub const COMPARISON_LEASE_MS: i64 = 30 * 60_000;

/// Runs every provider's scheduled comparison (`compare.schedule`) until
/// `shutdown`: sleeps until the next run of any of them, runs the ones due
/// and alerts on discrepancies ([`run_window`]). A window whose run was
/// claimed and never finished (its process died) is run once its claim is
/// [`COMPARISON_LEASE_MS`] old, looked for at start and at least as often.
pub async fn run_schedule(
    store: Store,
    providers: Arc<Providers>,
    sink: Option<AlertSink>,
    shutdown: CancellationToken,
) {
    let scheduled: Vec<(String, crate::schedule::Schedule)> = providers
        .iter()
        .filter_map(|(name, c)| Some((name.clone(), c.spec().compare.as_ref()?.schedule?)))
        .collect();
    if scheduled.is_empty() {
        return;
    }
    for (name, schedule) in &scheduled {
        catch_up(&store, &providers, sink.as_ref(), name, *schedule).await;
    }
    let mut after = crate::now_ms();
    loop {
        match store.abandoned_comparisons(crate::now_ms() - COMPARISON_LEASE_MS).await {
            Ok(abandoned) => {
                for (name, window) in abandoned.iter().filter(|(n, _)| scheduled.iter().any(|(s, _)| s == n))
                {
                    tracing::warn!(provider = %name, from_ms = window.0, "a scheduled comparison was never finished; running it");
                    run_window(&store, &providers, sink.as_ref(), name, *window).await;
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read the unfinished comparisons"),
        }
        let next = scheduled.iter().map(|(_, s)| s.next_run(after)).min().unwrap_or(i64::MAX);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(until(next.min(crate::now_ms() + COMPARISON_LEASE_MS))) => {}
        }
        if crate::now_ms() < next {
            continue;
        }
        for (name, schedule) in scheduled.iter().filter(|(_, s)| s.next_run(after) == next) {
            run_window(&store, &providers, sink.as_ref(), name, schedule.window(next)).await;
        }
        after = next;
    }
}

/// Scheduled runs a server makes up for at start, at most.
const CATCH_UP_RUNS: usize = 100;

/// Runs the scheduled comparisons of `name` whose time came while no
/// process ran the schedule: every run after the last window claimed, up
/// to now (at most [`CATCH_UP_RUNS`], oldest first). Nothing before the
/// first scheduled comparison is made up for: that time may predate
/// failwell's use, and the provider's records from then would all look
/// missing here.
async fn catch_up(
    store: &Store,
    providers: &Providers,
    sink: Option<&AlertSink>,
    name: &str,
    schedule: crate::schedule::Schedule,
) {
    let last = match store.last_comparison_window(name).await {
        Ok(Some((_, to_ms))) => to_ms,
        Ok(None) => return,
        Err(e) => {
            tracing::error!(provider = %name, error = %e, "cannot read the last compared window");
            return;
        }
    };
    let now = crate::now_ms();
    let mut run = schedule.next_run(last);
    for _ in 0..CATCH_UP_RUNS {
        if run > now {
            return;
        }
        run_window(store, providers, sink, name, schedule.window(run)).await;
        run = schedule.next_run(run);
    }
    tracing::warn!(provider = %name, "more scheduled comparisons were missed than are made up for at start");
}

/// Runs the scheduled comparison of `name` over `window` if this process
/// claims it (every process runs the schedule: the first to claim a window
/// compares it, the others skip it), then records it finished. A
/// comparison that fails (after its page reads were retried) is logged,
/// counted in `failwell_comparison_failures_total{provider}` and sent to
/// the alert sink; the window counts as run (an operator compares it again
/// with `failwell reconcile run --window`).
async fn run_window(
    store: &Store,
    providers: &Providers,
    sink: Option<&AlertSink>,
    name: &str,
    window: (i64, i64),
) {
    match store.claim_comparison(name, window, crate::now_ms(), COMPARISON_LEASE_MS).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(provider = %name, "the scheduled comparison ran elsewhere");
            return;
        }
        Err(e) => {
            tracing::warn!(provider = %name, error = %e, "cannot claim the scheduled comparison; running it")
        }
    }
    if let Err(e) = compare_and_alert(store, providers, sink, name, window, "schedule").await {
        tracing::error!(provider = %name, error = %e, "the scheduled comparison failed");
        metrics::counter!("failwell_comparison_failures_total", "provider" => name.to_owned()).increment(1);
        if let Some(sink) = sink {
            let alert = NewAlert {
                kind: "comparison_failed".into(),
                subject: name.to_owned(),
                text: format!("failwell: the scheduled comparison of {name} failed: {e}"),
                details: json!({
                    "kind": "comparison_failed",
                    "provider": name,
                    "window": { "from_ms": window.0, "to_ms": window.1 },
                    "error": e.to_string(),
                }),
                at_ms: crate::now_ms(),
            };
            let queued = store.queue_alert(alert).await;
            if let Err(e) = queued.and(deliver(store, sink, AlertClaim::Due).await.map(|_| ())) {
                tracing::error!(provider = %name, error = %e, "the comparison failure was not sent to the alert sink");
            }
        }
    }
    if let Err(e) = store.finish_comparison(name, window, crate::now_ms()).await {
        tracing::error!(provider = %name, error = %e, "cannot record the comparison as finished");
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
pub async fn watch_age(
    store: Store,
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
            // Recorded with its alert in one transaction: a process that
            // finds it already recorded leaves the sending to the one that
            // did, and an alert not sent now is sent later.
            let alert = NewAlert {
                kind: KIND.into(),
                subject: i.integration.clone(),
                text,
                details,
                at_ms: crate::now_ms(),
            };
            match store.set_alert(KIND, &i.integration, old, crate::now_ms(), Some(alert)).await {
                Ok(true) => tracing::warn!(integration = %i.integration, status, "oldest open entry alert"),
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot record the alert");
                    continue;
                }
            }
            if let Err(e) = deliver(&store, &sink, AlertClaim::Due).await {
                tracing::error!(error = %e, "cannot send the queued alerts");
            }
        }
    }
}

#[cfg(test)]
mod tests;
