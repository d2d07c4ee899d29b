//! What operators read and do: dead letters, the history of a subject, the
//! four numbers per integration, and the comparison reports.

use std::collections::BTreeMap;

use failwell_policy::Discrepancy;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;
use sqlx::{Decode, Postgres, Sqlite, Type};

use crate::error::{Context, StoreError};

/// Which queue a dead letter comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterKind {
    /// An outbox message: a call to a provider that was given up.
    Message,
    /// A webhook event's forward to the application that was given up.
    Forward,
}

impl DeadLetterKind {
    /// `message` or `forward`, as in URLs and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Forward => "forward",
        }
    }

    /// Parses [`Self::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "message" => Some(Self::Message),
            "forward" => Some(Self::Forward),
            _ => None,
        }
    }
}

/// Who does something on an operator's behalf: recorded in the history as
/// `operator:<channel>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `failwell` on the command line.
    Cli,
    /// The admin HTTP API.
    Api,
    /// The `/ui` dashboard.
    Ui,
}

impl Channel {
    /// `operator:cli`, `operator:api` or `operator:ui`.
    pub fn actor(self) -> &'static str {
        match self {
            Self::Cli => "operator:cli",
            Self::Api => "operator:api",
            Self::Ui => "operator:ui",
        }
    }
}

/// What an operator's [`crate::Store::resolve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ManualResolution {
    /// The operation now has the status given.
    Resolved,
    /// No operation has the key.
    NotFound,
    /// The operation is not `unknown` or `needs_human` (it has this status):
    /// nothing was changed.
    NotOpen(crate::OperationStatus),
}

/// A dead letter: work given up after its attempts or deadline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadLetter {
    /// Message or forward.
    pub kind: DeadLetterKind,
    /// The outbox message's or forward's id.
    pub id: i64,
    /// The provider (messages) or webhook integration (forwards).
    pub integration: String,
    /// The operation's idempotency key (messages) or the provider's event
    /// id (forwards).
    pub key: String,
    /// The operation's name (messages only).
    pub operation: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When it was given up, ms since epoch.
    pub dead_at_ms: i64,
    /// When the work was created, ms since epoch.
    pub created_at_ms: i64,
    /// The payload: the operation's request (messages), or the event body
    /// (forwards; a JSON string when it is not JSON).
    pub payload: Value,
}

/// Which dead letters to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this kind.
    pub kind: Option<DeadLetterKind>,
    /// Only this provider or integration.
    pub integration: Option<String>,
    /// Only those given up after this moment (ms since epoch).
    pub since_ms: Option<i64>,
}

/// One entry of a subject's history: a state change or an attempt.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistoryEntry {
    /// When, ms since epoch.
    pub at_ms: i64,
    /// `operation`, `message`, `forward`, `attempt`, `event` or `report`.
    pub subject: &'static str,
    /// Who: `api`, `app`, `relay`, `reconciler`, `webhook`, `forwarder`,
    /// `comparison` or `operator:<channel>`.
    pub actor: String,
    /// What changed, e.g. `pending -> unknown`, `call 2: HTTP 500
    /// (retryable)`, or a ledger effect.
    pub change: String,
    /// Why, or the decision taken.
    pub detail: Option<String>,
}

/// The four numbers of one integration (a provider, or a webhook
/// integration's forwards), as of `now`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntegrationStats {
    /// Provider or webhook integration name.
    pub integration: String,
    /// Calls that started within the window.
    pub calls: u64,
    /// Of those, calls the provider answered definitively (a success or a
    /// permanent refusal): the rest failed retryably or ambiguously.
    pub answered: u64,
    /// `answered / calls` (`None` without calls in the window).
    pub success_ratio: Option<f64>,
    /// 95th percentile of those calls' durations in ms, from an HDR
    /// histogram (3 significant digits); `None` without calls.
    pub p95_ms: Option<u64>,
    /// Open entries: outbox messages (or forwards) not yet delivered or
    /// given up.
    pub depth: u64,
    /// Age of the oldest open entry in ms (`None` when there is none).
    pub oldest_open_age_ms: Option<i64>,
    /// Operations whose outcome is unknown.
    pub unknown: u64,
    /// Operations waiting for a person (`needs_human`).
    pub needs_human: u64,
    /// Dead letters now.
    pub dead_letters: u64,
    /// Dead letters given up after the last acknowledgement.
    pub dead_letters_unacked: u64,
}

/// All integrations' numbers, and the window they were taken over.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    /// When, ms since epoch.
    pub at_ms: i64,
    /// The success-rate and latency window, ms.
    pub window_ms: u64,
    /// The last `failwell dlq ack`, ms since epoch.
    pub last_ack_ms: Option<i64>,
    /// By integration name.
    pub integrations: Vec<IntegrationStats>,
}

/// A comparison report to store.
#[derive(Clone, Debug, PartialEq)]
pub struct NewReport {
    /// The provider compared.
    pub provider: String,
    /// The window's start (inclusive), ms since epoch.
    pub window_from_ms: i64,
    /// Its end (exclusive), ms since epoch.
    pub window_to_ms: i64,
    /// When the comparison started, ms since epoch.
    pub started_at_ms: i64,
    /// When it finished, ms since epoch.
    pub finished_at_ms: i64,
    /// `schedule` or `operator:<channel>`.
    pub actor: String,
    /// Our operations compared.
    pub ours: u64,
    /// The provider's records compared.
    pub theirs: u64,
    /// What was found.
    pub discrepancies: Vec<Discrepancy>,
    /// The whole report as JSON.
    pub report: Value,
    /// The same, as readable text.
    pub text: String,
}

/// A stored comparison report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Report id.
    pub id: i64,
    /// The provider compared.
    pub provider: String,
    /// The window's start (inclusive), ms since epoch.
    pub window_from_ms: i64,
    /// Its end (exclusive), ms since epoch.
    pub window_to_ms: i64,
    /// When it finished, ms since epoch.
    pub finished_at_ms: i64,
    /// Who started it.
    pub actor: String,
    /// Our operations compared.
    pub ours: u64,
    /// The provider's records compared.
    pub theirs: u64,
    /// How many discrepancies were found.
    pub discrepancies: u64,
    /// The report as JSON.
    pub report: Value,
    /// The report as text.
    pub text: String,
    /// When the alert sink took it, ms since epoch.
    pub alerted_at_ms: Option<i64>,
    /// The last error sending it to the alert sink.
    pub alert_error: Option<String>,
}

/// Which comparison reports a store's report listing reads.
pub(crate) enum Reports {
    /// The newest ones, at most this many.
    Newest(u32),
    /// The one with this id.
    One(i64),
    /// The newest one of each provider.
    LatestPerProvider,
}

impl Reports {
    /// The statement that reads these reports (plain SQL both databases
    /// run, `$1` bound by number on SQLite too) and the value to bind to
    /// `$1`, if it has one. Its rows are read by [`report_from_row`].
    pub(crate) fn query(&self) -> (String, Option<i64>) {
        const SELECT: &str = "SELECT id, provider, window_from_ms, window_to_ms, finished_at_ms, actor, ours, \
             theirs, discrepancies, report, text, alerted_at_ms, alert_error FROM reconciliation_reports";
        let (tail, value) = match *self {
            Self::Newest(limit) => ("ORDER BY id DESC LIMIT $1", Some(i64::from(limit))),
            Self::One(id) => ("WHERE id = $1", Some(id)),
            Self::LatestPerProvider => (
                "WHERE id IN (SELECT MAX(id) FROM reconciliation_reports GROUP BY provider) ORDER BY provider",
                None,
            ),
        };
        (format!("{SELECT} {tail}"), value)
    }
}

/// A Rust type both databases decode their own column types into (e.g.
/// `i64` from SQLite's INTEGER and PostgreSQL's `bigint`, `Vec<u8>` from
/// TEXT, BLOB or `bytea`).
pub(crate) trait Column:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Column for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A row of either database, read by the shared `*_from_row` functions and
/// [`StatsBuilder`] below, so the mapping from columns to values is written
/// once whatever the backend's SQL looks like.
pub(crate) trait OperatorRow {
    /// The value of `column`, decoded as `T`.
    fn value<T: Column>(&self, column: &str) -> Result<T, sqlx::Error>;
}

macro_rules! operator_row {
    ($row:ty) => {
        impl OperatorRow for $row {
            fn value<T: Column>(&self, column: &str) -> Result<T, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
        }
    };
}

operator_row!(sqlx::sqlite::SqliteRow);
operator_row!(sqlx::postgres::PgRow);

/// The table a dead letter of `kind` lives in.
pub(crate) fn table(kind: DeadLetterKind) -> &'static str {
    match kind {
        DeadLetterKind::Message => "outbox",
        DeadLetterKind::Forward => "forwards",
    }
}

/// A dead letter from a row of the dead-letter relation of either store:
/// `kind, id, integration, key, operation, attempts, last_error,
/// dead_at_ms, created_at_ms, payload, json_payload`, where `payload` holds
/// the operation's request (JSON text, `json_payload` true) or the event's
/// body (any bytes, `json_payload` false).
pub(crate) fn dead_letter_from_row<R: OperatorRow>(row: &R) -> Result<DeadLetter, StoreError> {
    const CONTEXT: &str = "reading a dead letter";
    let kind: String = row.value("kind").context(CONTEXT)?;
    let bytes: Vec<u8> = row.value("payload").context(CONTEXT)?;
    let payload = if row.value::<bool>("json_payload").context(CONTEXT)? {
        // We wrote the request as JSON: anything else is damage.
        serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::Corrupt { what: "payload", detail: e.to_string() })?
    } else {
        // A webhook body is whatever the provider sent.
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Ok(DeadLetter {
        kind: DeadLetterKind::parse(&kind)
            .ok_or(StoreError::Corrupt { what: "dead letter kind", detail: kind })?,
        id: row.value("id").context(CONTEXT)?,
        integration: row.value("integration").context(CONTEXT)?,
        key: row.value("key").context(CONTEXT)?,
        operation: row.value("operation").context(CONTEXT)?,
        attempts: row.value::<i64>("attempts").context(CONTEXT)? as u32,
        last_error: row.value("last_error").context(CONTEXT)?,
        dead_at_ms: row.value::<Option<i64>>("dead_at_ms").context(CONTEXT)?.unwrap_or_default(),
        created_at_ms: row.value("created_at_ms").context(CONTEXT)?,
        payload,
    })
}

/// An entry of an operation's history from a row of either store's
/// history relation: `at_ms, subject, actor, change, detail`.
pub(crate) fn history_entry_from_row<R: OperatorRow>(row: &R) -> Result<HistoryEntry, StoreError> {
    const CONTEXT: &str = "reading an operation's history";
    let subject: String = row.value("subject").context(CONTEXT)?;
    Ok(HistoryEntry {
        at_ms: row.value("at_ms").context(CONTEXT)?,
        subject: match subject.as_str() {
            "operation" => "operation",
            "message" => "message",
            "forward" => "forward",
            "attempt" => "attempt",
            "event" => "event",
            _ => "report",
        },
        actor: row.value("actor").context(CONTEXT)?,
        change: row.value("change").context(CONTEXT)?,
        detail: row.value("detail").context(CONTEXT)?,
    })
}

/// A comparison report from a row of [`Reports::query`].
pub(crate) fn report_from_row<R: OperatorRow>(row: &R) -> Result<Report, StoreError> {
    const CONTEXT: &str = "reading comparison reports";
    let report: String = row.value("report").context(CONTEXT)?;
    Ok(Report {
        id: row.value("id").context(CONTEXT)?,
        provider: row.value("provider").context(CONTEXT)?,
        window_from_ms: row.value("window_from_ms").context(CONTEXT)?,
        window_to_ms: row.value("window_to_ms").context(CONTEXT)?,
        finished_at_ms: row.value("finished_at_ms").context(CONTEXT)?,
        actor: row.value("actor").context(CONTEXT)?,
        ours: row.value::<i64>("ours").context(CONTEXT)? as u64,
        theirs: row.value::<i64>("theirs").context(CONTEXT)? as u64,
        discrepancies: row.value::<i64>("discrepancies").context(CONTEXT)? as u64,
        report: serde_json::from_str(&report)
            .map_err(|e| StoreError::Corrupt { what: "report", detail: e.to_string() })?,
        text: row.value("text").context(CONTEXT)?,
        alerted_at_ms: row.value("alerted_at_ms").context(CONTEXT)?,
        alert_error: row.value("alert_error").context(CONTEXT)?,
    })
}

/// A discrepancy as the JSON array `[kind, reference, operation_id,
/// provider_ref, detail]` (SQLite inserts a report's discrepancies from an
/// array of these).
pub(crate) fn discrepancy_json(d: &Discrepancy) -> Value {
    serde_json::json!([d.kind.as_str(), d.reference, d.operation_id, d.provider_ref, d.detail])
}

/// A report's discrepancies as one array per column, in the order of
/// [`discrepancy_json`] (PostgreSQL inserts them with `unnest`).
#[derive(Default)]
pub(crate) struct DiscrepancyColumns {
    pub kind: Vec<&'static str>,
    pub reference: Vec<Option<String>>,
    pub operation_id: Vec<Option<i64>>,
    pub provider_ref: Vec<Option<String>>,
    pub detail: Vec<String>,
}

impl DiscrepancyColumns {
    /// The columns of `discrepancies`, in order.
    pub(crate) fn of(discrepancies: &[Discrepancy]) -> Self {
        let mut columns = Self::default();
        for d in discrepancies {
            columns.kind.push(d.kind.as_str());
            columns.reference.push(d.reference.clone());
            columns.operation_id.push(d.operation_id);
            columns.provider_ref.push(d.provider_ref.clone());
            columns.detail.push(d.detail.clone());
        }
        columns
    }
}

/// The columns recording the alert sink's answer for a report
/// (`alerted_at_ms`, `alert_error`): a success keeps no error, a failure
/// keeps the time of an earlier success (the statement's `COALESCE`).
pub(crate) fn alert_columns(result: Result<i64, String>) -> (Option<i64>, Option<String>) {
    match result {
        Ok(at) => (Some(at), None),
        Err(error) => (None, Some(error)),
    }
}

/// The status an operator's resolution gives an operation: `succeeded` or
/// `failed` (`unknown` is not something an operator can settle on).
pub(crate) fn resolved_status(outcome: failwell_policy::Outcome) -> Result<&'static str, StoreError> {
    match outcome {
        failwell_policy::Outcome::Succeeded => Ok("succeeded"),
        failwell_policy::Outcome::Failed => Ok("failed"),
        failwell_policy::Outcome::Unknown => {
            Err(StoreError::Corrupt { what: "resolution", detail: "unknown is not an outcome".into() })
        }
    }
}

/// Why an operation with status `current` (`None`: no such operation)
/// cannot be resolved by an operator, or `None` when it can (only
/// `unknown` and `needs_human` are open to it).
pub(crate) fn resolution_refused(current: Option<String>) -> Result<Option<ManualResolution>, StoreError> {
    let Some(current) = current else { return Ok(Some(ManualResolution::NotFound)) };
    if current == "unknown" || current == "needs_human" {
        return Ok(None);
    }
    let status = crate::OperationStatus::parse(&current)
        .ok_or(StoreError::Corrupt { what: "status", detail: current })?;
    Ok(Some(ManualResolution::NotOpen(status)))
}

/// What a resolution writes as the operation's last error (and so into its
/// history): who resolved it, and their note.
pub(crate) fn resolution_note(channel: Channel, note: &str) -> String {
    format!("resolved by {}: {note}", channel.actor())
}

/// The four numbers of every integration, added up from the rows of a
/// store's statements (each store writes its own SQL, the arithmetic is
/// here).
pub(crate) struct StatsBuilder {
    by_name: BTreeMap<String, (IntegrationStats, Option<Histogram<u64>>)>,
}

impl StatsBuilder {
    /// A row for each of `known`, even if nothing is found for it.
    pub(crate) fn new(known: &[String]) -> Self {
        Self { by_name: known.iter().map(|name| (name.clone(), (empty_stats(name), None))).collect() }
    }

    /// The start of the success-rate and latency window ending at `now_ms`.
    pub(crate) fn window_start(now_ms: i64, window_ms: u64) -> i64 {
        now_ms.saturating_sub(i64::try_from(window_ms).unwrap_or(i64::MAX))
    }

    /// Adds the calls of the window, one row per `(name, duration_ms)`
    /// with `calls` (how many took that long) and `answered` (how many of
    /// those the provider answered definitively).
    pub(crate) fn add_calls<R: OperatorRow>(&mut self, rows: &[R]) -> Result<(), StoreError> {
        const CONTEXT: &str = "reading recent calls";
        for row in rows {
            let (stats, histogram) = self.slot(row.value("name").context(CONTEXT)?);
            let calls = row.value::<i64>("calls").context(CONTEXT)? as u64;
            stats.calls += calls;
            stats.answered += row.value::<i64>("answered").context(CONTEXT)? as u64;
            let histogram = histogram.get_or_insert_with(|| {
                Histogram::new(3).expect("3 significant digits is a valid HDR histogram precision")
            });
            let duration = row.value::<i64>("duration_ms").context(CONTEXT)?.max(0) as u64;
            histogram.saturating_record_n(duration, calls);
        }
        Ok(())
    }

    /// Adds open and dead entries: rows of `name, depth, oldest` (creation
    /// of the oldest open entry), `dead, unacked` (dead letters, and those
    /// given up after the last acknowledgement), several per name (outbox
    /// messages and forwards, open and dead).
    pub(crate) fn add_entries<R: OperatorRow>(&mut self, rows: &[R], now_ms: i64) -> Result<(), StoreError> {
        const CONTEXT: &str = "reading open and dead entries";
        for row in rows {
            let (stats, _) = self.slot(row.value("name").context(CONTEXT)?);
            stats.depth += row.value::<i64>("depth").context(CONTEXT)? as u64;
            stats.dead_letters += row.value::<i64>("dead").context(CONTEXT)? as u64;
            stats.dead_letters_unacked +=
                row.value::<Option<i64>>("unacked").context(CONTEXT)?.unwrap_or(0) as u64;
            if let Some(oldest) = row.value::<Option<i64>>("oldest").context(CONTEXT)? {
                let age = (now_ms - oldest).max(0);
                stats.oldest_open_age_ms = Some(stats.oldest_open_age_ms.map_or(age, |a| a.max(age)));
            }
        }
        Ok(())
    }

    /// Adds the operations waiting for an outcome: rows of `name, status`
    /// (`unknown` or `needs_human`) and `n`, how many.
    pub(crate) fn add_unsettled<R: OperatorRow>(&mut self, rows: &[R]) -> Result<(), StoreError> {
        const CONTEXT: &str = "counting unknown operations";
        for row in rows {
            let n = row.value::<i64>("n").context(CONTEXT)? as u64;
            let status: String = row.value("status").context(CONTEXT)?;
            let stats = &mut self.slot(row.value("name").context(CONTEXT)?).0;
            match status.as_str() {
                "unknown" => stats.unknown = n,
                _ => stats.needs_human = n,
            }
        }
        Ok(())
    }

    /// The numbers, by integration name, with the ratios and percentiles
    /// worked out.
    pub(crate) fn finish(self, now_ms: i64, window_ms: u64, last_ack_ms: Option<i64>) -> Stats {
        let integrations = self
            .by_name
            .into_values()
            .map(|(mut stats, histogram)| {
                if stats.calls > 0 {
                    stats.success_ratio = Some(stats.answered as f64 / stats.calls as f64);
                }
                stats.p95_ms = histogram.map(|h| h.value_at_quantile(0.95));
                stats
            })
            .collect();
        Stats { at_ms: now_ms, window_ms, last_ack_ms, integrations }
    }

    fn slot(&mut self, name: String) -> &mut (IntegrationStats, Option<Histogram<u64>>) {
        self.by_name.entry(name).or_insert_with_key(|name| (empty_stats(name), None))
    }
}

fn empty_stats(name: &str) -> IntegrationStats {
    IntegrationStats {
        integration: name.to_owned(),
        calls: 0,
        answered: 0,
        success_ratio: None,
        p95_ms: None,
        depth: 0,
        oldest_open_age_ms: None,
        unknown: 0,
        needs_human: 0,
        dead_letters: 0,
        dead_letters_unacked: 0,
    }
}
