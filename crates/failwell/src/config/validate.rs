//! Validation: raw configuration into the engine's provider descriptions,
//! each refusal naming its source, key and problem.

use std::sync::Arc;

use failwell_engine::{
    ForwardSpecs, ProviderClient, ProviderSpecs, PumpConfig, ReconcilerConfig, RetentionConfig,
};
use failwell_store::{Database, Synchronous};

use super::raw::{RawAlerts, RawBulkhead, RawCluster, RawConfig, RawRelay, RawRetention};
use super::{ApiLimits, Checker, Config, ConfigError, MAX_CONCURRENCY};

pub(super) fn validate(raw: RawConfig, c: &Checker<'_>) -> Result<Config, ConfigError> {
    if Database::of(&raw.database_url).is_none() {
        return Err(c.invalid(
            "database_url",
            format!(
                "{:?}: expected sqlite://PATH, postgres://USER@HOST:PORT/DATABASE or mysql://USER@HOST:PORT/DATABASE",
                raw.database_url
            ),
        ));
    }
    if !(2..=1000).contains(&raw.database_max_connections) {
        return Err(c.invalid("database_max_connections", "must be between 2 and 1000"));
    }
    let synchronous = match raw.sqlite_synchronous.as_str() {
        "full" => Synchronous::Full,
        "normal" => Synchronous::Normal,
        other => {
            return Err(
                c.invalid("sqlite_synchronous", format!("{other:?}: expected \"full\" or \"normal\""))
            );
        }
    };
    let listen = raw.listen.parse().map_err(|e| {
        c.invalid("listen", format!("{:?} is not an address like 127.0.0.1:8080: {e}", raw.listen))
    })?;
    if raw.max_body_bytes == 0 {
        return Err(c.invalid("max_body_bytes", "must be greater than 0"));
    }
    let api = ApiLimits {
        bulkhead: super::providers::bulkhead(
            c,
            "api",
            &RawBulkhead {
                max_concurrent: raw.api.max_concurrent_requests,
                max_wait_ms: raw.api.max_wait_ms,
                max_waiting: raw.api.max_waiting,
            },
        )?,
        request_timeout: c.positive("api.request_timeout_ms", raw.api.request_timeout_ms)?,
    };
    let relay = pump(c, "relay", &raw.relay)?;
    let forwarder = pump(c, "forwarder", &raw.forwarder)?;
    if raw.reconciler.batch_size == 0 {
        return Err(c.invalid("reconciler.batch_size", "must be greater than 0"));
    }
    let reconciler = ReconcilerConfig {
        interval: c.positive("reconciler.interval_ms", raw.reconciler.interval_ms)?,
        batch_size: raw.reconciler.batch_size,
    };
    let mut providers = ProviderSpecs::new();
    for (name, p) in raw.providers {
        let spec = super::providers::provider(c, &name, p)?;
        ProviderClient::check(&spec).map_err(|e| c.invalid(format!("providers.{name}"), e.to_string()))?;
        providers.insert(name, spec);
    }
    let mut webhooks = failwell_engine::Webhooks::new();
    let mut forwards = ForwardSpecs::new();
    for (name, w) in raw.webhooks {
        let (source, forward) = super::webhooks::webhook(c, &name, w, &providers)?;
        webhooks.insert(name.clone(), source);
        if let Some(forward) = forward {
            forwards.insert(name, forward);
        }
    }
    Ok(Config {
        database_url: raw.database_url,
        database_max_connections: raw.database_max_connections,
        synchronous,
        listen,
        max_body_bytes: raw.max_body_bytes,
        api,
        relay,
        forwarder,
        reconciler,
        providers,
        webhooks: Arc::new(webhooks),
        forwards,
        cluster: cluster(c, raw.cluster)?,
        stats_window: c.positive("stats.window_ms", raw.stats.window_ms)?,
        retention: retention(c, &raw.retention)?,
        admin_token: raw
            .admin
            .map(|a| crate::http::Token::new(a.token).map_err(|e| c.invalid("admin.token", e.to_string())))
            .transpose()?,
        alerts: alerts(c, raw.alerts)?,
    })
}

/// `[relay]` or `[forwarder]`: a queue's pump.
fn pump(c: &Checker<'_>, section: &str, raw: &RawRelay) -> Result<PumpConfig, ConfigError> {
    let key = |k: &str| format!("{section}.{k}");
    if raw.concurrency == 0 || raw.concurrency > MAX_CONCURRENCY {
        return Err(c.invalid(key("concurrency"), format!("must be between 1 and {MAX_CONCURRENCY}")));
    }
    if raw.batch_size == 0 {
        return Err(c.invalid(key("batch_size"), "must be greater than 0"));
    }
    Ok(PumpConfig {
        concurrency: raw.concurrency,
        batch_size: raw.batch_size,
        poll_interval: c.positive(&key("poll_interval_ms"), raw.poll_interval_ms)?,
        lease: {
            let lease = c.positive(&key("lease_ms"), raw.lease_ms)?;
            if lease < MIN_LEASE {
                return Err(c.invalid(
                    key("lease_ms"),
                    format!(
                        "{} ms is too short: leases are renewed every third of it, so at least {} ms",
                        lease.as_millis(),
                        MIN_LEASE.as_millis()
                    ),
                ));
            }
            lease
        },
    })
}

/// `[retention]`: `None` when `delivered_ms` is 0 (messages are kept).
fn retention(c: &Checker<'_>, raw: &RawRetention) -> Result<Option<RetentionConfig>, ConfigError> {
    if raw.batch_size == 0 || raw.batch_size > 100_000 {
        return Err(c.invalid("retention.batch_size", "must be between 1 and 100000"));
    }
    let interval = c.positive("retention.interval_ms", raw.interval_ms)?;
    if raw.delivered_ms == 0 {
        return Ok(None);
    }
    Ok(Some(RetentionConfig {
        delivered: c.positive("retention.delivered_ms", raw.delivered_ms)?,
        batch_size: raw.batch_size,
        interval,
    }))
}

/// The shortest claim lease: renewed every third of it while an item is in
/// hand, a shorter one would renew too often to be worth it.
const MIN_LEASE: std::time::Duration = std::time::Duration::from_millis(1_000);

fn cluster(
    c: &Checker<'_>,
    raw: Option<RawCluster>,
) -> Result<Option<failwell_cluster::ClusterConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    failwell_cluster::Cluster::check_url(&raw.url).map_err(|e| c.invalid("cluster.url", e.to_string()))?;
    if raw.namespace.is_empty()
        || raw.namespace.len() > 100
        || !raw.namespace.chars().all(|ch| ch.is_ascii_alphanumeric() || "_.-".contains(ch))
    {
        return Err(c.invalid("cluster.namespace", "must be 1 to 100 letters, digits, '_', '.' or '-'"));
    }
    Ok(Some(failwell_cluster::ClusterConfig {
        url: raw.url,
        namespace: raw.namespace,
        timeout: c.positive("cluster.timeout_ms", raw.timeout_ms)?,
        resync: c.positive("cluster.resync_ms", raw.resync_ms)?,
    }))
}

fn alerts(c: &Checker<'_>, raw: Option<RawAlerts>) -> Result<Option<super::Alerts>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    // The URL may carry a secret (Slack's do): never echoed.
    let url = reqwest::Url::parse(&raw.webhook_url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| c.invalid("alerts.webhook_url", "is not an http:// or https:// URL"))?;
    let timeout = c.positive("alerts.timeout_ms", raw.timeout_ms)?;
    let sink = failwell_engine::AlertSink::new(url, timeout)
        .map_err(|e| c.invalid("alerts.webhook_url", format!("cannot build an HTTP client: {e}")))?;
    let age = match raw.oldest_open_age_ms {
        0 => None,
        ms => Some(failwell_engine::AgeAlert {
            threshold: c.duration("alerts.oldest_open_age_ms", ms)?,
            interval: c.positive("alerts.check_interval_ms", raw.check_interval_ms)?,
        }),
    };
    Ok(Some(super::Alerts { sink, age }))
}
