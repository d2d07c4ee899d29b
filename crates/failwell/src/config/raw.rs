//! The configuration as written: serde types mirroring the TOML, unknown
//! keys refused, defaults for optional provider keys. Nothing here is
//! validated; `validate.rs` turns these into the types the engine uses.

use std::collections::BTreeMap;

use failwell_policy::{Class, Jitter};
use serde::Deserialize;

/// The configuration as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) database_url: String,
    pub(super) database_max_connections: u32,
    pub(super) sqlite_synchronous: String,
    pub(super) listen: String,
    pub(super) max_body_bytes: usize,
    pub(super) api: RawApi,
    pub(super) relay: RawRelay,
    pub(super) forwarder: RawRelay,
    pub(super) reconciler: RawReconciler,
    #[serde(default)]
    pub(super) providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub(super) webhooks: BTreeMap<String, RawWebhook>,
    pub(super) cluster: Option<RawCluster>,
    pub(super) stats: RawStats,
    pub(super) retention: RawRetention,
    pub(super) admin: Option<RawAdmin>,
    pub(super) alerts: Option<RawAlerts>,
}

/// `[retention]`: when delivered outbox messages are deleted.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    pub(super) delivered_ms: u64,
    pub(super) batch_size: u32,
    pub(super) interval_ms: u64,
}

/// `[stats]`: the window of the success rate and p95 latency.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStats {
    pub(super) window_ms: u64,
}

/// `[admin]`: the admin API's and dashboard's bearer token.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub(super) token: String,
}

impl std::fmt::Debug for RawAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawAdmin { token: <redacted> }")
    }
}

/// `[alerts]`: where alerts go and the oldest-open-entry rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    pub(super) webhook_url: String,
    #[serde(default = "d_alert_timeout")]
    pub(super) timeout_ms: u64,
    #[serde(default)]
    pub(super) oldest_open_age_ms: u64,
    #[serde(default = "d_alert_interval")]
    pub(super) check_interval_ms: u64,
}

fn d_alert_timeout() -> u64 {
    5_000
}
fn d_alert_interval() -> u64 {
    15_000
}

/// `[providers.NAME.compare]`: the provider's list by creation time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(default)]
pub(super) struct RawCompare {
    pub(super) schedule: Option<String>,
    pub(super) from_param: String,
    pub(super) to_param: String,
    pub(super) time_unit: String,
    pub(super) page_size_param: String,
    pub(super) page_size: u32,
    pub(super) cursor_param: String,
    pub(super) has_more_pointer: String,
    pub(super) reference_pointer: String,
    pub(super) amount_pointer: String,
    pub(super) payload_amount_pointer: String,
    pub(super) max_records: u32,
}

impl Default for RawCompare {
    fn default() -> Self {
        Self {
            schedule: None,
            from_param: "created[gte]".into(),
            to_param: "created[lt]".into(),
            time_unit: "s".into(),
            page_size_param: "limit".into(),
            page_size: 100,
            cursor_param: "starting_after".into(),
            has_more_pointer: "/has_more".into(),
            reference_pointer: "/reference".into(),
            amount_pointer: "/amount".into(),
            payload_amount_pointer: "/amount".into(),
            max_records: 1_000_000,
        }
    }
}

/// `[cluster]`: breakers and pauses shared with the other processes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) url: String,
    #[serde(default = "d_namespace")]
    pub(super) namespace: String,
    #[serde(default = "d_cluster_timeout")]
    pub(super) timeout_ms: u64,
    #[serde(default = "d_resync")]
    pub(super) resync_ms: u64,
}

fn d_namespace() -> String {
    "failwell".into()
}
fn d_cluster_timeout() -> u64 {
    1_000
}
fn d_resync() -> u64 {
    1_000
}

/// `[webhooks.NAME]`: a webhook source.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) scheme: String,
    pub(super) secrets: Vec<String>,
    #[serde(default = "d_tolerance")]
    pub(super) tolerance_s: u64,
    #[serde(default = "d_id_pointer")]
    pub(super) event_id_pointer: String,
    #[serde(default = "d_webhook_body")]
    pub(super) max_body_bytes: usize,
    /// For `scheme = "hmac"`.
    pub(super) header: Option<String>,
    /// For `scheme = "hmac"`: `hex` (default) or `base64`.
    pub(super) encoding: Option<String>,
    /// For `scheme = "hmac"`.
    pub(super) prefix: Option<String>,
    /// For `scheme = "hmac"`: a header with the provider's event id.
    pub(super) event_id_header: Option<String>,
    pub(super) forward: Option<RawForward>,
    pub(super) ledger: Option<RawLedger>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForward {
    pub(super) provider: String,
    pub(super) path: String,
    pub(super) secret: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLedger {
    pub(super) provider: String,
    pub(super) reference_pointer: String,
    pub(super) status_pointer: String,
    #[serde(default = "d_version_pointer")]
    pub(super) version_pointer: String,
    #[serde(default = "d_succeeded")]
    pub(super) succeeded: Vec<String>,
    #[serde(default = "d_failed")]
    pub(super) failed: Vec<String>,
    #[serde(default = "d_in_progress")]
    pub(super) in_progress: Vec<String>,
    #[serde(default)]
    pub(super) types: Vec<String>,
    #[serde(default = "d_type_pointer")]
    pub(super) type_pointer: String,
    #[serde(default = "d_object_id_pointer")]
    pub(super) id_pointer: String,
}

fn d_object_id_pointer() -> String {
    "/data/object/id".into()
}

fn d_type_pointer() -> String {
    "/type".into()
}

fn d_version_pointer() -> String {
    "/created".into()
}
fn d_succeeded() -> Vec<String> {
    vec!["succeeded".into()]
}
fn d_failed() -> Vec<String> {
    vec!["failed".into()]
}
fn d_in_progress() -> Vec<String> {
    vec!["pending".into(), "processing".into()]
}

fn d_tolerance() -> u64 {
    300
}
fn d_webhook_body() -> usize {
    1 << 20
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    pub(super) max_concurrent_requests: usize,
    pub(super) max_wait_ms: u64,
    pub(super) max_waiting: usize,
    pub(super) request_timeout_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRelay {
    pub(super) concurrency: usize,
    pub(super) batch_size: u32,
    pub(super) poll_interval_ms: u64,
    pub(super) lease_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconciler {
    pub(super) interval_ms: u64,
    pub(super) batch_size: u32,
}

fn d_connect() -> u64 {
    1_000
}
fn d_timeout() -> u64 {
    10_000
}
fn d_attempts() -> u32 {
    8
}
fn d_deadline() -> u64 {
    3_600_000
}
fn d_retry_after() -> u64 {
    60_000
}
fn d_true() -> bool {
    true
}
fn d_header() -> String {
    "Idempotency-Key".into()
}
fn d_ttl() -> u64 {
    86_400_000
}
fn d_code_pointer() -> String {
    "/error/code".into()
}
fn d_id_pointer() -> String {
    "/id".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) base_url: String,
    #[serde(default = "d_connect")]
    pub(super) connect_timeout_ms: u64,
    #[serde(default = "d_timeout")]
    pub(super) timeout_ms: u64,
    /// Defaults to `timeout_ms`.
    pub(super) headers_timeout_ms: Option<u64>,
    /// Defaults to `timeout_ms`.
    pub(super) body_idle_timeout_ms: Option<u64>,
    #[serde(default = "d_attempts")]
    pub(super) max_attempts: u32,
    #[serde(default = "d_deadline")]
    pub(super) deadline_ms: u64,
    #[serde(default = "d_retry_after")]
    pub(super) max_retry_after_ms: u64,
    pub(super) reconcile_after_ms: Option<u64>,
    #[serde(default = "d_true")]
    pub(super) idempotency_keys: bool,
    #[serde(default = "d_header")]
    pub(super) idempotency_header: String,
    #[serde(default = "d_ttl")]
    pub(super) idempotency_key_ttl_ms: u64,
    #[serde(default = "d_code_pointer")]
    pub(super) error_code_pointer: String,
    #[serde(default = "d_id_pointer")]
    pub(super) id_pointer: String,
    #[serde(default)]
    pub(super) backoff: RawBackoff,
    #[serde(default)]
    pub(super) classify: RawClassify,
    #[serde(default)]
    pub(super) breaker: RawBreaker,
    #[serde(default)]
    pub(super) bulkhead: RawBulkhead,
    #[serde(default)]
    pub(super) retry_budget: RawRetryBudget,
    #[serde(default)]
    pub(super) pause: RawPause,
    #[serde(default)]
    pub(super) throttle: RawThrottle,
    pub(super) lookup: Option<RawLookup>,
    pub(super) compare: Option<RawCompare>,
    #[serde(default)]
    pub(super) operations: BTreeMap<String, RawOperation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(default)]
pub(super) struct RawBackoff {
    pub(super) base_ms: u64,
    pub(super) cap_ms: u64,
    pub(super) jitter: Jitter,
    /// A fixed schedule instead of the exponential backoff.
    pub(super) schedule_ms: Option<Vec<u64>>,
}

impl Default for RawBackoff {
    fn default() -> Self {
        Self { base_ms: 200, cap_ms: 30_000, jitter: Jitter::Full, schedule_ms: None }
    }
}

/// `[providers.NAME.breaker]`; a zero turns a rule off.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBreaker {
    pub(super) enabled: bool,
    pub(super) consecutive_failures: u32,
    pub(super) failure_rate: f64,
    pub(super) slow_call_ms: u64,
    pub(super) slow_call_rate: f64,
    pub(super) window: String,
    pub(super) window_calls: u32,
    pub(super) window_ms: u64,
    pub(super) minimum_calls: u32,
    pub(super) open_ms: u64,
    pub(super) open_multiplier: f64,
    pub(super) max_open_ms: u64,
    pub(super) half_open_probes: u32,
    pub(super) cluster_failures: u32,
    pub(super) cluster_window_ms: u64,
}

/// `[providers.NAME.pause]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawPause {
    pub(super) statuses: Vec<u16>,
    /// `"persistent"`, `"always"` or `"never"`.
    pub(super) when: String,
    pub(super) persistent_ratio: f64,
    pub(super) after_errors: u32,
    pub(super) for_ms: u64,
}

impl Default for RawPause {
    fn default() -> Self {
        Self {
            statuses: vec![429, 503],
            when: "persistent".into(),
            persistent_ratio: 0.5,
            after_errors: 0,
            for_ms: 30_000,
        }
    }
}

/// `[providers.NAME.throttle]`: the adaptive sending rate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawThrottle {
    pub(super) enabled: bool,
    pub(super) window: u32,
    pub(super) cut_ratio: f64,
    pub(super) min_rate_per_s: f64,
    pub(super) max_wait_ms: u64,
}

impl Default for RawThrottle {
    fn default() -> Self {
        Self { enabled: true, window: 100, cut_ratio: 0.1, min_rate_per_s: 0.5, max_wait_ms: 1_000 }
    }
}

impl Default for RawBreaker {
    fn default() -> Self {
        Self {
            enabled: true,
            consecutive_failures: 0,
            failure_rate: 0.5,
            slow_call_ms: 0,
            slow_call_rate: 0.0,
            window: "count".into(),
            window_calls: 50,
            window_ms: 60_000,
            minimum_calls: 20,
            open_ms: 10_000,
            open_multiplier: 2.0,
            max_open_ms: 300_000,
            half_open_probes: 1,
            cluster_failures: 20,
            cluster_window_ms: 10_000,
        }
    }
}

/// `[providers.NAME.bulkhead]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBulkhead {
    pub(super) max_concurrent: usize,
    pub(super) max_wait_ms: u64,
    pub(super) max_waiting: usize,
}

impl Default for RawBulkhead {
    fn default() -> Self {
        Self { max_concurrent: 64, max_wait_ms: 100, max_waiting: 64 }
    }
}

/// `[providers.NAME.retry_budget]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetryBudget {
    pub(super) ratio: f64,
    pub(super) min_per_second: u32,
    pub(super) ttl_ms: u64,
}

impl Default for RawRetryBudget {
    fn default() -> Self {
        Self { ratio: 0.2, min_per_second: 10, ttl_ms: 10_000 }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClassify {
    #[serde(default)]
    pub(super) statuses: BTreeMap<String, Class>,
    #[serde(default)]
    pub(super) codes: BTreeMap<String, Class>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLookup {
    pub(super) path: String,
    pub(super) query_param: String,
    pub(super) list_pointer: String,
    pub(super) status_pointer: String,
    pub(super) succeeded: Vec<String>,
    pub(super) failed: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperation {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) encoding: String,
    pub(super) reference_field: String,
    pub(super) on_unavailable: Option<String>,
    pub(super) duplicate_severity: Option<String>,
    pub(super) disagreement: Option<RawDisagreement>,
    pub(super) retry_owner: Option<String>,
    pub(super) idempotency: Option<String>,
    pub(super) max_stale_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDisagreement {
    pub(super) reconcile: Option<String>,
    pub(super) schedule: Option<String>,
}
