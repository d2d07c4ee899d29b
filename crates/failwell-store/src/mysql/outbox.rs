//! [`Outbox::enqueue`](crate::Outbox::enqueue) on MySQL.

use failwell_policy::derive_key;
use serde_json::Value;
use sqlx::mysql::MySqlConnection;

use super::rows::operation_by_key;
use super::sql;
use crate::error::{Context, StoreError};
use crate::outbox::{OutboxConnection, check_replay, replayed, request_hash};
use crate::{NewOperation, Submitted};

impl OutboxConnection for MySqlConnection {
    async fn record(&mut self, op: &NewOperation, now_ms: i64, actor: &str) -> Result<Submitted, StoreError> {
        let conn = self;
        let hash = request_hash(&op.provider, &op.operation, &op.payload);
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, 0);
        // A duplicate key fails this statement only, not the caller's
        // transaction; an insert of the same key by another transaction is
        // waited for, then conflicts or goes in. The outbox message is
        // inserted by the `operations_created` trigger.
        let inserted = sql::query(
            "INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash, \
             provider_key, created_at_ms, updated_at_ms, changed_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
        )
        .bind(op.idempotency_key.as_str())
        .bind(op.provider.as_str())
        .bind(op.operation.as_str())
        .bind(op.reference.as_deref())
        .bind(op.payload.to_string())
        .bind(hash.as_str())
        .bind(provider_key.as_str())
        .bind(now_ms)
        .bind(actor)
        .execute(&mut *conn)
        .await;
        match inserted {
            Ok(_) => {
                let created = operation_by_key(conn, &op.idempotency_key).await?.ok_or_else(|| {
                    StoreError::Corrupt { what: "operation", detail: "vanished once inserted".into() }
                })?;
                return Ok(Submitted::Created(created));
            }
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
            Err(source) => return Err(StoreError::Database { context: "inserting an operation", source }),
        }
        let stored: Option<String> =
            sql::query_scalar("SELECT request_hash FROM operations WHERE idempotency_key = $1")
                .bind(op.idempotency_key.as_str())
                .fetch_optional(&mut *conn)
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
        Ok(format!("sha256:{}", request_hash(provider, operation, payload)))
    }

    async fn schedule(
        &mut self,
        operation_id: i64,
        ordering_key: Option<&str>,
        available_at_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        sql::query(
            "UPDATE outbox SET ordering_key = $2, available_at_ms = GREATEST(available_at_ms, COALESCE($3, 0)) \
             WHERE operation_id = $1",
        )
        .bind(operation_id)
        .bind(ordering_key)
        .bind(available_at_ms)
        .execute(&mut *self)
        .await
        .context("scheduling an outbox message")?;
        sql::query("UPDATE operations SET not_before_ms = $2 WHERE id = $1 AND $2 > created_at_ms")
            .bind(operation_id)
            .bind(available_at_ms)
            .execute(&mut *self)
            .await
            .context("scheduling an operation")?;
        Ok(())
    }
}
