//! The transactional outbox API: an intent recorded inside the caller's
//! own transaction, on either database.

use std::future::Future;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::{NewOperation, Submitted};

/// The transactional outbox API: record an intent inside the caller's
/// transaction.
#[derive(Debug)]
pub struct Outbox;

/// A message an application enqueues: one call to make to a provider (see
/// `docs/OUTBOX.md` for the same contract in plain SQL).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The provider's name in configuration.
    pub provider: String,
    /// The operation's name in the provider's configuration.
    pub operation: String,
    /// The request payload (JSON).
    pub payload: Value,
    /// One intent, one key. `None`: derived from the request (`sha256:`
    /// and the store's hash of provider, operation and payload), so the
    /// same request enqueued twice is one message.
    pub idempotency_key: Option<String>,
    /// Our business reference (e.g. the order id), for status lookups;
    /// unique per provider.
    pub reference: Option<String>,
    /// Messages of one ordering key are delivered one at a time, in the
    /// order they were enqueued (id order); a dead letter releases the key.
    pub ordering_key: Option<String>,
    /// Not delivered before this time (ms since the Unix epoch); its
    /// delivery deadline counts from then.
    pub available_at_ms: Option<i64>,
    /// A hold made with the message, in the same transaction, that the
    /// operation's outcome posts (success) or voids (failure); see
    /// `docs/LEDGER.md`.
    pub hold: Option<crate::NewHold>,
}

impl Message {
    /// A message with a derived key, no reference, no ordering key, due now.
    pub fn new(provider: impl Into<String>, operation: impl Into<String>, payload: Value) -> Self {
        Self {
            provider: provider.into(),
            operation: operation.into(),
            payload,
            idempotency_key: None,
            reference: None,
            ordering_key: None,
            available_at_ms: None,
            hold: None,
        }
    }
}

impl Outbox {
    /// Records `message` (an operation and its outbox message) on `conn`
    /// — typically `&mut tx`, a transaction from `SqliteStore::begin`,
    /// `PostgresStore::begin` or the application's own pool on the same
    /// database — next to the caller's own writes: both commit or neither
    /// does. The key sent to the provider is derived from the idempotency
    /// key ([`failwell_policy::derive_key`]). When the key exists with the
    /// same request this returns [`Submitted::Replayed`] and writes
    /// nothing. Errors: [`StoreError::KeyReused`] (the key holds a different
    /// request), [`StoreError::ReferenceReused`] (another operation of the
    /// provider holds the reference), [`StoreError::InvalidMessage`] (an
    /// empty or blank provider, operation, key, reference or ordering key; checked before
    /// anything is written), [`StoreError::InvalidPayload`] (the payload
    /// is not a JSON object, nests too deep or holds U+0000),
    /// [`StoreError::HoldRefused`] (the message's hold, e.g. insufficient
    /// funds; a replay carries the hold it was made with or none, another
    /// hold is [`StoreError::KeyReused`]), [`StoreError::Database`]. After an
    /// error, roll the transaction back.
    pub async fn enqueue<C: OutboxConnection>(
        conn: &mut C,
        message: &Message,
        now_ms: i64,
    ) -> Result<Submitted, StoreError> {
        for (field, value) in [
            ("provider", Some(&message.provider)),
            ("operation", Some(&message.operation)),
            ("idempotency_key", message.idempotency_key.as_ref()),
            ("reference", message.reference.as_ref()),
            ("ordering_key", message.ordering_key.as_ref()),
        ] {
            if value.is_some_and(|v| v.trim().is_empty()) {
                return Err(StoreError::InvalidMessage { field });
            }
        }
        crate::outbox::stored::check_object(&message.payload)?;
        crate::outbox::stored::check_payload(&message.payload)?;
        let idempotency_key = match &message.idempotency_key {
            Some(key) => key.clone(),
            None => conn.derived_key(&message.provider, &message.operation, &message.payload).await?,
        };
        let op = NewOperation {
            idempotency_key,
            provider: message.provider.clone(),
            operation: message.operation.clone(),
            reference: message.reference.clone(),
            payload: message.payload.clone(),
            hold: message.hold.clone(),
        };
        let submitted = conn.record(&op, now_ms, "app").await?;
        if let Some(hold) = &op.hold {
            crate::ledger::hold_with(conn, hold, &submitted, &op.idempotency_key, now_ms).await?;
        }
        if let Submitted::Created(created) = &submitted
            && (message.ordering_key.is_some() || message.available_at_ms.is_some())
        {
            conn.schedule(created.id, message.ordering_key.as_deref(), message.available_at_ms).await?;
        }
        Ok(submitted)
    }
}

/// What [`Outbox::enqueue`] can record on: an `sqlx::Transaction` of
/// SQLite, PostgreSQL or MySQL, or its connection (the ledger's too, for a
/// message's hold). Sealed.
pub trait OutboxConnection: sealed::Sealed + crate::LedgerConnection + Send {
    /// Records `op` with `actor` as the history's author of the new
    /// operation (`api` for the HTTP API, `app` for an application).
    #[doc(hidden)]
    fn record(
        &mut self,
        op: &NewOperation,
        now_ms: i64,
        actor: &str,
    ) -> impl Future<Output = Result<Submitted, StoreError>> + Send;

    /// The key of a message enqueued without one: `sha256:` and the
    /// request hash ([`request_hash`], failwell's own, unless the database
    /// computes it).
    #[doc(hidden)]
    fn derived_key(
        &mut self,
        provider: &str,
        operation: &str,
        payload: &Value,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        let key = format!("sha256:{}", request_hash(provider, operation, payload));
        std::future::ready(Ok(key))
    }

    /// Gives the new operation's message its ordering key and, when later
    /// than now, the time it becomes due (its delivery counts from then).
    #[doc(hidden)]
    fn schedule(
        &mut self,
        operation_id: i64,
        ordering_key: Option<&str>,
        available_at_ms: Option<i64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// [`OutboxConnection::schedule`] in SQL, for a backend whose `sql`
/// module runs `$N` statements: `greatest` is the database's
/// larger-of-two function (`MAX` on SQLite, `GREATEST` on MySQL).
macro_rules! schedule_statements {
    (greatest = $greatest:literal) => {
        async fn schedule(
            &mut self,
            operation_id: i64,
            ordering_key: Option<&str>,
            available_at_ms: Option<i64>,
        ) -> Result<(), StoreError> {
            super::sql::query(concat!(
                "UPDATE outbox SET ordering_key = $2, available_at_ms = ",
                $greatest,
                "(available_at_ms, COALESCE($3, 0)) WHERE operation_id = $1"
            ))
            .bind(operation_id)
            .bind(ordering_key)
            .bind(available_at_ms)
            .execute(&mut *self)
            .await
            .context("scheduling an outbox message")?;
            super::sql::query(
                "UPDATE operations SET not_before_ms = $2 WHERE id = $1 AND $2 > created_at_ms",
            )
            .bind(operation_id)
            .bind(available_at_ms)
            .execute(&mut *self)
            .await
            .context("scheduling an operation")?;
            Ok(())
        }
    };
}

pub(crate) use schedule_statements;

/// A transaction records (and holds) on its connection.
macro_rules! outbox_transaction {
    ($db:ty) => {
        impl OutboxConnection for sqlx::Transaction<'_, $db> {
            fn record(
                &mut self,
                op: &NewOperation,
                now_ms: i64,
                actor: &str,
            ) -> impl Future<Output = Result<Submitted, StoreError>> + Send {
                (**self).record(op, now_ms, actor)
            }

            fn derived_key(
                &mut self,
                provider: &str,
                operation: &str,
                payload: &Value,
            ) -> impl Future<Output = Result<String, StoreError>> + Send {
                (**self).derived_key(provider, operation, payload)
            }

            fn schedule(
                &mut self,
                operation_id: i64,
                ordering_key: Option<&str>,
                available_at_ms: Option<i64>,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).schedule(operation_id, ordering_key, available_at_ms)
            }
        }

        impl crate::LedgerConnection for sqlx::Transaction<'_, $db> {
            fn apply_transfers(
                &mut self,
                batch: &[crate::NewTransfer],
                now_ms: i64,
            ) -> impl Future<Output = Result<Vec<crate::TransferResult>, StoreError>> + Send {
                (**self).apply_transfers(batch, now_ms)
            }

            fn tie_hold(
                &mut self,
                hold: &str,
                operation_id: i64,
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                (**self).tie_hold(hold, operation_id)
            }
        }
    };
}

outbox_transaction!(sqlx::Sqlite);
outbox_transaction!(sqlx::Postgres);
outbox_transaction!(sqlx::MySql);

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::SqliteConnection {}
    impl Sealed for sqlx::PgConnection {}
    impl Sealed for sqlx::Transaction<'_, sqlx::Sqlite> {}
    impl Sealed for sqlx::Transaction<'_, sqlx::Postgres> {}
    impl Sealed for sqlx::MySqlConnection {}
    impl Sealed for sqlx::Transaction<'_, sqlx::MySql> {}
}

/// SQLite's request hash: SHA-256 (hex) over the canonical JSON of
/// `[provider, operation, payload]`: object keys sorted at every level (key
/// order in the caller's JSON does not matter) and numbers in the form
/// earlier versions hashed ([`crate::outbox::stored::hash_form`]: `12.50` and
/// `12.5` are one request), so stored hashes and derived keys stay valid.
/// PostgreSQL computes its own in SQL (`failwell_request_hash`), so
/// plain-SQL applications get the same.
pub(crate) fn request_hash(provider: &str, operation: &str, payload: &Value) -> String {
    let canonical =
        serde_json::json!([provider, operation, crate::outbox::stored::hash_form(payload)]).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

/// Whether an insert that wrote nothing is a replay: `stored` is the
/// request hash under `op`'s key, if the key exists. Errors: the key is
/// free, so another operation holds the reference
/// ([`StoreError::ReferenceReused`]); the key holds a different request
/// ([`StoreError::KeyReused`]).
pub(crate) fn check_replay(op: &NewOperation, hash: &str, stored: Option<String>) -> Result<(), StoreError> {
    match stored {
        None => Err(StoreError::ReferenceReused { reference: op.reference.clone().unwrap_or_default() }),
        Some(stored) if stored != hash => Err(StoreError::KeyReused { key: op.idempotency_key.clone() }),
        Some(_) => Ok(()),
    }
}

/// The stored operation a replay answers with.
pub(crate) fn replayed(existing: Option<crate::Operation>) -> Result<Submitted, StoreError> {
    existing
        .map(Submitted::Replayed)
        .ok_or_else(|| StoreError::Corrupt { what: "operation", detail: "vanished while being read".into() })
}

/// The claim condition of an outbox message aliased `x`, at time `$1`: pending,
/// due, not leased, and (with an ordering key) the first message of its
/// key still pending. The same SQL on every database.
///
/// The first of a key is asked for in the order of the key's index
/// (`outbox_ordering`, `ordering_key, id`), so that index is the one that
/// answers it, whatever the statistics. Asked as "no earlier message of
/// the key" (`NOT EXISTS ... earlier.id < x.id`), PostgreSQL planned it on
/// an empty table as a walk of the due messages' index for each message
/// checked (`id < x.id` is a condition on its last column): 200 ms a claim
/// once 50,000 messages had arrived, in a plan kept for reuse.
pub(crate) const DUE: &str = "x.state = 'pending' AND x.available_at_ms <= $1 \
     AND (x.locked_until_ms IS NULL OR x.locked_until_ms <= $1) \
     AND (x.ordering_key IS NULL OR x.id = (SELECT earlier.id FROM outbox earlier \
     WHERE earlier.ordering_key = x.ordering_key AND earlier.state = 'pending' \
     ORDER BY earlier.ordering_key, earlier.id LIMIT 1))";

/// The columns a claim reads of each message it takes.
pub(crate) const CLAIMED_COLUMNS: &str = "x.id, x.operation_id, x.attempts, x.previous_delay_ms, x.in_flight, \
     x.available_at_ms, x.provider, x.updated_at_ms";
