//! What the webhook inbox does the same way on either database: which
//! deliveries of a batch are new, what their reports do to the operations
//! they name (the ledger rule, applied in arrival order), where a page of
//! the feed ends, how forward results are judged, the values each write
//! binds, and how rows are read back. The statements, whose SQL is the
//! same on both, are defined once by [`inbox_statements!`]; the backends
//! (`sqlite/inbox.rs`, `postgres/inbox.rs`) give it their row locks and the
//! way they pass a batch ([`InboxBinds`]).

use std::collections::HashMap;

use failwell_policy::{EventEffect, Ledger as LedgerState, Outcome, apply_event};

use crate::error::{Context, StoreError};
use crate::{
    ClaimedForward, EventRecord, EventReport, EventStep, ForwardCompletion, ForwardTransition, LedgerEffect,
    NewEvent, OperationEvent, OperationStatus, Received, Recorded, StoredEvent,
};

/// The last error of an operation an event sent back to `unknown`.
pub(crate) const CONFLICT_NOTE: &str =
    "conflict: an event contradicts the provider's answer to our call; looking it up";

/// The typed column reads the inbox needs, on a row of either database
/// (each decodes the same Rust types from its own column types).
pub(crate) trait InboxRow {
    fn int(&self, column: &'static str) -> Result<i64, StoreError>;
    fn int_or_null(&self, column: &'static str) -> Result<Option<i64>, StoreError>;
    fn text(&self, column: &'static str) -> Result<String, StoreError>;
    fn text_or_null(&self, column: &'static str) -> Result<Option<String>, StoreError>;
    fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError>;
    fn flag(&self, column: &'static str) -> Result<bool, StoreError>;
}

macro_rules! inbox_row {
    ($row:ty) => {
        impl InboxRow for $row {
            fn int(&self, column: &'static str) -> Result<i64, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
            fn int_or_null(&self, column: &'static str) -> Result<Option<i64>, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
            fn text(&self, column: &'static str) -> Result<String, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
            fn text_or_null(&self, column: &'static str) -> Result<Option<String>, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
            fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
            fn flag(&self, column: &'static str) -> Result<bool, StoreError> {
                sqlx::Row::try_get(self, column).context("reading an inbox row")
            }
        }
    };
}

inbox_row!(sqlx::sqlite::SqliteRow);
inbox_row!(sqlx::mysql::MySqlRow);
inbox_row!(sqlx::postgres::PgRow);

/// A batch of deliveries after the insert that stored the new ones: what
/// the rest of the transaction writes for them.
pub(crate) struct Batch<'a> {
    /// Per delivery, in order: the `seq` it was stored under, `None` for a
    /// duplicate.
    fresh: Vec<Option<i64>>,
    /// The new events' reports, `(seq, report)`, in arrival order.
    pub reports: Vec<(i64, &'a EventReport)>,
    /// History steps to append, `(seq, step)`: so far those of new events
    /// that report nothing applicable; [`Ledger::apply`] adds the others.
    pub steps: Vec<(i64, EventStep)>,
    /// The `seq`s of the new events to forward, in arrival order.
    pub forwards: Vec<i64>,
}

impl<'a> Batch<'a> {
    /// Sorts `events` by what the insert did: `inserted` are the rows it
    /// returned (`seq`, `integration`, `event_id`). The first delivery of
    /// an inserted event is the new one; any other, in this batch or later,
    /// is a duplicate.
    pub(crate) fn new<R: InboxRow>(
        events: &'a [NewEvent],
        inserted: &[R],
        now_ms: i64,
    ) -> Result<Self, StoreError> {
        let mut new = HashMap::with_capacity(inserted.len());
        for r in inserted {
            new.insert((r.text("integration")?, r.text("event_id")?), r.int("seq")?);
        }
        let fresh: Vec<Option<i64>> =
            events.iter().map(|e| new.remove(&(e.integration.clone(), e.event_id.clone()))).collect();
        let mut steps = Vec::new();
        let reports = events
            .iter()
            .zip(&fresh)
            .filter_map(|(e, seq)| match (seq, &e.report) {
                (Some(seq), Some(Ok(report))) => Some((*seq, report)),
                (Some(seq), Some(Err(why))) => {
                    let step = EventStep::new("ledger", now_ms, why.to_string());
                    steps.push((*seq, EventStep { effect: Some(LedgerEffect::NotApplicable), ..step }));
                    None
                }
                _ => None,
            })
            .collect();
        let forwards =
            events.iter().zip(&fresh).filter(|(e, _)| e.forward).filter_map(|(_, seq)| *seq).collect();
        Ok(Self { fresh, reports, steps, forwards })
    }

    /// What each delivery was, in order.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.fresh.iter().map(|seq| if seq.is_some() { Received::New } else { Received::Duplicate }).collect()
    }
}

/// One operation as the events of a batch find and leave it.
struct LedgerRow {
    id: i64,
    status: OperationStatus,
    version: Option<i64>,
    changed: bool,
    settled: bool,
    conflict: bool,
    provider_ref: Option<String>,
    dead: bool,
}

/// The operations a batch's reports name, by `(provider, reference)`, as
/// read (locked against other writers) before the reports are applied.
pub(crate) struct Ledger {
    rows: HashMap<(String, String), LedgerRow>,
}

impl Ledger {
    /// Reads rows of `id`, `provider`, `reference`, `status`,
    /// `event_version` and `dead` (whether the operation's message is a
    /// dead letter).
    pub(crate) fn read<R: InboxRow>(rows: &[R]) -> Result<Self, StoreError> {
        let mut ledger = HashMap::with_capacity(rows.len());
        for r in rows {
            let status = r.text("status")?;
            let status = OperationStatus::parse(&status)
                .ok_or(StoreError::Corrupt { what: "status", detail: status })?;
            let row = LedgerRow {
                id: r.int("id")?,
                status,
                version: r.int_or_null("event_version")?,
                changed: false,
                settled: false,
                conflict: false,
                provider_ref: None,
                dead: r.flag("dead")?,
            };
            ledger.insert((r.text("provider")?, r.text("reference")?), row);
        }
        Ok(Self { rows: ledger })
    }

    /// Applies `reports`, in arrival order, by [`apply_event`] (each sees
    /// what the earlier ones of the batch did), and adds a ledger step per
    /// report to `steps`.
    pub(crate) fn apply(
        &mut self,
        reports: &[(i64, &EventReport)],
        steps: &mut Vec<(i64, EventStep)>,
        now_ms: i64,
    ) {
        for (seq, report) in reports {
            let Some(row) = self.rows.get_mut(&(report.provider.clone(), report.reference.clone())) else {
                let detail =
                    format!("no {:?} operation has reference {:?}", report.provider, report.reference);
                let step = EventStep::new("ledger", now_ms, detail);
                steps.push((*seq, EventStep { effect: Some(LedgerEffect::NoOperation), ..step }));
                continue;
            };
            // A dead letter's `failed` is failwell giving up, not the
            // provider's answer: the operation is as open as an unknown one.
            let before = match row.status {
                OperationStatus::Succeeded => Some(Outcome::Succeeded),
                OperationStatus::Failed if !row.dead => Some(Outcome::Failed),
                OperationStatus::Failed
                | OperationStatus::Pending
                | OperationStatus::Unknown
                | OperationStatus::NeedsHuman => None,
            };
            let effect = apply_event(
                LedgerState { settled: before, version: row.version },
                report.reported,
                report.version,
            );
            let detail = format!(
                "{} (version {}, operation was {})",
                effect.describe(),
                report.version,
                row.status.as_str()
            );
            let recorded = match effect {
                EventEffect::Settle(outcome) => {
                    (row.status, row.version, row.changed, row.settled) =
                        (OperationStatus::from(outcome), Some(report.version), true, true);
                    row.provider_ref = report.provider_ref.clone().or(row.provider_ref.take());
                    match before {
                        None => LedgerEffect::Resolved,
                        Some(b) if b == outcome => LedgerEffect::Confirmed,
                        Some(_) => LedgerEffect::Changed,
                    }
                }
                EventEffect::Note => {
                    (row.version, row.changed) = (Some(report.version), true);
                    LedgerEffect::Noted
                }
                EventEffect::Stale => LedgerEffect::Stale,
                EventEffect::WouldRegress => LedgerEffect::WouldRegress,
                // Two statements of the provider that nothing orders: back
                // to unknown, and a status lookup decides.
                EventEffect::Conflict => {
                    (row.status, row.changed, row.conflict) = (OperationStatus::Unknown, true, true);
                    row.version = Some(report.version);
                    LedgerEffect::Conflict
                }
            };
            let step = EventStep::new("ledger", now_ms, detail);
            steps.push((*seq, EventStep { operation_id: Some(row.id), effect: Some(recorded), ..step }));
        }
    }

    /// The operations the applied reports changed, by id.
    pub(crate) fn changes(&self) -> Vec<LedgerChange<'_>> {
        let mut changes: Vec<LedgerChange<'_>> = self
            .rows
            .values()
            .filter(|row| row.changed)
            .map(|row| LedgerChange {
                id: row.id,
                status: row.status.as_str(),
                version: row.version,
                settled: row.settled,
                provider_ref: row.provider_ref.as_deref(),
                conflict: row.conflict,
            })
            .collect();
        changes.sort_unstable_by_key(|c| c.id);
        changes
    }
}

/// An operation's new columns after a batch's events: both databases'
/// statements write `status` and `event_version`, keep a settled
/// operation's `provider_ref` (if it had none), clear its error and
/// lookup, close its message, and schedule a conflict's lookup at once.
pub(crate) struct LedgerChange<'a> {
    pub id: i64,
    pub status: &'static str,
    pub version: Option<i64>,
    /// An event settled it.
    pub settled: bool,
    pub provider_ref: Option<&'a str>,
    /// An event contradicted the provider's answer to our call.
    pub conflict: bool,
}

/// A history step as the columns of `inbox_steps` hold it.
pub(crate) struct StepColumns<'a> {
    pub event_seq: i64,
    pub kind: &'a str,
    pub at_ms: i64,
    pub duration_ms: Option<i64>,
    pub status_code: Option<i64>,
    pub operation_id: Option<i64>,
    pub effect: Option<&'static str>,
    pub detail: &'a str,
}

impl<'a> StepColumns<'a> {
    pub(crate) fn of((event_seq, step): &'a (i64, EventStep)) -> Self {
        Self {
            event_seq: *event_seq,
            kind: &step.kind,
            at_ms: step.at_ms,
            duration_ms: step.duration_ms.map(|d| d as i64),
            status_code: step.status_code.map(i64::from),
            operation_id: step.operation_id,
            effect: step.effect.map(|e| e.as_str()),
            detail: &step.detail,
        }
    }
}

/// Where a page of the feed ends: the last `seq` of `sizes` (`(seq,
/// payload length)`, in order) that keeps the page within `max_bytes`, but
/// always the first one; `None` when `sizes` is empty.
pub(crate) fn page_end(sizes: &[(i64, i64)], max_bytes: usize) -> Option<i64> {
    let mut bytes = 0usize;
    sizes
        .iter()
        .take_while(|(_, size)| {
            let first = bytes == 0;
            bytes = bytes.saturating_add((*size).max(1) as usize);
            first || bytes <= max_bytes
        })
        .last()
        .map(|(seq, _)| *seq)
}

/// When a lease taken at `now_ms` for `lease_ms` runs out.
pub(crate) fn lease_until(now_ms: i64, lease_ms: u64) -> i64 {
    now_ms.saturating_add(i64::try_from(lease_ms).unwrap_or(i64::MAX))
}

/// The history steps of claimed forwards that were still leased (rows of
/// `seq`, `attempts`, `locked_until_ms`, `updated_at_ms`): each was cut
/// short (its worker stopped), and that attempt may have been delivered.
pub(crate) fn interrupted_steps<R: InboxRow>(due: &[R]) -> Result<Vec<(i64, EventStep)>, StoreError> {
    let mut steps = Vec::new();
    for r in due {
        if r.int_or_null("locked_until_ms")?.is_none() {
            continue;
        }
        let detail = format!(
            "interrupted: the lease expired before attempt {} recorded a result (it may have been delivered)",
            r.int("attempts")?
        );
        steps.push((r.int("seq")?, EventStep::new("forward", r.int("updated_at_ms")?, detail)));
    }
    Ok(steps)
}

/// A forward claimed under `lease_token`, from a row of the forward's `id`,
/// `attempts` (before this claim) and `previous_delay_ms`, and its event.
pub(crate) fn claimed_forward<R: InboxRow>(r: &R, lease_token: i64) -> Result<ClaimedForward, StoreError> {
    Ok(ClaimedForward {
        id: r.int("id")?,
        lease_token,
        attempts: r.int("attempts")? as u32 + 1,
        previous_delay_ms: r.int("previous_delay_ms")? as u64,
        event: event_from_row(r)?,
    })
}

/// The history steps of forwarding results, `(seq, step)`.
pub(crate) fn completion_steps(completions: &[ForwardCompletion]) -> Vec<(i64, EventStep)> {
    completions.iter().filter_map(|c| c.step.clone().map(|step| (c.event_seq, step))).collect()
}

/// Judges each result by its own lease token: applied only while the
/// forward, still pending, carries it (`tokens`: forward id to the token it
/// carries now).
pub(crate) fn judge(completions: &[ForwardCompletion], tokens: &HashMap<i64, i64>) -> Vec<Recorded> {
    completions
        .iter()
        .map(
            |c| {
                if tokens.get(&c.id) == Some(&c.lease_token) {
                    Recorded::Applied
                } else {
                    Recorded::LeaseLost
                }
            },
        )
        .collect()
}

/// A forward's new columns after a result (NULL keeps the stored value
/// where the statement says `COALESCE`).
pub(crate) struct ForwardChange<'a> {
    pub id: i64,
    pub state: &'static str,
    pub available_at_ms: Option<i64>,
    pub delay_ms: Option<i64>,
    pub error: Option<&'a str>,
    pub dead_at_ms: Option<i64>,
    /// 1 when the attempt counted at claim time is given back (a deferral
    /// sent nothing).
    pub given_back: i64,
}

/// The changes of the results `recorded` says were applied.
pub(crate) fn forward_changes<'a>(
    completions: &'a [ForwardCompletion],
    recorded: &[Recorded],
    now_ms: i64,
) -> Vec<ForwardChange<'a>> {
    completions
        .iter()
        .zip(recorded)
        .filter(|(_, r)| **r == Recorded::Applied)
        .map(|(c, _)| {
            let (state, available_at_ms, delay_ms, error, dead_at_ms, given_back) = match &c.transition {
                ForwardTransition::Delivered => ("done", None, None, None, None, 0),
                ForwardTransition::Retry { available_at_ms, delay_ms, error } => {
                    ("pending", Some(*available_at_ms), Some(*delay_ms as i64), Some(error), None, 0)
                }
                ForwardTransition::Defer { available_at_ms, reason } => {
                    ("pending", Some(*available_at_ms), None, Some(reason), None, 1)
                }
                ForwardTransition::DeadLetter { error } => ("dead", None, None, Some(error), Some(now_ms), 0),
            };
            let error = error.map(String::as_str);
            ForwardChange { id: c.id, state, available_at_ms, delay_ms, error, dead_at_ms, given_back }
        })
        .collect()
}

/// A stored event, from a row of its `seq`, `integration`, `event_id`,
/// `payload`, `headers` and `received_at_ms`.
pub(crate) fn event_from_row<R: InboxRow>(r: &R) -> Result<StoredEvent, StoreError> {
    let headers = r.text("headers")?;
    Ok(StoredEvent {
        seq: r.int("seq")?,
        integration: r.text("integration")?,
        event_id: r.text("event_id")?,
        payload: r.bytes("payload")?,
        // Only the content type is sent on: damaged headers are shown as
        // their text, and the event forwarded with the default type.
        headers: crate::outbox::stored::json_or_text(headers).0,
        received_at_ms: r.int("received_at_ms")?,
    })
}

/// A history step, from a row of `inbox_steps`' columns.
pub(crate) fn step_from_row<R: InboxRow>(r: &R) -> Result<EventStep, StoreError> {
    let effect = r
        .text_or_null("effect")?
        .map(|e| LedgerEffect::parse(&e).ok_or(StoreError::Corrupt { what: "ledger effect", detail: e }))
        .transpose()?;
    Ok(EventStep {
        kind: r.text("kind")?,
        at_ms: r.int("at_ms")?,
        duration_ms: r.int_or_null("duration_ms")?.map(|d| d as u64),
        status_code: r.int_or_null("status_code")?.map(|s| s as u16),
        operation_id: r.int_or_null("operation_id")?,
        effect,
        detail: r.text("detail")?,
    })
}

/// A ledger step with its event's `integration` and `event_id`.
pub(crate) fn operation_event_from_row<R: InboxRow>(r: &R) -> Result<OperationEvent, StoreError> {
    Ok(OperationEvent {
        integration: r.text("integration")?,
        event_id: r.text("event_id")?,
        step: step_from_row(r)?,
    })
}

/// A stored `event` with its `steps` and its forwarding state, from a row
/// of its forward's `forward_state`, `forward_attempts`,
/// `forward_last_error` and `forward_due_at_ms`.
pub(crate) fn event_record_from_row<R: InboxRow>(
    r: &R,
    event: StoredEvent,
    steps: Vec<EventStep>,
) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        event,
        steps,
        forward_state: r.text_or_null("forward_state")?,
        forward_attempts: r.int("forward_attempts")? as u32,
        forward_last_error: r.text_or_null("forward_last_error")?,
        forward_due_at_ms: r.int_or_null("forward_due_at_ms")?,
    })
}

/// How a backend passes the inbox's batches as parameters: each method
/// binds one batch the way the row source of the same name given to
/// [`inbox_statements!`] reads it (one JSON array on SQLite, one array per
/// column on PostgreSQL).
pub(crate) trait InboxBinds: Sized {
    /// A list of ids, read by `ids_in`.
    fn bind_ids(self, ids: &[i64]) -> Self;
    /// New events, read by `events` as `integration, event_id, payload,
    /// headers` and `n`, the position in the batch.
    fn bind_events(self, events: &[NewEvent]) -> Self;
    /// The operations reports name, read by `keys` as `provider,
    /// reference`.
    fn bind_keys(self, reports: &[(i64, &EventReport)]) -> Self;
    /// What a batch's events change in operations ([`LedgerChange`]), read
    /// by `changes` as `id, status, version, settled, provider_ref,
    /// conflict`.
    fn bind_changes(self, changes: &[LedgerChange<'_>]) -> Self;
    /// History steps, `(event seq, step)`, read by `steps` as the columns of
    /// [`StepColumns`] and `n`, the position in the list.
    fn bind_steps(self, steps: &[(i64, EventStep)]) -> Self;
    /// Forwards' new columns ([`ForwardChange`]), read by `forward_changes`
    /// as `id, state, available_at_ms, delay_ms, error, dead_at_ms,
    /// given_back`.
    fn bind_forward_changes(self, changes: &[ForwardChange<'_>]) -> Self;
}
