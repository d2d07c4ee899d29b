//! Configuration: raw TOML and environment layers parsed into `RawConfig`,
//! then validated into [`Config`], so nothing downstream can meet an
//! unvalidated value.
//!
//! Layers (later wins): the commented defaults in `config.default.toml`
//! (embedded), the `--config` file, then `FAILWELL_*` environment variables
//! with `__` between nested keys. Every error names the file, the key and
//! what is wrong. This module builds the engine's provider descriptions; it
//! does not start anything.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use failwell_engine::{
    Encoding, LookupSpec, OperationSpec, ProviderClient, ProviderSpec, Providers, ReconcilerConfig,
    RelayConfig,
};
use failwell_policy::{Backoff, Class, Classifier, IdempotencyPolicy, Jitter, RetryPolicy};
use failwell_store::Synchronous;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;

const DEFAULTS: &str = include_str!("../config.default.toml");

/// A configuration that could not be loaded. The message names the source
/// (file or environment variable), the key and the problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file does not exist or cannot be read.
    #[error("cannot read config file {path}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A layer is malformed, or a key has the wrong type or is unknown
    /// (one line per problem: source, key, what is wrong).
    #[error("{0}")]
    Parse(String),
    /// A value parsed but is not acceptable.
    #[error("{source_name}: key `{key}`: {message}")]
    Invalid {
        /// Where the value came from: the file, the environment variable or
        /// the built-in defaults.
        source_name: String,
        /// The full key path, e.g. `providers.payments.timeout_ms`.
        key: String,
        /// What is wrong and what would be right.
        message: String,
    },
}

/// The configuration as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    database_url: String,
    sqlite_synchronous: String,
    listen: String,
    max_body_bytes: usize,
    relay: RawRelay,
    reconciler: RawReconciler,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    concurrency: usize,
    batch_size: u32,
    poll_interval_ms: u64,
    lease_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconciler {
    interval_ms: u64,
    batch_size: u32,
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
struct RawProvider {
    base_url: String,
    #[serde(default = "d_connect")]
    connect_timeout_ms: u64,
    #[serde(default = "d_timeout")]
    timeout_ms: u64,
    #[serde(default = "d_attempts")]
    max_attempts: u32,
    #[serde(default = "d_deadline")]
    deadline_ms: u64,
    #[serde(default = "d_retry_after")]
    max_retry_after_ms: u64,
    reconcile_after_ms: Option<u64>,
    #[serde(default = "d_true")]
    idempotency_keys: bool,
    #[serde(default = "d_header")]
    idempotency_header: String,
    #[serde(default = "d_ttl")]
    idempotency_key_ttl_ms: u64,
    #[serde(default = "d_code_pointer")]
    error_code_pointer: String,
    #[serde(default = "d_id_pointer")]
    id_pointer: String,
    #[serde(default)]
    backoff: RawBackoff,
    #[serde(default)]
    classify: RawClassify,
    lookup: Option<RawLookup>,
    #[serde(default)]
    operations: BTreeMap<String, RawOperation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackoff {
    base_ms: u64,
    cap_ms: u64,
    jitter: Jitter,
}

impl Default for RawBackoff {
    fn default() -> Self {
        Self { base_ms: 200, cap_ms: 30_000, jitter: Jitter::Full }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClassify {
    #[serde(default)]
    statuses: BTreeMap<String, Class>,
    #[serde(default)]
    codes: BTreeMap<String, Class>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLookup {
    path: String,
    query_param: String,
    list_pointer: String,
    status_pointer: String,
    succeeded: Vec<String>,
    failed: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    method: String,
    path: String,
    encoding: String,
    reference_field: String,
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Database URL (`sqlite://…`).
    pub database_url: String,
    /// SQLite commit durability.
    pub synchronous: Synchronous,
    /// HTTP API address.
    pub listen: SocketAddr,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Relay settings.
    pub relay: RelayConfig,
    /// Reconciler settings.
    pub reconciler: ReconcilerConfig,
    /// Provider clients by name.
    pub providers: Arc<Providers>,
}

/// The top-level keys: only `FAILWELL_*` variables naming one of these are
/// configuration (so `FAILWELL_LOG` and the like are left alone).
const TOP_LEVEL_KEYS: [&str; 7] =
    ["database_url", "sqlite_synchronous", "listen", "max_body_bytes", "relay", "reconciler", "providers"];

/// The longest duration any `_ms` key accepts: one year.
const MAX_DURATION_MS: u64 = 365 * 24 * 3600 * 1000;

/// The highest `relay.concurrency`.
const MAX_CONCURRENCY: usize = 10_000;

/// Loads and validates the configuration: defaults, then `file` (which must
/// exist when given), then the environment.
pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
    let mut figment = Figment::from(Toml::string(DEFAULTS));
    if let Some(path) = file {
        std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Unreadable { path: path.into(), source })?;
        figment = figment.merge(Toml::file_exact(path));
    }
    let env = Env::prefixed("FAILWELL_").split("__").filter(|key| {
        let key = key.as_str().to_ascii_lowercase().replace("__", ".");
        TOP_LEVEL_KEYS.iter().any(|top| key == *top || key.starts_with(&format!("{top}.")))
    });
    extract(figment.merge(env))
}

/// Parses a configuration from a TOML string layered over the defaults (no
/// environment), for tests and the demo.
pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
    extract(Figment::from(Toml::string(DEFAULTS)).merge(Toml::string(text)))
}

fn extract(figment: Figment) -> Result<Config, ConfigError> {
    let raw: RawConfig = figment.extract().map_err(|e| ConfigError::Parse(describe(e)))?;
    validate(raw, &Checker { figment: &figment })
}

/// Where a value came from, for error messages: the file, the environment
/// variable, or the built-in defaults.
fn source_label(metadata: &figment::Metadata, key: &str) -> String {
    match &metadata.source {
        Some(figment::Source::File(path)) => path.display().to_string(),
        _ if metadata.name.contains("environment") => {
            format!("environment variable FAILWELL_{}", key.replace('.', "__").to_uppercase())
        }
        _ if metadata.name.contains("string") => "built-in defaults".to_string(),
        _ => metadata.name.to_string(),
    }
}

/// One line per figment error: source, key, problem.
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let source =
                e.metadata.as_ref().map_or_else(|| "configuration".to_string(), |m| source_label(m, &key));
            if key.is_empty() {
                format!("{source}: {}", e.kind)
            } else {
                format!("{source}: key `{key}`: {}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct Checker<'a> {
    figment: &'a Figment,
}

impl Checker<'_> {
    fn invalid(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let key = key.into();
        let source_name = self
            .figment
            .find_metadata(&key)
            .map_or_else(|| "configuration".to_string(), |m| source_label(m, &key));
        ConfigError::Invalid { source_name, key, message: message.into() }
    }

    fn positive(&self, key: &str, value: u64) -> Result<Duration, ConfigError> {
        if value == 0 {
            return Err(self.invalid(key, "must be greater than 0"));
        }
        self.duration(key, value)
    }

    fn duration(&self, key: &str, value: u64) -> Result<Duration, ConfigError> {
        if value > MAX_DURATION_MS {
            return Err(self.invalid(key, format!("{value} ms is more than a year")));
        }
        Ok(Duration::from_millis(value))
    }

    fn pointer(&self, key: &str, value: &str) -> Result<String, ConfigError> {
        if !value.is_empty() && !value.starts_with('/') {
            return Err(
                self.invalid(key, format!("{value:?} is not a JSON pointer (it must start with '/')"))
            );
        }
        Ok(value.to_string())
    }
}

fn validate(raw: RawConfig, c: &Checker<'_>) -> Result<Config, ConfigError> {
    if !raw.database_url.starts_with("sqlite:") {
        return Err(
            c.invalid("database_url", format!("{:?}: only sqlite: URLs are supported", raw.database_url))
        );
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
    if raw.relay.concurrency == 0 || raw.relay.concurrency > MAX_CONCURRENCY {
        return Err(c.invalid("relay.concurrency", format!("must be between 1 and {MAX_CONCURRENCY}")));
    }
    if raw.relay.batch_size == 0 {
        return Err(c.invalid("relay.batch_size", "must be greater than 0"));
    }
    let relay = RelayConfig {
        concurrency: raw.relay.concurrency,
        batch_size: raw.relay.batch_size,
        poll_interval: c.positive("relay.poll_interval_ms", raw.relay.poll_interval_ms)?,
        lease: c.positive("relay.lease_ms", raw.relay.lease_ms)?,
    };
    if raw.reconciler.batch_size == 0 {
        return Err(c.invalid("reconciler.batch_size", "must be greater than 0"));
    }
    let reconciler = ReconcilerConfig {
        interval: c.positive("reconciler.interval_ms", raw.reconciler.interval_ms)?,
        batch_size: raw.reconciler.batch_size,
    };
    let mut providers = Providers::new();
    for (name, p) in raw.providers {
        let spec = provider(c, &name, p)?;
        if spec.timeout * 2 > relay.lease {
            return Err(c.invalid(
                format!("providers.{name}.timeout_ms"),
                format!(
                    "{} ms is more than half of relay.lease_ms ({} ms): a slow attempt would outlive its lease",
                    spec.timeout.as_millis(),
                    relay.lease.as_millis()
                ),
            ));
        }
        let client = ProviderClient::new(spec).map_err(|e| {
            c.invalid(format!("providers.{name}"), format!("cannot build the HTTP client: {e}"))
        })?;
        providers.insert(name, client);
    }
    Ok(Config {
        database_url: raw.database_url,
        synchronous,
        listen,
        max_body_bytes: raw.max_body_bytes,
        relay,
        reconciler,
        providers: Arc::new(providers),
    })
}

fn provider(c: &Checker<'_>, name: &str, p: RawProvider) -> Result<ProviderSpec, ConfigError> {
    let key = |k: &str| format!("providers.{name}.{k}");
    let base_url: reqwest::Url = p
        .base_url
        .parse()
        .map_err(|e| c.invalid(key("base_url"), format!("{:?} is not a URL: {e}", p.base_url)))?;
    if !matches!(base_url.scheme(), "http" | "https") {
        return Err(c.invalid(key("base_url"), format!("{:?}: the scheme must be http or https", p.base_url)));
    }
    let backoff = Backoff::try_new(
        c.duration(&key("backoff.base_ms"), p.backoff.base_ms)?,
        c.duration(&key("backoff.cap_ms"), p.backoff.cap_ms)?,
        p.backoff.jitter,
    )
    .map_err(|e| c.invalid(key("backoff"), e.to_string()))?;
    let retry = RetryPolicy::try_new(
        p.max_attempts,
        backoff,
        c.positive(&key("deadline_ms"), p.deadline_ms)?,
        c.duration(&key("max_retry_after_ms"), p.max_retry_after_ms)?,
    )
    .map_err(|e| c.invalid(key("max_attempts"), e.to_string()))?;
    let timeout = c.positive(&key("timeout_ms"), p.timeout_ms)?;
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
                path: l.path,
                query_param: l.query_param,
                list_pointer: c.pointer(&key("lookup.list_pointer"), &l.list_pointer)?,
                status_pointer: c.pointer(&key("lookup.status_pointer"), &l.status_pointer)?,
                succeeded: l.succeeded,
                failed: l.failed,
            })
        })
        .transpose()?;
    let mut operations = BTreeMap::new();
    for (op_name, o) in p.operations {
        let okey = |k: &str| key(&format!("operations.{op_name}.{k}"));
        let method = o
            .method
            .parse::<reqwest::Method>()
            .map_err(|_| c.invalid(okey("method"), format!("{:?} is not an HTTP method", o.method)))?;
        let encoding = match o.encoding.as_str() {
            "json" => Encoding::Json,
            "form" => Encoding::Form,
            other => {
                return Err(c.invalid(okey("encoding"), format!("{other:?}: expected \"json\" or \"form\"")));
            }
        };
        operations.insert(
            op_name,
            OperationSpec { method, path: o.path, encoding, reference_field: o.reference_field },
        );
    }
    Ok(ProviderSpec {
        name: name.to_string(),
        base_url,
        connect_timeout: c.positive(&key("connect_timeout_ms"), p.connect_timeout_ms)?,
        timeout,
        retry,
        idempotency,
        classifier: Classifier::new(statuses, p.classify.codes),
        error_code_pointer: c.pointer(&key("error_code_pointer"), &p.error_code_pointer)?,
        id_pointer: c.pointer(&key("id_pointer"), &p.id_pointer)?,
        reconcile_after: c
            .duration(&key("reconcile_after_ms"), p.reconcile_after_ms.unwrap_or(p.timeout_ms))?,
        lookup,
        operations,
    })
}
