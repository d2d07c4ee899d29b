//! The Redis backend: each transition is one `EVALSHA` of `breaker.lua`
//! (atomic on the server, published on the namespace's channel when the
//! record changed), and every process subscribes to that channel.
//!
//! Keys: `{namespace}:breaker:{name}` (hash: epoch, generation, phase,
//! trips, open until, probe owner and lease end, pause end) and
//! `{namespace}:breaker-failures:{name}` (list of failure times, newest
//! first). Channel: `{namespace}:breakers`.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Script};

use crate::record::{Event, ProbeResult, Rules, Snapshot};
use crate::{ClusterError, parse_snapshot};

const SCRIPT: &str = include_str!("breaker.lua");

/// Breaker records in Redis (see the module docs).
pub(crate) struct RedisBackend {
    client: Client,
    config: AsyncConnectionConfig,
    connection: Option<MultiplexedConnection>,
    script: Script,
    namespace: String,
    channel: String,
}

impl RedisBackend {
    /// A backend for `url` (`redis://`, plain TCP); connects lazily.
    /// Errors when the URL cannot be parsed.
    pub(crate) fn new(url: &str, namespace: &str, timeout: Duration) -> Result<Self, ClusterError> {
        let client = Client::open(url).map_err(|e| ClusterError::Url(e.to_string()))?;
        Ok(Self {
            client,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout)),
            connection: None,
            script: Script::new(SCRIPT),
            namespace: namespace.to_owned(),
            channel: format!("{namespace}:breakers"),
        })
    }

    /// Applies `event` to breaker `name`; `now` (server ms) is for tests,
    /// `None` uses the server's clock. Errors when Redis cannot be reached
    /// or answers with an error; the connection is then dropped and made
    /// again on the next call.
    pub(crate) async fn apply(
        &mut self,
        name: &str,
        rules: &Rules,
        event: &Event,
        now: Option<i64>,
    ) -> Result<Snapshot, ClusterError> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self
                .connection
                .insert(self.client.get_multiplexed_async_connection_with_config(&self.config).await?),
        };
        let (op, a, b) = match event {
            Event::Load => ("load", String::new(), String::new()),
            Event::Failures { generation, count } => ("failures", generation.to_string(), count.to_string()),
            Event::Success { generation } => ("success", generation.to_string(), String::new()),
            Event::Trip { generation } => ("trip", generation.to_string(), String::new()),
            Event::Claim { owner } => ("claim", owner.clone(), String::new()),
            Event::Probe { generation, result } => {
                let result = match result {
                    ProbeResult::Success => "success",
                    ProbeResult::Failure => "failure",
                    ProbeResult::Release => "release",
                    ProbeResult::Started => "started",
                };
                ("probe", generation.to_string(), result.to_owned())
            }
            Event::Pause { ms } => ("pause", ms.to_string(), String::new()),
            Event::Force(phase) => ("force", phase.map_or(0, |p| p.code()).to_string(), String::new()),
            Event::Throttle { owner } => ("throttle", owner.clone(), String::new()),
        };
        // Distinct prefixes: no breaker name makes one breaker's record
        // another's failure list.
        let json: Result<String, _> = self
            .script
            .key(format!("{}:breaker:{name}", self.namespace))
            .key(format!("{}:breaker-failures:{name}", self.namespace))
            .arg(op)
            .arg(now.map(|n| n.to_string()).unwrap_or_default())
            .arg(name)
            .arg(&self.channel)
            .arg(rules.failures)
            .arg(rules.window_ms)
            .arg(rules.probe_timeout_ms)
            .arg(rules.open_for_ms)
            .arg(rules.open_multiplier)
            .arg(rules.max_open_for_ms)
            .arg(a)
            .arg(b)
            .invoke_async(connection)
            .await;
        match json {
            Ok(json) => parse_snapshot(json.as_bytes()),
            Err(error) => {
                self.connection = None;
                Err(error.into())
            }
        }
    }

    /// The published snapshots, from a connection of its own. The stream
    /// ends when that connection is lost. Errors when Redis cannot be
    /// reached.
    pub(crate) async fn subscribe(&self) -> Result<BoxStream<'static, Snapshot>, ClusterError> {
        let mut pubsub = self.client.get_async_pubsub().await?;
        pubsub.subscribe(&self.channel).await?;
        Ok(pubsub
            .into_on_message()
            .filter_map(|message| async move { parse_snapshot(message.get_payload_bytes()).ok() })
            .boxed())
    }
}
