//! The outbox role: recording intents (from the API or inside the
//! application's own transaction) and delivering them: claims under
//! leases, compare-and-set completions, lease renewal, retention, and the
//! reconciliation of operations whose outcome is unknown.
//!
//! The trait is [`OutboxStore`]; its statements, the same SQL on every
//! database, are in `statements.rs` (`outbox_statements!`), instantiated by
//! each backend with what differs (`sqlite/outbox.rs`, `postgres/outbox.rs`).

pub(crate) mod changes;
pub(crate) mod contract;
mod enqueue;
mod model;
pub(crate) mod rows;
pub(crate) mod statements;
pub(crate) mod stored;
pub(crate) mod writes;

pub(crate) use enqueue::{CLAIMED_COLUMNS, DUE, check_replay, replayed, request_hash, schedule_statements};
pub use enqueue::{Message, Outbox, OutboxConnection};
pub use model::*;

use crate::StoreError;

/// Intents and their delivery: what the HTTP API, the relay, the reconciler
/// and retention need of a store.
///
/// All times are milliseconds since the Unix epoch, passed in by the caller
/// (`now_ms`), so a store never reads the clock itself.
#[async_trait::async_trait]
pub trait OutboxStore: Send + Sync {
    /// Records a new intent and its outbox message in one transaction.
    /// Returns [`Submitted::Replayed`] with the stored operation when the
    /// idempotency key exists with the same request, and
    /// [`StoreError::KeyReused`] when it exists with a different one; in
    /// both cases nothing is written. A payload failwell could not read back
    /// is refused before anything is written
    /// ([`StoreError::InvalidPayload`]).
    async fn submit(&self, op: NewOperation, now_ms: i64) -> Result<Submitted, StoreError>;

    /// Claims up to `limit` due outbox messages under a lease of `lease_ms`,
    /// counting the attempt about to be made and stamping the first use of
    /// the operation's idempotency key. A message whose earlier lease expired
    /// while an attempt was in flight comes back with
    /// [`Claimed::interrupted`] set. A message with an ordering key is due
    /// only once every earlier message (lower id) of its key is done or
    /// dead, so one claim never holds two messages of a key. `scope` says
    /// which providers' messages it may take ([`ClaimScope`]).
    async fn claim(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
        scope: &ClaimScope,
    ) -> Result<Vec<Claimed>, StoreError>;

    /// Writes the results of finished attempts, all in one transaction: each
    /// history row is appended, and each operation and message transition is
    /// applied only if the message still carries the claim's lease token.
    /// Returns, per completion in order, what was recorded
    /// ([`Recorded::Applied`], or only the history row:
    /// [`Recorded::LeaseLost`], [`Recorded::SettledElsewhere`]).
    async fn complete(&self, completions: Vec<Completion>, now_ms: i64) -> Result<Vec<Recorded>, StoreError>;

    /// Extends the leases of claimed items still being worked, given as
    /// `(id, lease_token)` pairs of `queue`, to `until_ms`, so a slow call
    /// keeps its item and no other process starts it. An item whose lease
    /// was taken over, or that is no longer pending, is left alone. Returns
    /// how many were extended.
    async fn renew(&self, queue: Leased, leases: Vec<(i64, i64)>, until_ms: i64) -> Result<u64, StoreError>;

    /// Deletes up to `limit` outbox messages delivered (`done`, their
    /// operation `succeeded` or `failed`) before `before_ms`, oldest first,
    /// and returns how many: the outbox keeps open and recent work, while
    /// operations (the idempotency records), attempts and the history stay.
    async fn delete_delivered(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError>;

    /// Operations whose outcome is unknown and whose next reconciliation is
    /// due, oldest first, at most `limit`.
    async fn due_unknown(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, StoreError>;

    /// Applies a status lookup's result to an unknown operation (a no-op if
    /// the operation is no longer unknown).
    async fn reconcile(&self, reconciled: Reconciled, now_ms: i64) -> Result<(), StoreError>;

    /// The operation with this idempotency key, if any.
    async fn operation(&self, idempotency_key: &str) -> Result<Option<Operation>, StoreError>;

    /// The attempt history of one operation, oldest first.
    async fn attempts(&self, operation_id: i64) -> Result<Vec<AttemptRow>, StoreError>;
}

/// Merges per-provider lists of due messages, each in claim order, into
/// one of at most `limit`: the first of each provider, then the second of
/// each, and so on, so one provider's backlog never starves another's.
pub(crate) fn take_turns<R>(turns: Vec<Vec<R>>, limit: usize) -> Vec<R> {
    let mut turns: Vec<_> = turns.into_iter().map(Vec::into_iter).collect();
    let mut rows = Vec::with_capacity(limit);
    while rows.len() < limit {
        let before = rows.len();
        for turn in &mut turns {
            rows.extend(turn.next());
        }
        if rows.len() == before {
            break;
        }
    }
    rows.truncate(limit);
    rows
}
