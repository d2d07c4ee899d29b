//! Configuration: raw TOML and environment layers parsed into `RawConfig`,
//! then validated into [`Config`], so nothing downstream can meet an
//! unvalidated value.
//!
//! Layers (later wins): the commented defaults in `config.default.toml`
//! (embedded), the `--config` file, then `FAILWELL_*` environment variables
//! with `__` between nested keys. Every error names the file, the key and
//! what is wrong. This module builds the engine's provider descriptions; it
//! does not start anything.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use failwell_engine::{PumpConfig, ReconcilerConfig};
use failwell_store::Synchronous;
use figment::Figment;
use figment::providers::{Env, Format, Toml};

const DEFAULTS: &str = include_str!("../../config.default.toml");

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
    /// A layer is malformed, or a key has the wrong type or is unknown:
    /// figment's errors, written one line per problem (the file or
    /// environment variable, the key, what is wrong). The message already
    /// holds all figment says, so it is not repeated as a source. (Boxed:
    /// figment's error is large.)
    #[error("{}", describe(.0))]
    Parse(Box<figment::Error>),
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

mod providers;
mod raw;
mod validate;
mod webhooks;

use raw::RawConfig;

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Database URL (`sqlite://…`, `postgres://…` or `mysql://…`).
    pub database_url: String,
    /// SQLite commit durability.
    pub synchronous: Synchronous,
    /// PostgreSQL connections per process.
    pub database_max_connections: u32,
    /// HTTP API address.
    pub listen: SocketAddr,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// The API's own limits.
    pub api: ApiLimits,
    /// Relay settings.
    pub relay: PumpConfig,
    /// Forwarder settings (`[forwarder]`, the same keys as `[relay]`).
    pub forwarder: PumpConfig,
    /// Reconciler settings.
    pub reconciler: ReconcilerConfig,
    /// The providers, as descriptions: each becomes a client once, when a
    /// process starts ([`crate::clients`]).
    pub providers: failwell_engine::ProviderSpecs,
    /// Webhook sources by integration name.
    pub webhooks: Arc<failwell_engine::Webhooks>,
    /// Where each webhook integration's events are forwarded.
    pub forwards: failwell_engine::ForwardSpecs,
    /// Breakers and pauses shared with the other processes (`[cluster]`;
    /// `None`: each process has its own).
    pub cluster: Option<failwell_cluster::ClusterConfig>,
    /// The window of the success rate and p95 latency (`[stats]`).
    pub stats_window: Duration,
    /// When delivered outbox messages are deleted (`[retention]`; `None`:
    /// kept).
    pub retention: Option<failwell_engine::RetentionConfig>,
    /// The admin API's and dashboard's bearer token (`[admin]`; `None`:
    /// both are off).
    pub admin_token: Option<crate::http::Token>,
    /// The alert sink and the oldest-open-entry rule (`[alerts]`).
    pub alerts: Option<Alerts>,
}

impl Config {
    /// How to open the store `database_url` names.
    pub fn store_options(&self) -> failwell_store::StoreOptions {
        failwell_store::StoreOptions {
            synchronous: self.synchronous,
            max_connections: self.database_max_connections,
        }
    }
}

pub use failwell_engine::Alerts;

/// The top-level keys: only `FAILWELL_*` variables naming one of these are
/// configuration (so `FAILWELL_LOG` and the like are left alone).
const TOP_LEVEL_KEYS: [&str; 16] = [
    "database_url",
    "database_max_connections",
    "sqlite_synchronous",
    "listen",
    "max_body_bytes",
    "api",
    "relay",
    "forwarder",
    "reconciler",
    "providers",
    "webhooks",
    "cluster",
    "stats",
    "retention",
    "admin",
    "alerts",
];

/// The HTTP API's bulkhead and request deadline (`[api]`).
#[derive(Clone, Copy, Debug)]
pub struct ApiLimits {
    /// Requests handled at once, and how long and how many more may wait.
    pub bulkhead: failwell_policy::BulkheadConfig,
    /// The most one request may take.
    pub request_timeout: Duration,
}

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
    let raw: RawConfig = figment.extract().map_err(|e| ConfigError::Parse(Box::new(e)))?;
    validate::validate(raw, &Checker { figment: &figment })
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
fn describe(error: &figment::Error) -> String {
    error
        .clone()
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

    /// Whether a layer (file or environment) set `key`.
    fn is_set(&self, key: &str) -> bool {
        self.figment.find_metadata(key).is_some()
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
