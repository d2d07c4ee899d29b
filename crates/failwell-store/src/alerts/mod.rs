//! The alerts role: the alert outbox (each alert queued in the transaction
//! that records what it reports, then sent at least once, in order per
//! kind and subject) and the alerts currently firing.
//!
//! The trait is [`AlertStore`]; its statements, the same SQL on every
//! database, are in `statements.rs` (`alert_statements!`).

mod model;
pub(crate) mod statements;

pub use model::*;

use crate::StoreError;

/// The alert outbox: what the alert sender and the watches that raise
/// alerts need of a store.
#[async_trait::async_trait]
pub trait AlertStore: Send + Sync {
    /// The subjects (integrations) of the alerts of `kind` raised and not
    /// yet resolved.
    async fn firing_alerts(&self, kind: &str) -> Result<Vec<String>, StoreError>;

    /// Records that the alert `(kind, subject)` is raised (`firing`) or
    /// resolved and, if that changed it, queues `alert` in the same
    /// transaction; returns whether it changed (`false`: it already was,
    /// e.g. another process took the same transition first, and nothing
    /// is queued).
    async fn set_alert(
        &self,
        kind: &str,
        subject: &str,
        firing: bool,
        now_ms: i64,
        alert: Option<NewAlert>,
    ) -> Result<bool, StoreError>;

    /// Queues `alert` for the alert sink.
    async fn queue_alert(&self, alert: NewAlert) -> Result<(), StoreError>;

    /// Claims a queued alert to send for `lease_ms` (after which another
    /// process may send it again): the oldest due one (or the one of
    /// [`AlertClaim::Report`]) that no one holds and that no earlier
    /// unsent alert of the same kind and subject is waiting before; `None`
    /// when there is none. The claim counts as a send tried
    /// ([`Alert::attempts`]).
    async fn claim_alert(
        &self,
        claim: AlertClaim,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<Alert>, StoreError>;

    /// Records what became of a claimed alert's send (and, for a report's
    /// alert, on the report: `alerted_at_ms`, `alert_error`); a failed one
    /// is due again at its `retry_at_ms`. Returns `false`, recording
    /// nothing, when the claim no longer holds it (another sender claimed
    /// it after the lease ran out).
    async fn alert_sent(&self, claimed: &Alert, sent: AlertSent) -> Result<bool, StoreError>;
}
