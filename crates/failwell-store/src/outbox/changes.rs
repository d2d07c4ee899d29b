//! What a finished attempt writes, as values both databases' statements
//! bind: the message's new columns, the operation's new state, and which
//! answer a late result carries.

use serde_json::{Value, json};

use crate::{Completion, OperationStatus, Transition};

/// The outbox message's columns after `transition` (NULL keeps the stored
/// value where the statement says `COALESCE`).
pub(crate) struct MessageChange<'a> {
    pub state: &'static str,
    pub available_at_ms: Option<i64>,
    pub delay_ms: Option<i64>,
    pub error: Option<&'a String>,
    pub dead_at_ms: Option<i64>,
    /// 1 when the attempt counted at claim time is given back (a deferral
    /// sent nothing).
    pub given_back: i64,
    /// The message then leaves the outbox: its delivery succeeded, and its
    /// operation keeps the outcome (migrations `0026_delivered_leave_outbox`
    /// on PostgreSQL, `0017` on SQLite, `0009` on MySQL).
    pub leaves: bool,
}

impl<'a> MessageChange<'a> {
    pub(crate) fn of(transition: &'a Transition, now_ms: i64) -> Self {
        let (state, available_at_ms, delay_ms, error, dead_at_ms, given_back) = match transition {
            Transition::Succeeded { .. } => ("done", None, None, None, None, 0),
            Transition::Failed { error, .. } | Transition::Unknown { error, .. } => {
                ("done", None, None, Some(error), None, 0)
            }
            Transition::Retry { available_at_ms, delay_ms, error } => {
                ("pending", Some(*available_at_ms), Some(*delay_ms as i64), Some(error), None, 0)
            }
            Transition::DeadLetter { error } => ("dead", None, None, Some(error), Some(now_ms), 0),
            Transition::Defer { available_at_ms, reason } => {
                ("pending", Some(*available_at_ms), None, Some(reason), None, 1)
            }
        };
        let leaves = matches!(transition, Transition::Succeeded { .. });
        Self { state, available_at_ms, delay_ms, error, dead_at_ms, given_back, leaves }
    }
}

/// The operation's columns after `transition`.
pub(crate) struct OperationChange<'a> {
    pub status: OperationStatus,
    pub provider_ref: Option<&'a str>,
    pub response: Option<&'a Value>,
    pub error: Option<&'a str>,
    pub reconcile_at_ms: Option<i64>,
}

impl<'a> OperationChange<'a> {
    pub(crate) fn of(transition: &'a Transition) -> Self {
        let (status, provider_ref, response, error, reconcile_at_ms) = match transition {
            Transition::Succeeded { provider_ref, response } => {
                (OperationStatus::Succeeded, provider_ref.as_deref(), response.as_ref(), None, None)
            }
            Transition::Failed { error, response } => {
                (OperationStatus::Failed, None, response.as_ref(), Some(error), None)
            }
            Transition::Retry { error, .. } | Transition::Defer { reason: error, .. } => {
                (OperationStatus::Pending, None, None, Some(error), None)
            }
            Transition::Unknown { error, reconcile_at_ms } => {
                (OperationStatus::Unknown, None, None, Some(error), Some(*reconcile_at_ms))
            }
            Transition::DeadLetter { error } => (OperationStatus::Failed, None, None, Some(error), None),
        };
        Self { status, provider_ref, response, error: error.map(String::as_str), reconcile_at_ms }
    }
}

/// The provider's answer a result carries, when it settles the call
/// (success or failure): status, provider id, response.
pub(crate) fn settling_answer(
    transition: &Transition,
) -> Option<(OperationStatus, Option<&str>, Option<&Value>)> {
    match transition {
        Transition::Succeeded { provider_ref, response } => {
            Some((OperationStatus::Succeeded, provider_ref.as_deref(), response.as_ref()))
        }
        Transition::Failed { response, .. } => Some((OperationStatus::Failed, None, response.as_ref())),
        _ => None,
    }
}

/// The history's note when the provider's answer to our call contradicts
/// the event that settled the operation.
pub(crate) fn conflict_note(answer: OperationStatus, settled: &str) -> String {
    format!(
        "conflict: the provider answered our call {} after an event said {settled}; looking it up",
        answer.as_str()
    )
}

/// A batch of results split into rounds, each holding at most one result
/// per operation, in arrival order: indexes into `completions`. A message
/// claimed again after its lease ran out with the call still in flight can
/// have two results in one batch; recorded round by round, each statement
/// writes a row once and the later result sees what the earlier one wrote.
pub(crate) fn rounds(completions: &[Completion]) -> Vec<Vec<usize>> {
    let mut rounds = Vec::new();
    let mut left: Vec<usize> = (0..completions.len()).collect();
    while !left.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, later): (Vec<usize>, Vec<usize>) =
            left.into_iter().partition(|&i| seen.insert(completions[i].operation_id));
        rounds.push(round);
        left = later;
    }
    rounds
}

/// One result as a JSON object, a row of the batch SQLite and MySQL read
/// back (`json_each`, `JSON_TABLE`). Text (the response among it) goes in
/// as JSON strings, so it is stored exactly as serde_json wrote it.
pub(crate) fn completion_json(c: &Completion, now_ms: i64) -> Value {
    let a = c.attempt.as_ref();
    let m = MessageChange::of(&c.transition, now_ms);
    let o = OperationChange::of(&c.transition);
    json!({
        "outbox_id": c.outbox_id,
        "token": c.lease_token,
        "operation_id": c.operation_id,
        "kind": a.map(|a| a.kind.as_str()),
        "started_at_ms": a.map(|a| a.started_at_ms),
        "duration_ms": a.map(|a| a.duration_ms),
        "status_code": a.and_then(|a| a.status_code),
        "error_kind": a.and_then(|a| a.error_kind.as_deref()),
        "classification": a.and_then(|a| a.classification),
        "outcome": a.map(|a| a.outcome.as_str()),
        "decision": a.map(|a| a.decision.as_str()),
        "maybe_acted": a.is_some_and(|a| a.maybe_acted()),
        "state": m.state,
        "available_at_ms": m.available_at_ms,
        "delay_ms": m.delay_ms,
        "error": m.error,
        "dead_at_ms": m.dead_at_ms,
        "given_back": m.given_back,
        "leaves": m.leaves,
        "status": o.status.as_str(),
        "provider_ref": o.provider_ref,
        "response": o.response.map(Value::to_string),
        "op_error": o.error,
        "reconcile_at_ms": o.reconcile_at_ms,
    })
}

/// Defines `complete_batch(store, conn, completions, now_ms)` for a backend that
/// records a batch of results round by round ([`rounds`]) from a JSON
/// array of [`completion_json`] rows (SQLite, MySQL): the invoking module
/// provides `settle(conn, rows, now_ms)`, which writes one round and
/// returns the ids of the messages whose lease held, and `not_applied`
/// (`attempt_writes!`), which says why a result's lease did not hold.
macro_rules! complete_by_rounds {
    ($store:ty, $conn:ty) => {
        /// Records a batch of results, round by round. Per result: the
        /// attempt goes into the history and is counted; the message moves
        /// if its lease held (compare-and-set on id and lease token), and
        /// then its operation; a result whose lease did not hold says why.
        /// The store is not read (its claims keep no floors, see
        /// `postgres/floors.rs`).
        pub(super) async fn complete_batch(
            _store: &$store,
            conn: &mut $conn,
            completions: &[crate::Completion],
            now_ms: i64,
        ) -> Result<Vec<crate::Recorded>, crate::StoreError> {
            let mut recorded: Vec<Option<crate::Recorded>> = completions.iter().map(|_| None).collect();
            for round in crate::outbox::changes::rounds(completions) {
                let rows = serde_json::Value::Array(
                    round
                        .iter()
                        .map(|&i| crate::outbox::changes::completion_json(&completions[i], now_ms))
                        .collect(),
                )
                .to_string();
                let moved = settle(conn, &rows, now_ms).await?;
                for i in round {
                    let c = &completions[i];
                    recorded[i] = Some(if moved.contains(&c.outbox_id) {
                        crate::Recorded::Applied
                    } else {
                        not_applied(conn, c, now_ms).await?
                    });
                }
            }
            Ok(recorded.into_iter().flatten().collect())
        }
    };
}

pub(crate) use complete_by_rounds;
