//! failwell's durable core: operations, the outbox and the append-only
//! attempt history, the webhook inbox, the operator's views, comparisons
//! and alerts, on SQLite, PostgreSQL or MySQL (and MariaDB).
//!
//! Only this crate knows SQL (besides the cluster's own breaker table).
//! The store is split by role, one folder each, each a trait of what its
//! callers need, with its types, its row reading and its statements:
//! [`OutboxStore`] (`outbox/`), [`InboxStore`] (`inbox/`),
//! [`OperatorStore`] (`operator/`), [`ComparisonStore`] (`comparisons/`),
//! [`AlertStore`] (`alerts/`) and [`LedgerStore`] (`ledger/`, internal
//! balances). A database backend (`sqlite/`,
//! `postgres/`, `mysql/`) implements every role ([`Backend`]), mostly by
//! instantiating each role's statement macro with what differs on it;
//! [`Store`] is the handle the rest of failwell holds, opened from a
//! `database_url` (`open.rs`).
//!
//! Every state change an attempt causes (its history row, the operation,
//! the outbox message) is written in one transaction, and outbox
//! completions are compare-and-set on `(id, lease_token)`: a worker that
//! lost its lease cannot overwrite the state a newer owner wrote. This
//! crate makes no decisions: what to write is decided by `failwell-policy`
//! and carried out by `failwell-engine`.

mod alerts;
mod comparisons;
mod error;
mod inbox;
mod inspect;
mod ledger;
mod mysql;
mod open;
mod operator;
mod outbox;
mod postgres;
mod sqlite;

#[cfg(test)]
mod tests;

use std::any::Any;
use std::fmt::Debug;
use std::ops::Deref;
use std::sync::Arc;

pub use alerts::{Alert, AlertBody, AlertClaim, AlertSent, AlertStore, NewAlert};
pub use comparisons::{AlertState, ComparisonStore, NewReport, Report, Window};
pub use error::StoreError;
pub use inbox::{
    ClaimedForward, EventRecord, EventReport, EventStep, ForwardCompletion, ForwardTransition, InboxStore,
    LedgerEffect, NewEvent, OperationEvent, Received, StoredEvent,
};
pub use inspect::{Inspection, Location, Server};
pub use ledger::{
    Account, Ended, Entry, FOLLOW_RETRY_MS, HoldEnd, Ledger, LedgerConnection, LedgerStats, LedgerStore,
    NewAccount, NewHold, NewTransfer, Opened, Swept, Transfer, TransferRefusal, TransferResult,
};
pub use mysql::MySqlStore;
pub use open::{Database, StoreOptions};
pub use operator::{
    Channel, DeadLetter, DeadLetterFilter, DeadLetterKind, HistoryEntry, IntegrationStats, ManualResolution,
    OperatorStore, Stats,
};
pub use outbox::stored::{MAX_NESTING, RESERVED_KEY_PREFIX, reserved_key_in};
pub use outbox::{
    AttemptKind, AttemptRecord, AttemptRow, ClaimScope, Claimed, Completion, Counts, Leased, Message,
    NewOperation, Operation, OperationStatus, Outbox, OutboxConnection, OutboxStore, Reconciled, Recorded,
    Resolution, Submitted, Transition,
};
pub use postgres::{NewMessages, PostgresStore};
pub use sqlite::{SqliteStore, Synchronous};

/// The role traits, imported anonymously: `use failwell_store::prelude::*;`
/// lets a caller call every role's methods on a [`Store`] or a backend.
pub mod prelude {
    pub use crate::{
        AlertStore as _, Backend as _, ComparisonStore as _, InboxStore as _, LedgerStore as _,
        OperatorStore as _, OutboxStore as _,
    };
}

/// Every role one database plays: what a backend implements, and what a
/// [`Store`] dereferences to.
#[async_trait::async_trait]
pub trait Backend:
    OutboxStore
    + InboxStore
    + OperatorStore
    + ComparisonStore
    + AlertStore
    + LedgerStore
    + Any
    + Debug
    + Send
    + Sync
{
    /// Closes the backend's connections, waiting for them to be returned.
    async fn close(&self);
}

/// The store failwell works on: a cheap handle (an `Arc`) to one
/// [`Backend`], whose role methods it dereferences to (bring the role's
/// trait into scope to call them, e.g. `use failwell_store::OutboxStore`).
#[derive(Clone, Debug)]
pub struct Store(Arc<dyn Backend>);

impl Store {
    /// A handle to `backend`.
    pub fn new(backend: impl Backend) -> Self {
        Self(Arc::new(backend))
    }

    /// The backend as its own type, when it is a `B` (e.g. a
    /// [`PostgresStore`], for its [`PostgresStore::new_messages`]).
    pub fn backend<B: Backend>(&self) -> Option<&B> {
        let backend: &dyn Any = &*self.0;
        backend.downcast_ref()
    }
}

impl Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl From<SqliteStore> for Store {
    fn from(store: SqliteStore) -> Self {
        Self::new(store)
    }
}

impl From<PostgresStore> for Store {
    fn from(store: PostgresStore) -> Self {
        Self::new(store)
    }
}

impl From<MySqlStore> for Store {
    fn from(store: MySqlStore) -> Self {
        Self::new(store)
    }
}
