//! The webhook inbox on PostgreSQL: storing events once, applying them to
//! the operations ledger in the same transaction, and the forwarding queue.
//! What is decided and read back is shared ([`crate::inbox`]); this module
//! runs the statements, passing batches as arrays (`unnest`, `= ANY`).
//!
//! Several processes receive, claim and complete at once, so:
//! - receiving takes a transaction-level lock on the inbox first, so events
//!   are stored one transaction at a time and `seq` order is commit order
//!   (SQLite's single writer gives that for free): without it a feed reader
//!   could see `seq` 8 committed while 7 is still in flight, move its cursor
//!   past 7 and never see it;
//! - duplicates are left out by `ON CONFLICT DO NOTHING` (an error would
//!   abort the whole transaction);
//! - the operations the new events name are locked before they are read,
//!   their outbox messages first, then the operations (each in id order),
//!   the order every writer takes them in (the relay locks the message and
//!   then updates its operation), so no two writers wait for each other
//!   in a cycle;
//! - forward claims skip rows another process is claiming (`SKIP LOCKED`),
//!   and completions lock the forwards they judge, so the compare-and-set
//!   on `(id, lease_token)` holds until they are written.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::PostgresStore;
use crate::error::{Context, StoreError};
use crate::inbox::{
    Batch, CONFLICT_NOTE, Ledger, StepColumns, claimed_forward, completion_steps, forward_changes,
    interrupted_steps, judge, lease_until,
};
use crate::model::{
    ClaimedForward, EventRecord, EventStep, ForwardCompletion, NewEvent, OperationEvent, Received, Recorded,
    StoredEvent,
};

crate::inbox::inbox_reads!(sqlx::PgPool, "octet_length(payload)::bigint");

impl PostgresStore {
    /// Stores a batch of events in a fixed number of statements, whatever
    /// its size: the inbox lock, one insert of every event, one read of the
    /// operations the new events name and one lock each of their messages
    /// and of them, one update of those that change, one close of their
    /// outbox messages, one insert of the history steps and one of the
    /// forwards. The ledger rule runs in between, in arrival order, on the
    /// locked rows.
    pub(super) async fn receive_events(
        &self,
        events: Vec<NewEvent>,
        now_ms: i64,
    ) -> Result<Vec<Received>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
        // Held until the commit: the next batch takes its `seq`s only once
        // this one is visible (see the module docs). Keyed by the table's
        // oid, so stores in other schemas of the database do not wait.
        sqlx::query("SELECT pg_advisory_xact_lock('inbox_events'::regclass::oid::bigint)")
            .execute(&mut *tx)
            .await
            .context("locking the inbox")?;
        let integrations: Vec<&str> = events.iter().map(|e| e.integration.as_str()).collect();
        let event_ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        let payloads: Vec<&[u8]> = events.iter().map(|e| e.payload.as_slice()).collect();
        let headers: Vec<String> = events.iter().map(|e| e.headers.to_string()).collect();
        // In arrival order, so `seq`s follow it and the first delivery of a
        // key is the one stored (the others conflict with it and are left
        // out).
        let inserted = sqlx::query(
            "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
             SELECT integration, event_id, payload, headers, $5 \
             FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[]) WITH ORDINALITY \
               AS u(integration, event_id, payload, headers, n) ORDER BY n \
             ON CONFLICT (integration, event_id) DO NOTHING RETURNING seq, integration, event_id",
        )
        .bind(&integrations)
        .bind(&event_ids)
        .bind(&payloads)
        .bind(&headers)
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .context("storing webhook events")?;
        let mut batch = Batch::new(&events, &inserted, now_ms)?;
        apply_reports(&mut tx, &mut batch, now_ms).await?;
        insert_steps(&mut tx, &batch.steps).await?;
        if !batch.forwards.is_empty() {
            sqlx::query(
                "INSERT INTO forwards (event_seq, available_at_ms, created_at_ms, updated_at_ms) \
                 SELECT seq, $2, $2, $2 FROM unnest($1::bigint[]) WITH ORDINALITY AS u(seq, n) ORDER BY n",
            )
            .bind(&batch.forwards)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .context("queueing events for forwarding")?;
        }
        tx.commit().await.context("committing webhook events")?;
        Ok(batch.received())
    }

    pub(super) async fn stored_events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        reads::events_after(&self.pool, after, limit, max_bytes).await
    }

    pub(super) async fn events_of_operation(
        &self,
        operation_id: i64,
    ) -> Result<Vec<OperationEvent>, StoreError> {
        reads::operation_events(&self.pool, operation_id).await
    }

    pub(super) async fn event_record(
        &self,
        integration: &str,
        event_id: &str,
    ) -> Result<Option<EventRecord>, StoreError> {
        reads::event(&self.pool, integration, event_id).await
    }

    pub(super) async fn claim_due_forwards(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedForward>, StoreError> {
        let mut tx = self.begin().await?;
        // Forwards another process is claiming or completing are skipped,
        // not waited for; only the forwards are locked (the events are
        // append-only).
        let due = sqlx::query(
            "SELECT f.id, f.attempts, f.previous_delay_ms, f.locked_until_ms, f.updated_at_ms, e.seq, \
             e.integration, e.event_id, e.payload, e.headers, e.received_at_ms \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq \
             WHERE f.state = 'pending' AND f.available_at_ms <= $1 \
             AND (f.locked_until_ms IS NULL OR f.locked_until_ms <= $1) \
             ORDER BY f.available_at_ms, f.id LIMIT $2 FOR UPDATE OF f SKIP LOCKED",
        )
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .context("finding due forwards")?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        insert_steps(&mut tx, &interrupted_steps(&due)?).await?;
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<i64> =
            due.iter().map(|r| r.try_get("id")).collect::<Result<_, _>>().context("reading due forwards")?;
        sqlx::query(
            "UPDATE forwards SET locked_until_ms = $2, lease_token = $3, attempts = attempts + 1, \
             updated_at_ms = $4 WHERE id = ANY($1)",
        )
        .bind(&ids)
        .bind(lease_until(now_ms, lease_ms))
        .bind(token)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("leasing forwards")?;
        tx.commit().await.context("committing a forward claim")?;
        due.iter().map(|r| claimed_forward(r, token)).collect()
    }

    pub(super) async fn complete_claimed_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> Result<Vec<Recorded>, StoreError> {
        let mut tx = self.begin().await?;
        insert_steps(&mut tx, &completion_steps(&completions)).await?;
        // Each transition applies only while the forward still carries its
        // claim's lease token (compare-and-set), read first so that each
        // result is judged by its own token, and locked (in id order) so
        // that no claim takes the lease over before the transition is
        // written.
        let ids: Vec<i64> = completions.iter().map(|c| c.id).collect();
        let tokens: HashMap<i64, i64> = sqlx::query(
            "SELECT id, lease_token FROM forwards WHERE state = 'pending' AND lease_token IS NOT NULL \
             AND id = ANY($1) ORDER BY id FOR UPDATE",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .context("reading forward leases")?
        .iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("lease_token")?)))
        .collect::<Result<_, sqlx::Error>>()
        .context("reading forward leases")?;
        let recorded = judge(&completions, &tokens);
        let changes = forward_changes(&completions, &recorded, now_ms);
        if !changes.is_empty() {
            let mut columns = ForwardColumns::default();
            for c in &changes {
                columns.id.push(c.id);
                columns.state.push(c.state);
                columns.available_at_ms.push(c.available_at_ms);
                columns.delay_ms.push(c.delay_ms);
                columns.error.push(c.error);
                columns.dead_at_ms.push(c.dead_at_ms);
                columns.given_back.push(c.given_back);
            }
            sqlx::query(
                "UPDATE forwards SET state = u.state, \
                 available_at_ms = COALESCE(u.available_at_ms, forwards.available_at_ms), \
                 previous_delay_ms = COALESCE(u.delay_ms, forwards.previous_delay_ms), last_error = u.error, \
                 dead_at_ms = u.dead_at_ms, locked_until_ms = NULL, lease_token = NULL, \
                 attempts = forwards.attempts - u.given_back, updated_at_ms = $8, changed_by = 'forwarder' \
                 FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], \
                   $7::bigint[]) AS u(id, state, available_at_ms, delay_ms, error, dead_at_ms, given_back) \
                 WHERE forwards.id = u.id",
            )
            .bind(&columns.id)
            .bind(&columns.state)
            .bind(&columns.available_at_ms)
            .bind(&columns.delay_ms)
            .bind(&columns.error)
            .bind(&columns.dead_at_ms)
            .bind(&columns.given_back)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .context("completing forwards")?;
        }
        tx.commit().await.context("committing forward results")?;
        Ok(recorded)
    }
}

/// [`crate::inbox::ForwardChange`]s as one array per column.
#[derive(Default)]
struct ForwardColumns<'a> {
    id: Vec<i64>,
    state: Vec<&'static str>,
    available_at_ms: Vec<Option<i64>>,
    delay_ms: Vec<Option<i64>>,
    error: Vec<Option<&'a str>>,
    dead_at_ms: Vec<Option<i64>>,
    given_back: Vec<i64>,
}

/// Applies the new events' reports ([`Ledger::apply`]) to the operations
/// they name, locked (their messages first) before they are read, writes
/// the operations that changed and closes the outbox messages of those an
/// event settled; the ledger steps go to `batch.steps`.
async fn apply_reports(
    conn: &mut PgConnection,
    batch: &mut Batch<'_>,
    now_ms: i64,
) -> Result<(), StoreError> {
    if batch.reports.is_empty() {
        return Ok(());
    }
    let (providers, references): (Vec<&str>, Vec<&str>) =
        batch.reports.iter().map(|(_, r)| (r.provider.as_str(), r.reference.as_str())).unzip();
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM operations \
         WHERE (provider, reference) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
    )
    .bind(&providers)
    .bind(&references)
    .fetch_all(&mut *conn)
    .await
    .context("finding the events' operations")?;
    // Only the operations found above are locked and read: one created
    // meanwhile has its message unlocked, and counts as not there yet (as
    // if its event had come first).
    let rows = if ids.is_empty() {
        Vec::new()
    } else {
        sqlx::query("SELECT id FROM outbox WHERE operation_id = ANY($1) ORDER BY id FOR UPDATE")
            .bind(&ids)
            .execute(&mut *conn)
            .await
            .context("locking the events' outbox messages")?;
        // Read after the messages are locked, so `dead` and the status
        // are what the relay left.
        sqlx::query(
            "SELECT o.id, o.provider, o.reference, o.status, o.event_version, \
             EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id AND x.state = 'dead') AS dead \
             FROM operations o WHERE o.id = ANY($1) ORDER BY o.id FOR UPDATE OF o",
        )
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await
        .context("locking the events' operations")?
    };
    let mut ledger = Ledger::read(&rows)?;
    ledger.apply(&batch.reports, &mut batch.steps, now_ms);
    let changes = ledger.changes();
    if changes.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = changes.iter().map(|c| c.id).collect();
    let statuses: Vec<&str> = changes.iter().map(|c| c.status).collect();
    let versions: Vec<Option<i64>> = changes.iter().map(|c| c.version).collect();
    let settled: Vec<bool> = changes.iter().map(|c| c.settled).collect();
    let provider_refs: Vec<Option<&str>> = changes.iter().map(|c| c.provider_ref).collect();
    let conflicts: Vec<bool> = changes.iter().map(|c| c.conflict).collect();
    // A settled operation needs no lookup and keeps no error; an attempt
    // still in flight loses its lease, so its late result cannot overwrite
    // what the provider said.
    sqlx::query(
        "UPDATE operations SET status = u.status, event_version = u.version, \
         provider_ref = COALESCE(operations.provider_ref, u.provider_ref), \
         last_error = CASE WHEN u.settled THEN NULL WHEN u.conflict THEN $8 ELSE operations.last_error END, \
         next_reconcile_at_ms = CASE WHEN u.settled THEN NULL WHEN u.conflict THEN $7 \
           ELSE operations.next_reconcile_at_ms END, \
         reconcile_attempts = CASE WHEN u.conflict THEN 0 ELSE operations.reconcile_attempts END, \
         updated_at_ms = CASE WHEN u.settled OR u.conflict THEN $7 ELSE operations.updated_at_ms END, \
         changed_by = 'webhook' \
         FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::boolean[], $5::text[], $6::boolean[]) \
           AS u(id, status, version, settled, provider_ref, conflict) \
         WHERE operations.id = u.id",
    )
    .bind(&ids)
    .bind(&statuses)
    .bind(&versions)
    .bind(&settled)
    .bind(&provider_refs)
    .bind(&conflicts)
    .bind(now_ms)
    .bind(CONFLICT_NOTE)
    .execute(&mut *conn)
    .await
    .context("applying events to operations")?;
    // A dead letter stays one unless the provider says the operation
    // succeeded (replaying it then would be wrong).
    sqlx::query(
        "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, lease_token = NULL, \
         dead_at_ms = NULL, updated_at_ms = $4, changed_by = 'webhook' \
         FROM unnest($1::bigint[], $2::text[], $3::boolean[]) AS u(id, status, settled) \
         WHERE outbox.operation_id = u.id AND u.settled \
         AND (outbox.state = 'pending' OR (outbox.state = 'dead' AND u.status = 'succeeded'))",
    )
    .bind(&ids)
    .bind(&statuses)
    .bind(&settled)
    .bind(now_ms)
    .execute(&mut *conn)
    .await
    .context("closing settled operations' messages")?;
    Ok(())
}

/// Appends history steps, `(event seq, step)`, in one statement, in order.
async fn insert_steps(conn: &mut PgConnection, steps: &[(i64, EventStep)]) -> Result<(), StoreError> {
    if steps.is_empty() {
        return Ok(());
    }
    let mut columns = StepArrays::default();
    for s in steps.iter().map(StepColumns::of) {
        columns.event_seq.push(s.event_seq);
        columns.kind.push(s.kind);
        columns.at_ms.push(s.at_ms);
        columns.duration_ms.push(s.duration_ms);
        columns.status_code.push(s.status_code);
        columns.operation_id.push(s.operation_id);
        columns.effect.push(s.effect);
        columns.detail.push(s.detail);
    }
    sqlx::query(
        "INSERT INTO inbox_steps (event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail) \
         SELECT event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail \
         FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
           $7::text[], $8::text[]) WITH ORDINALITY \
           AS s(event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail, n) \
         ORDER BY n",
    )
    .bind(&columns.event_seq)
    .bind(&columns.kind)
    .bind(&columns.at_ms)
    .bind(&columns.duration_ms)
    .bind(&columns.status_code)
    .bind(&columns.operation_id)
    .bind(&columns.effect)
    .bind(&columns.detail)
    .execute(conn)
    .await
    .context("appending to events' histories")?;
    Ok(())
}

/// [`StepColumns`] as one array per column.
#[derive(Default)]
struct StepArrays<'a> {
    event_seq: Vec<i64>,
    kind: Vec<&'a str>,
    at_ms: Vec<i64>,
    duration_ms: Vec<Option<i64>>,
    status_code: Vec<Option<i64>>,
    operation_id: Vec<Option<i64>>,
    effect: Vec<Option<&'static str>>,
    detail: Vec<&'a str>,
}
