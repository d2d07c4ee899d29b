//! The transactional outbox API: an intent recorded inside the caller's
//! own transaction.

use failwell_policy::derive_key;
use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteConnection;

use super::rows::{operation_by_key, operation_from_row};
use crate::error::{Context, StoreError};
use crate::model::{NewOperation, Submitted};

/// The transactional outbox API: record an intent inside the caller's
/// transaction.
#[derive(Debug)]
pub struct Outbox;

impl Outbox {
    /// Records `op` and its outbox message on `conn` (typically `&mut *tx`
    /// of a transaction from [`SqliteStore::begin`]), next to the caller's
    /// own writes. The provider idempotency key is derived from the intent
    /// ([`derive_key`]). When the key exists with the same request this
    /// returns [`Submitted::Replayed`] and writes nothing; with a different
    /// request, [`StoreError::KeyReused`].
    pub async fn enqueue(
        conn: &mut SqliteConnection,
        op: &NewOperation,
        now_ms: i64,
    ) -> Result<Submitted, StoreError> {
        Self::record(conn, op, now_ms, "app").await
    }

    /// [`Self::enqueue`], with `actor` as the history's author of the new
    /// operation (`api` for the HTTP API, `app` for an application).
    pub(super) async fn record(
        conn: &mut SqliteConnection,
        op: &NewOperation,
        now_ms: i64,
        actor: &str,
    ) -> Result<Submitted, StoreError> {
        let hash = request_hash(op);
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, 0);
        let inserted = sqlx::query(
            "INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash, \
             provider_key, created_at_ms, updated_at_ms, changed_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9) \
             ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, idempotency_key, provider, operation, \
             reference, payload, status, key_group, provider_key, key_first_sent_at_ms, attempts, provider_ref, \
             response, last_error, FALSE AS dead_letter, reconcile_attempts, effect_possible, lookup_misses, created_at_ms, \
             created_at_ms AS delivery_started_at_ms, updated_at_ms",
        )
        .bind(&op.idempotency_key)
        .bind(&op.provider)
        .bind(&op.operation)
        .bind(&op.reference)
        .bind(op.payload.to_string())
        .bind(&hash)
        .bind(&provider_key)
        .bind(now_ms)
        .bind(actor)
        .fetch_optional(&mut *conn)
        .await;
        let inserted = match inserted {
            Ok(row) => row,
            // Another operation holds the reference; this may still be a
            // replay of that very operation, which the key check below finds.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() && e.message().contains("reference") => {
                None
            }
            Err(source) => return Err(StoreError::Database { context: "inserting an operation", source }),
        };
        // The outbox message is inserted by the `operations_outbox` trigger.
        if let Some(row) = inserted {
            return operation_from_row(&row).map(Submitted::Created);
        }
        let stored: Option<String> =
            sqlx::query_scalar("SELECT request_hash FROM operations WHERE idempotency_key = ?1")
                .bind(&op.idempotency_key)
                .fetch_optional(&mut *conn)
                .await
                .context("reading an existing operation")?;
        match stored {
            None => {
                return Err(StoreError::ReferenceReused {
                    reference: op.reference.clone().unwrap_or_default(),
                });
            }
            Some(stored) if stored != hash => {
                return Err(StoreError::KeyReused { key: op.idempotency_key.clone() });
            }
            Some(_) => {}
        }
        let existing = operation_by_key(conn, &op.idempotency_key).await?;
        existing.map(Submitted::Replayed).ok_or_else(|| StoreError::Corrupt {
            what: "operation",
            detail: "vanished while being read".into(),
        })
    }
}

/// SHA-256 over the canonical JSON of (provider, operation, payload):
/// serde_json sorts object keys, so key order in the caller's JSON does not
/// matter.
fn request_hash(op: &NewOperation) -> String {
    let canonical = serde_json::json!([op.provider, op.operation, op.payload]).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}
