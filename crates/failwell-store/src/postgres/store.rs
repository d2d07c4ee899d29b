//! The outbox role on PostgreSQL: the shared statements
//! ([`crate::outbox::statements`]) with row locks, and what is PostgreSQL's own: the
//! claim and lease renewal (its batch of results is in `settle.rs`).

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::PostgresStore;
use super::settle::complete_batch;
use crate::outbox::{CLAIMED_COLUMNS, DUE};

crate::outbox::statements::outbox_statements!(
    store = PostgresStore,
    lock = " FOR UPDATE",
    upsert_message = "ON CONFLICT (operation_id) DO UPDATE SET",
    relay_begin = begin_relay,
);

impl PostgresStore {
    /// Begins a transaction of the relay's: a claim or a batch of results
    /// ([`RELAY_BEGIN`]). Errors: PostgreSQL cannot be reached.
    async fn begin_relay(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.pool().begin_with(RELAY_BEGIN).await.context("beginning a relay transaction")
    }
}

/// The due messages a claim takes (`$1` now, `$2` the limit, `$3` the
/// providers of the scope), each locked until the claim commits; rows
/// another process is claiming are skipped, not waited for (`SKIP
/// LOCKED`). For [`ClaimScope::Providers`], one index range per provider
/// (`LATERAL`), merged in turns: claim order is `turn, available_at_ms, id`;
/// each range starts after the provider's floor (`$6` and `$7`, its
/// `available_at_ms` and `id`, see [`super::floors`]), an index condition.
/// [`ClaimScope::Strays`] reads one index range per provider not in the
/// list: the relay asks for strays every second, and reading past every
/// known provider's pending message took 62 ms at 200,000 of them.
/// [`ClaimScope::All`] is the same with an empty list (`$3` is bound empty):
/// the first `$2` of each provider's range hold the first `$2` of all, so
/// no index of every provider's pending messages is needed (migration
/// 0023).
fn due_messages(scope: &ClaimScope) -> String {
    match scope {
        // The providers that have pending messages, one index probe each
        // (`outbox_provider_due` in provider order, skipping from one
        // provider to the next), then those not in `$3` as for
        // `Providers`: the backlog of known providers is never walked.
        ClaimScope::All | ClaimScope::Strays(_) => format!(
            "SELECT c.*, 1 AS turn FROM ( \
               WITH RECURSIVE present (provider) AS ( \
                 SELECT min(provider) FROM outbox WHERE state = 'pending' \
                 UNION ALL \
                 SELECT (SELECT min(o.provider) FROM outbox o WHERE o.state = 'pending' AND o.provider > p.provider) \
                 FROM present p WHERE p.provider IS NOT NULL) \
               SELECT provider FROM present WHERE provider IS NOT NULL AND NOT (provider = ANY($3)) \
             ) stray CROSS JOIN LATERAL (SELECT {CLAIMED_COLUMNS} FROM outbox x \
               WHERE x.provider = stray.provider AND {DUE} \
               ORDER BY x.available_at_ms, x.id LIMIT $2 FOR UPDATE SKIP LOCKED) c \
             ORDER BY c.available_at_ms, c.id LIMIT $2"
        ),
        ClaimScope::Providers(_) => format!(
            "SELECT * FROM ( \
               SELECT c.*, row_number() OVER (PARTITION BY c.provider ORDER BY c.available_at_ms, c.id) AS turn \
               FROM unnest($3::text[], $6::bigint[], $7::bigint[]) AS wanted (provider, after_at, after_id) \
               CROSS JOIN LATERAL (SELECT {CLAIMED_COLUMNS} FROM outbox x \
                 WHERE x.provider = wanted.provider \
                 AND (x.available_at_ms, x.id) > (wanted.after_at, wanted.after_id) AND {DUE} \
                 ORDER BY x.available_at_ms, x.id LIMIT $2 FOR UPDATE SKIP LOCKED) c \
             ) due ORDER BY turn, available_at_ms, id LIMIT $2"
        ),
    }
}

/// How the relay's transactions begin (its claims and its batches of
/// results): `BEGIN` and the settings of its statements for the rest of
/// the transaction, in one round trip (one simple query of five
/// statements; a `set_config` statement of its own was one more round
/// trip per claim and per batch, a fortieth of failwell's CPU in `perf`).
///
/// The relay's statements are planned with generic plans, planned once
/// per connection instead of for each batch's values (their plans do not
/// depend on the ids, tokens and arrays bound, and planning each execution
/// cost more than running some of them), never reading a whole table, and
/// without JIT compilation.
///
/// A generic plan is made from the table statistics of the moment a
/// connection first runs the statement, and kept. Those can be far from the
/// tables the plan then runs on, both ways. A relay that started on a large
/// backlog joined each batch to `outbox` by a hash join over a sequential
/// scan (17 ms for a claim of 128 over 50,000 messages); one that started
/// on empty tables, with 50,000 messages enqueued a moment later, leased
/// each claim's messages by reading the whole of `outbox` (a table of a
/// few pages costs less to read than any index lookup, as the planner
/// sees it: 20–40 ms a claim). Every statement here reaches `outbox` and
/// `operations` through an index, by primary key or by the due messages'
/// index, so sequential scans are off for them (`enable_seqscan`: the
/// planner then takes an index wherever one serves, whatever the
/// statistics say).
///
/// Whether a statement is compiled by PostgreSQL's JIT is also decided when
/// it is planned (its estimated cost above `jit_above_cost`), and a generic
/// plan keeps that decision: a claim planned over 50,000 messages was
/// compiled again at every execution (40 ms of a claim's 42; a drain of
/// 1,600 messages/s instead of 14,700, medians of 5 in docs/BENCHMARKS.md).
/// The relay's statements are short and run many times, so JIT is off for
/// them.
///
/// `failwell.history_written = on` says that this transaction's statements
/// write the history rows of the state changes they make themselves (the
/// batch statement of [`complete_batch`]), so the history triggers leave
/// them out (migration `0008_relay_history.sql`). The claim's own statement
/// changes no message's state and no operation's status; whatever else
/// writes in these transactions turns the setting off first
/// ([`complete_batch`]).
pub(super) const RELAY_BEGIN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; \
     SET LOCAL enable_seqscan = off; SET LOCAL jit = off; SET LOCAL failwell.history_written = on";

/// Sets `failwell.history_written` (see [`RELAY_BEGIN`]) for the rest of
/// this transaction.
pub(super) fn history_written(on: bool) -> (&'static str, &'static str) {
    ("failwell.history_written", if on { "on" } else { "off" })
}

/// Sets `settings` (name, value) for the rest of this transaction only, in
/// one round trip: other transactions on the connection keep their own.
pub(super) async fn set_local(conn: &mut PgConnection, settings: &[(&str, &str)]) -> Result<(), StoreError> {
    let (names, values): (Vec<&str>, Vec<&str>) = settings.iter().copied().unzip();
    sqlx::query(
        "SELECT set_config(s.name, s.value, true) FROM unnest($1::text[], $2::text[]) AS s (name, value)",
    )
    .bind(names)
    .bind(values)
    .execute(conn)
    .await
    .context("setting the transaction's settings")?;
    Ok(())
}

/// Claims up to `limit` due messages of `scope` under lease `token` until
/// `until_ms`, in claim order, in one statement: the messages are locked
/// and leased, their operations read; an attempt whose lease expired in
/// flight (it may have reached the provider) is written to the history and
/// counted on its operation, whose key counts as used from that claim.
/// Only those operations are written: a first claim leaves its operation
/// untouched until the result is recorded. A claim of
/// [`ClaimScope::Providers`] reads each provider's messages from its floor
/// in `store` and moves the floors on ([`super::floors`]).
async fn lease_due(
    store: &PostgresStore,
    conn: &mut PgConnection,
    now_ms: i64,
    limit: u32,
    until_ms: i64,
    token: i64,
    scope: &ClaimScope,
) -> Result<Vec<Claimed>, StoreError> {
    let providers: &[String] = match scope {
        ClaimScope::All => &[],
        ClaimScope::Strays(providers) | ClaimScope::Providers(providers) => providers,
    };
    let floored = matches!(scope, ClaimScope::Providers(_));
    let starts = if floored { store.floors.starts(now_ms, providers) } else { Vec::new() };
    let (after_at, after_id): (Vec<i64>, Vec<i64>) = starts.iter().map(|s| s.after).unzip();
    let query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH due AS MATERIALIZED ({due}), \
         interrupted AS (INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, \
             duration_ms, status_code, error_kind, classification, outcome, decision) \
           SELECT o.id, 'call', o.attempts + 1, o.provider_key, d.updated_at_ms, $1 - d.updated_at_ms, NULL, \
             'interrupted', 'ambiguous', 'unknown', 'interrupted: the lease expired before a result was recorded' \
           FROM due d JOIN operations o ON o.id = d.operation_id WHERE d.in_flight = 1), \
         counted AS (UPDATE operations o SET attempts = o.attempts + 1, effect_possible = 1, \
             key_first_sent_at_ms = COALESCE(o.key_first_sent_at_ms, d.updated_at_ms) \
           FROM due d WHERE o.id = d.operation_id AND d.in_flight = 1), \
         leased AS (UPDATE outbox x SET locked_until_ms = $4, lease_token = $5, attempts = x.attempts + (x.attempts < 1000000)::int, \
             in_flight = 1, updated_at_ms = $1 WHERE x.id = ANY(ARRAY(SELECT id FROM due))) \
         SELECT d.id AS outbox_id, d.attempts AS message_attempts, d.previous_delay_ms, d.in_flight, \
           o.id, o.idempotency_key, o.provider, o.operation, o.reference, o.payload, o.status, o.key_group, \
           o.provider_key, o.attempts + d.in_flight AS attempts, o.provider_ref, o.response, o.last_error, \
           CASE WHEN d.in_flight = 1 THEN COALESCE(o.key_first_sent_at_ms, d.updated_at_ms) \
             ELSE o.key_first_sent_at_ms END AS key_first_sent_at_ms, \
           false AS dead_letter, o.reconcile_attempts, \
           CASE WHEN d.in_flight = 1 THEN 1 ELSE o.effect_possible END AS effect_possible, o.lookup_misses, \
           o.created_at_ms, COALESCE(o.replayed_at_ms, o.not_before_ms, o.created_at_ms) AS delivery_started_at_ms, \
           o.updated_at_ms, d.operation_id AS message_operation_id, d.provider AS due_provider, d.available_at_ms AS due_at_ms, {STATISTICS_STALE} AS statistics_stale \
         FROM due d LEFT JOIN LATERAL (SELECT * FROM operations o WHERE o.id = d.operation_id OFFSET 0) o ON true \
         ORDER BY d.turn, d.available_at_ms, d.id",
        due = due_messages(scope)
    )))
    .bind(now_ms)
    .bind(i64::from(limit))
    .bind(providers)
    .bind(until_ms)
    .bind(token);
    let rows = if floored { query.bind(&after_at).bind(&after_id) } else { query }
        .fetch_all(&mut *conn)
        .await
        .context("claiming outbox messages")?;
    if floored {
        let taken = rows
            .iter()
            .map(|r| Ok((r.try_get("due_provider")?, r.try_get("due_at_ms")?, r.try_get("outbox_id")?)))
            .collect::<Result<Vec<(&str, i64, i64)>, sqlx::Error>>()
            .context("reading a claimed message")?;
        store.floors.record(now_ms, providers, &starts, limit, taken.into_iter());
    }
    let full = rows.len() == limit as usize;
    if full && rows[0].try_get::<bool, _>("statistics_stale").context("reading a claimed message")? {
        refresh_statistics(conn).await?;
    }
    let mut claimed = Vec::with_capacity(rows.len());
    let mut orphans = Vec::new();
    for r in &rows {
        let outbox_id: i64 = r.try_get("outbox_id").context("reading a claimed message")?;
        if r.try_get::<Option<i64>, _>("id").context("reading a claimed message")?.is_none() {
            let operation_id: i64 = r.try_get("message_operation_id").context("reading a claimed message")?;
            orphans.push((outbox_id, operation_id));
            continue;
        }
        claimed.push(crate::outbox::rows::claimed_from_row(
            r,
            outbox_id,
            "message_attempts",
            token,
            operation_from_row(r)?,
        ));
    }
    if !orphans.is_empty() {
        set_aside_orphans(conn, &orphans, now_ms).await?;
    }
    Ok(claimed)
}

/// Dead-letters each claimed message whose operation is gone (changed
/// behind failwell's back: no foreign key holds a message to its
/// operation), given as `(message id, operation_id)`, alone, so it is never
/// sent and no claim takes it again; the same statement as SQLite's and
/// MySQL's claims. Their history rows are written by the message trigger
/// (`failwell.history_written` is off for these statements only). Rare: one
/// statement each.
async fn set_aside_orphans(
    conn: &mut PgConnection,
    orphans: &[(i64, i64)],
    now_ms: i64,
) -> Result<(), StoreError> {
    set_local(conn, &[history_written(false)]).await?;
    for (id, operation_id) in orphans {
        sqlx::query(crate::outbox::stored::SET_ASIDE_MESSAGE)
            .bind(id)
            .bind(crate::outbox::stored::operation_id_set_aside(&format!(
                "{operation_id} names no operation"
            )))
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("setting aside a message whose operation is gone")?;
    }
    set_local(conn, &[history_written(true)]).await
}

/// Says whether `outbox` holds more than twice the rows the planner's
/// statistics count, and 1,000 more: a boolean column of the claim, read
/// once per statement (an InitPlan, no round trip of its own), from two
/// numbers PostgreSQL keeps: the live rows its statistics system counts,
/// and `pg_class.reltuples` (-1 before the first `ANALYZE`).
const STATISTICS_STALE: &str = "(SELECT pg_stat_get_live_tuples(c.oid) > 2 * greatest(c.reltuples, 0) + 1000 \
     FROM pg_class c WHERE c.oid = 'outbox'::regclass)";

/// Refreshes the planner's statistics of `outbox` and `operations`
/// (`ANALYZE`): called after a full claim, a sign of a backlog, that found
/// them stale ([`STATISTICS_STALE`]). What the relay's plans need is each
/// table's size: the sample is a tenth of PostgreSQL's default
/// (`default_statistics_target` 10, 3,000 rows), and of `operations` only
/// `id` is described (its payloads made an `ANALYZE` of both tables 240 ms
/// at 50,000 messages; this one takes 20 ms). Autovacuum's next `ANALYZE`
/// writes the full statistics again.
///
/// The relay's plans are made from these statistics and kept
/// ([`RELAY_BEGIN`]). Made while the tables held a few messages, they
/// can read every pending message for each batch once a backlog arrives
/// (a drain of 90 messages/s instead of 12,000). `ANALYZE` makes every
/// connection plan those statements again. PostgreSQL's autovacuum does
/// the same, but only at its next round (`autovacuum_naptime`, a minute
/// by default), and not at all where it is off. A role that does not own
/// the tables gets a warning from `ANALYZE`, not an error.
async fn refresh_statistics(conn: &mut PgConnection) -> Result<(), StoreError> {
    set_local(conn, &[("default_statistics_target", "10")]).await?;
    sqlx::query("ANALYZE outbox, operations (id)")
        .execute(&mut *conn)
        .await
        .context("refreshing the statistics of outbox and operations")?;
    Ok(())
}

/// Extends the leases `(id, token)` of `queue` still held to `until_ms`,
/// locking the rows in id order as every writer does. Planned for each
/// call's values (renewals are rare); the rows are reached by primary key
/// with the array of ids, so statistics that still count few pending
/// messages do not turn it into a join over every pending message.
async fn renew_leases(
    pool: &sqlx::PgPool,
    queue: crate::Leased,
    leases: &[(i64, i64)],
    until_ms: i64,
) -> Result<u64, crate::StoreError> {
    use crate::error::Context;
    let table = queue.table();
    let (ids, tokens): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH held AS (SELECT x.id FROM {table} x JOIN unnest($1::bigint[], $2::bigint[]) AS l (id, token) \
           ON l.id = x.id AND l.token = x.lease_token WHERE x.id = ANY($1) AND x.state = 'pending' \
           ORDER BY x.id FOR UPDATE OF x) \
         UPDATE {table} SET locked_until_ms = $3 WHERE id = ANY(ARRAY(SELECT id FROM held))"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(until_ms)
    .execute(pool)
    .await
    .context("renewing leases")?;
    Ok(done.rows_affected())
}
