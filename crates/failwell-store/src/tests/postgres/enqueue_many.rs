//! PostgreSQL only: `failwell_enqueue`, many intents of one provider
//! operation in one statement (migration 0021).

use sqlx::PgPool;

use super::store;

/// One row a call returns: the operation's id, its key, whether the call
/// created it.
type Written = (i64, String, bool);

/// A message as the first test reads it: its operation's id, reference,
/// ordering key, delay in ms, whether it has a `not_before_ms`, its
/// `created` history rows and who it says created it (`created_by`).
type Message = (i64, Option<String>, Option<String>, i64, bool, i64, Option<String>);

/// An intent as the view and `failwell_enqueue` must write it alike: its
/// payload, request hash, status, ordering key, whether it is due in an
/// hour and its `not_before_ms` is that time, its history rows and its
/// `created_by`.
type Alike = (String, String, String, String, bool, bool, i64, Option<String>);

/// A batch writes one operation and one message per new intent (its
/// creation is the operation's `created_by`, not a history row), with ids
/// in the payloads' order, ordering keys and `available_at` on the
/// messages, and answers one row per intent in order:
/// a repeat inside the batch and a later call with the same intents are
/// replays that write nothing. The transaction wakes the relays.
#[tokio::test]
async fn a_batch_writes_each_new_intent_once_in_order_and_replays_the_rest() {
    let (schema, s) = store().await;
    let pool = s.pool();
    let mut listener = super::listening(pool).await;
    let call = "SELECT * FROM failwell_enqueue('payments', 'charge', \
                  ARRAY['{\"n\": 1}', '{\"n\": 2}', '{\"n\": 1}', '{\"n\": 3}']::json[], \
                  idempotency_keys => ARRAY[NULL, 'k2', NULL, 'k3'], refs => ARRAY[NULL, 'r2', NULL, NULL], \
                  ordering_keys => ARRAY['acct-1', 'acct-1', 'acct-1', NULL], \
                  available_at => ARRAY[NULL, NULL, NULL, now() + interval '1 hour'])";
    let first: Vec<Written> = sqlx::query_as(call).fetch_all(pool).await.unwrap();
    super::notice_naming(&mut listener, &schema).await;
    let created: Vec<bool> = first.iter().map(|w| w.2).collect();
    assert_eq!(created, [true, true, false, true]);
    assert_eq!(first[0].0, first[2].0, "the repeat is the first intent's operation");
    assert_eq!(first[0].1, first[2].1);
    assert!(first[0].1.starts_with("sha256:"), "{first:?}");
    assert_eq!((first[1].1.as_str(), first[3].1.as_str()), ("k2", "k3"));
    assert!(first[0].0 < first[1].0 && first[1].0 < first[3].0, "{first:?}");

    let rows: Vec<Message> = sqlx::query_as(
        "SELECT o.id, o.reference::text, x.ordering_key, x.available_at_ms - o.created_at_ms, \
           o.not_before_ms IS NOT NULL, \
           (SELECT count(*) FROM history h WHERE h.operation_id = o.id AND h.change = 'created'), \
           o.created_by \
         FROM operations o JOIN outbox x ON x.operation_id = o.id ORDER BY x.id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(ids, [first[0].0, first[1].0, first[3].0], "messages follow the payloads' order");
    assert_eq!((rows[1].1.as_deref(), rows[1].2.as_deref()), (Some("r2"), Some("acct-1")));
    assert_eq!(rows[0].2.as_deref(), Some("acct-1"));
    assert_eq!((rows[0].3, rows[0].4), (0, false));
    assert!(rows[2].3 > 3_500_000 && rows[2].4, "due in an hour: {rows:?}");
    assert!(
        rows.iter().all(|r| (r.5, r.6.as_deref()) == (0, Some("app"))),
        "created by app, no row: {rows:?}"
    );

    let again: Vec<Written> = sqlx::query_as(call).fetch_all(pool).await.unwrap();
    let replayed: Vec<(i64, String, bool)> = first.iter().map(|w| (w.0, w.1.clone(), false)).collect();
    assert_eq!(again, replayed);
    assert_eq!(count(pool, "SELECT count(*) FROM outbox").await, 3);
    let none: Vec<Written> =
        sqlx::query_as("SELECT * FROM failwell_enqueue('payments', 'charge', ARRAY[]::json[])")
            .fetch_all(pool)
            .await
            .unwrap();
    assert!(none.is_empty());
}

/// A batch enqueued from inside an application's own trigger wakes the
/// relays at the commit too.
#[tokio::test]
async fn a_batch_from_an_applications_trigger_wakes_the_relays() {
    let (schema, s) = store().await;
    let pool = s.pool();
    let mut listener = super::listening(pool).await;
    for sql in [
        super::ORDERS_TABLE,
        "CREATE FUNCTION orders_charge() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           PERFORM failwell_enqueue('payments', 'charge', ARRAY[json_build_object('order', NEW.id)], ARRAY[NEW.id]); \
           RETURN NULL; END $$",
        "CREATE TRIGGER orders_charge AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_charge()",
        "INSERT INTO orders VALUES ('o-1')",
    ] {
        sqlx::query(sql).execute(pool).await.unwrap();
    }
    super::notice_naming(&mut listener, &schema).await;
    assert_eq!(count(pool, "SELECT count(*) FROM outbox").await, 1);
}

/// A refused intent refuses the whole batch, with the view's error and the
/// intent's position, and nothing of the batch is written.
#[tokio::test]
async fn one_refused_intent_refuses_the_batch_and_writes_nothing() {
    let (_schema, s) = store_with_one_taken().await;
    let pool = s.pool();
    for (arguments, code, says) in [
        (
            "ARRAY['{\"n\": 1}', '[1]']::json[]",
            "23514",
            "payload must be a JSON object, not array (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', NULL]::json[]",
            "23502",
            "provider, operation and payload are required (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], ordering_keys => ARRAY['a', ' ']",
            "23514",
            "ordering_key must not be empty or blank (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"\\u0024serde_json::private::x\": 1}']::json[]",
            "23514",
            "which failwell's JSON reader reserves (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], idempotency_keys => ARRAY['new', 'taken']",
            "23505",
            "idempotency key taken was already used with a different request (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], idempotency_keys => ARRAY['same', 'same']",
            "23505",
            "idempotency key same was already used with a different request (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], refs => ARRAY['r9', 'r0']",
            "23505",
            "reference r0 already belongs to another operation of provider payments (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], refs => ARRAY['r9', ' ']",
            "23514",
            "operations_reference_not_blank",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], available_at => ARRAY[NULL, 'infinity']::timestamptz[]",
            "23514",
            "is not a time within a year from now (intent 2)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], refs => ARRAY['r9']",
            "2202E",
            "refs has a different number of entries than payloads (2)",
        ),
        (
            "ARRAY['{\"n\": 1}']::json[], hold_ids => ARRAY['no-such-hold']",
            "23514",
            "hold_id \"no-such-hold\" names no transfer",
        ),
        // Holds and references are read by position, whatever the lower bound.
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], hold_ids => '[0:1]={no-such-hold,NULL}'::text[]",
            "23514",
            "hold_id \"no-such-hold\" names no transfer (intent 1)",
        ),
        (
            "ARRAY['{\"n\": 1}', '{\"n\": 2}']::json[], refs => '[0:1]={r0,fresh}'::text[]",
            "23505",
            "reference r0 already belongs to another operation of provider payments (intent 1)",
        ),
        // An intent left out for its reference, although a later one with
        // its key was written: with a key, without one, and inside the batch.
        (
            "ARRAY['{\"p\": 1}', '{\"p\": 2}']::json[], idempotency_keys => ARRAY['dup', 'dup'], \
             refs => ARRAY['r0', 'r-free']",
            "23505",
            "reference r0 already belongs to another operation of provider payments (intent 1)",
        ),
        (
            "ARRAY['{\"p\": 1}', '{\"p\": 1}']::json[], refs => ARRAY['r0', 'r-free']",
            "23505",
            "reference r0 already belongs to another operation of provider payments (intent 1)",
        ),
        (
            "ARRAY['{\"q\": 1}', '{\"q\": 2}', '{\"q\": 2}']::json[], idempotency_keys => ARRAY['a', 'b', 'b'], \
             refs => ARRAY['in', 'in', 'in-2']",
            "23505",
            "reference in already belongs to another operation of provider payments (intent 2)",
        ),
        // The payload is parsed only after the checks that read it as text.
        (
            "ARRAY['{\"a\": \"\\u0000\"}']::json[], idempotency_keys => ARRAY[' ']",
            "23514",
            "provider, operation and idempotency_key must not be empty or blank",
        ),
    ] {
        let error = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM failwell_enqueue('payments', 'charge', {arguments})"
        )))
        .execute(pool)
        .await
        .unwrap_err();
        let error = error.as_database_error().unwrap();
        assert_eq!(error.code().as_deref(), Some(code), "{arguments}: {error}");
        assert!(error.message().contains(says), "{arguments}: {error}");
    }
    assert_eq!(count(pool, "SELECT count(*) FROM operations").await, 1);
    assert_eq!(count(pool, "SELECT count(*) FROM outbox").await, 1);
    assert_eq!(count(pool, "SELECT count(*) FROM history").await, 0, "a creation is no history row");
}

/// The view and `failwell_enqueue` check one intent alike: each refusal
/// has the same SQLSTATE and message on both ways in, and an intent both
/// accept is written alike (ordering key, `available_at`, history).
#[tokio::test]
async fn the_view_and_failwell_enqueue_refuse_and_write_one_intent_alike() {
    let (_schema, s) = store_with_one_taken().await;
    let pool = s.pool();
    // payload, idempotency_key, reference, ordering_key, available_at
    let refused = [
        ["NULL", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"a\": \"\\u0000\"}'", "' '", "NULL", "NULL", "NULL"],
        ["'[1]'", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"a\": 1}'", "NULL", "NULL", "E'\\t'", "NULL"],
        ["'{\"a\": \"' || repeat('x', 1048576) || '\"}'", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"a\": ' || repeat('[', 127) || repeat(']', 127) || '}'", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"a\": 1' || repeat('0', 1000) || '}'", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"\\u0024serde_json::private::x\": 1}'", "NULL", "NULL", "NULL", "NULL"],
        ["'{\"a\": 1}'", "NULL", "NULL", "NULL", "'infinity'"],
        ["'{\"n\": 2}'", "'taken'", "NULL", "NULL", "NULL"],
        ["'{\"n\": 3}'", "'other'", "'r0'", "NULL", "NULL"],
    ];
    for [payload, key, reference, ordering_key, available_at] in refused {
        let view = format!(
            "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference, ordering_key, \
             available_at) VALUES ('payments', 'charge', ({payload})::json, {key}, {reference}, {ordering_key}, \
             ({available_at})::timestamptz)"
        );
        let function = format!(
            "SELECT * FROM failwell_enqueue('payments', 'charge', ARRAY[({payload})::json], ARRAY[{key}]::text[], \
             ARRAY[{reference}]::text[], ARRAY[{ordering_key}]::text[], ARRAY[({available_at})::timestamptz])"
        );
        let [by_view, by_function] = [view, function].map(|sql| async move {
            let error = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap_err();
            let error = error.as_database_error().unwrap();
            (error.code().map(|c| c.into_owned()), error.message().to_owned())
        });
        let (by_view, by_function) = (by_view.await, by_function.await);
        assert!(by_view.1.starts_with("failwell_outbox: "), "{payload}: {by_view:?}");
        assert_eq!(by_view, by_function, "{payload}");
    }
    assert_eq!(count(pool, "SELECT count(*) FROM operations").await, 1);

    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, ordering_key, available_at) \
         VALUES ('payments', 'charge', '{\"n\": 4}', 'by-view', 'acct', now() + interval '1 hour')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "SELECT * FROM failwell_enqueue('payments', 'charge', ARRAY['{\"n\": 4}']::json[], ARRAY['by-function'], \
         ordering_keys => ARRAY['acct'], available_at => ARRAY[now() + interval '1 hour'])",
    )
    .execute(pool)
    .await
    .unwrap();
    let written: Vec<Alike> = sqlx::query_as(
        "SELECT o.payload, o.request_hash, o.status, x.ordering_key, \
           x.available_at_ms - o.created_at_ms BETWEEN 3500000 AND 3600000, o.not_before_ms = x.available_at_ms, \
           (SELECT count(*) FROM history h WHERE h.operation_id = o.id), o.created_by \
         FROM operations o JOIN outbox x ON x.operation_id = o.id \
         WHERE o.idempotency_key IN ('by-view', 'by-function') ORDER BY o.id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(written.len(), 2);
    assert_eq!(written[0], written[1]);
    assert!(written[0].4 && written[0].5 && written[0].6 == 0, "{written:?}");
    assert_eq!(written[0].7.as_deref(), Some("app"));
}

/// The functions an application's statement calls write failwell's tables
/// whatever the application's `search_path`: an application table named
/// like one of failwell's, earlier on the path, gets none of failwell's
/// rows, and the ways in work schema-qualified with failwell's schema off
/// the path.
#[tokio::test]
async fn the_ways_in_write_failwells_tables_whatever_the_applications_search_path() {
    use sqlx::{Connection, Executor};
    let (schema, url) = super::schema().await;
    let _store = crate::PostgresStore::open(&url, 1).await.unwrap();
    let (app, _) = super::schema().await;
    let (ours, theirs) = (schema.name.as_str(), app.name.as_str());
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for table in ["operations", "outbox", "history"] {
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE TABLE {theirs}.{table} (x int)"))).await.unwrap();
    }
    conn.execute(sqlx::AssertSqlSafe(format!("SET search_path = {theirs}, {ours}"))).await.unwrap();
    conn.execute(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{\"n\": 1}', 'on-path-view')",
    )
    .await
    .unwrap();
    conn.execute(
        "SELECT * FROM failwell_enqueue('payments', 'charge', ARRAY['{\"n\": 2}']::json[], ARRAY['on-path'])",
    )
    .await
    .unwrap();
    conn.execute(sqlx::AssertSqlSafe(format!("SET search_path = {theirs}"))).await.unwrap();
    conn.execute(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {ours}.failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{{\"n\": 3}}', 'off-path-view')"
    )))
    .await
    .unwrap();
    conn.execute(sqlx::AssertSqlSafe(format!(
        "SELECT * FROM {ours}.failwell_enqueue('payments', 'charge', ARRAY['{{\"n\": 4}}']::json[], ARRAY['off-path'])"
    )))
    .await
    .unwrap();
    let error = conn
        .execute(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {ours}.failwell_transfers (id, debit_account, credit_account, amount) \
             VALUES ('t', 'nobody', 'no-one', 1)"
        )))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("failwell_transfers: "), "{error}");
    // The intents' creations are on their operations: no history rows.
    for (table, written) in [("operations", 4), ("outbox", 4), ("history", 0)] {
        let failwells: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {ours}.{table}")))
                .fetch_one(&mut conn)
                .await
                .unwrap();
        let applications: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {theirs}.{table}")))
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!((failwells, applications), (written, 0), "{table}");
    }
}

/// `failwell_enqueue` plans each call for its batch (`plan_cache_mode =
/// force_custom_plan`, migration 0025) and keeps failwell's schema on its
/// `search_path`. Without the first, PostgreSQL may use a generic plan from
/// a session's sixth call on, which joins a large batch by nested loops. A
/// `CREATE OR REPLACE` of the function drops both settings.
#[tokio::test]
async fn failwell_enqueue_plans_every_call_for_its_batch() {
    let (schema, s) = store().await;
    let config: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(proconfig) FROM pg_proc \
         WHERE proname = 'failwell_enqueue' AND pronamespace = $1::text::regnamespace",
    )
    .bind(&schema.name)
    .fetch_all(s.pool())
    .await
    .unwrap();
    assert!(config.iter().any(|c| c == "plan_cache_mode=force_custom_plan"), "{config:?}");
    assert!(config.iter().any(|c| c.starts_with("search_path=")), "{config:?}");
}

/// A store holding one operation, with the idempotency key `taken` and the
/// reference `r0`.
async fn store_with_one_taken() -> (super::Schema, crate::PostgresStore) {
    let (schema, s) = store().await;
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
         VALUES ('payments', 'charge', '{\"n\": 0}', 'taken', 'r0')",
    )
    .execute(s.pool())
    .await
    .unwrap();
    (schema, s)
}

/// The one number `sql` selects.
async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}
