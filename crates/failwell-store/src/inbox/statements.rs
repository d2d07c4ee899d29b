//! The webhook inbox's statements, the same SQL on every database.

/// An `UPDATE` of `table` whose new values (`column = "value"` pairs)
/// come from the batch `source` (aliased `u`, matched on `id`): `from` in
/// the form PostgreSQL and SQLite write (`UPDATE … SET … FROM …`), `join`
/// in MySQL's (`UPDATE … JOIN … ON … SET …`, the columns named with their
/// table): the batch first (`STRAIGHT_JOIN`), each row of `table` read by
/// primary key, so that InnoDB never scans, and waits at, a row another
/// transaction has inserted and not committed.
macro_rules! update_joined {
    (from, $table:literal, $source:literal, $first:ident = $value:literal $(, $column:ident = $v:literal)* $(,)?) => {
        concat!(
            "UPDATE ", $table, " SET ", stringify!($first), " = ", $value,
            $(", ", stringify!($column), " = ", $v,)*
            " FROM ", $source, " WHERE ", $table, ".id = u.id"
        )
    };
    (join, $table:literal, $source:literal, $first:ident = $value:literal $(, $column:ident = $v:literal)* $(,)?) => {
        concat!(
            "UPDATE ", $source, " STRAIGHT_JOIN ", $table, " FORCE INDEX (PRIMARY) ON ", $table, ".id = u.id SET ",
            $table, ".", stringify!($first), " = ", $value,
            $(", ", $table, ".", stringify!($column), " = ", $v,)*
        )
    };
}

/// Defines `insert_events` for the inbox statements
/// ([`inbox_statements!`]) where an insert can return what it inserted
/// (PostgreSQL, SQLite): one statement, `events` the batch's row source
/// (`u`, from `$2`).
macro_rules! insert_returning_events {
    (conn = $conn:ty, row = $row:ty, events = $events:literal $(,)?) => {
        /// Stores the batch's new events in arrival order (one
        /// statement; `WHERE true` lets SQLite parse the upsert after a
        /// `SELECT`) and returns what it stored.
        async fn insert_events(
            conn: &mut $conn,
            events: &[crate::NewEvent],
            now_ms: i64,
        ) -> Result<Vec<$row>, crate::error::StoreError> {
            use crate::error::Context as _;
            use crate::inbox::InboxBinds as _;
            sqlx::query(concat!(
                "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
                 SELECT integration, event_id, payload, headers, $1 FROM ",
                $events,
                " WHERE true ORDER BY n \
                 ON CONFLICT (integration, event_id) DO NOTHING RETURNING seq, integration, event_id"
            ))
            .bind(now_ms)
            .bind_events(events)
            .fetch_all(&mut *conn)
            .await
            .context("storing webhook events")
        }
    };
}

/// Implements [`InboxStore`](crate::InboxStore) for `store`, with two
/// helper functions on connections of type `conn`, in the invoking module,
/// with the same SQL on every database (`$N` parameters, run by the
/// backend's `sql` module). The store provides `read_pool()` and
/// `begin()`. What differs is passed in:
/// - `lock`: the row-lock clause (`[" FOR UPDATE"]`) of the reads that
///   decide a write, or none (`[]`: SQLite, whose single writer, `BEGIN
///   IMMEDIATE`, already excludes every other); a statement that only
///   locks is left out without one; `claim_lock`, that of the forward
///   claim (forwards `f` joined with their events), which skips rows
///   another process holds, and `operations_lock`, that of the operations
///   `o` an event names (read with a subquery of their messages);
/// - `update`: how an update takes its new values from a batch `u`
///   ([`update_joined!`]: `from` or `join`);
/// - `insert_events(conn, events, now_ms)`, a function of the invoking
///   module: stores the new events, leaving out those already stored, and
///   returns the stored ones' `seq, integration, event_id`;
/// - `serialize` (optional): a statement that makes receiving take one
///   transaction at a time, where the database does not already;
/// - `payload_size`: the SQL expression of a payload's length in bytes as
///   a 64-bit integer;
/// - `ids_in` (a subquery of the ids bound as `$1`), `keys` (`k`, from
///   `$1`), `changes` (`u`, from `$3`), `steps` (`s`, from `$1`) and
///   `forward_changes` (`u`, from `$2`): the row sources of the batches the
///   backend's [`InboxBinds`] binds.
macro_rules! inbox_statements {
    (
        store = $store:ty,
        conn = $conn:ty,
        lock = [$($lock:literal)?],
        claim_lock = [$($claim_lock:literal)?],
        operations_lock = [$($operations_lock:literal)?],
        update = $update:ident,
        $(serialize = $serialize:literal,)?
        payload_size = $payload_size:literal,
        ids_in = $ids_in:literal,
        keys = $keys:literal,
        changes = $changes:literal,
        steps = $steps:literal,
        forward_changes = $forward_changes:literal $(,)?
    ) => {
        use sqlx::Row as _;

        use super::sql;

        use crate::error::Context as _;
        use crate::inbox::InboxBinds as _;

        #[async_trait::async_trait]
        impl crate::InboxStore for $store {
            /// Stores a batch of events in a fixed number of statements, whatever
            /// its size: one insert of every event (after the `serialize` lock,
            /// where there is one), one read of the operations the new events name
            /// (and, where rows are locked, one lock each of their messages and of
            /// them), one update of those that change, one close of their outbox
            /// messages, one insert of the history steps and one of the forwards.
            /// The ledger rule runs in between, in arrival order, on the rows read
            /// under the transaction's write lock (or locked).
            async fn receive(
                &self,
                events: Vec<crate::NewEvent>,
                now_ms: i64,
            ) -> Result<Vec<crate::Received>, crate::error::StoreError> {
                if events.is_empty() {
                    return Ok(Vec::new());
                }
                crate::error::retry_conflicts!(async {
                    let mut tx = self.begin().await?;
                    // One receiving transaction at a time, where the database does not
                    // already see to it (`serialize`).
                    $(
                        sql::query($serialize).execute(&mut *tx).await.context("locking the inbox")?;
                    )?
                    // In arrival order, so `seq`s follow it and the first delivery of a
                    // key is the one stored (the others are left out: an error would
                    // abort the whole transaction).
                    let inserted = insert_events(&mut tx, &events, now_ms).await?;
                    let mut batch = crate::inbox::Batch::new(&events, &inserted, now_ms)?;
                    apply_reports(&mut tx, &mut batch, now_ms).await?;
                    insert_steps(&mut tx, &batch.steps).await?;
                    if !batch.forwards.is_empty() {
                        // In `seq` order, which is arrival order.
                        sql::query(concat!(
                            "INSERT INTO forwards (event_seq, available_at_ms, created_at_ms, updated_at_ms) \
                             SELECT seq, $2, $2, $2 FROM inbox_events WHERE seq IN ",
                            $ids_in,
                            " ORDER BY seq"
                        ))
                        .bind_ids(&batch.forwards)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("queueing events for forwarding")?;
                    }
                    tx.commit().await.context("committing webhook events")?;
                    Ok::<_, crate::error::StoreError>(batch.received())
                })
            }

            /// Up to `limit` events after `after`, within `max_bytes` of payloads
            /// but at least one.
            async fn events_after(
                &self,
                after: i64,
                limit: u32,
                max_bytes: usize,
            ) -> Result<Vec<crate::StoredEvent>, crate::error::StoreError> {
                // Sizes first (both databases read a value's length from its
                // header), so the page stops at `max_bytes` before any payload is
                // loaded.
                let sizes: Vec<(i64, i64)> = sql::query_as(concat!(
                    "SELECT seq, ",
                    $payload_size,
                    " FROM inbox_events WHERE seq > $1 ORDER BY seq LIMIT $2"
                ))
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(self.read_pool())
                .await
                .context("reading the event feed")?;
                let Some(last) = crate::inbox::page_end(&sizes, max_bytes) else { return Ok(Vec::new()) };
                let rows = sql::query(
                    "SELECT seq, integration, event_id, payload, headers, received_at_ms FROM inbox_events \
                     WHERE seq > $1 AND seq <= $2 ORDER BY seq",
                )
                .bind(after)
                .bind(last)
                .fetch_all(self.read_pool())
                .await
                .context("reading the event feed")?;
                rows.iter().map(crate::inbox::event_from_row).collect()
            }

            /// The ledger steps events made on one operation, oldest first.
            async fn operation_events(
                &self,
                operation_id: i64,
            ) -> Result<Vec<crate::OperationEvent>, crate::error::StoreError> {
                let rows = sql::query(
                    "SELECT e.integration, e.event_id, s.kind, s.at_ms, s.duration_ms, s.status_code, \
                     s.operation_id, s.effect, s.detail \
                     FROM inbox_steps s JOIN inbox_events e ON e.seq = s.event_seq \
                     WHERE s.operation_id = $1 ORDER BY s.id",
                )
                .bind(operation_id)
                .fetch_all(self.read_pool())
                .await
                .context("reading an operation's events")?;
                rows.iter().map(crate::inbox::operation_event_from_row).collect()
            }

            /// The event `(integration, event_id)` with its history and
            /// forwarding state.
            async fn event(
                &self,
                integration: &str,
                event_id: &str,
            ) -> Result<Option<crate::EventRecord>, crate::error::StoreError> {
                let row = sql::query(
                    "SELECT e.seq, e.integration, e.event_id, e.payload, e.headers, e.received_at_ms, \
                     f.state AS forward_state, COALESCE(f.attempts, 0) AS forward_attempts, \
                     f.last_error AS forward_last_error, \
                     CASE WHEN f.state = 'pending' THEN f.available_at_ms END AS forward_due_at_ms \
                     FROM inbox_events e LEFT JOIN forwards f ON f.event_seq = e.seq \
                     WHERE e.integration = $1 AND e.event_id = $2",
                )
                .bind(integration)
                .bind(event_id)
                .fetch_optional(self.read_pool())
                .await
                .context("reading an event")?;
                let Some(row) = row else { return Ok(None) };
                let event = crate::inbox::event_from_row(&row)?;
                let steps = sql::query(
                    "SELECT kind, at_ms, duration_ms, status_code, operation_id, effect, detail \
                     FROM inbox_steps WHERE event_seq = $1 ORDER BY id",
                )
                .bind(event.seq)
                .fetch_all(self.read_pool())
                .await
                .context("reading an event's history")?;
                let steps = steps.iter().map(crate::inbox::step_from_row).collect::<Result<_, _>>()?;
                crate::inbox::event_record_from_row(&row, event, steps).map(Some)
            }

            async fn claim_forwards(
                &self,
                now_ms: i64,
                limit: u32,
                lease_ms: u64,
            ) -> Result<Vec<crate::ClaimedForward>, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                // Where rows are locked, forwards another process is claiming or
                // completing are skipped, not waited for (`SKIP LOCKED`); only the
                // forwards are locked (the events are append-only).
                let due = sql::query(concat!(
                    "SELECT f.id, f.attempts, f.previous_delay_ms, f.locked_until_ms, f.updated_at_ms, \
                     e.seq, e.integration, e.event_id, e.payload, e.headers, e.received_at_ms \
                     FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq \
                     WHERE f.state = 'pending' AND f.available_at_ms <= $1 \
                     AND (f.locked_until_ms IS NULL OR f.locked_until_ms <= $1) \
                     ORDER BY f.available_at_ms, f.id LIMIT $2",
                    $($claim_lock)?
                ))
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await
                .context("finding due forwards")?;
                if due.is_empty() {
                    return Ok(Vec::new());
                }
                insert_steps(&mut tx, &crate::inbox::interrupted_steps(&due)?).await?;
                let token = self.tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let ids: Vec<i64> = due
                    .iter()
                    .map(|r| r.try_get("id"))
                    .collect::<Result<_, _>>()
                    .context("reading due forwards")?;
                sql::query(concat!(
                    "UPDATE forwards SET locked_until_ms = $2, lease_token = $3, attempts = attempts + 1, \
                     updated_at_ms = $4 WHERE id IN ",
                    $ids_in
                ))
                .bind_ids(&ids)
                .bind(crate::inbox::lease_until(now_ms, lease_ms))
                .bind(token)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("leasing forwards")?;
                tx.commit().await.context("committing a forward claim")?;
                due.iter().map(|r| crate::inbox::claimed_forward(r, token)).collect()
            }

            async fn complete_forwards(
                &self,
                completions: Vec<crate::ForwardCompletion>,
                now_ms: i64,
            ) -> Result<Vec<crate::Recorded>, crate::error::StoreError> {
                crate::error::retry_conflicts!(async {
                    let mut tx = self.begin().await?;
                    insert_steps(&mut tx, &crate::inbox::completion_steps(&completions)).await?;
                    // Each transition applies only while the forward still carries its
                    // claim's lease token (compare-and-set), read first so that each
                    // result is judged by its own token, and, where rows are locked,
                    // locked (in id order) so that no claim takes the lease over before
                    // the transition is written.
                    let ids: Vec<i64> = completions.iter().map(|c| c.id).collect();
                    let tokens: std::collections::HashMap<i64, i64> = sql::query(concat!(
                        "SELECT id, lease_token FROM forwards \
                         WHERE state = 'pending' AND lease_token IS NOT NULL AND id IN ",
                        $ids_in,
                        " ORDER BY id",
                        $($lock)?
                    ))
                    .bind_ids(&ids)
                    .fetch_all(&mut *tx)
                    .await
                    .context("reading forward leases")?
                    .iter()
                    .map(|r| Ok((r.try_get("id")?, r.try_get("lease_token")?)))
                    .collect::<Result<_, sqlx::Error>>()
                    .context("reading forward leases")?;
                    let recorded = crate::inbox::judge(&completions, &tokens);
                    let changes = crate::inbox::forward_changes(&completions, &recorded, now_ms);
                    if !changes.is_empty() {
                        sql::query(crate::inbox::statements::update_joined!(
                            $update,
                            "forwards",
                            $forward_changes,
                            state = "u.state",
                            available_at_ms = "COALESCE(u.available_at_ms, forwards.available_at_ms)",
                            previous_delay_ms = "COALESCE(u.delay_ms, forwards.previous_delay_ms)",
                            last_error = "u.error",
                            dead_at_ms = "u.dead_at_ms",
                            locked_until_ms = "NULL",
                            lease_token = "NULL",
                            attempts = "forwards.attempts - u.given_back",
                            updated_at_ms = "$1",
                            changed_by = "'forwarder'",
                        ))
                        .bind(now_ms)
                        .bind_forward_changes(&changes)
                        .execute(&mut *tx)
                        .await
                        .context("completing forwards")?;
                    }
                    tx.commit().await.context("committing forward results")?;
                    Ok::<_, crate::error::StoreError>(recorded)
                })
            }
        }

        /// Applies the new events' reports ([`crate::inbox::Ledger::apply`]) to
        /// the operations they name, read once (where rows are locked, locked
        /// first, their messages before them), writes the operations that
        /// changed and closes the outbox messages of those an event settled;
        /// the ledger steps go to `batch.steps`.
        async fn apply_reports(
            conn: &mut $conn,
            batch: &mut crate::inbox::Batch<'_>,
            now_ms: i64,
        ) -> Result<(), crate::error::StoreError> {
            if batch.reports.is_empty() {
                return Ok(());
            }
            let ids: Vec<i64> = sql::query(concat!(
                "SELECT o.id FROM ",
                $keys,
                " JOIN operations o ON o.provider = k.provider AND o.reference = k.reference"
            ))
            .bind_keys(&batch.reports)
            .fetch_all(&mut *conn)
            .await
            .context("finding the events' operations")?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()
            .context("finding the events' operations")?;
            // Only the operations found above are locked and read: one created
            // meanwhile has its message unlocked, and counts as not there yet (as
            // if its event had come first).
            let rows = if ids.is_empty() {
                Vec::new()
            } else {
                $(
                    sql::query(concat!(
                        "SELECT id FROM outbox WHERE operation_id IN ",
                        $ids_in,
                        " ORDER BY id",
                        $lock
                    ))
                    .bind_ids(&ids)
                    .execute(&mut *conn)
                    .await
                    .context("locking the events' outbox messages")?;
                )?
                // Read after the messages are locked, so `dead` and the status
                // are what the relay left.
                sql::query(concat!(
                    "SELECT o.id, o.provider, o.reference, o.status, o.event_version, \
                     EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id AND x.state = 'dead') \
                       AS dead \
                     FROM operations o WHERE o.id IN ",
                    $ids_in,
                    " ORDER BY o.id",
                    $($operations_lock)?
                ))
                .bind_ids(&ids)
                .fetch_all(&mut *conn)
                .await
                .context("reading the events' operations")?
            };
            let mut ledger = crate::inbox::Ledger::read(&rows)?;
            ledger.apply(&batch.reports, &mut batch.steps, now_ms);
            let changes = ledger.changes();
            if changes.is_empty() {
                return Ok(());
            }
            // A settled operation needs no lookup and keeps no error; an attempt
            // still in flight loses its lease, so its late result cannot overwrite
            // what the provider said.
            sql::query(crate::inbox::statements::update_joined!(
                $update,
                "operations",
                $changes,
                status = "u.status",
                event_version = "u.version",
                provider_ref = "COALESCE(operations.provider_ref, u.provider_ref)",
                last_error = "CASE WHEN u.settled THEN NULL WHEN u.conflict THEN $2 ELSE operations.last_error END",
                next_reconcile_at_ms = "CASE WHEN u.settled THEN NULL WHEN u.conflict THEN $1 \
                    ELSE operations.next_reconcile_at_ms END",
                reconcile_attempts = "CASE WHEN u.conflict THEN 0 ELSE operations.reconcile_attempts END",
                updated_at_ms = "CASE WHEN u.settled OR u.conflict THEN $1 ELSE operations.updated_at_ms END",
                changed_by = "'webhook'",
            ))
            .bind(now_ms)
            .bind(crate::inbox::CONFLICT_NOTE)
            .bind_changes(&changes)
            .execute(&mut *conn)
            .await
            .context("applying events to operations")?;
            // The operation's hold may have ended (or be ending now, in a
            // sweep that read the earlier outcome) on the earlier outcome: the
            // ledger's sweep checks it again. Every state is marked, so this
            // waits for a sweep that holds the hold's lock, and marks what it
            // wrote.
            let changed: Vec<i64> = changes.iter().map(|c| c.id).collect();
            sql::query(concat!(
                "UPDATE ledger_transfers SET recheck = 1 WHERE id IN \
                 (SELECT hold_id FROM operations WHERE hold_id IS NOT NULL AND id IN ",
                $ids_in,
                ")"
            ))
            .bind_ids(&changed)
            .execute(&mut *conn)
            .await
            .context("marking holds whose operation's outcome changed")?;
            let settled: Vec<i64> = changes.iter().filter(|c| c.settled).map(|c| c.id).collect();
            if settled.is_empty() {
                return Ok(());
            }
            // A dead letter stays one unless the provider says the operation
            // succeeded (replaying it then would be wrong): the status just
            // written is the event's.
            sql::query(concat!(
                "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, \
                 lease_token = NULL, dead_at_ms = NULL, updated_at_ms = $2, changed_by = 'webhook' \
                 WHERE operation_id IN ",
                $ids_in,
                " AND (state = 'pending' OR (state = 'dead' \
                 AND (SELECT status FROM operations WHERE id = outbox.operation_id) = 'succeeded'))"
            ))
            .bind_ids(&settled)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("closing settled operations' messages")?;
            Ok(())
        }

        /// Appends history steps, `(event seq, step)`, in one statement, in
        /// order.
        async fn insert_steps(
            conn: &mut $conn,
            steps: &[(i64, crate::EventStep)],
        ) -> Result<(), crate::error::StoreError> {
            if steps.is_empty() {
                return Ok(());
            }
            sql::query(concat!(
                "INSERT INTO inbox_steps (event_seq, kind, at_ms, duration_ms, status_code, operation_id, \
                 effect, detail) \
                 SELECT event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail FROM ",
                $steps,
                " ORDER BY n"
            ))
            .bind_steps(steps)
            .execute(conn)
            .await
            .context("appending to events' histories")?;
            Ok(())
        }
    };
}

pub(crate) use {inbox_statements, insert_returning_events, update_joined};
