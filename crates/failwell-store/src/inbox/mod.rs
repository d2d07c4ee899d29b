//! The inbox role: verified webhook events stored once, applied to the
//! operations they report on, handed out as a feed, and forwarded to the
//! application.
//!
//! The trait is [`InboxStore`]. What the inbox decides the same way on every
//! database is in `ledger.rs`; its statements, the same SQL on every
//! database, in `statements.rs` (`inbox_statements!`), instantiated by each
//! backend with its row locks and the way it binds a batch
//! (`sqlite/inbox.rs`, `postgres/inbox.rs`).

pub(crate) mod json_binds;
pub(crate) mod ledger;
mod model;
pub(crate) mod statements;

pub(crate) use ledger::*;
pub use model::*;

use crate::{Recorded, StoreError};

/// Webhook events and their forwards: what the webhook endpoint, the event
/// feed and the forwarder need of a store.
#[async_trait::async_trait]
pub trait InboxStore: Send + Sync {
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
    async fn receive(&self, events: Vec<NewEvent>, now_ms: i64) -> Result<Vec<Received>, StoreError>;

    /// Up to `limit` stored events with `seq` above `after`, in the order
    /// they were first received, and no more than `max_bytes` of payloads
    /// (but always at least one event when any is left). `seq` increases
    /// and may skip numbers.
    async fn events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// What webhook events did to one operation (their ledger steps),
    /// oldest first.
    async fn operation_events(&self, operation_id: i64) -> Result<Vec<OperationEvent>, StoreError>;

    /// The stored event `(integration, event_id)` with its history and
    /// forwarding state, if any.
    async fn event(&self, integration: &str, event_id: &str) -> Result<Option<EventRecord>, StoreError>;

    /// Claims up to `limit` events due for forwarding to the application
    /// under a lease of `lease_ms`, counting the attempt about to be made.
    /// A forward whose lease expired is claimed again (the application
    /// deduplicates by event id).
    async fn claim_forwards(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedForward>, StoreError>;

    /// Records forwarding attempts, all in one transaction: each history
    /// step is appended, and each transition applied only if the forward
    /// still carries the claim's lease token. Returns, per completion,
    /// [`Recorded::Applied`] or [`Recorded::LeaseLost`].
    async fn complete_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> Result<Vec<Recorded>, StoreError>;
}
