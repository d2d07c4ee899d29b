//! failwell's durable core: operations, the outbox and the append-only
//! attempt history, behind the [`Store`] trait.
//!
//! Only this crate knows SQL. The embedded default is SQLite
//! ([`SqliteStore`]); the relay and the HTTP API are generic over
//! [`Store`], so another database can be added beside it. Every state change
//! an attempt causes (its history row, the operation, the outbox message) is
//! written in one transaction, and outbox completions are compare-and-set on
//! `(id, lease_token)`: a worker that lost its lease cannot overwrite the
//! state a newer owner wrote. This crate makes no decisions: what to write
//! is decided by `failwell-policy` and carried out by `failwell-engine`.

mod any;
mod changes;
mod error;
mod inbox;
mod model;
mod operator;
mod outbox;
mod postgres;
mod rows;
mod sqlite;
mod store;
mod stored;
mod writes;

#[cfg(test)]
mod tests;

use std::future::Future;

pub use any::{AnyStore, Backend, StoreOptions};
pub use error::StoreError;
pub use model::{
    AttemptKind, AttemptRecord, AttemptRow, ClaimScope, Claimed, ClaimedForward, Completion, Counts,
    EventRecord, EventReport, EventStep, ForwardCompletion, ForwardTransition, Leased, LedgerEffect,
    NewEvent, NewOperation, Operation, OperationEvent, OperationStatus, Received, Reconciled, Recorded,
    Resolution, StoredEvent, Submitted, Transition,
};
pub use operator::{
    Alert, AlertBody, AlertClaim, AlertSent, AlertState, Channel, DeadLetter, DeadLetterFilter,
    DeadLetterKind, HistoryEntry, IntegrationStats, ManualResolution, NewAlert, NewReport, Report, Stats,
    Window,
};
pub use outbox::{Message, Outbox, OutboxConnection};
pub use postgres::{NewMessages, PostgresStore};
pub use sqlite::{SqliteStore, Synchronous};
pub use stored::{MAX_NESTING, RESERVED_KEY_PREFIX, reserved_key_in};

/// The durable store the relay, the reconciler and the HTTP API work on.
///
/// All times are milliseconds since the Unix epoch, passed in by the caller
/// (`now_ms`), so a store never reads the clock itself.
pub trait Store: Clone + Send + Sync + 'static {
    /// Records a new intent and its outbox message in one transaction.
    /// Returns [`Submitted::Replayed`] with the stored operation when the
    /// idempotency key exists with the same request, and
    /// [`StoreError::KeyReused`] when it exists with a different one; in
    /// both cases nothing is written. A payload failwell could not read back
    /// is refused before anything is written
    /// ([`StoreError::InvalidPayload`]).
    fn submit(
        &self,
        op: NewOperation,
        now_ms: i64,
    ) -> impl Future<Output = Result<Submitted, StoreError>> + Send;

    /// Claims up to `limit` due outbox messages under a lease of `lease_ms`,
    /// counting the attempt about to be made and stamping the first use of
    /// the operation's idempotency key. A message whose earlier lease expired
    /// while an attempt was in flight comes back with
    /// [`Claimed::interrupted`] set. A message with an ordering key is due
    /// only once every earlier message (lower id) of its key is done or
    /// dead, so one claim never holds two messages of a key. `scope` says
    /// which providers' messages it may take ([`ClaimScope`]).
    fn claim(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
        scope: &ClaimScope,
    ) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send;

    /// Writes the results of finished attempts, all in one transaction: each
    /// history row is appended, and each operation and message transition is
    /// applied only if the message still carries the claim's lease token.
    /// Returns, per completion in order, what was recorded
    /// ([`Recorded::Applied`], or only the history row:
    /// [`Recorded::LeaseLost`], [`Recorded::SettledElsewhere`]).
    fn complete(
        &self,
        completions: Vec<Completion>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Recorded>, StoreError>> + Send;

    /// Extends the leases of claimed items still being worked, given as
    /// `(id, lease_token)` pairs of `queue`, to `until_ms`, so a slow call
    /// keeps its item and no other process starts it. An item whose lease
    /// was taken over, or that is no longer pending, is left alone. Returns
    /// how many were extended.
    fn renew(
        &self,
        queue: Leased,
        leases: Vec<(i64, i64)>,
        until_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes up to `limit` outbox messages delivered (`done`, their
    /// operation `succeeded` or `failed`) before `before_ms`, oldest first,
    /// and returns how many: the outbox keeps open and recent work, while
    /// operations (the idempotency records), attempts and the history stay.
    fn delete_delivered(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Operations whose outcome is unknown and whose next reconciliation is
    /// due, oldest first, at most `limit`.
    fn due_unknown(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Operation>, StoreError>> + Send;

    /// Applies a status lookup's result to an unknown operation (a no-op if
    /// the operation is no longer unknown).
    fn reconcile(
        &self,
        reconciled: Reconciled,
        now_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The operation with this idempotency key, if any.
    fn operation(
        &self,
        idempotency_key: &str,
    ) -> impl Future<Output = Result<Option<Operation>, StoreError>> + Send;

    /// The attempt history of one operation, oldest first.
    fn attempts(&self, operation_id: i64)
    -> impl Future<Output = Result<Vec<AttemptRow>, StoreError>> + Send;

    /// Operation and message counts by state.
    fn counts(&self) -> impl Future<Output = Result<Counts, StoreError>> + Send;

    /// Stores verified webhook events, each under `(integration,
    /// event_id)`, in one transaction committed before this returns (a
    /// group commit for deliveries that arrive together). A further
    /// delivery of a stored event, in this batch or later, writes nothing
    /// and is [`Received::Duplicate`] (the unique key decides, never
    /// "process anyway"). One result per event, in order.
    ///
    /// In the same transaction, a new event's [`EventReport`] is applied to
    /// the operation it names, with that operation locked against other
    /// writers until the commit, by
    /// [`failwell_policy::apply_event`] (only a newer event changes it, a
    /// settled operation never goes back; settling one closes its outbox
    /// message), and a forward to the application is queued when asked for.
    /// Each of these steps is recorded in the event's history.
    fn receive(
        &self,
        events: Vec<NewEvent>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Received>, StoreError>> + Send;

    /// Up to `limit` stored events with `seq` above `after`, in the order
    /// they were first received, and no more than `max_bytes` of payloads
    /// (but always at least one event when any is left). `seq` increases
    /// and may skip numbers.
    fn events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, StoreError>> + Send;

    /// What webhook events did to one operation (their ledger steps),
    /// oldest first.
    fn operation_events(
        &self,
        operation_id: i64,
    ) -> impl Future<Output = Result<Vec<OperationEvent>, StoreError>> + Send;

    /// The stored event `(integration, event_id)` with its history and
    /// forwarding state, if any.
    fn event(
        &self,
        integration: &str,
        event_id: &str,
    ) -> impl Future<Output = Result<Option<EventRecord>, StoreError>> + Send;

    /// Claims up to `limit` events due for forwarding to the application
    /// under a lease of `lease_ms`, counting the attempt about to be made.
    /// A forward whose lease expired is claimed again (the application
    /// deduplicates by event id).
    fn claim_forwards(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> impl Future<Output = Result<Vec<ClaimedForward>, StoreError>> + Send;

    /// Records forwarding attempts, all in one transaction: each history
    /// step is appended, and each transition applied only if the forward
    /// still carries the claim's lease token. Returns, per completion,
    /// [`Recorded::Applied`] or [`Recorded::LeaseLost`].
    fn complete_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Recorded>, StoreError>> + Send;

    /// Dead letters of both kinds matching `filter`, newest first, at most
    /// `limit`.
    fn dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<DeadLetter>, StoreError>> + Send;

    /// One dead letter, if `(kind, id)` is one.
    fn dead_letter(
        &self,
        kind: DeadLetterKind,
        id: i64,
    ) -> impl Future<Output = Result<Option<DeadLetter>, StoreError>> + Send;

    /// Puts a dead letter back in its queue, due now, with its attempts
    /// counted afresh and (for a message) its operation `pending` again with
    /// its deadline counted from now; the idempotency key stays the same.
    /// Returns `false`, writing nothing, when `(kind, id)` is not a dead
    /// letter (never was, replayed or purged meanwhile).
    fn replay(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes a dead letter for good (its operation stays `failed`; the
    /// history keeps who purged it and when). `false` when `(kind, id)` is
    /// not a dead letter.
    fn purge(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// An operator settles an operation whose outcome failwell could not
    /// find out (`unknown` or `needs_human`) after checking with the
    /// provider: `succeeded` (with the provider's id, if known) or `failed`.
    /// The `note` goes into the operation's last error and its history,
    /// beside who did it. Nothing is changed for another status.
    fn resolve(
        &self,
        idempotency_key: &str,
        outcome: failwell_policy::Outcome,
        provider_ref: Option<String>,
        note: String,
        channel: Channel,
        now_ms: i64,
    ) -> impl Future<Output = Result<ManualResolution, StoreError>> + Send;

    /// Records that an operator has looked at the dead letters: those given
    /// up until now no longer count as unacknowledged.
    fn ack_dead_letters(
        &self,
        channel: Channel,
        now_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The four numbers of every integration (success ratio and p95 latency
    /// of the calls started in the last `window_ms`, open entries and the
    /// oldest one's age, dead letters since the last acknowledgement), with
    /// a row for each name in `known` even when it has nothing.
    fn stats(
        &self,
        now_ms: i64,
        window_ms: u64,
        known: &[String],
    ) -> impl Future<Output = Result<Stats, StoreError>> + Send;

    /// Everything that happened to one operation, oldest first: its state
    /// changes and its message's (with who made them), every attempt, what
    /// webhook events did, and the discrepancies reports found.
    fn history(
        &self,
        operation_id: i64,
    ) -> impl Future<Output = Result<Vec<HistoryEntry>, StoreError>> + Send;

    /// Operations of `provider` created in `[from_ms, to_ms)`, oldest first.
    fn operations_between(
        &self,
        provider: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> impl Future<Output = Result<Vec<Operation>, StoreError>> + Send;

    /// Operations of `provider` carrying one of `references`.
    fn operations_by_reference(
        &self,
        provider: &str,
        references: &[String],
    ) -> impl Future<Output = Result<Vec<Operation>, StoreError>> + Send;

    /// Stores a comparison report and its discrepancies in one transaction;
    /// returns the report's id.
    fn save_report(&self, report: NewReport) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// The latest `limit` comparison reports, newest first.
    fn reports(&self, limit: u32) -> impl Future<Output = Result<Vec<Report>, StoreError>> + Send;

    /// The newest comparison report of each provider, by provider name.
    fn latest_reports(&self) -> impl Future<Output = Result<Vec<Report>, StoreError>> + Send;

    /// One comparison report.
    fn report(&self, id: i64) -> impl Future<Output = Result<Option<Report>, StoreError>> + Send;

    /// The subjects (integrations) of the alerts of `kind` raised and not
    /// yet resolved.
    fn firing_alerts(&self, kind: &str) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Records that the alert `(kind, subject)` is raised (`firing`) or
    /// resolved and, if that changed it, queues `alert` in the same
    /// transaction; returns whether it changed (`false`: it already was,
    /// e.g. another process took the same transition first, and nothing
    /// is queued).
    fn set_alert(
        &self,
        kind: &str,
        subject: &str,
        firing: bool,
        now_ms: i64,
        alert: Option<NewAlert>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Queues `alert` for the alert sink.
    fn queue_alert(&self, alert: NewAlert) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Claims a queued alert to send for `lease_ms` (after which another
    /// process may send it again): the oldest due one (or the one of
    /// [`AlertClaim::Report`]) that no one holds and that no earlier
    /// unsent alert of the same kind and subject is waiting before; `None`
    /// when there is none. The claim counts as a send tried
    /// ([`Alert::attempts`]).
    fn claim_alert(
        &self,
        claim: AlertClaim,
        now_ms: i64,
        lease_ms: i64,
    ) -> impl Future<Output = Result<Option<Alert>, StoreError>> + Send;

    /// Records what became of a claimed alert's send (and, for a report's
    /// alert, on the report: `alerted_at_ms`, `alert_error`); a failed one
    /// is due again at its `retry_at_ms`. Returns `false`, recording
    /// nothing, when the claim no longer holds it (another sender claimed
    /// it after the lease ran out).
    fn alert_sent(
        &self,
        claimed: &Alert,
        sent: AlertSent,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Claims the comparison of `provider` over `[from_ms, to_ms)` for this
    /// process; returns `false` when another process (or an earlier run)
    /// claimed it and finished it, or claimed it less than `lease_ms` ago,
    /// so a schedule shared by several processes runs once and a run whose
    /// process died is taken over.
    fn claim_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records that the claimed comparison of `provider` over `window` has
    /// run (whether it found anything or failed).
    fn finish_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The latest window of `provider` a scheduled comparison claimed (by
    /// its end), if any.
    fn last_comparison_window(
        &self,
        provider: &str,
    ) -> impl Future<Output = Result<Option<Window>, StoreError>> + Send;

    /// The comparisons claimed at or before `claimed_before_ms` and never
    /// finished, as `(provider, (from_ms, to_ms))`, oldest window first.
    fn abandoned_comparisons(
        &self,
        claimed_before_ms: i64,
    ) -> impl Future<Output = Result<Vec<(String, Window)>, StoreError>> + Send;
}
