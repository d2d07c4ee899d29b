//! What operators read and do: dead letters, the history of a subject, the
//! four numbers per integration, and the comparison reports. The statements,
//! the same on both databases, are defined once by [`operator_statements!`].

use std::collections::BTreeMap;

use failwell_policy::Discrepancy;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;
use sqlx::{Decode, Postgres, Sqlite, Type};

use crate::error::{Context, StoreError};

/// Which queue a dead letter comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
    /// Queue the report for the alert sink, in the transaction that
    /// stores it.
    pub alert: bool,
}

/// A stored comparison report.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
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
    /// Its alert is queued and not sent yet (it may wait for a retry, or
    /// for an earlier alert of its provider).
    pub alert_pending: bool,
}

/// What became of a report's alert ([`Report::alert_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlertState<'a> {
    /// None was sent: none was needed, or there is no alert sink.
    None,
    /// Queued and not sent yet, with the last send's error if one failed.
    Queued {
        /// The last send's error.
        last_error: Option<&'a str>,
    },
    /// The alert sink took it at `at_ms` (ms since epoch).
    Sent {
        /// When.
        at_ms: i64,
    },
    /// Given up (the sink refused it for good, or too often).
    GivenUp {
        /// Why.
        error: &'a str,
    },
}

impl AlertState<'_> {
    /// `none`, `queued`, `sent` or `given_up`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Queued { .. } => "queued",
            Self::Sent { .. } => "sent",
            Self::GivenUp { .. } => "given_up",
        }
    }
}

impl Report {
    /// What became of its alert, from `alert_pending`, `alerted_at_ms` and
    /// `alert_error`: queued while pending; else sent if the sink took it
    /// (an earlier success is kept), else given up if a send failed.
    pub fn alert_state(&self) -> AlertState<'_> {
        match (self.alert_pending, self.alerted_at_ms, self.alert_error.as_deref()) {
            (true, _, last_error) => AlertState::Queued { last_error },
            (false, Some(at_ms), _) => AlertState::Sent { at_ms },
            (false, None, Some(error)) => AlertState::GivenUp { error },
            (false, None, None) => AlertState::None,
        }
    }
}

/// An alert for the alert sink, queued in the store ([`crate::Store::queue_alert`])
/// and sent from there at least once.
#[derive(Clone, Debug, PartialEq)]
pub struct NewAlert {
    /// What it is about: `oldest_open_age`, `comparison_failed`.
    pub kind: String,
    /// The integration or provider it concerns; alerts of one kind and
    /// subject are sent in the order they were queued.
    pub subject: String,
    /// The readable text (Slack's `text`).
    pub text: String,
    /// The details (the body's `failwell` member).
    pub details: Value,
    /// When it was raised, ms since epoch; it is due from then.
    pub at_ms: i64,
}

/// What a queued alert says.
#[derive(Clone, Debug, PartialEq)]
pub enum AlertBody {
    /// Its own text and details.
    Message {
        /// The readable text.
        text: String,
        /// The details.
        details: Value,
    },
    /// The comparison report with this id: its text and JSON.
    Report(i64),
}

/// A queued alert claimed for sending (see [`crate::Store::claim_alert`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// Alert id.
    pub id: i64,
    /// What it says.
    pub body: AlertBody,
    /// Sends tried so far, this one included.
    pub attempts: u32,
    /// When it was raised (queued), ms since epoch.
    pub raised_at_ms: i64,
    /// Until when this claim holds it (ms since epoch): its outcome is
    /// recorded only while no other sender has claimed it since.
    pub held_until_ms: i64,
}

/// A comparison window `(from_ms, to_ms)`: from inclusive to exclusive, ms
/// since epoch.
pub type Window = (i64, i64);

/// Which queued alert [`crate::Store::claim_alert`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlertClaim {
    /// The oldest due one.
    Due,
    /// The one carrying this comparison report, if it is due.
    Report(i64),
}

/// What became of one send of an alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlertSent {
    /// The sink took it at this time (ms since epoch).
    At(i64),
    /// It did not, for this reason; try again at `retry_at_ms`.
    Failed {
        /// Why (a sentence without the sink's URL).
        error: String,
        /// When to send it again, ms since epoch.
        retry_at_ms: i64,
    },
    /// It did not, and it is not sent again (the sink refused it for good,
    /// or too often): set aside at `at_ms`, so it no longer holds back the
    /// alerts queued after it.
    GivenUp {
        /// Why.
        error: String,
        /// When, ms since epoch.
        at_ms: i64,
    },
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
             theirs, discrepancies, report, text, alerted_at_ms, alert_error, \
             EXISTS (SELECT 1 FROM alerts a WHERE a.report_id = reconciliation_reports.id \
               AND a.sent_at_ms IS NULL AND a.gave_up_at_ms IS NULL) AS alert_pending FROM reconciliation_reports";
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
/// body (any bytes, `json_payload` false). A column that cannot be read
/// (changed behind failwell's back, or the message's operation gone) reads
/// as a stand-in, and the last error ends with which column and why, so
/// one damaged dead letter is shown, never a failed list.
/// Errors: only a `kind` or `id` that cannot be read.
pub(crate) fn dead_letter_from_row<R: OperatorRow>(row: &R) -> Result<DeadLetter, StoreError> {
    const CONTEXT: &str = "reading a dead letter";
    let kind: String = row.value("kind").context(CONTEXT)?;
    let kind =
        DeadLetterKind::parse(&kind).ok_or(StoreError::Corrupt { what: "dead letter kind", detail: kind })?;
    let mut d = crate::rows::Damage::default();
    let read = |column: &'static str| row.value::<Option<i64>>(column).map_err(|e| e.to_string());
    let attempts = read("attempts").and_then(|n| {
        let n = n.unwrap_or_default();
        u32::try_from(n).map_err(|_| format!("{n} is out of range"))
    });
    let attempts = d.or("attempts", attempts, 0);
    // A dead letter always has both times: a missing one is damage, shown
    // as 0 (1970) with the reason, never a time that looks real.
    let time = |column: &'static str| read(column).and_then(|t| t.ok_or_else(|| "is NULL".to_string()));
    let dead_at_ms = d.or("dead_at_ms", time("dead_at_ms"), 0);
    let created_at_ms = d.or("created_at_ms", time("created_at_ms"), 0);
    let text = |d: &mut crate::rows::Damage, column: &'static str| {
        d.or(column, row.value::<Option<String>>(column).map_err(|e| e.to_string()), None)
    };
    let integration = text(&mut d, "integration").unwrap_or_default();
    let key = text(&mut d, "key").unwrap_or_default();
    let operation = text(&mut d, "operation");
    let last_error = text(&mut d, "last_error");
    let bytes = d.or("payload", row.value::<Option<Vec<u8>>>("payload").map_err(|e| e.to_string()), None);
    let payload = match bytes {
        None => Value::Null,
        // We wrote the request as JSON: anything else is damage, shown as
        // its text (the dead letter's last error says why it was set aside).
        Some(bytes) if row.value::<bool>("json_payload").unwrap_or(true) => {
            crate::stored::json_or_text(String::from_utf8_lossy(&bytes).into_owned()).0
        }
        // A webhook body is whatever the provider sent.
        Some(bytes) => serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    };
    let last_error = match (last_error, d.into_reason()) {
        (error, None) => error,
        (None, Some(damage)) => Some(format!("stored {damage}")),
        (Some(error), Some(damage)) => Some(format!("{error}; stored {damage}")),
    };
    Ok(DeadLetter {
        kind,
        id: row.value("id").context(CONTEXT)?,
        integration,
        key,
        operation,
        attempts,
        last_error,
        dead_at_ms,
        created_at_ms,
        payload,
    })
}

/// An entry of an operation's history from a row of either store's
/// history relation: `at_ms, subject, actor, change, detail`.
/// Text that is not UTF-8 is read as [`lossy_text`] does; a time that is
/// not an integer (written behind failwell's back) reads as 0, with the
/// damage named in `detail`, so one damaged row never hides the others.
pub(crate) fn history_entry_from_row<R: OperatorRow>(row: &R) -> Result<HistoryEntry, StoreError> {
    const CONTEXT: &str = "reading an operation's history";
    let text = |column| lossy_text(row, column).context(CONTEXT);
    let subject = text("subject")?.unwrap_or_default();
    let mut detail = text("detail")?;
    let at_ms = row.value::<i64>("at_ms").unwrap_or_else(|e| {
        let damage = format!("stored at_ms: {e}");
        detail = Some(detail.take().map_or_else(|| damage.clone(), |d| format!("{d}; {damage}")));
        0
    });
    Ok(HistoryEntry {
        at_ms,
        subject: match subject.as_str() {
            "operation" => "operation",
            "message" => "message",
            "forward" => "forward",
            "attempt" => "attempt",
            "event" => "event",
            _ => "report",
        },
        actor: text("actor")?.unwrap_or_default(),
        change: text("change")?.unwrap_or_default(),
        detail,
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
        report: crate::stored::json_or_text(report).0,
        text: row.value("text").context(CONTEXT)?,
        alerted_at_ms: row.value("alerted_at_ms").context(CONTEXT)?,
        alert_error: row.value("alert_error").context(CONTEXT)?,
        alert_pending: row.value("alert_pending").context(CONTEXT)?,
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

/// An alert's columns `(text, details, report_id)` as a claim reads them.
pub(crate) fn alert_from_row<R: OperatorRow>(row: &R) -> Result<Alert, StoreError> {
    const CONTEXT: &str = "reading a queued alert";
    let report_id: Option<i64> = row.value("report_id").context(CONTEXT)?;
    let body = match report_id {
        Some(id) => AlertBody::Report(id),
        None => {
            let details: String = row.value("details").context(CONTEXT)?;
            AlertBody::Message {
                text: row.value("text").context(CONTEXT)?,
                details: crate::stored::json_or_text(details).0,
            }
        }
    };
    Ok(Alert {
        id: row.value("id").context(CONTEXT)?,
        body,
        attempts: u32::try_from(row.value::<i64>("attempts").context(CONTEXT)?).unwrap_or(u32::MAX),
        raised_at_ms: row.value("created_at_ms").context(CONTEXT)?,
        held_until_ms: row.value("locked_until_ms").context(CONTEXT)?,
    })
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

/// The four numbers of every integration, added up from the rows of the
/// statements of [`operator_statements!`] (the SQL is there, the arithmetic
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
            let (stats, histogram) = self.slot(name_of(row).context(CONTEXT)?);
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

    /// Adds open and dead entries: rows of `name, depth, oldest` (when the
    /// oldest open entry was due: created, scheduled or replayed), `dead, unacked` (dead letters, and those
    /// given up after the last acknowledgement), several per name (outbox
    /// messages and forwards, open and dead).
    pub(crate) fn add_entries<R: OperatorRow>(&mut self, rows: &[R], now_ms: i64) -> Result<(), StoreError> {
        const CONTEXT: &str = "reading open and dead entries";
        for row in rows {
            let (stats, _) = self.slot(name_of(row).context(CONTEXT)?);
            stats.depth += row.value::<i64>("depth").context(CONTEXT)? as u64;
            stats.dead_letters += row.value::<i64>("dead").context(CONTEXT)? as u64;
            stats.dead_letters_unacked +=
                row.value::<Option<i64>>("unacked").context(CONTEXT)?.unwrap_or(0) as u64;
            if let Some(oldest) = row.value::<Option<i64>>("oldest").context(CONTEXT)? {
                let age = now_ms.saturating_sub(oldest).max(0);
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
            let stats = &mut self.slot(name_of(row).context(CONTEXT)?).0;
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

/// The text `column` of a row (`None`: NULL). Text that is not UTF-8
/// (SQLite keeps whatever bytes another program wrote) is shown with U+FFFD
/// for what cannot be read, so one damaged row never fails a view of many.
fn lossy_text<R: OperatorRow>(row: &R, column: &str) -> Result<Option<String>, sqlx::Error> {
    row.value::<Option<String>>(column).or_else(|e| {
        row.value::<Option<Vec<u8>>>(column)
            .map(|bytes| bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
            .map_err(|_| e)
    })
}

/// The integration `name` of a statistics row ([`lossy_text`]).
fn name_of<R: OperatorRow>(row: &R) -> Result<String, sqlx::Error> {
    lossy_text(row, "name").map(Option::unwrap_or_default)
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

/// How a backend passes the operator statements' lists as parameters: each
/// method binds one list the way the row source of the same name given to
/// [`operator_statements!`] reads it (a JSON array on SQLite, arrays on
/// PostgreSQL).
pub(crate) trait OperatorBinds: Sized {
    /// A list of texts, read by `texts_in`.
    fn bind_texts(self, texts: &[String]) -> Self;
    /// A report's discrepancies, read by `discrepancies` as `kind,
    /// reference, operation_id, provider_ref, detail`.
    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self;
}

/// Defines what operators read and do (dead letters, an operation's
/// history, the four numbers, the comparison reports) as methods of
/// `store`, in the invoking module, with the same SQL on both databases
/// (`$N` parameters, which sqlx binds by number on SQLite too). What
/// differs is passed in:
/// - `reader`, `writer`: the fields of the pools reads and single writes
///   go through (write transactions start with the store's `begin`);
/// - `lock`: the row-lock clause (`[" FOR UPDATE"]`) of the reads that
///   decide a write, or none (`[]`: SQLite, whose single writer, `BEGIN
///   IMMEDIATE`, already excludes every other); a statement that only
///   locks is left out without one;
/// - `snapshot`: the statement that begins the read-only transaction the
///   four numbers are read in;
/// - `message_payload`: an operation's request (text) as the type of the
///   event bodies it shares a dead-letter column with;
/// - `texts_in`: a subquery of the texts bound as `$2`, and
///   `discrepancies`: the row source (`d`) of the discrepancies bound from
///   `$3` on, both bound by the backend's [`OperatorBinds`];
/// - `unsettled`: the condition of an operation that is `unknown` or
///   `needs_human`, as the backend's index of them answers it.
macro_rules! operator_statements {
    (
        store = $store:ty,
        reader = $reader:ident,
        writer = $writer:ident,
        lock = [$($lock:literal)?],
        snapshot = $snapshot:literal,
        message_payload = $message_payload:literal,
        texts_in = $texts_in:literal,
        discrepancies = $discrepancies:literal,
        unsettled = $unsettled:literal $(,)?
    ) => {
        use crate::error::Context as _;
        use crate::operator::OperatorBinds as _;

        /// Dead letters of both kinds as one relation: `kind, id, integration,
        /// key, operation, attempts, last_error, dead_at_ms, created_at_ms,
        /// payload, json_payload` (see [`crate::operator::dead_letter_from_row`]).
        /// A UNION needs one type per column: the operation's request is
        /// converted to the event bodies' type (`message_payload`).
        const DEAD_LETTERS: &str = concat!(
            "SELECT * FROM (\
             SELECT CAST('message' AS text) AS kind, x.id, o.provider AS integration, \
               o.idempotency_key AS key, o.operation, x.attempts, x.last_error, x.dead_at_ms, \
               x.created_at_ms, ",
            $message_payload,
            " AS payload, TRUE AS json_payload \
             FROM outbox x LEFT JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' \
             UNION ALL \
             SELECT 'forward', f.id, e.integration, e.event_id, NULL, f.attempts, f.last_error, \
               f.dead_at_ms, f.created_at_ms, e.payload, FALSE \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead') AS d"
        );

        impl $store {
            pub(super) async fn list_dead_letters(
                &self,
                filter: crate::operator::DeadLetterFilter,
                limit: u32,
            ) -> Result<Vec<crate::operator::DeadLetter>, crate::error::StoreError> {
                // `NULLS LAST`: SQLite's order, where NULL sorts below every value.
                let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{DEAD_LETTERS} WHERE (CAST($1 AS text) IS NULL OR kind = $1) \
                     AND (CAST($2 AS text) IS NULL OR integration = $2) \
                     AND (CAST($3 AS bigint) IS NULL OR dead_at_ms > $3) \
                     ORDER BY dead_at_ms DESC NULLS LAST, id DESC LIMIT $4"
                )))
                .bind(filter.kind.map(crate::operator::DeadLetterKind::as_str))
                .bind(filter.integration)
                .bind(filter.since_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.$reader)
                .await
                .context("listing dead letters")?;
                rows.iter().map(crate::operator::dead_letter_from_row).collect()
            }

            pub(super) async fn one_dead_letter(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
            ) -> Result<Option<crate::operator::DeadLetter>, crate::error::StoreError> {
                let row =
                    sqlx::query(sqlx::AssertSqlSafe(format!("{DEAD_LETTERS} WHERE kind = $1 AND id = $2")))
                        .bind(kind.as_str())
                        .bind(id)
                        .fetch_optional(&self.$reader)
                        .await
                        .context("reading a dead letter")?;
                row.as_ref().map(crate::operator::dead_letter_from_row).transpose()
            }

            /// Puts a dead letter back in its queue. The `UPDATE … WHERE state =
            /// 'dead'` decides alone: on PostgreSQL it locks the message (or
            /// forward), so a concurrent replay or purge of it waits for this one
            /// to commit, then finds it no longer dead and changes nothing. The
            /// operation is changed second, in the relay's lock order.
            pub(super) async fn replay_dead_letter(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<bool, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                let table = crate::operator::table(kind);
                let moved: Option<Option<i64>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "UPDATE {table} SET state = 'pending', attempts = 0, previous_delay_ms = 0, \
                     available_at_ms = $2, locked_until_ms = NULL, lease_token = NULL, dead_at_ms = NULL, \
                     changed_by = $3, updated_at_ms = $2, last_error = 'replayed by ' || $3{replayed} \
                     WHERE id = $1 AND state = 'dead' RETURNING {operation}",
                    // A message's replay is kept on its operation (below).
                    replayed = match kind {
                        crate::operator::DeadLetterKind::Message => "",
                        crate::operator::DeadLetterKind::Forward => ", replayed_at_ms = $2",
                    },
                    operation = match kind {
                        crate::operator::DeadLetterKind::Message => "operation_id",
                        crate::operator::DeadLetterKind::Forward => "CAST(NULL AS bigint)",
                    }
                )))
                .bind(id)
                .bind(now_ms)
                .bind(channel.actor())
                .fetch_optional(&mut *tx)
                .await
                .context("replaying a dead letter")?;
                let Some(operation_id) = moved else { return Ok(false) };
                if let Some(operation_id) = operation_id {
                    // The operation is delivered again from now on: its deadline and
                    // attempts count from the replay.
                    sqlx::query(
                        "UPDATE operations SET status = 'pending', replayed_at_ms = $2, \
                         next_reconcile_at_ms = NULL, changed_by = $3, updated_at_ms = $2, \
                         last_error = 'replayed by ' || $3 WHERE id = $1",
                    )
                    .bind(operation_id)
                    .bind(now_ms)
                    .bind(channel.actor())
                    .execute(&mut *tx)
                    .await
                    .context("reopening a replayed operation")?;
                }
                tx.commit().await.context("committing a replay")?;
                Ok(true)
            }

            /// Deletes a dead letter. As with a replay, the first `UPDATE … WHERE
            /// state = 'dead'` decides (and on PostgreSQL locks the row): a
            /// concurrent replay or purge waits, then finds it gone or no longer
            /// dead.
            pub(super) async fn purge_dead_letter(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<bool, crate::error::StoreError> {
                let table = crate::operator::table(kind);
                let mut tx = self.begin().await?;
                // Who purged and when go into the row first, so the delete trigger
                // writes them into the history.
                let marked = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE {table} SET changed_by = $2, updated_at_ms = $3, last_error = 'purged by ' || $2 \
                     WHERE id = $1 AND state = 'dead'"
                )))
                .bind(id)
                .bind(channel.actor())
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("purging a dead letter")?;
                if marked.rows_affected() == 0 {
                    return Ok(false);
                }
                sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE id = $1")))
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .context("purging a dead letter")?;
                tx.commit().await.context("committing a purge")?;
                Ok(true)
            }

            /// Settles an open operation for an operator. Where rows are locked,
            /// its message is locked first, then the operation, whose status is
            /// read under that lock: of two racing resolutions (or a resolution
            /// and a reconciliation, which locks in the same order) the second
            /// sees the first one's result.
            pub(super) async fn resolve_by_operator(
                &self,
                idempotency_key: &str,
                outcome: failwell_policy::Outcome,
                provider_ref: Option<String>,
                note: String,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<crate::operator::ManualResolution, crate::error::StoreError> {
                let status = crate::operator::resolved_status(outcome)?;
                let mut tx = self.begin().await?;
                $(
                    // An operation's id never changes, so finding its message without
                    // a lock on the operation is safe; the message may be missing
                    // (purged).
                    sqlx::query(concat!(
                        "SELECT id FROM outbox WHERE operation_id = \
                         (SELECT id FROM operations WHERE idempotency_key = $1)",
                        $lock
                    ))
                    .bind(idempotency_key)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("locking an outbox message")?;
                )?
                let current: Option<(i64, String)> = sqlx::query_as(concat!(
                    "SELECT id, status FROM operations WHERE idempotency_key = $1",
                    $($lock)?
                ))
                .bind(idempotency_key)
                .fetch_optional(&mut *tx)
                .await
                .context("reading an operation")?;
                let operation_id = current.as_ref().map(|(id, _)| *id);
                let current = current.map(|(_, status)| status);
                if let Some(refused) = crate::operator::resolution_refused(current)? {
                    return Ok(refused);
                }
                let error = crate::operator::resolution_note(channel, &note);
                sqlx::query(
                    "UPDATE operations SET status = $2, provider_ref = COALESCE($3, provider_ref), \
                     last_error = $4, next_reconcile_at_ms = NULL, changed_by = $5, updated_at_ms = $6 \
                     WHERE id = $1",
                )
                .bind(operation_id)
                .bind(status)
                .bind(provider_ref)
                .bind(&error)
                .bind(channel.actor())
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("resolving an operation")?;
                // A message still waiting is closed: nothing is sent for it again.
                sqlx::query(
                    "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, \
                     lease_token = NULL, last_error = $2, changed_by = $3, updated_at_ms = $4 \
                     WHERE state = 'pending' AND operation_id = $1",
                )
                .bind(operation_id)
                .bind(&error)
                .bind(channel.actor())
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("closing a resolved operation's message")?;
                tx.commit().await.context("committing a resolution")?;
                Ok(crate::operator::ManualResolution::Resolved)
            }

            pub(super) async fn acknowledge(
                &self,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<(), crate::error::StoreError> {
                sqlx::query("INSERT INTO dead_letter_acks (at_ms, actor) VALUES ($1, $2)")
                    .bind(now_ms)
                    .bind(channel.actor())
                    .execute(&self.$writer)
                    .await
                    .context("acknowledging dead letters")?;
                Ok(())
            }

            /// The four numbers, read in one read-only snapshot (`snapshot`) so
            /// they agree with each other however many processes write
            /// meanwhile.
            pub(super) async fn integration_stats(
                &self,
                now_ms: i64,
                window_ms: u64,
                known: &[String],
            ) -> Result<crate::operator::Stats, crate::error::StoreError> {
                use crate::operator::StatsBuilder;

                let mut tx = self.$reader.begin_with($snapshot).await.context("reading the numbers")?;
                let last_ack_ms: Option<i64> = sqlx::query_scalar("SELECT MAX(at_ms) FROM dead_letter_acks")
                    .fetch_one(&mut *tx)
                    .await
                    .context("reading the last acknowledgement")?;
                let mut stats = StatsBuilder::new(known);
                // One row per (provider, duration): a few thousand rows however
                // many calls the window holds.
                let calls = sqlx::query(
                    "SELECT o.provider AS name, a.duration_ms, COUNT(*) AS calls, \
                     COUNT(*) FILTER (WHERE a.outcome = 'succeeded' OR a.classification = 'permanent') \
                       AS answered \
                     FROM attempts a JOIN operations o ON o.id = a.operation_id \
                     WHERE a.kind = 'call' AND a.started_at_ms >= $1 AND a.started_at_ms <= $2 \
                     GROUP BY o.provider, a.duration_ms",
                )
                .bind(StatsBuilder::window_start(now_ms, window_ms))
                .bind(now_ms)
                .fetch_all(&mut *tx)
                .await
                .context("reading recent calls")?;
                stats.add_calls(&calls)?;
                let entries = sqlx::query(
                    // A message's age counts from when it was due to be
                    // delivered: its creation, its `available_at` when the
                    // application scheduled it later, or its replay.
                    "SELECT o.provider AS name, COUNT(*) AS depth, \
                       MIN(COALESCE(o.replayed_at_ms, o.not_before_ms, x.created_at_ms)) AS oldest, \
                       CAST(0 AS bigint) AS dead, CAST(0 AS bigint) AS unacked \
                     FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'pending' \
                     GROUP BY o.provider \
                     UNION ALL \
                     SELECT e.integration, COUNT(*), MIN(COALESCE(f.replayed_at_ms, f.created_at_ms)), 0, 0 \
                     FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'pending' \
                     GROUP BY e.integration \
                     UNION ALL \
                     SELECT o.provider, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE x.dead_at_ms > $1) \
                     FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' \
                     GROUP BY o.provider \
                     UNION ALL \
                     SELECT e.integration, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE f.dead_at_ms > $1) \
                     FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead' \
                     GROUP BY e.integration",
                )
                .bind(last_ack_ms.unwrap_or(i64::MIN))
                .fetch_all(&mut *tx)
                .await
                .context("reading open and dead entries")?;
                stats.add_entries(&entries, now_ms)?;
                let unsettled = sqlx::query(
                    concat!(
                        "SELECT provider AS name, status, COUNT(*) AS n FROM operations WHERE ",
                        $unsettled,
                        " GROUP BY provider, status"
                    ),
                )
                .fetch_all(&mut *tx)
                .await
                .context("counting unknown operations")?;
                stats.add_unsettled(&unsettled)?;
                tx.commit().await.context("reading the numbers")?;
                Ok(stats.finish(now_ms, window_ms, last_ack_ms))
            }

            pub(super) async fn operation_history(
                &self,
                operation_id: i64,
            ) -> Result<Vec<crate::operator::HistoryEntry>, crate::error::StoreError> {
                let rows = sqlx::query(
                    "SELECT at_ms, subject, actor, change, detail, 0 AS source, id FROM history \
                     WHERE operation_id = $1 \
                     UNION ALL \
                     SELECT started_at_ms, 'attempt', \
                       CASE kind WHEN 'lookup' THEN 'reconciler' ELSE 'relay' END, \
                       kind || CASE WHEN kind = 'call' THEN ' ' || attempt_no ELSE '' END || ': ' || \
                       COALESCE('HTTP ' || status_code, error_kind, 'no answer') || \
                       COALESCE(' (' || classification || ')', '') || ', ' || outcome || ', ' || \
                       duration_ms || ' ms', \
                       decision, 1, id \
                     FROM attempts WHERE operation_id = $1 \
                     UNION ALL \
                     SELECT s.at_ms, 'event', 'webhook', 'event ' || e.event_id || ': ' || s.effect, \
                       s.detail, 2, s.id \
                     FROM inbox_steps s JOIN inbox_events e ON e.seq = s.event_seq \
                     WHERE s.operation_id = $1 AND s.kind = 'ledger' \
                     UNION ALL \
                     SELECT r.finished_at_ms, 'report', 'comparison', \
                       'discrepancy ' || d.kind || ' (report ' || r.id || ')', d.detail, 3, d.id \
                     FROM discrepancies d JOIN reconciliation_reports r ON r.id = d.report_id \
                     WHERE d.operation_id = $1 \
                     ORDER BY 1, 6, 7",
                )
                .bind(operation_id)
                .fetch_all(&self.$reader)
                .await
                .context("reading an operation's history")?;
                rows.iter().map(crate::operator::history_entry_from_row).collect()
            }

            pub(super) async fn operations_created_between(
                &self,
                provider: &str,
                from_ms: i64,
                to_ms: i64,
            ) -> Result<Vec<crate::model::Operation>, crate::error::StoreError> {
                let rows = sqlx::query(crate::rows::select_operation!(
                    "WHERE o.provider = $1 AND o.created_at_ms >= $2 AND o.created_at_ms < $3 ORDER BY o.id"
                ))
                .bind(provider)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_all(&self.$reader)
                .await
                .context("reading operations of a window")?;
                rows.iter().map(crate::rows::operation_from_row).collect()
            }

            pub(super) async fn operations_with_references(
                &self,
                provider: &str,
                references: &[String],
            ) -> Result<Vec<crate::model::Operation>, crate::error::StoreError> {
                let rows = sqlx::query(crate::rows::select_operation!(
                    "WHERE o.provider = $1 AND o.reference IN ",
                    $texts_in,
                    " ORDER BY o.id"
                ))
                .bind(provider)
                .bind_texts(references)
                .fetch_all(&self.$reader)
                .await
                .context("reading operations by reference")?;
                rows.iter().map(crate::rows::operation_from_row).collect()
            }

            /// Stores a report and its discrepancies in one transaction: the
            /// discrepancies in one statement, whatever their number.
            pub(super) async fn insert_report(
                &self,
                report: crate::operator::NewReport,
            ) -> Result<i64, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO reconciliation_reports (provider, window_from_ms, window_to_ms, \
                     started_at_ms, finished_at_ms, actor, ours, theirs, discrepancies, report, text) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
                )
                .bind(&report.provider)
                .bind(report.window_from_ms)
                .bind(report.window_to_ms)
                .bind(report.started_at_ms)
                .bind(report.finished_at_ms)
                .bind(&report.actor)
                .bind(report.ours as i64)
                .bind(report.theirs as i64)
                .bind(report.discrepancies.len() as i64)
                .bind(report.report.to_string())
                .bind(&report.text)
                .fetch_one(&mut *tx)
                .await
                .context("storing a comparison report")?;
                sqlx::query(concat!(
                    "INSERT INTO discrepancies (report_id, provider, kind, reference, operation_id, \
                     provider_ref, detail) \
                     SELECT $1, $2, d.kind, d.reference, d.operation_id, d.provider_ref, d.detail FROM ",
                    $discrepancies
                ))
                .bind(id)
                .bind(&report.provider)
                .bind_discrepancies(&report.discrepancies)
                .execute(&mut *tx)
                .await
                .context("storing discrepancies")?;
                if report.alert {
                    sqlx::query(
                        "INSERT INTO alerts (kind, subject, report_id, created_at_ms, next_at_ms) \
                         VALUES ('comparison', $1, $2, $3, $3)",
                    )
                    .bind(&report.provider)
                    .bind(id)
                    .bind(report.finished_at_ms)
                    .execute(&mut *tx)
                    .await
                    .context("queueing a report's alert")?;
                }
                tx.commit().await.context("committing a comparison report")?;
                Ok(id)
            }

            pub(super) async fn list_reports(
                &self,
                which: crate::operator::Reports,
            ) -> Result<Vec<crate::operator::Report>, crate::error::StoreError> {
                let (sql, value) = which.query();
                let query = sqlx::query(sqlx::AssertSqlSafe(sql));
                let query = match value {
                    Some(value) => query.bind(value),
                    None => query,
                };
                let rows = query.fetch_all(&self.$reader).await.context("reading comparison reports")?;
                rows.iter().map(crate::operator::report_from_row).collect()
            }

            pub(super) async fn claim_alert_row(
                &self,
                claim: crate::operator::AlertClaim,
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<Option<crate::operator::Alert>, crate::error::StoreError> {
                let report = match claim {
                    crate::operator::AlertClaim::Due => None,
                    crate::operator::AlertClaim::Report(id) => Some(id),
                };
                // Due, not leased, and no earlier unsent alert of its kind
                // and subject; the outer conditions are checked again on
                // the locked row, so two processes never both claim one.
                let row = sqlx::query(
                    "UPDATE alerts SET locked_until_ms = $2, attempts = attempts + 1 \
                     WHERE id IN (SELECT a.id FROM alerts a WHERE a.sent_at_ms IS NULL AND a.gave_up_at_ms IS NULL \
                       AND a.next_at_ms <= $1 \
                       AND (a.locked_until_ms IS NULL OR a.locked_until_ms <= $1) \
                       AND ($3 IS NULL OR a.report_id = $3) \
                       AND NOT EXISTS (SELECT 1 FROM alerts e WHERE e.kind = a.kind AND e.subject = a.subject \
                         AND e.sent_at_ms IS NULL AND e.gave_up_at_ms IS NULL AND e.id < a.id) \
                       ORDER BY a.id LIMIT 1) \
                       AND sent_at_ms IS NULL AND gave_up_at_ms IS NULL \
                       AND (locked_until_ms IS NULL OR locked_until_ms <= $1) \
                     RETURNING id, report_id, text, details, attempts, created_at_ms, locked_until_ms",
                )
                .bind(now_ms)
                .bind(now_ms + lease_ms)
                .bind(report)
                .fetch_optional(&self.$writer)
                .await
                .context("claiming an alert")?;
                row.as_ref().map(crate::operator::alert_from_row).transpose()
            }

            pub(super) async fn record_alert(
                &self,
                claimed: &crate::operator::Alert,
                sent: crate::operator::AlertSent,
            ) -> Result<bool, crate::error::StoreError> {
                let (at, error, retry_at, gave_up) = match sent {
                    crate::operator::AlertSent::At(at) => (Some(at), None, None, None),
                    crate::operator::AlertSent::Failed { error, retry_at_ms } => {
                        (None, Some(error), Some(retry_at_ms), None)
                    }
                    crate::operator::AlertSent::GivenUp { error, at_ms } => {
                        (None, Some(format!("given up: {error}")), None, Some(at_ms))
                    }
                };
                let mut tx = self.begin().await?;
                // Only while this claim still holds it: a sender that
                // outlived its lease cannot undo what another one recorded.
                let held = sqlx::query(
                    "UPDATE alerts SET sent_at_ms = $2, last_error = $3, next_at_ms = COALESCE($4, next_at_ms), \
                     gave_up_at_ms = $6, locked_until_ms = NULL \
                     WHERE id = $1 AND locked_until_ms = $5 AND sent_at_ms IS NULL AND gave_up_at_ms IS NULL",
                )
                .bind(claimed.id)
                .bind(at)
                .bind(&error)
                .bind(retry_at)
                .bind(claimed.held_until_ms)
                .bind(gave_up)
                .execute(&mut *tx)
                .await
                .context("recording an alert's send")?
                .rows_affected()
                    > 0;
                if !held {
                    return Ok(false);
                }
                // A report's alert: the report shows it too (an earlier
                // success is kept; a success clears the error).
                sqlx::query(
                    "UPDATE reconciliation_reports SET alerted_at_ms = COALESCE($2, alerted_at_ms), alert_error = $3 \
                     WHERE id = (SELECT report_id FROM alerts WHERE id = $1)",
                )
                .bind(claimed.id)
                .bind(at)
                .bind(&error)
                .execute(&mut *tx)
                .await
                .context("recording a report's alert")?;
                tx.commit().await.context("committing an alert's send")?;
                Ok(true)
            }
        }
    };
}

pub(crate) use operator_statements;
