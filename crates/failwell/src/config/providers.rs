//! Validation of `[providers.NAME]`: a provider's operations and their
//! manifests, timeouts, breaker, bulkhead, retry budget, adaptive rate,
//! pause rules and comparison, into a [`ProviderSpec`].

use std::collections::BTreeMap;

use failwell_engine::{
    ClusterRule, CompareSpec, Encoding, LookupSpec, OperationSpec, PauseRule, PauseWhen, ProviderSpec,
    Schedule, TimeUnit,
};
use failwell_policy::{
    Answer, Backoff, BreakerConfig, BulkheadConfig, Classifier, IdempotencyPolicy, Manifest, Offers,
    OnUnavailable, RetryBudgetConfig, RetryPolicy, SlidingWindow, ThrottleConfig, ThrottleConfigError,
    Timeouts, TimeoutsError,
};

use super::raw::{
    RawBreaker, RawBulkhead, RawCompare, RawOperation, RawPause, RawProvider, RawRetryBudget, RawThrottle,
};
use super::{Checker, ConfigError, MAX_CONCURRENCY};

/// An operation's manifest: its answers, the safe default for each one not
/// given.
fn manifest(
    c: &Checker<'_>,
    okey: &dyn Fn(&str) -> String,
    o: &RawOperation,
    offers: Offers,
) -> Result<Manifest, ConfigError> {
    fn pick<T: Answer>(
        c: &Checker<'_>,
        key: String,
        given: Option<&str>,
        default: T,
    ) -> Result<T, ConfigError> {
        let Some(given) = given else { return Ok(default) };
        T::parse(given).ok_or_else(|| {
            let names: Vec<String> = T::ALL.iter().map(|a| format!("{:?}", a.as_str())).collect();
            c.invalid(key, format!("{given:?}: expected {}", names.join(", ")))
        })
    }
    let default = Manifest::default_for(offers);
    let disagreement = o.disagreement.as_ref();
    Ok(Manifest {
        on_unavailable: pick(c, okey("on_unavailable"), o.on_unavailable.as_deref(), default.on_unavailable)?,
        duplicate_severity: pick(
            c,
            okey("duplicate_severity"),
            o.duplicate_severity.as_deref(),
            default.duplicate_severity,
        )?,
        reconcile: pick(
            c,
            okey("disagreement.reconcile"),
            disagreement.and_then(|d| d.reconcile.as_deref()),
            default.reconcile,
        )?,
        schedule: disagreement.and_then(|d| d.schedule.clone()),
        retry_owner: pick(c, okey("retry_owner"), o.retry_owner.as_deref(), default.retry_owner)?,
        idempotency: pick(c, okey("idempotency"), o.idempotency.as_deref(), default.idempotency)?,
    })
}

pub(super) fn provider(c: &Checker<'_>, name: &str, p: RawProvider) -> Result<ProviderSpec, ConfigError> {
    let key = |k: &str| format!("providers.{name}.{k}");
    let base_url: reqwest::Url = p
        .base_url
        .parse()
        .map_err(|e| c.invalid(key("base_url"), format!("{:?} is not a URL: {e}", p.base_url)))?;
    if !matches!(base_url.scheme(), "http" | "https") {
        return Err(c.invalid(key("base_url"), format!("{:?}: the scheme must be http or https", p.base_url)));
    }
    // Operation and lookup paths become URLs once, here.
    let join = |at: String, path: &str| {
        base_url.join(path).map_err(|e| c.invalid(at, format!("{path:?} does not make a URL: {e}")))
    };
    let backoff = match &p.backoff.schedule_ms {
        Some(schedule) => {
            let delays = schedule
                .iter()
                .map(|ms| c.duration(&key("backoff.schedule_ms"), *ms))
                .collect::<Result<Vec<_>, _>>()?;
            Backoff::schedule(delays).map_err(|e| c.invalid(key("backoff.schedule_ms"), e.to_string()))?
        }
        None => Backoff::try_new(
            c.duration(&key("backoff.base_ms"), p.backoff.base_ms)?,
            c.duration(&key("backoff.cap_ms"), p.backoff.cap_ms)?,
            p.backoff.jitter,
        )
        .map_err(|e| c.invalid(key("backoff"), e.to_string()))?,
    };
    let retry = RetryPolicy::try_new(
        p.max_attempts,
        backoff,
        c.positive(&key("deadline_ms"), p.deadline_ms)?,
        c.duration(&key("max_retry_after_ms"), p.max_retry_after_ms)?,
    )
    .map_err(|e| c.invalid(key("max_attempts"), e.to_string()))?;
    // The total first: the phases default to it.
    let total = c.positive(&key("timeout_ms"), p.timeout_ms)?;
    let timeouts = Timeouts {
        connect: c.positive(&key("connect_timeout_ms"), p.connect_timeout_ms)?,
        headers: c.positive(&key("headers_timeout_ms"), p.headers_timeout_ms.unwrap_or(p.timeout_ms))?,
        body_idle: c
            .positive(&key("body_idle_timeout_ms"), p.body_idle_timeout_ms.unwrap_or(p.timeout_ms))?,
        total,
    };
    // Zero timeouts were refused above, by key; what is left is a phase
    // longer than the total.
    timeouts.validate().map_err(|e| {
        let phase = match &e {
            TimeoutsError::LongerThanTotal { phase, .. } | TimeoutsError::Zero(phase) => *phase,
        };
        let message = match e {
            TimeoutsError::LongerThanTotal { phase_ms, total_ms, .. } => format!(
                "must not exceed timeout_ms ({phase_ms} ms > {total_ms} ms): the total per attempt already bounds it"
            ),
            TimeoutsError::Zero(_) => "must be greater than 0".into(),
        };
        let name = if phase == "total" { "timeout_ms".to_owned() } else { format!("{phase}_timeout_ms") };
        c.invalid(key(&name), message)
    })?;
    if p.idempotency_keys && reqwest::header::HeaderName::from_bytes(p.idempotency_header.as_bytes()).is_err()
    {
        return Err(c.invalid(
            key("idempotency_header"),
            format!("{:?} is not a valid header name", p.idempotency_header),
        ));
    }
    let idempotency = IdempotencyPolicy {
        header: p.idempotency_keys.then_some(p.idempotency_header),
        key_ttl: c.positive(&key("idempotency_key_ttl_ms"), p.idempotency_key_ttl_ms)?,
    };
    let mut statuses = BTreeMap::new();
    for (status, class) in p.classify.statuses {
        let code = status.parse::<u16>().ok().filter(|s| (100..=599).contains(s)).ok_or_else(|| {
            c.invalid(key(&format!("classify.statuses.{status}")), "not an HTTP status code (100-599)")
        })?;
        statuses.insert(code, class);
    }
    let lookup = p
        .lookup
        .map(|l| -> Result<LookupSpec, ConfigError> {
            Ok(LookupSpec {
                url: join(key("lookup.path"), &l.path)?,
                query_param: l.query_param,
                list_pointer: c.pointer(&key("lookup.list_pointer"), &l.list_pointer)?,
                status_pointer: c.pointer(&key("lookup.status_pointer"), &l.status_pointer)?,
                succeeded: l.succeeded,
                failed: l.failed,
            })
        })
        .transpose()?;
    let compare = compare(c, &key, p.compare, lookup.is_some())?;
    let mut operations = BTreeMap::new();
    for (op_name, o) in p.operations {
        let okey = |k: &str| key(&format!("operations.{op_name}.{k}"));
        if o.method != o.method.to_ascii_uppercase() {
            return Err(c.invalid(
                okey("method"),
                format!("{:?}: HTTP methods are upper case, e.g. \"GET\"", o.method),
            ));
        }
        let method = o
            .method
            .parse::<reqwest::Method>()
            .map_err(|_| c.invalid(okey("method"), format!("{:?} is not an HTTP method", o.method)))?;
        let url = join(okey("path"), &o.path)?;
        let encoding = match o.encoding.as_str() {
            "json" => Encoding::Json,
            "form" => Encoding::Form,
            other => {
                return Err(c.invalid(okey("encoding"), format!("{other:?}: expected \"json\" or \"form\"")));
            }
        };
        let offers = Offers {
            key_header: idempotency.header.is_some(),
            lookup: lookup.is_some(),
            max_attempts: retry.max_attempts(),
            read: method == reqwest::Method::GET,
        };
        let manifest = manifest(c, &okey, &o, offers)?;
        let effective = manifest.check(offers).map_err(|refusal| {
            c.invalid(key(&format!("operations.{op_name}")), refusal.to_string().replace("NAME", name))
        })?;
        let max_stale = match (manifest.on_unavailable, offers.read, o.max_stale_ms) {
            (OnUnavailable::Degrade, true, Some(ms)) => Some(c.positive(&okey("max_stale_ms"), ms)?),
            (OnUnavailable::Degrade, true, None) => {
                return Err(c.invalid(
                    okey("max_stale_ms"),
                    "a read with on_unavailable = \"degrade\" needs the oldest answer it may serve stale",
                ));
            }
            (_, _, Some(_)) => {
                return Err(c.invalid(
                    okey("max_stale_ms"),
                    "only applies to a read (method = \"GET\") with on_unavailable = \"degrade\"",
                ));
            }
            (_, _, None) => None,
        };
        let op_idempotency = if effective.retry_ambiguous {
            IdempotencyPolicy::always_safe("none: duplicates are harmless")
        } else if effective.send_key {
            idempotency.clone()
        } else {
            IdempotencyPolicy { header: None, key_ttl: idempotency.key_ttl }
        };
        operations.insert(
            op_name,
            OperationSpec {
                method,
                url,
                encoding,
                reference_field: o.reference_field,
                manifest,
                retry: retry.with_max_attempts(effective.max_attempts),
                idempotency: op_idempotency,
                send_key: effective.send_key,
                max_stale,
            },
        );
    }
    Ok(ProviderSpec {
        name: name.to_string(),
        base_url,
        timeouts,
        breaker: breaker(c, name, &p.breaker)?,
        cluster_rule: ClusterRule {
            failures: match p.breaker.cluster_failures {
                n @ 1..=10_000 => n,
                _ => return Err(c.invalid(key("breaker.cluster_failures"), "must be between 1 and 10000")),
            },
            window: c.positive(&key("breaker.cluster_window_ms"), p.breaker.cluster_window_ms)?,
        },
        pause: pause(c, name, &p.pause, p.breaker.enabled)?,
        throttle: throttle(c, name, &p.throttle)?,
        bulkhead: bulkhead(c, &format!("providers.{name}.bulkhead"), &p.bulkhead)?,
        retry_budget: retry_budget(c, name, &p.retry_budget)?,
        retry,
        idempotency,
        classifier: Classifier::new(statuses, p.classify.codes),
        error_code_pointer: c.pointer(&key("error_code_pointer"), &p.error_code_pointer)?,
        id_pointer: c.pointer(&key("id_pointer"), &p.id_pointer)?,
        reconcile_after: c
            .duration(&key("reconcile_after_ms"), p.reconcile_after_ms.unwrap_or(p.timeout_ms))?,
        compare,
        lookup,
        operations,
    })
}

fn pause(c: &Checker<'_>, name: &str, p: &RawPause, breaker: bool) -> Result<PauseRule, ConfigError> {
    let key = |k: &str| format!("providers.{name}.pause.{k}");
    if let Some(bad) = p.statuses.iter().find(|s| !(400..=599).contains(*s)) {
        return Err(c.invalid(key("statuses"), format!("{bad} is not an error status (400-599)")));
    }
    let when = match p.when.as_str() {
        "persistent" => PauseWhen::Persistent,
        "always" => PauseWhen::Always,
        "never" => PauseWhen::Never,
        other => {
            return Err(c.invalid(
                key("when"),
                format!("{other:?} is not one of \"persistent\", \"always\", \"never\""),
            ));
        }
    };
    if !(p.persistent_ratio > 0.0 && p.persistent_ratio <= 1.0) {
        return Err(c.invalid(key("persistent_ratio"), "must be above 0 and at most 1"));
    }
    let rule = PauseRule {
        statuses: p.statuses.clone(),
        when,
        persistent_ratio: p.persistent_ratio,
        after_errors: (p.after_errors > 0).then_some(p.after_errors),
        duration: c.positive(&key("for_ms"), p.for_ms)?,
    };
    if !breaker {
        let set = ["after_errors", "statuses", "when", "persistent_ratio"]
            .into_iter()
            .find(|k| c.is_set(&key(k)) || (*k == "after_errors" && rule.after_errors.is_some()));
        if let Some(k) = set {
            return Err(c.invalid(
                key(k),
                "a pause is held by the provider's breaker: it needs breaker.enabled = true",
            ));
        }
    }
    Ok(rule)
}

fn throttle(c: &Checker<'_>, name: &str, p: &RawThrottle) -> Result<Option<ThrottleConfig>, ConfigError> {
    if !p.enabled {
        return Ok(None);
    }
    let config = ThrottleConfig {
        window: p.window,
        cut_ratio: p.cut_ratio,
        min_rate: p.min_rate_per_s,
        max_wait: std::time::Duration::from_millis(p.max_wait_ms),
    };
    config.validate().map_err(|e| {
        let k = match e {
            ThrottleConfigError::Window(_) => "window",
            ThrottleConfigError::CutRatio(_) => "cut_ratio",
            ThrottleConfigError::MinRate(_) => "min_rate_per_s",
            ThrottleConfigError::MaxWait(_) => "max_wait_ms",
        };
        c.invalid(format!("providers.{name}.throttle.{k}"), e.to_string())
    })?;
    Ok(Some(config))
}

/// `[providers.NAME.compare]`, which needs the provider's lookup.
fn compare(
    c: &Checker<'_>,
    key: &dyn Fn(&str) -> String,
    raw: Option<RawCompare>,
    lookup: bool,
) -> Result<Option<CompareSpec>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    if !lookup {
        return Err(c.invalid(key("compare"), "needs [lookup]: its path, list and statuses are the list's"));
    }
    let schedule = raw
        .schedule
        .as_deref()
        .map(|s| Schedule::parse(s).map_err(|e| c.invalid(key("compare.schedule"), e.to_string())))
        .transpose()?;
    let time_unit = match raw.time_unit.as_str() {
        "s" => TimeUnit::Seconds,
        "ms" => TimeUnit::Millis,
        other => {
            return Err(c.invalid(key("compare.time_unit"), format!("{other:?}: expected \"s\" or \"ms\"")));
        }
    };
    if !(1..=1000).contains(&raw.page_size) {
        return Err(c.invalid(key("compare.page_size"), "must be between 1 and 1000"));
    }
    if raw.max_records == 0 {
        return Err(c.invalid(key("compare.max_records"), "must be greater than 0"));
    }
    for (k, v) in [
        ("from_param", &raw.from_param),
        ("to_param", &raw.to_param),
        ("page_size_param", &raw.page_size_param),
        ("cursor_param", &raw.cursor_param),
    ] {
        if v.is_empty() {
            return Err(c.invalid(key(&format!("compare.{k}")), "must not be empty"));
        }
    }
    let optional = |k: &str, v: &str| -> Result<Option<String>, ConfigError> {
        Ok((!v.is_empty()).then_some(c.pointer(&key(&format!("compare.{k}")), v)?))
    };
    Ok(Some(CompareSpec {
        schedule,
        from_param: raw.from_param,
        to_param: raw.to_param,
        time_unit,
        page_size_param: raw.page_size_param,
        page_size: raw.page_size,
        cursor_param: raw.cursor_param,
        has_more_pointer: c.pointer(&key("compare.has_more_pointer"), &raw.has_more_pointer)?,
        reference_pointer: c.pointer(&key("compare.reference_pointer"), &raw.reference_pointer)?,
        amount_pointer: optional("amount_pointer", &raw.amount_pointer)?,
        payload_amount_pointer: optional("payload_amount_pointer", &raw.payload_amount_pointer)?,
        max_records: raw.max_records,
    }))
}

/// A rate in (0, 1], or 0 for "off".
fn rate(c: &Checker<'_>, key: &str, value: f64) -> Result<Option<f64>, ConfigError> {
    if value == 0.0 {
        return Ok(None);
    }
    if !(value > 0.0 && value <= 1.0) {
        return Err(c.invalid(key, format!("{value} is not a ratio in (0, 1] (0 turns the rule off)")));
    }
    Ok(Some(value))
}

fn breaker(c: &Checker<'_>, name: &str, b: &RawBreaker) -> Result<Option<BreakerConfig>, ConfigError> {
    let key = |k: &str| format!("providers.{name}.breaker.{k}");
    if !b.enabled {
        return Ok(None);
    }
    let window = match b.window.as_str() {
        "count" => {
            if b.window_calls == 0 || b.window_calls > 100_000 {
                return Err(c.invalid(key("window_calls"), "must be between 1 and 100000"));
            }
            SlidingWindow::Count(b.window_calls)
        }
        "time" => {
            let span = c.positive(&key("window_ms"), b.window_ms)?;
            if span < std::time::Duration::from_millis(10) {
                return Err(c.invalid(key("window_ms"), "must be at least 10 ms"));
            }
            SlidingWindow::Time(span)
        }
        other => return Err(c.invalid(key("window"), format!("{other:?}: expected \"count\" or \"time\""))),
    };
    let slow_call_rate = rate(c, &key("slow_call_rate"), b.slow_call_rate)?;
    let config = BreakerConfig {
        consecutive_failures: (b.consecutive_failures > 0).then_some(b.consecutive_failures),
        failure_rate: rate(c, &key("failure_rate"), b.failure_rate)?,
        slow_call_duration: (b.slow_call_ms > 0)
            .then(|| c.duration(&key("slow_call_ms"), b.slow_call_ms))
            .transpose()?,
        slow_call_rate,
        window,
        minimum_calls: b.minimum_calls,
        open_for: c.positive(&key("open_ms"), b.open_ms)?,
        open_multiplier: b.open_multiplier,
        max_open_for: c.duration(&key("max_open_ms"), b.max_open_ms)?,
        half_open_probes: b.half_open_probes,
        ..BreakerConfig::default()
    };
    config.validate().map_err(|e| {
        use failwell_policy::BreakerConfigError as E;
        let (field, message) = match &e {
            E::NoRule => ("consecutive_failures", e.to_string()),
            E::SlowRateWithoutDuration => ("slow_call_rate", "needs slow_call_ms (0: off)".to_string()),
            // Of the two keys in conflict, name the one the user set.
            E::Range { field: "minimum_calls", problem } if !c.is_set(&key("minimum_calls")) => {
                ("window_calls", problem.clone())
            }
            E::Zero { field } => (*field, "must be at least 1".to_string()),
            E::Ratio { field, value } => (*field, format!("{value} is not a ratio in (0, 1]")),
            E::Range { field, problem } => (*field, problem.clone()),
        };
        let field = match field {
            "open_for" => "open_ms",
            "max_open_for" => "max_open_ms",
            "window" => "window_calls",
            other => other,
        };
        c.invalid(key(field), message)
    })?;
    Ok(Some(config))
}

fn retry_budget(c: &Checker<'_>, name: &str, b: &RawRetryBudget) -> Result<RetryBudgetConfig, ConfigError> {
    let key = |k: &str| format!("providers.{name}.retry_budget.{k}");
    let config = RetryBudgetConfig {
        ratio: b.ratio,
        min_per_second: b.min_per_second,
        ttl: c.positive(&key("ttl_ms"), b.ttl_ms)?,
    };
    config.validate().map_err(|e| {
        let field =
            if matches!(e, failwell_policy::RetryBudgetConfigError::Ratio(_)) { "ratio" } else { "ttl_ms" };
        c.invalid(key(field), e.to_string())
    })?;
    Ok(config)
}

/// A bulkhead's limits under `prefix` (`api` or `providers.NAME.bulkhead`).
pub(super) fn bulkhead(
    c: &Checker<'_>,
    prefix: &str,
    b: &RawBulkhead,
) -> Result<BulkheadConfig, ConfigError> {
    let key = |k: &str| {
        let k = if prefix == "api" && k == "max_concurrent" { "max_concurrent_requests" } else { k };
        format!("{prefix}.{k}")
    };
    if b.max_concurrent == 0 || b.max_concurrent > MAX_CONCURRENCY {
        return Err(c.invalid(key("max_concurrent"), format!("must be between 1 and {MAX_CONCURRENCY}")));
    }
    if b.max_waiting > MAX_CONCURRENCY {
        return Err(c.invalid(key("max_waiting"), format!("must be at most {MAX_CONCURRENCY}")));
    }
    Ok(BulkheadConfig {
        max_concurrent: b.max_concurrent,
        max_wait: c.duration(&key("max_wait_ms"), b.max_wait_ms)?,
        max_waiting: b.max_waiting,
    })
}
