//! A batch of relay results on PostgreSQL in one statement, whatever its
//! size: the messages move (or leave the outbox, delivered), their attempt
//! rows, the operations' new state and the history, bound as one array per
//! column.

use sqlx::postgres::PgConnection;

use super::PostgresStore;
use super::store::{history_written, set_local};
use super::writes::{insert_attempt, not_applied};
use crate::error::{Context, StoreError};
use crate::outbox::changes::{MessageChange, OperationChange};
use crate::{AttemptRecord, Completion, Recorded};

/// Records a batch of results in one statement: the compare-and-set of
/// every message on `(id, lease_token)` (each message locked in id order,
/// as every writer locks them; a delivered one deleted, any other
/// updated, see [`settle`]), their attempt rows, the new state
/// of the operations whose message moved, and the history rows of those
/// changes, except a plain success's: its attempt row says it
/// (`settled_from`, migration `0017_history_from_attempts.sql`). Results
/// whose lease did not hold (a newer claim took it over, or an event
/// settled the operation) are then looked at one by one: the attempt is
/// written and a call still counts on its operation ([`insert_attempt`]),
/// and [`not_applied`] says what became of it. They are rare.
///
/// A message of an ordering key that leaves `pending` makes the next one of
/// its key due, wherever that one sits in the due messages' index: it is
/// pinned in the claim floors of `store`, so that no floor passes it
/// before a claim takes it ([`super::floors`]).
pub(super) async fn complete_batch(
    store: &PostgresStore,
    conn: &mut PgConnection,
    completions: &[Completion],
    now_ms: i64,
) -> Result<Vec<Recorded>, StoreError> {
    // Round by round: at most one result per operation in each. The
    // transaction began with `failwell.history_written = on` (RELAY_BEGIN).
    let mut writes_history = true;
    let mut recorded: Vec<Option<Recorded>> = completions.iter().map(|_| None).collect();
    for round in crate::outbox::changes::rounds(completions) {
        if !writes_history {
            set_local(conn, &[history_written(true)]).await?;
            writes_history = true;
        }
        let (moved, freed) = settle(conn, round.iter().map(|&i| &completions[i]), now_ms).await?;
        for (provider, at, id) in &freed {
            store.floors.pin(provider, (*at, *id), now_ms);
        }
        for i in round {
            let c = &completions[i];
            recorded[i] = Some(if moved.contains(&c.outbox_id) {
                Recorded::Applied
            } else {
                // Written one by one, the triggers record their history.
                if writes_history {
                    set_local(conn, &[history_written(false)]).await?;
                    writes_history = false;
                }
                if let Some(attempt) = &c.attempt {
                    insert_attempt(conn, c.operation_id, attempt).await?;
                }
                not_applied(conn, c, now_ms).await?
            });
        }
    }
    Ok(recorded.into_iter().flatten().collect())
}

/// The batch statement of [`complete_batch`] for results of distinct
/// operations; returns the ids of the messages whose lease held, and
/// `(provider, available_at_ms, id)` of the next pending message of the
/// ordering key of each of them that left `pending` (as the statement's
/// snapshot sees it, through `outbox_ordering`).
///
/// A message whose delivery succeeded leaves the outbox
/// ([`MessageChange::leaves`]): it is deleted, not kept as `'done'` until
/// retention. A delete writes no index entries and about a fifth of an
/// update's WAL (migration `0026_delivered_leave_outbox.sql`). Any other
/// message is updated (retried, deferred, dead-lettered, or kept as
/// `'done'` for retention when its operation failed or its outcome is
/// unknown).
///
/// The messages are locked in id order, as every writer locks them: the
/// batch is bound sorted by message id and joined to `outbox` by its
/// primary key, one message after another, deleted ones first, then
/// updated ones. A batch that does both locks its messages first, in id
/// order ([`lock_in_id_order`]); a batch that does one of them takes no
/// lock step of its own (one wrote a lock record per message to the WAL,
/// beside the writes' own).
///
/// Under generic plans the planner cannot know a batch's size and joins
/// one CTE to another by nested loops, which is quadratic in the batch: so
/// no step joins two CTEs by a nested loop. The messages whose lease held
/// carry their results on (`moved` returns them), so the history rows and the
/// operations' new state are written from them without looking anything up
/// by message (a lookup of each in an array of the moved ids was quadratic
/// in the batch). Tables are reached by primary key (see [`RELAY_BEGIN`](super::store::RELAY_BEGIN)).
/// An operation's status before the
/// statement (for its history row) is read from `operations` itself: every
/// part of one statement sees the snapshot taken at its start, not the
/// other parts' writes.
async fn settle(
    conn: &mut PgConnection,
    completions: impl Iterator<Item = &Completion>,
    now_ms: i64,
) -> Result<(std::collections::HashSet<i64>, Vec<(String, i64, i64)>), StoreError> {
    let mut completions: Vec<&Completion> = completions.collect();
    completions.sort_unstable_by_key(|c| c.outbox_id);
    let mut b = CompletionBinds::default();
    for c in completions {
        b.push(c, now_ms);
    }
    if b.leaves.contains(&true) && b.leaves.contains(&false) {
        lock_in_id_order(conn, &b.outbox_id).await?;
    }
    let moved: Vec<Moved> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH i AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], \
           $6::bigint[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bool[], $13::text[], \
           $14::bigint[], $15::bigint[], $16::text[], $17::bigint[], $18::bigint[], $19::text[], $20::text[], \
           $21::text[], $22::text[], $23::bigint[], $25::bool[]) \
           AS i (outbox_id, token, operation_id, kind, started_at_ms, duration_ms, status_code, error_kind, \
                 classification, outcome, decision, maybe_acted, state, available_at_ms, delay_ms, error, \
                 dead_at_ms, given_back, status, provider_ref, response, op_error, reconcile_at_ms, leaves)), \
         gone AS (DELETE FROM outbox x USING i \
           WHERE x.id = i.outbox_id AND x.lease_token = i.token AND x.state = 'pending' AND i.leaves \
           RETURNING {returning}), \
         kept AS (UPDATE outbox x SET state = i.state, available_at_ms = COALESCE(i.available_at_ms, x.available_at_ms), \
             previous_delay_ms = COALESCE(i.delay_ms, x.previous_delay_ms), last_error = i.error, \
             dead_at_ms = i.dead_at_ms, in_flight = 0, locked_until_ms = NULL, lease_token = NULL, \
             updated_at_ms = $24, attempts = x.attempts - i.given_back, changed_by = 'relay' \
           FROM i WHERE x.id = i.outbox_id AND x.lease_token = i.token AND x.state = 'pending' AND NOT i.leaves \
           RETURNING {returning}), \
         moved AS (SELECT * FROM gone UNION ALL SELECT * FROM kept), \
         history AS (INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
             status_code, error_kind, classification, outcome, decision, settled_from) \
           SELECT o.id, m.kind, o.attempts + CASE WHEN m.kind = 'call' THEN 1 ELSE 0 END, \
             CASE WHEN m.kind = 'call' THEN o.provider_key END, m.started_at_ms, m.duration_ms, m.status_code, \
             m.error_kind, m.classification, m.outcome, m.decision, CASE WHEN m.on_attempt THEN o.status END \
           FROM moved m JOIN operations o ON o.id = m.operation_id WHERE m.kind IS NOT NULL), \
         logged AS (INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail) \
           SELECT h.subject, h.subject_id, h.operation_id, $24, 'relay', h.change, h.detail FROM ( \
             SELECT m.id AS sort, 0 AS part, 'message' AS subject, m.id AS subject_id, m.operation_id, \
               'pending -> ' || m.state AS change, m.error AS detail \
             FROM moved m WHERE m.state <> 'pending' AND NOT m.on_attempt \
             UNION ALL \
             SELECT m.id, 1, 'operation', m.operation_id, m.operation_id, b.status || ' -> ' || m.status, m.op_error \
             FROM moved m JOIN operations b ON b.id = m.operation_id \
             WHERE b.status IS DISTINCT FROM m.status AND NOT m.on_attempt) h ORDER BY h.sort, h.part), \
         settled AS (UPDATE operations o SET \
             attempts = o.attempts + CASE WHEN m.kind = 'call' THEN 1 ELSE 0 END, \
             effect_possible = CASE WHEN m.maybe_acted THEN 1 ELSE o.effect_possible END, \
             key_first_sent_at_ms = CASE WHEN m.kind = 'call' THEN COALESCE(o.key_first_sent_at_ms, m.started_at_ms) \
               ELSE o.key_first_sent_at_ms END, \
             status = m.status, provider_ref = COALESCE(m.provider_ref, o.provider_ref), \
             response = COALESCE(m.response, o.response), last_error = m.op_error, \
             next_reconcile_at_ms = m.reconcile_at_ms, \
             reconcile_attempts = CASE WHEN m.reconcile_at_ms IS NOT NULL THEN 0 ELSE o.reconcile_attempts END, \
             updated_at_ms = $24, changed_by = 'relay' \
           FROM moved m WHERE o.id = m.operation_id) \
         SELECT m.id, n.provider, n.available_at_ms, n.id FROM moved m LEFT JOIN LATERAL ( \
           SELECT n.provider, n.available_at_ms, n.id FROM outbox n \
           WHERE m.freed_key IS NOT NULL AND n.ordering_key = m.freed_key AND n.state = 'pending' AND n.id <> m.id \
           ORDER BY n.ordering_key, n.id LIMIT 1) n ON true",
        returning = MOVED_COLUMNS,
    )))
    .bind(&b.outbox_id)
    .bind(&b.token)
    .bind(&b.operation_id)
    .bind(&b.kind)
    .bind(&b.started_at_ms)
    .bind(&b.duration_ms)
    .bind(&b.status_code)
    .bind(&b.error_kind)
    .bind(&b.classification)
    .bind(&b.outcome)
    .bind(&b.decision)
    .bind(&b.maybe_acted)
    .bind(&b.state)
    .bind(&b.available_at_ms)
    .bind(&b.delay_ms)
    .bind(&b.error)
    .bind(&b.dead_at_ms)
    .bind(&b.given_back)
    .bind(&b.status)
    .bind(&b.provider_ref)
    .bind(&b.response)
    .bind(&b.op_error)
    .bind(&b.reconcile_at_ms)
    .bind(now_ms)
    .bind(&b.leaves)
    .fetch_all(&mut *conn)
    .await
    .context("recording attempt results")?;
    let freed =
        moved.iter().filter_map(|(_, provider, at, id)| Some((provider.clone()?, (*at)?, (*id)?))).collect();
    Ok((moved.into_iter().map(|(id, ..)| id).collect(), freed))
}

/// What [`settle`]'s deleted and updated messages carry on to the rest of
/// the statement: the message's id and its result, whether the attempt row
/// alone records the change (`on_attempt`), and the ordering key it frees
/// when it leaves `pending` (`freed_key`).
const MOVED_COLUMNS: &str = "x.id, i.operation_id, i.kind, i.started_at_ms, i.duration_ms, i.status_code, \
     i.error_kind, i.classification, i.outcome, i.decision, i.maybe_acted, i.state, i.error, i.status, \
     i.provider_ref, i.response, i.op_error, i.reconcile_at_ms, \
     (i.kind IS NOT NULL AND i.state = 'done' AND i.status = 'succeeded' AND i.error IS NULL \
       AND i.op_error IS NULL) AS on_attempt, \
     CASE WHEN i.state <> 'pending' THEN x.ordering_key END AS freed_key";

/// Locks the messages `ids` (sorted), in id order: the step of a batch of
/// results that deletes some messages and updates others ([`settle`]),
/// which would otherwise lock them in two passes. The rows are reached by
/// primary key.
async fn lock_in_id_order(conn: &mut PgConnection, ids: &[i64]) -> Result<(), StoreError> {
    sqlx::query("SELECT id FROM outbox WHERE id = ANY($1) ORDER BY id FOR UPDATE")
        .bind(ids)
        .execute(conn)
        .await
        .context("locking a batch's messages")?;
    Ok(())
}

/// A row of [`settle`]'s statement: the id of a message whose lease held,
/// then the provider, `available_at_ms` and id of the next pending message
/// of its ordering key, when it left `pending` and has one.
type Moved = (i64, Option<String>, Option<i64>, Option<i64>);

/// A batch of [`Completion`]s as one array per column, for `unnest`.
#[derive(Default)]
struct CompletionBinds {
    outbox_id: Vec<i64>,
    token: Vec<i64>,
    operation_id: Vec<i64>,
    kind: Vec<Option<&'static str>>,
    started_at_ms: Vec<Option<i64>>,
    duration_ms: Vec<Option<i64>>,
    status_code: Vec<Option<i64>>,
    error_kind: Vec<Option<String>>,
    classification: Vec<Option<&'static str>>,
    outcome: Vec<Option<&'static str>>,
    decision: Vec<Option<String>>,
    maybe_acted: Vec<bool>,
    state: Vec<&'static str>,
    available_at_ms: Vec<Option<i64>>,
    delay_ms: Vec<Option<i64>>,
    error: Vec<Option<String>>,
    dead_at_ms: Vec<Option<i64>>,
    given_back: Vec<i64>,
    status: Vec<&'static str>,
    provider_ref: Vec<Option<String>>,
    response: Vec<Option<String>>,
    op_error: Vec<Option<String>>,
    reconcile_at_ms: Vec<Option<i64>>,
    leaves: Vec<bool>,
}

impl CompletionBinds {
    fn push(&mut self, c: &Completion, now_ms: i64) {
        self.outbox_id.push(c.outbox_id);
        self.token.push(c.lease_token);
        self.operation_id.push(c.operation_id);
        let a = c.attempt.as_ref();
        self.kind.push(a.map(|a| a.kind.as_str()));
        self.started_at_ms.push(a.map(|a| a.started_at_ms));
        self.duration_ms.push(a.map(|a| a.duration_ms as i64));
        self.status_code.push(a.and_then(|a| a.status_code.map(i64::from)));
        self.error_kind.push(a.and_then(|a| a.error_kind.clone()));
        self.classification.push(a.and_then(|a| a.classification));
        self.outcome.push(a.map(|a| a.outcome.as_str()));
        self.decision.push(a.map(|a| a.decision.clone()));
        self.maybe_acted.push(a.is_some_and(AttemptRecord::maybe_acted));
        let m = MessageChange::of(&c.transition, now_ms);
        self.state.push(m.state);
        self.available_at_ms.push(m.available_at_ms);
        self.delay_ms.push(m.delay_ms);
        self.error.push(m.error.cloned());
        self.dead_at_ms.push(m.dead_at_ms);
        self.given_back.push(m.given_back);
        self.leaves.push(m.leaves);
        let o = OperationChange::of(&c.transition);
        self.status.push(o.status.as_str());
        self.provider_ref.push(o.provider_ref.map(str::to_owned));
        self.response.push(o.response.map(serde_json::Value::to_string));
        self.op_error.push(o.error.map(str::to_owned));
        self.reconcile_at_ms.push(o.reconcile_at_ms);
    }
}
