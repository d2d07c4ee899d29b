//! Comparison reports and windows, and how they are read from rows.

use failwell_policy::Discrepancy;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Context, StoreError};
use crate::operator::rows::OperatorRow;

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

/// A comparison window `(from_ms, to_ms)`: from inclusive to exclusive, ms
/// since epoch.
pub type Window = (i64, i64);

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
        report: crate::outbox::stored::json_or_text(report).0,
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
