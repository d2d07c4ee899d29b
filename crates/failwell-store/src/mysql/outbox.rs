//! [`Outbox::enqueue`](crate::Outbox::enqueue) on MySQL.

use failwell_policy::derive_key;
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
             provider_key, created_at_ms, updated_at_ms, changed_by, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $9)",
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
        let read_hash = "SELECT request_hash FROM operations WHERE idempotency_key = $1";
        let mut stored: Option<String> = sql::query_scalar(read_hash)
            .bind(op.idempotency_key.as_str())
            .fetch_optional(&mut *conn)
            .await
            .context("reading an existing operation")?;
        if stored.as_deref() == Some("") {
            // Inserted through `failwell_outbox` and not filled yet.
            super::contract::fill(&mut *conn, now_ms, Some(&op.idempotency_key)).await?;
            stored = sql::query_scalar(read_hash)
                .bind(op.idempotency_key.as_str())
                .fetch_optional(&mut *conn)
                .await
                .context("reading an existing operation")?;
        }
        check_replay(op, &hash, stored)?;
        replayed(operation_by_key(conn, &op.idempotency_key).await?)
    }

    crate::outbox::schedule_statements!(greatest = "GREATEST");
}
