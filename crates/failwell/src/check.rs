//! `failwell check --config FILE`: the page an on-call engineer reads. Per
//! integration and operation, the four written answers of its manifest and
//! what failwell does because of them: timeouts, retries and who makes
//! them, what happens while the provider is down, how disagreement is found,
//! and the worst-case load on the provider and on failwell's workers.
//!
//! First the store: which database (never a password), whether it is
//! reachable and migrated, and the rights the application's and failwell's
//! database users need there ([`StoreReport`]).
//!
//! A configuration a manifest rule refuses never gets here: loading it
//! fails with the file, the operation, the rule and the fix.

use std::fmt::Write;
use std::time::Duration;

use failwell_engine::{OperationSpec, PauseWhen, ProviderSpec};
use failwell_policy::{Answer, OnUnavailable, Reconcile, RetryOwner, Severity};

use crate::config::Config;
use crate::store::StoreReport;

/// The report for a loaded configuration and its store.
pub fn report(config: &Config, store: &StoreReport) -> String {
    let operations: usize = config.providers.values().map(|spec| spec.operations.len()).sum();
    let mut out = format!(
        "{} provider(s), {operations} operation(s); every manifest rule holds.\n\n{}",
        config.providers.len(),
        store.lines()
    );
    for spec in config.providers.values() {
        for (name, operation) in &spec.operations {
            out.push('\n');
            operation_report(&mut out, spec, name, operation, config);
        }
    }
    out
}

fn ms(d: Duration) -> String {
    if d.as_millis() >= 10_000 && d.as_millis().is_multiple_of(1000) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn operation_report(out: &mut String, spec: &ProviderSpec, name: &str, op: &OperationSpec, config: &Config) {
    let workers = config.relay.concurrency;
    let m = &op.manifest;
    let _ = writeln!(out, "{}.{name}: {} {}", spec.name, op.method, op.url);
    let breaker = match &spec.breaker {
        Some(b) => {
            format!("breaker: opens for {} (growing to {}) on {}", ms(b.open_for), ms(b.max_open_for), {
                let mut rules = Vec::new();
                if let Some(rate) = b.failure_rate {
                    rules.push(format!(
                        "{:.0} % failures once {} calls were made",
                        rate * 100.0,
                        b.minimum_calls
                    ));
                }
                if let Some(n) = b.consecutive_failures {
                    rules.push(format!("{n} failures in a row"));
                }
                if let (Some(rate), Some(slow)) = (b.slow_call_rate, b.slow_call_duration) {
                    rules.push(format!("{:.0} % of calls slower than {}", rate * 100.0, ms(slow)));
                }
                rules.join(" or ")
            })
        }
        None => "no breaker".into(),
    };
    let breaker = match (&config.cluster, &spec.breaker) {
        (Some(cluster), Some(_)) => {
            let store = cluster.url.split_once("://").map_or("?", |(scheme, _)| scheme);
            format!(
                "shared breaker ({store}, namespace {:?}): opens in every process on {} failures anywhere within \
                 {} with no success between, or when one process's own rules trip, one probe per open period \
                 cluster-wide; own rules: {breaker}",
                cluster.namespace,
                spec.cluster_rule.failures,
                ms(spec.cluster_rule.window)
            )
        }
        _ => breaker,
    };
    let throttled = match &spec.throttle {
        Some(t) => format!(
            "a 429{} slows the calls (rate cut to 70 % when {} of the last {} answers throttle)",
            throttling_statuses(&spec.pause.statuses),
            t.cut_after(),
            t.window
        ),
        None => "no adaptive rate".to_owned(),
    };
    let breaker = match (&spec.breaker, spec.pause.when, spec.pause.after_errors) {
        (None, ..) => format!("{breaker}; {throttled}"),
        (Some(_), when, after_errors) => {
            let mut pauses = Vec::new();
            match (when, &spec.throttle) {
                (PauseWhen::Never, _) => {}
                (PauseWhen::Always, _) | (PauseWhen::Persistent, None) => {
                    pauses.push("every throttling answer with Retry-After".to_owned())
                }
                (PauseWhen::Persistent, Some(t)) => pauses.push(format!(
                    "a Retry-After when {} % of the last {} answers throttle",
                    (spec.pause.persistent_ratio * 100.0).round(),
                    t.window
                )),
            }
            if let Some(n) = after_errors {
                pauses.push(format!("{n} transport errors in a row ({})", ms(spec.pause.duration)));
            }
            match pauses.is_empty() {
                true => format!("{breaker}; {throttled}"),
                false => format!("{breaker}; {throttled}; paused by {}", pauses.join(" or ")),
            }
        }
    };
    let unavailable = match (m.on_unavailable, op.max_stale) {
        (OnUnavailable::Reject, _) => {
            "reject: answered 503 with Retry-After at once, nothing recorded".to_owned()
        }
        (OnUnavailable::Queue, _) => {
            "queue: accepted (202) and delivered from the outbox when the provider is back".to_owned()
        }
        (OnUnavailable::Degrade, Some(max)) => {
            format!("degrade: the last-known-good answer up to {} old, marked stale; then 503", ms(max))
        }
        (OnUnavailable::Degrade, None) => "degrade: a write has no cached answer, so 503 at once".to_owned(),
    };
    let bulkhead = spec.bulkhead.max_concurrent;
    line(out, "1. when unavailable", format!("{unavailable} ({breaker}; bulkhead: {bulkhead} calls)"));
    line(out, "2. a duplicate costs", m.duplicate_severity.as_str().to_owned());
    let read = op.method == reqwest::Method::GET;
    let found = match (m.reconcile, &spec.lookup) {
        _ if read => "not applicable: a read changes nothing at the provider".to_owned(),
        (Reconcile::None, _) | (_, None) => {
            let retried = if op.retry.max_attempts() < 2 || m.retry_owner != RetryOwner::Failwell {
                None
            } else if spec.idempotency.header.is_some() && op.send_key {
                Some("under the same key")
            } else {
                (m.duplicate_severity == Severity::Harmless).then_some("harmless")
            };
            match retried {
                Some(why) => format!(
                    "none: never looked up; an ambiguous outcome is retried ({why}), and one still unknown \
                     after the last attempt goes to needs_human for a person"
                ),
                None => format!(
                    "none: an ambiguous outcome stays unknown for {}, then goes to needs_human for a person; \
                     never looked up",
                    ms(spec.reconcile_after)
                ),
            }
        }
        (how, Some(lookup)) => format!(
            "{}: GET {}?{}=REFERENCE, first {} after an ambiguous outcome",
            how.as_str(),
            lookup.url.path(),
            lookup.query_param,
            ms(spec.reconcile_after)
        ),
    };
    let schedule = match (&spec.compare, m.schedule.as_deref()) {
        (Some(c), _) => match c.schedule {
            Some(failwell_engine::Schedule::Daily { minute }) => format!(
                "daily at {:02}:{:02} UTC over the previous day ([providers.{}.compare])",
                minute / 60,
                minute % 60,
                spec.name
            ),
            Some(failwell_engine::Schedule::Every(p)) => {
                format!(
                    "every {} s over the period before the last ([providers.{}.compare])",
                    p.as_secs(),
                    spec.name
                )
            }
            None => format!(
                "only by `failwell reconcile run` ([providers.{}.compare] has no schedule)",
                spec.name
            ),
        },
        (None, Some(s)) => {
            format!("{s:?} declared, but [providers.{}.compare] is missing: nothing runs it", spec.name)
        }
        (None, None) => format!("none ([providers.{}.compare] runs one)", spec.name),
    };
    line(out, "3. disagreement", format!("{found}; scheduled comparison: {schedule}"));
    let attempts = op.retry.max_attempts();
    let retries = match m.retry_owner {
        _ if read => "none: one call per request, answered at once (GET /v1/read)".to_owned(),
        RetryOwner::Failwell if attempts > 1 => {
            let waits: Vec<String> =
                (0..(attempts - 1).min(4)).map(|n| ms(op.retry.backoff().ceiling(n))).collect();
            format!(
                "failwell: up to {attempts} attempts within {} (waits up to {}{}), Retry-After honoured, retry \
                 budget {:.0} % + {}/s",
                ms(op.retry.deadline()),
                waits.join(", "),
                if attempts > 5 { ", …" } else { "" },
                spec.retry_budget.ratio * 100.0,
                spec.retry_budget.min_per_second
            )
        }
        RetryOwner::Failwell => "failwell: one attempt (max_attempts = 1)".into(),
        owner => format!("{}: failwell makes one attempt", owner.as_str()),
    };
    line(out, "4. retries", retries);
    let looked_up = m.reconcile != Reconcile::None && spec.lookup.is_some();
    let key = match (&spec.idempotency.header, op.send_key) {
        _ if read => "none: a read is not an effect".to_owned(),
        (Some(header), true) => {
            format!("{header}, honoured {} after first use", ms(spec.idempotency.key_ttl))
        }
        _ if m.duplicate_severity == Severity::Harmless
            && attempts > 1
            && m.retry_owner == RetryOwner::Failwell =>
        {
            "none sent; harmless, so ambiguous outcomes are retried (a duplicate is accepted)".into()
        }
        _ if m.duplicate_severity == Severity::Harmless => "none sent; harmless, one attempt".into(),
        _ if looked_up => "none: an ambiguous outcome is looked up, never blindly retried".into(),
        _ => "none: an ambiguous outcome is never retried; it goes to needs_human for a person".into(),
    };
    line(out, "   idempotency", key);
    let t = &spec.timeouts;
    line(
        out,
        "   timeouts",
        format!(
            "connect {}, headers {}, body idle {}, total {} per attempt",
            ms(t.connect),
            ms(t.headers),
            ms(t.body_idle),
            ms(t.total)
        ),
    );
    let held = spec.bulkhead.max_concurrent;
    let calls = if held == 1 { "call" } else { "calls" };
    let per_second = held as f64 / t.total.as_secs_f64().max(0.001);
    line(
        out,
        "   worst case",
        format!(
            "a hanging provider holds {held} {calls} for {} each: at most {} calls/s reach it, the rest wait \
             or are deferred; failwell's relay runs {workers} calls at once across providers",
            ms(t.total),
            if per_second >= 10.0 { format!("{per_second:.0}") } else { format!("{per_second:.2}") }
        ),
    );
}

/// One labelled line of an operation's report.
fn line(out: &mut String, label: &str, text: String) {
    let _ = writeln!(out, "  {label:<22}{text}");
}

/// ` or a 503 with Retry-After` for the pause's statuses other than 429.
fn throttling_statuses(statuses: &[u16]) -> String {
    let others: Vec<String> = statuses.iter().filter(|s| **s != 429).map(u16::to_string).collect();
    match others.is_empty() {
        true => String::new(),
        false => format!(" or a {} with Retry-After", others.join("/")),
    }
}
