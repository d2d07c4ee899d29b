//! [`Outbox::enqueue`](crate::Outbox::enqueue) on SQLite.

use failwell_policy::derive_key;
use sqlx::sqlite::SqliteConnection;

use super::rows::operation_by_key;
use crate::error::{Context, StoreError};
use crate::outbox::rows::operation_from_row;
use crate::outbox::{OutboxConnection, check_replay, replayed, request_hash};
use crate::{NewOperation, Submitted};

impl OutboxConnection for SqliteConnection {
    async fn record(&mut self, op: &NewOperation, now_ms: i64, actor: &str) -> Result<Submitted, StoreError> {
        let conn = self;
        let hash = request_hash(&op.provider, &op.operation, &op.payload);
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, 0);
        let inserted = sqlx::query(
            "INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash, \
             provider_key, created_at_ms, updated_at_ms, changed_by, created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?9) \
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
        let read_hash = "SELECT request_hash FROM operations WHERE idempotency_key = ?1";
        let mut stored: Option<String> = sqlx::query_scalar(read_hash)
            .bind(&op.idempotency_key)
            .fetch_optional(&mut *conn)
            .await
            .context("reading an existing operation")?;
        if stored.as_deref() == Some("") {
            // Inserted through the `failwell_outbox` view and not filled yet.
            super::contract::fill(&mut *conn, now_ms, Some(&op.idempotency_key)).await?;
            stored = sqlx::query_scalar(read_hash)
                .bind(&op.idempotency_key)
                .fetch_optional(&mut *conn)
                .await
                .context("reading an existing operation")?;
        }
        check_replay(op, &hash, stored)?;
        replayed(operation_by_key(conn, &op.idempotency_key).await?)
    }

    crate::outbox::schedule_statements!(greatest = "MAX");
}
