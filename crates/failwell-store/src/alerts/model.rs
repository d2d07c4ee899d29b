//! Alerts as queued, claimed and sent, and how they are read from rows.

use serde_json::Value;

use crate::error::{Context, StoreError};
use crate::operator::rows::OperatorRow;

/// An alert for the alert sink, queued in the store ([`crate::AlertStore::queue_alert`])
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

/// A queued alert claimed for sending (see [`crate::AlertStore::claim_alert`]).
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

/// Which queued alert [`crate::AlertStore::claim_alert`] takes.
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
                details: crate::outbox::stored::json_or_text(details).0,
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
