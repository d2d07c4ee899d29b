//! [`Outbox::enqueue`](crate::Outbox::enqueue) on PostgreSQL.

use failwell_policy::derive_key;
use serde_json::Value;
use sqlx::postgres::PgConnection;

use super::rows::operation_by_key;
use crate::error::{Context, StoreError};
use crate::outbox::rows::operation_from_row;
use crate::outbox::{OutboxConnection, check_replay, replayed};
use crate::{NewOperation, Submitted};

impl OutboxConnection for PgConnection {
    async fn record(&mut self, op: &NewOperation, now_ms: i64, actor: &str) -> Result<Submitted, StoreError> {
        let conn = self;
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, 0);
        // The request hash is the database's (`failwell_request_hash`), so a
        // message an application inserted with plain SQL and the same
        // request sent through failwell's API are one intent. `ON CONFLICT
        // DO NOTHING` without a target covers the key and the reference
        // alike (an error would abort the caller's transaction); when
        // another transaction is inserting the same key, PostgreSQL waits
        // for it and then does nothing or inserts.
        let inserted = sqlx::query(
            "INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash, \
             provider_key, created_at_ms, updated_at_ms, changed_by, created_by) \
             VALUES ($1, $2, $3, $4, $5, failwell_request_hash($2, $3, $5::jsonb), $6, $7, $7, $8, $8) \
             ON CONFLICT DO NOTHING RETURNING id, idempotency_key, provider, operation, \
             reference, payload, status, key_group, provider_key, key_first_sent_at_ms, attempts, provider_ref, \
             response, last_error, FALSE AS dead_letter, reconcile_attempts, effect_possible, lookup_misses, \
             created_at_ms, created_at_ms AS delivery_started_at_ms, updated_at_ms",
        )
        .bind(&op.idempotency_key)
        .bind(&op.provider)
        .bind(&op.operation)
        .bind(&op.reference)
        .bind(op.payload.to_string())
        .bind(&provider_key)
        .bind(now_ms)
        .bind(actor)
        .fetch_optional(&mut *conn)
        .await
        .context("inserting an operation")?;
        // The outbox message is inserted by the `operations_created` trigger.
        if let Some(row) = inserted {
            return operation_from_row(&row).map(Submitted::Created);
        }
        let (hash, stored): (String, Option<String>) = sqlx::query_as(
            "SELECT failwell_request_hash($2, $3, $4::jsonb), \
             (SELECT request_hash FROM operations WHERE idempotency_key = $1)",
        )
        .bind(&op.idempotency_key)
        .bind(&op.provider)
        .bind(&op.operation)
        .bind(op.payload.to_string())
        .fetch_one(&mut *conn)
        .await
        .context("reading an existing operation")?;
        check_replay(op, &hash, stored)?;
        replayed(operation_by_key(conn, &op.idempotency_key).await?)
    }

    async fn derived_key(
        &mut self,
        provider: &str,
        operation: &str,
        payload: &Value,
    ) -> Result<String, StoreError> {
        sqlx::query_scalar("SELECT 'sha256:' || failwell_request_hash($1, $2, $3::jsonb)")
            .bind(provider)
            .bind(operation)
            .bind(payload.to_string())
            .fetch_one(&mut *self)
            .await
            .context("deriving an idempotency key")
    }

    async fn schedule(
        &mut self,
        operation_id: i64,
        ordering_key: Option<&str>,
        available_at_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        sqlx::query("SELECT failwell_schedule($1, $2, $3)")
            .bind(operation_id)
            .bind(ordering_key)
            .bind(available_at_ms)
            .execute(&mut *self)
            .await
            .context("scheduling an outbox message")?;
        Ok(())
    }
}
