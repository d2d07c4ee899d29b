//! PostgreSQL only: a relay that starts on a large backlog works it at the
//! cost of the rows it takes, not of the tables' size.

use failwell_policy::Outcome;
use sqlx::Connection;

use super::schema;
use crate::prelude::*;
use crate::tests::{completion, record};
use crate::{ClaimScope, Leased, PostgresStore, Recorded, Transition};

/// Messages waiting when the relay's connections first plan their
/// statements: enough that reading a whole table costs more than an index
/// lookup per row, as the planner sees it.
const BACKLOG: i64 = 20_000;

/// What PostgreSQL's statistics count of `outbox` and of `operations`
/// (in that order, in each pair) so far, once every connection of the pool
/// has reported what it did: rows read by sequential scans, index scans
/// started, and blocks (8 kB pages) of the table and its indexes read or
/// found in the buffer cache.
#[derive(Clone, Copy, Debug)]
struct Reads {
    whole_table_rows: [i64; 2],
    index_scans: [i64; 2],
    blocks: [i64; 2],
}

async fn reads(s: &PostgresStore) -> Reads {
    let mut held = Vec::new();
    for _ in 0..s.pool().size() {
        let mut conn = s.pool().acquire().await.unwrap();
        sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *conn).await.unwrap();
        held.push(conn);
    }
    drop(held);
    let mut conn = s.pool().acquire().await.unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *conn).await.unwrap();
    let counts: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT t.seq_tup_read, t.idx_scan, \
           (io.heap_blks_read + io.heap_blks_hit + io.idx_blks_read + io.idx_blks_hit)::bigint \
         FROM unnest(ARRAY['outbox'::regclass, 'operations'::regclass]) WITH ORDINALITY AS r (relid, n) \
         JOIN pg_stat_user_tables t USING (relid) JOIN pg_statio_user_tables io USING (relid) ORDER BY r.n",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let pair = |f: fn(&(i64, i64, i64)) -> i64| [f(&counts[0]), f(&counts[1])];
    Reads { whole_table_rows: pair(|c| c.0), index_scans: pair(|c| c.1), blocks: pair(|c| c.2) }
}

/// The plans the connections of the pool keep for the relay's claim
/// (`WITH due AS …`) and batch of results (`WITH i AS …`): the first
/// words of each statement and its plan, as `EXPLAIN` prints it, made with
/// JIT allowed for every statement. Fails when no such statement was kept
/// at all.
async fn kept_plans(s: &PostgresStore) -> Vec<(String, Vec<String>)> {
    let mut held = Vec::new();
    let mut plans = Vec::new();
    for _ in 0..s.pool().size() {
        let mut conn = s.pool().acquire().await.unwrap();
        let kept: Vec<(String, String, i32)> = sqlx::query_as(
            "SELECT name, left(statement, 60), cardinality(parameter_types) FROM pg_prepared_statements \
             WHERE generic_plans > 0 AND (statement LIKE 'WITH due AS%' OR statement LIKE 'WITH i AS%')",
        )
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        for (name, statement, parameters) in kept {
            // A plan made now (if the kept one was dropped) is made without
            // JIT: only one the relay kept can show it.
            let mut tx = conn.begin().await.unwrap();
            sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan").execute(&mut *tx).await.unwrap();
            sqlx::query("SET LOCAL jit_above_cost = -1").execute(&mut *tx).await.unwrap();
            let nulls = vec!["NULL"; parameters as usize].join(", ");
            let plan: Vec<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN EXECUTE {name}({nulls})")))
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap();
            plans.push((statement, plan));
        }
        held.push(conn);
    }
    assert!(plans.len() >= 2, "the claim's and the settle's plans were kept");
    plans
}

/// Says whether the batch of results' plan writes the messages one after
/// another in the order the batch is bound (sorted by id), each reached
/// by `outbox`'s primary key: under each `Delete on outbox` (delivered
/// messages) and `Update on outbox` (the others), the scan of `outbox` is
/// the inner side of a nested loop over the batch, with no sort, hash or
/// merge between them. That is the order each write locks them in.
fn writes_in_batch_order(plan: &[String]) -> bool {
    let writes: Vec<usize> = plan
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains("Delete on outbox x") || line.contains("Update on outbox x"))
        .map(|(at, _)| at)
        .collect();
    writes.len() == 2
        && writes.iter().all(|&start| {
            let nodes: Vec<&str> = plan[start + 1..]
                .iter()
                .filter_map(|line| line.trim_start().strip_prefix("->"))
                .map(str::trim_start)
                .take(3)
                .collect();
            matches!(
                nodes.as_slice(),
                [join, batch, messages] if join.starts_with("Nested Loop")
                    && batch.starts_with("CTE Scan on i ")
                    && messages.starts_with("Index Scan using outbox_pkey on outbox x")
            )
        })
}

/// Enqueues the messages `seqs` (their payload's `seq`) for `payments`
/// through the SQL contract, in one statement. Every other message has an
/// ordering key, one of a thousand, so claims check for earlier messages
/// of the same key.
async fn enqueue(s: &PostgresStore, seqs: std::ops::Range<i64>) {
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, ordering_key) \
         SELECT 'payments', 'charge', jsonb_build_object('amount', 100, 'seq', g), \
           CASE WHEN g % 2 = 1 THEN 'customer-' || g % 1000 END \
         FROM generate_series($1, $2 - 1) g",
    )
    .bind(seqs.start)
    .bind(seqs.end)
    .execute(s.pool())
    .await
    .unwrap();
}

/// Works `count` messages the way a relay does, `batch` at a time: claim,
/// renew the leases, record each as a success. Returns the messages
/// worked. Claims once at least, even for none.
async fn work(s: &PostgresStore, count: usize, batch: u32) -> usize {
    let now_ms: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint + 1000")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let scope = ClaimScope::Providers(vec!["payments".into()]);
    let mut worked = 0;
    loop {
        let claimed = s.claim(now_ms, batch, 60_000, &scope).await.unwrap();
        assert_eq!(claimed.len(), batch.min((count - worked) as u32) as usize, "a full claim");
        if claimed.is_empty() {
            return worked;
        }
        let leases: Vec<_> = claimed.iter().map(|c| (c.outbox_id, c.lease_token)).collect();
        assert_eq!(
            s.renew(Leased::Outbox, leases.clone(), now_ms + 120_000).await.unwrap(),
            leases.len() as u64
        );
        let completions = claimed
            .iter()
            .map(|c| {
                let succeeded = Transition::Succeeded { provider_ref: None, response: None };
                completion(c, Some(record(Outcome::Succeeded)), succeeded)
            })
            .collect();
        let recorded = s.complete(completions, now_ms).await.unwrap();
        assert!(recorded.iter().all(|r| *r == Recorded::Applied), "{recorded:?}");
        worked += claimed.len();
        if worked == count {
            return worked;
        }
    }
}

/// Messages waiting.
async fn pending(s: &PostgresStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox WHERE state = 'pending'")
        .fetch_one(s.pool())
        .await
        .unwrap()
}

/// Works a thousand messages of the backlog and asserts what that cost:
/// neither table read from end to end, each row looked up a few times,
/// not once for each row of the batch, no kept plan JIT-compiled, the
/// results' messages locked in id order, and the thousand done.
async fn assert_worked_at_the_cost_of_its_rows(s: &PostgresStore) {
    let pending_before = pending(s).await;
    let before = reads(s).await;
    assert_eq!(work(s, 1_000, 100).await, 1_000);
    let after = reads(s).await;
    let delta =
        |f: fn(&Reads) -> [i64; 2]| std::array::from_fn::<i64, 2, _>(|i| f(&after)[i] - f(&before)[i]);
    let (rows, scans, blocks) =
        (delta(|r| r.whole_table_rows), delta(|r| r.index_scans), delta(|r| r.blocks));
    let read = format!(
        "outbox, operations: {rows:?} rows read by sequential scans, {scans:?} index scans, {blocks:?} blocks"
    );
    assert!(rows.iter().all(|&r| r < BACKLOG), "a whole table read: {read}");
    // A statement that probes an index once per row of the batch for
    // each row of the batch (a nested loop over an `= ANY` scan) makes
    // about a hundred scans a message.
    assert!(scans.iter().all(|&s| s < 10 * 1_000), "index scans per row per row: {read}");
    // Working a message touches 35-55 blocks. One statement that walks a
    // whole index for each row it checks (the claim's check for an earlier
    // message of the same ordering key, through an index that does not
    // start with the key) made it 200.
    assert!(blocks.iter().all(|&b| b < 100 * 1_000), "blocks per message: {read}");
    let plans = kept_plans(s).await;
    let compiled: Vec<_> =
        plans.iter().filter(|(_, plan)| plan.iter().any(|line| line.starts_with("JIT:"))).collect();
    assert!(compiled.is_empty(), "plans kept with JIT compilation: {compiled:#?}");
    // A claim of the relay's providers reads from its floor, an index
    // condition: the messages delivered and leased before it are not
    // walked (postgres/floors.rs).
    let from_floor = |plan: &Vec<String>| {
        plan.iter()
            .any(|line| line.contains("Index Cond") && line.contains("ROW(available_at_ms, id) > ROW("))
    };
    assert!(
        plans.iter().any(|(statement, plan)| statement.starts_with("WITH due AS") && from_floor(plan)),
        "no kept claim reads from a floor: {plans:#?}"
    );
    // Every writer locks messages in id order (the batch is bound sorted).
    for (_, plan) in plans.iter().filter(|(statement, _)| statement.starts_with("WITH i AS")) {
        assert!(writes_in_batch_order(plan), "the results' messages written out of id order: {plan:#?}");
    }
    assert_eq!(pending(s).await, pending_before - 1_000, "the thousand messages worked are done");
}

/// The relay's statements run with plans made once per connection, from
/// the statistics of that moment. Made on a backlog of 20,000 messages,
/// claims, lease renewals and results still reach the rows they need by
/// key.
///
/// PostgreSQL decides at planning whether a statement is worth compiling
/// with its JIT, and a plan kept for reuse keeps that decision: here every
/// statement is worth compiling as the server sees it (`jit_above_cost`
/// 0), and the plans the relay keeps must still not be compiled.
#[tokio::test]
async fn a_relay_planned_on_a_backlog_reads_no_whole_table_and_compiles_nothing() {
    let (_schema, url) = schema().await;
    let application = PostgresStore::open(&url, 2).await.unwrap();
    enqueue(&application, 0..BACKLOG).await;
    sqlx::query("ANALYZE outbox, operations").execute(application.pool()).await.unwrap();
    let s = PostgresStore::open(&format!("{url}%20-cjit_above_cost%3D0"), 4).await.unwrap();
    assert_worked_at_the_cost_of_its_rows(&s).await;
}

/// The other way round: the relay's one connection plans its claim on
/// empty tables and its other statements while they hold a single
/// message, never analyzed (autovacuum is off for them), as on a new
/// database, and a backlog of 20,000 then arrives. Its plans, kept, still
/// reach rows by key.
#[tokio::test]
async fn a_relay_planned_on_empty_tables_works_a_backlog_at_the_cost_of_its_rows() {
    let (_schema, url) = schema().await;
    let application = without_autovacuum(&url).await;
    let s = PostgresStore::open(&format!("{url}%20-cjit_above_cost%3D0"), 1).await.unwrap();
    assert_eq!(work(&s, 0, 100).await, 0, "the claim is planned on empty tables");
    enqueue(&application, -1..0).await;
    assert_eq!(work(&s, 1, 100).await, 1, "the plans are made on one message");
    enqueue(&application, 0..BACKLOG).await;
    assert_worked_at_the_cost_of_its_rows(&s).await;
}

/// A store of one connection, as an application's, on tables whose
/// statistics only change when someone runs `ANALYZE` (autovacuum is off
/// for them).
async fn without_autovacuum(url: &str) -> PostgresStore {
    let application = PostgresStore::open(url, 1).await.unwrap();
    for table in ["outbox", "operations", "attempts"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER TABLE {table} SET (autovacuum_enabled = false)")))
            .execute(application.pool())
            .await
            .unwrap();
    }
    application
}

/// A relay that has delivered a trickle, one message at a time, with
/// statistics taken on those few, then meets a backlog of 20,000: its
/// first full claim refreshes the statistics, and its statements are
/// planned again for tables of that size. (Planned on a few dozen rows,
/// the batch's results were matched to their messages by reading every
/// pending message for each batch: 90 messages/s.)
#[tokio::test]
async fn a_relay_planned_on_a_trickle_works_a_backlog_at_the_cost_of_its_rows() {
    let (_schema, url) = schema().await;
    let application = without_autovacuum(&url).await;
    let s = PostgresStore::open(&format!("{url}%20-cjit_above_cost%3D0"), 1).await.unwrap();
    for seq in -30..0 {
        enqueue(&application, seq..seq + 1).await;
        assert_eq!(work(&s, 1, 100).await, 1);
        if seq == -20 {
            sqlx::query("ANALYZE outbox, operations").execute(application.pool()).await.unwrap();
        }
    }
    enqueue(&application, 0..BACKLOG).await;
    // What the application's connection counted reaches the statistics
    // system now rather than within the next ten seconds.
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(application.pool()).await.unwrap();
    // The first claim runs on the old plans, and refreshes the statistics.
    assert_eq!(work(&s, 100, 100).await, 100);
    assert_worked_at_the_cost_of_its_rows(&s).await;
}

/// The relay asks every second for messages of providers its
/// configuration does not know. Beside a backlog of 20,000 at a known
/// provider, the question reads a few index pages, not the backlog.
#[tokio::test]
async fn asking_for_strays_beside_a_backlog_does_not_read_it() {
    let (_schema, url) = schema().await;
    let application = PostgresStore::open(&url, 1).await.unwrap();
    enqueue(&application, 0..BACKLOG).await;
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload) \
         VALUES ('retired', 'charge', '{\"seq\": 1}'), ('zeta', 'charge', '{\"seq\": 2}')",
    )
    .execute(application.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE outbox, operations").execute(application.pool()).await.unwrap();
    let s = PostgresStore::open(&url, 1).await.unwrap();
    let now_ms: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint + 1000")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let before = reads(&s).await;
    let mut strays = Vec::new();
    for known in [vec!["payments".to_string()], vec!["payments".to_string(), "retired".to_string()]] {
        for _ in 0..10 {
            let claimed = s.claim(now_ms, 100, 60_000, &ClaimScope::Strays(known.clone())).await.unwrap();
            strays.extend(claimed.into_iter().map(|c| c.operation.provider));
        }
    }
    let after = reads(&s).await;
    assert_eq!(strays, ["retired", "zeta"], "each stray claimed once, oldest first, known ones left");
    let blocks = after.blocks[0] - before.blocks[0];
    // Walking the backlog to find them touched over a thousand blocks a
    // question.
    assert!(blocks < 20 * 50, "20 questions touched {blocks} blocks of outbox");
}
