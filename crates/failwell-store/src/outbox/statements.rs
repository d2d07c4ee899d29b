//! The outbox role's statements ([`outbox_statements!`]).

/// Implements [`OutboxStore`](crate::OutboxStore) for `store` with the same
/// statements on every database (`$N` parameters, run by the backend's
/// `sql` module). The invoking module provides what differs: the
/// claim `lease_due(store, conn, now_ms, limit, until_ms, token, scope)`, a batch
/// of results `complete_batch(store, conn, completions, now_ms)`,
/// `renew_leases(pool, queue, leases, until_ms)` and
/// `operation_by_key(conn, key)`; the store provides `pool()`,
/// `read_pool()`, `begin()` and its lease-token counter `tokens`. `lock` is
/// appended to the reads that decide a write (`" FOR UPDATE"` on
/// PostgreSQL and MySQL, `""` on SQLite, whose single writer already
/// excludes every other). `upsert_message` is what follows an insert of an
/// outbox message to update the one its operation has instead
/// (`ON CONFLICT (operation_id) DO UPDATE SET`, or MySQL's
/// `ON DUPLICATE KEY UPDATE`). `relay_begin` names the store's method
/// that begins the relay's claims and batches of results (`begin`, or
/// PostgreSQL's `begin_relay`, which sets how their statements are
/// planned in the same round trip). The statements run through the
/// backend's `sql` module.
macro_rules! outbox_statements {
    (
        store = $store:ty,
        lock = $lock:literal,
        upsert_message = $upsert_message:literal,
        relay_begin = $relay_begin:ident $(,)?
    ) => {
        use std::sync::atomic::Ordering;

        use super::sql;

        use super::rows::operation_by_key;
        use crate::error::{Context, StoreError};
        use crate::outbox::rows::{operation_from_row, select_operation};
        use super::writes::{insert_attempt, set_operation};
        use crate::OutboxConnection as _;
        use crate::{
            AttemptRow, ClaimScope, Claimed, Completion, Leased, NewOperation, Operation, OperationStatus,
            Reconciled, Recorded, Resolution, Submitted,
        };

        #[async_trait::async_trait]
        impl crate::OutboxStore for $store {
            async fn submit(&self, op: NewOperation, now_ms: i64) -> Result<Submitted, StoreError> {
                crate::outbox::stored::check_object(&op.payload)?;
                crate::outbox::stored::check_payload(&op.payload)?;
                let mut tx = self.begin().await?;
                let submitted = tx.record(&op, now_ms, "api").await?;
                if let Some(hold) = &op.hold {
                    crate::ledger::hold_with(&mut *tx, hold, &submitted, &op.idempotency_key, now_ms).await?;
                }
                if matches!(submitted, Submitted::Created(_)) {
                    tx.commit().await.context("committing an operation")?;
                }
                Ok(submitted)
            }

            async fn claim(
                &self,
                now_ms: i64,
                limit: u32,
                lease_ms: u64,
                scope: &ClaimScope,
            ) -> Result<Vec<Claimed>, StoreError> {
                crate::error::retry_conflicts!(async {
                    let mut tx = self.$relay_begin().await?;
                    let token = self.tokens.fetch_add(1, Ordering::Relaxed);
                    let until_ms = crate::inbox::lease_until(now_ms, lease_ms);
                    let (claimed, unreadable): (Vec<Claimed>, Vec<Claimed>) =
                        lease_due(self, &mut tx, now_ms, limit, until_ms, token, scope)
                            .await?
                            .into_iter()
                            .partition(|c| c.operation.unreadable.is_none());
                    if !unreadable.is_empty() {
                        let set_aside: Vec<Completion> =
                            unreadable.iter().map(|c| crate::outbox::stored::set_aside(c, now_ms)).collect();
                        complete_batch(self, &mut tx, &set_aside, now_ms).await?;
                    }
                    // Also when nothing was claimed: SQLite's and MySQL's claims
                    // may have filled rows an application inserted (see
                    // outbox/contract.rs).
                    tx.commit().await.context("committing a claim")?;
                    Ok::<_, StoreError>(claimed)
                })
            }

            async fn complete(&self, completions: Vec<Completion>, now_ms: i64) -> Result<Vec<Recorded>, StoreError> {
                crate::error::retry_conflicts!(async {
                    let mut tx = self.$relay_begin().await?;
                    let recorded = complete_batch(self, &mut tx, &completions, now_ms).await?;
                    tx.commit().await.context("committing attempt results")?;
                    Ok::<_, StoreError>(recorded)
                })
            }

            async fn due_unknown(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, StoreError> {
                let rows = sql::query(select_operation!(
                    "WHERE o.status = 'unknown' AND o.next_reconcile_at_ms <= $1 ORDER BY o.next_reconcile_at_ms LIMIT $2"
                ))
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(self.read_pool())
                .await
                .context("finding unknown operations")?;
                rows.iter().map(operation_from_row).collect()
            }

            async fn reconcile(&self, r: Reconciled, now_ms: i64) -> Result<(), StoreError> {
                let mut tx = self.begin().await?;
                // Locks in the order every writer takes them (the message, then the
                // operation), so two processes reconciling it apply one result.
                sql::query(concat!("SELECT id FROM outbox WHERE operation_id = $1", $lock))
                    .bind(r.operation_id)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("locking an outbox message")?;
                let status: Option<String> =
                    sql::query_scalar(concat!("SELECT status FROM operations WHERE id = $1", $lock))
                        .bind(r.operation_id)
                        .fetch_optional(&mut *tx)
                        .await
                        .context("reading an operation")?;
                if status.as_deref() != Some("unknown") {
                    return Ok(());
                }
                if let Some(attempt) = &r.attempt {
                    insert_attempt(&mut tx, r.operation_id, attempt).await?;
                }
                match &r.resolution {
                    Resolution::Found { outcome, provider_ref, response } => {
                        let status = OperationStatus::from(*outcome);
                        set_operation(
                            &mut tx,
                            r.operation_id,
                            status,
                            provider_ref.as_deref(),
                            response.as_ref(),
                            None,
                            None,
                            now_ms,
                            "reconciler",
                        )
                        .await?;
                    }
                    Resolution::Requeue { key_group, provider_key } => {
                        sql::query(
                            "UPDATE operations SET status = 'pending', provider_key = $3, \
                             key_first_sent_at_ms = CASE WHEN key_group = $2 THEN key_first_sent_at_ms END, \
                             next_reconcile_at_ms = NULL, lookup_misses = 0, \
                             effect_possible = CASE WHEN key_group = $2 THEN effect_possible ELSE 0 END, \
                             updated_at_ms = $4, changed_by = 'reconciler', key_group = $2 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(i64::from(*key_group))
                        .bind(provider_key)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("requeueing an operation")?;
                        // Retention may have deleted a delivered message whose
                        // operation an event reopened since: created again.
                        sql::query(concat!(
                            "INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, \
                             updated_at_ms, changed_by) SELECT id, provider, $2, $2, $2, 'reconciler' \
                             FROM operations WHERE id = $1 ",
                            $upsert_message,
                            " state = 'pending', available_at_ms = $2, \
                             in_flight = 0, locked_until_ms = NULL, lease_token = NULL, updated_at_ms = $2, \
                             changed_by = 'reconciler'",
                        ))
                        .bind(r.operation_id)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("requeueing an outbox message")?;
                    }
                    Resolution::DeadLetter { error } => {
                        set_operation(
                            &mut tx,
                            r.operation_id,
                            OperationStatus::Failed,
                            None,
                            None,
                            Some(error),
                            None,
                            now_ms,
                            "reconciler",
                        )
                        .await?;
                        sql::query(
                            "UPDATE outbox SET state = 'dead', dead_at_ms = $2, last_error = $3, updated_at_ms = $2, \
                             changed_by = 'reconciler' WHERE operation_id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(now_ms)
                        .bind(error)
                        .execute(&mut *tx)
                        .await
                        .context("dead-lettering an outbox message")?;
                    }
                    Resolution::Confirm { retry_at_ms } => {
                        sql::query(
                            "UPDATE operations SET next_reconcile_at_ms = $2, lookup_misses = lookup_misses + 1, \
                             updated_at_ms = $3 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(retry_at_ms)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("scheduling a confirming lookup")?;
                    }
                    Resolution::Postpone { retry_at_ms } => {
                        sql::query("UPDATE operations SET next_reconcile_at_ms = $2 WHERE id = $1")
                            .bind(r.operation_id)
                            .bind(retry_at_ms)
                            .execute(&mut *tx)
                            .await
                            .context("postponing a reconciliation")?;
                    }
                    Resolution::NeedsHuman { reason } => {
                        sql::query(
                            "UPDATE operations SET status = 'needs_human', next_reconcile_at_ms = NULL, last_error = $2, \
                             changed_by = 'reconciler', updated_at_ms = $3 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(reason)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("handing an operation to a human")?;
                    }
                    Resolution::Later { retry_at_ms, error } => {
                        sql::query(
                            "UPDATE operations SET next_reconcile_at_ms = $2, reconcile_attempts = reconcile_attempts + 1, \
                             last_error = $3, updated_at_ms = $4 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(retry_at_ms)
                        .bind(error)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("postponing a reconciliation")?;
                    }
                }
                tx.commit().await.context("committing a reconciliation")?;
                Ok(())
            }

            async fn operation(&self, idempotency_key: &str) -> Result<Option<Operation>, StoreError> {
                let mut conn = self.read_pool().acquire().await.context("acquiring a connection")?;
                operation_by_key(&mut conn, idempotency_key).await
            }

            async fn attempts(&self, operation_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
                let rows = sql::query(
                    "SELECT kind, attempt_no, provider_key, started_at_ms, duration_ms, status_code, error_kind, \
                     classification, outcome, decision FROM attempts WHERE operation_id = $1 ORDER BY id",
                )
                .bind(operation_id)
                .fetch_all(self.read_pool())
                .await
                .context("reading the attempt history")?;
                Ok(rows.iter().map(crate::outbox::rows::attempt_from_row).collect())
            }

            async fn renew(
                &self,
                queue: Leased,
                leases: Vec<(i64, i64)>,
                until_ms: i64,
            ) -> Result<u64, StoreError> {
                if leases.is_empty() {
                    return Ok(0);
                }
                renew_leases(self.pool(), queue, &leases, until_ms).await
            }

            async fn delete_delivered(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
                let deleted = sql::query(
                    "DELETE FROM outbox WHERE id IN (SELECT id FROM (SELECT x.id FROM outbox x \
                     JOIN operations o ON o.id = x.operation_id WHERE x.state = 'done' \
                     AND x.updated_at_ms < $1 AND o.status IN ('succeeded', 'failed') ORDER BY x.id LIMIT $2) old)",
                )
                .bind(before_ms)
                .bind(i64::from(limit))
                .execute(self.pool())
                .await
                .context("deleting delivered messages")?;
                Ok(deleted.rows_affected())
            }

        }
    };
}

/// Defines `claims(conn, due, operations, token, now_ms)` for a backend
/// whose claim reads the due messages (`due`, rows of
/// [`CLAIMED_COLUMNS`](crate::outbox::CLAIMED_COLUMNS) in claim order) and
/// then their operations (`operations`, rows of `select_operation!`) in
/// two statements (SQLite, MySQL): each message paired with its operation,
/// in claim order. A message whose `operation_id` cannot be read or names
/// no operation (changed behind failwell's back) is dead-lettered alone,
/// never sent, its `last_error` saying why.
macro_rules! pair_claims {
    (conn = $conn:ty, row = $row:ty $(,)?) => {
        async fn claims(
            conn: &mut $conn,
            due: &[$row],
            operations: &[$row],
            token: i64,
            now_ms: i64,
        ) -> Result<Vec<crate::Claimed>, crate::StoreError> {
            use crate::error::Context as _;
            use sqlx::Row as _;
            let mut by_id = std::collections::HashMap::with_capacity(operations.len());
            for row in operations {
                let op = crate::outbox::rows::operation_from_row(row)?;
                by_id.insert(op.id, op);
            }
            let mut claimed = Vec::with_capacity(due.len());
            for r in due {
                let id: i64 = r.try_get("id").context("reading a claimed message")?;
                let operation = match r.try_get::<i64, _>("operation_id") {
                    Ok(op_id) => by_id.remove(&op_id).ok_or_else(|| format!("{op_id} names no operation")),
                    Err(e) => Err(e.to_string()),
                };
                match operation {
                    Ok(operation) => claimed
                        .push(crate::outbox::rows::claimed_from_row(r, id, "attempts", token, operation)),
                    Err(why) => {
                        super::sql::query(crate::outbox::stored::SET_ASIDE_MESSAGE)
                            .bind(id)
                            .bind(crate::outbox::stored::operation_id_set_aside(&why))
                            .bind(now_ms)
                            .execute(&mut *conn)
                            .await
                            .context("setting a message aside")?;
                    }
                }
            }
            Ok(claimed)
        }
    };
}

/// Defines `due_messages(conn, now_ms, limit, scope)` for a backend whose
/// claim reads the due messages in one query per scope (SQLite, MySQL):
/// the rows of [`CLAIMED_COLUMNS`](crate::outbox::CLAIMED_COLUMNS) of
/// every due message ([`DUE`](crate::outbox::DUE)) that also meets `also`
/// (an SQL condition, or `""`), in claim order, at most `limit`, read with
/// `lock` (a row-lock clause, or `""`). [`ClaimScope::Strays`](crate::ClaimScope)
/// leaves out the providers in `not_in` (a subquery of the list bound as
/// `$3`); [`ClaimScope::Providers`](crate::ClaimScope) reads one indexed
/// range per provider and takes them in turns
/// ([`take_turns`](crate::outbox::take_turns)).
macro_rules! due_by_scope {
    (conn = $conn:ty, row = $row:ty, also = $also:expr, lock = $lock:literal, not_in = $not_in:literal $(,)?) => {
        async fn due_messages(
            conn: &mut $conn,
            now_ms: i64,
            limit: u32,
            scope: &crate::ClaimScope,
        ) -> Result<Vec<$row>, crate::StoreError> {
            use crate::error::Context as _;
            let query = |filter: &str| {
                sqlx::AssertSqlSafe(format!(
                    "SELECT {} FROM outbox x WHERE {} {} {filter} ORDER BY x.available_at_ms, x.id LIMIT $2{}",
                    crate::outbox::CLAIMED_COLUMNS,
                    crate::outbox::DUE,
                    $also,
                    $lock
                ))
            };
            let of = |filter: &str| super::sql::query(query(filter)).bind(now_ms).bind(i64::from(limit));
            match scope {
                crate::ClaimScope::All => of("").fetch_all(&mut *conn).await,
                crate::ClaimScope::Strays(known) => {
                    of(concat!("AND x.provider NOT IN ", $not_in))
                        .bind(serde_json::to_string(known).unwrap_or_default())
                        .fetch_all(&mut *conn)
                        .await
                }
                crate::ClaimScope::Providers(providers) => {
                    let mut turns = Vec::with_capacity(providers.len());
                    for provider in providers {
                        let of_provider = of("AND x.provider = $3").bind(provider.as_str()).fetch_all(&mut *conn);
                        turns.push(of_provider.await.context("finding due outbox messages")?);
                    }
                    Ok(crate::outbox::take_turns(turns, limit as usize))
                }
            }
            .context("finding due outbox messages")
        }
    };
}

pub(crate) use {due_by_scope, outbox_statements, pair_claims};
