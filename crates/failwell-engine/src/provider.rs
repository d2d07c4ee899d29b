//! Validated provider descriptions: where to send an operation, how to
//! encode it, how to find its effect again, and which policies apply.
//!
//! These types are built from configuration by the binary; they hold no
//! parsing of their own and are immutable once built.

use std::collections::BTreeMap;
use std::time::Duration;

use failwell_policy::{
    BreakerConfig, BulkheadConfig, Classifier, IdempotencyPolicy, Manifest, RetryBudgetConfig, RetryPolicy,
    ThrottleConfig, Timeouts,
};
use reqwest::{Method, Url};

use crate::schedule::Schedule;

/// How an operation's JSON payload goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json`.
    Json,
    /// `application/x-www-form-urlencoded` (top-level fields only).
    Form,
}

/// One operation a provider offers (e.g. `charge`).
#[derive(Clone, Debug)]
pub struct OperationSpec {
    /// HTTP method.
    pub method: Method,
    /// The operation's URL: its path (e.g. `/v1/charges`) joined to the
    /// provider's base URL once, when the configuration is loaded.
    pub url: Url,
    /// Body encoding.
    pub encoding: Encoding,
    /// Payload field holding our business reference (used for lookups).
    pub reference_field: String,
    /// The operation's written answers to the four questions.
    pub manifest: Manifest,
    /// Attempts, backoff, deadline and `Retry-After` cap for this operation:
    /// the provider's, with one attempt when another layer owns the retry.
    pub retry: RetryPolicy,
    /// How the retry decisions treat this operation's key: the provider's
    /// policy, without a header when the operation sends none, or a key
    /// that never expires for a harmless operation (ambiguous outcomes are
    /// retried freely).
    pub idempotency: IdempotencyPolicy,
    /// Whether the provider's idempotency header is sent.
    pub send_key: bool,
    /// For a read declared `on_unavailable = "degrade"`: the oldest
    /// last-known-good answer that may be served, marked stale.
    pub max_stale: Option<Duration>,
}

/// How to look up an effect by our reference (reconciliation).
#[derive(Clone, Debug)]
pub struct LookupSpec {
    /// The lookup's URL: its path (e.g. `/v1/charges`) joined to the
    /// provider's base URL once, when the configuration is loaded.
    pub url: Url,
    /// Query parameter carrying the reference, e.g. `reference`.
    pub query_param: String,
    /// JSON pointer to the list of records in the answer, e.g. `/data`.
    pub list_pointer: String,
    /// JSON pointer to a record's status, e.g. `/status`.
    pub status_pointer: String,
    /// Status values meaning the effect happened, e.g. `["succeeded"]`.
    pub succeeded: Vec<String>,
    /// Status values meaning the provider refused, e.g. `["failed"]`.
    pub failed: Vec<String>,
}

/// The trip rule of a breaker shared by a cluster: `failures` anywhere with
/// no success in between, within `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterRule {
    /// Failures that open the breaker everywhere (≥ 1). Default 20.
    pub failures: u32,
    /// The sliding window they are counted in. Default 10 s.
    pub window: Duration,
}

impl Default for ClusterRule {
    fn default() -> Self {
        Self { failures: 20, window: Duration::from_secs(10) }
    }
}

/// When a provider is paused: every call to it, from every worker (and,
/// with a shared breaker, every process), waits until the pause is over,
/// without spending attempts.
#[derive(Clone, Debug, PartialEq)]
pub struct PauseRule {
    /// An answer with one of these statuses and a `Retry-After` is
    /// throttling (a 429 is, with or without one). Default 429 and 503.
    pub statuses: Vec<u16>,
    /// When a throttling answer with `Retry-After` pauses the provider for
    /// that long (capped by the retry policy's `max_retry_after`).
    pub when: PauseWhen,
    /// With [`PauseWhen::Persistent`]: the share of the last answers (the
    /// adaptive rate's window) that must be throttling, in (0, 1]. Default
    /// 0.5.
    pub persistent_ratio: f64,
    /// This many transport errors in a row (connection refused or reset,
    /// timeouts) pause the provider for `duration` (`None`: never).
    pub after_errors: Option<u32>,
    /// The pause after `after_errors`. Default 30 s.
    pub duration: Duration,
}

/// When a throttling answer pauses every call to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseWhen {
    /// When throttling persists: at least `persistent_ratio` of the last
    /// answers were throttling (the default). Without an adaptive rate,
    /// every throttling answer pauses.
    Persistent,
    /// Every throttling answer pauses.
    Always,
    /// Throttling never pauses; the adaptive rate and each message's own
    /// `Retry-After` slow the calls down.
    Never,
}

impl PauseRule {
    /// Whether an answer with `status` (and a `Retry-After` or not) is
    /// throttling: a 429, or one of `statuses` with a `Retry-After`.
    pub fn is_throttling(&self, status: u16, retry_after: bool) -> bool {
        failwell_policy::throttle::is_throttling(status, retry_after, &self.statuses)
    }

    /// Whether a throttling answer pauses the provider, given the share of
    /// throttling among the last answers (`None`: no adaptive rate keeps
    /// one).
    pub fn pauses(&self, throttled_share: Option<f64>) -> bool {
        match self.when {
            PauseWhen::Always => true,
            PauseWhen::Never => false,
            PauseWhen::Persistent => throttled_share.is_none_or(|share| share >= self.persistent_ratio),
        }
    }
}

impl Default for PauseRule {
    fn default() -> Self {
        Self {
            statuses: vec![429, 503],
            when: PauseWhen::Persistent,
            persistent_ratio: 0.5,
            after_errors: None,
            duration: Duration::from_secs(30),
        }
    }
}

/// A provider and its policy: an integration.
#[derive(Clone, Debug)]
pub struct ProviderSpec {
    /// Name in configuration and in operations.
    pub name: String,
    /// Base URL; operation and lookup paths are joined to it.
    pub base_url: Url,
    /// The limits of one attempt: connect (its expiry means the request was
    /// not sent), response headers, body idle, and the total from sending to
    /// the last body byte, which the caller may shorten to the time left
    /// before the operation's deadline.
    pub timeouts: Timeouts,
    /// When to stop calling the provider (`None`: never).
    pub breaker: Option<BreakerConfig>,
    /// The cluster-wide trip rule when the breaker is shared
    /// (`failwell_cluster`); unused by an in-process breaker.
    pub cluster_rule: ClusterRule,
    /// When every call to the provider stops for a while (needs the
    /// breaker, which holds the pause).
    pub pause: PauseRule,
    /// The adaptive sending rate (`None`: off): throttling answers slow the
    /// calls down ([`failwell_policy::throttle`]).
    pub throttle: Option<ThrottleConfig>,
    /// The provider's share of concurrency.
    pub bulkhead: BulkheadConfig,
    /// How many retries may follow the provider's recent calls.
    pub retry_budget: RetryBudgetConfig,
    /// Attempts, backoff, deadline, `Retry-After` cap.
    pub retry: RetryPolicy,
    /// Idempotency header and key lifetime.
    pub idempotency: IdempotencyPolicy,
    /// Status and error-code rules.
    pub classifier: Classifier,
    /// JSON pointer to the provider's error code in error bodies, e.g. `/error/code`.
    pub error_code_pointer: String,
    /// JSON pointer to the provider's id of an effect in success bodies, e.g. `/id`.
    pub id_pointer: String,
    /// Wait after an ambiguous attempt before the first status lookup.
    pub reconcile_after: Duration,
    /// Status lookup, if the provider has one.
    pub lookup: Option<LookupSpec>,
    /// How the provider lists its records for the scheduled comparison
    /// (needs `lookup`), if it can.
    pub compare: Option<CompareSpec>,
    /// Operations by name.
    pub operations: BTreeMap<String, OperationSpec>,
}

impl ProviderSpec {
    /// The retry policy and key handling of `operation` (set by its
    /// manifest), or the provider's when it has no such operation.
    pub fn policies_of(&self, operation: &str) -> (&RetryPolicy, &IdempotencyPolicy) {
        match self.operations.get(operation) {
            Some(o) => (&o.retry, &o.idempotency),
            None => (&self.retry, &self.idempotency),
        }
    }
}

/// How the provider lists its records by creation time (defaults: Stripe's
/// list API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareSpec {
    /// When the comparison runs on its own (`None`: only when asked).
    pub schedule: Option<Schedule>,
    /// Query parameter of the window's start, inclusive (`created[gte]`).
    pub from_param: String,
    /// Query parameter of the window's end, exclusive (`created[lt]`).
    pub to_param: String,
    /// The unit of both (Stripe: seconds).
    pub time_unit: TimeUnit,
    /// Query parameter of the page size (`limit`).
    pub page_size_param: String,
    /// Records per page (1–1000; Stripe allows up to 100).
    pub page_size: u32,
    /// Query parameter naming the last record of the previous page
    /// (`starting_after`), by its id (the provider's `id_pointer`).
    pub cursor_param: String,
    /// JSON pointer to "more pages follow" in a page (`/has_more`).
    pub has_more_pointer: String,
    /// JSON pointer to our reference in a record (`/reference`).
    pub reference_pointer: String,
    /// JSON pointer to the amount in a record (`/amount`); `None`: amounts
    /// are not compared.
    pub amount_pointer: Option<String>,
    /// JSON pointer to the amount in our request payload (`/amount`).
    pub payload_amount_pointer: Option<String>,
    /// At most this many records are read per comparison (a bound against a
    /// provider that never says `has_more = false`).
    pub max_records: u32,
}

/// The unit of the window's query parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Unix seconds (Stripe, Adyen reports).
    Seconds,
    /// Unix milliseconds.
    Millis,
}
