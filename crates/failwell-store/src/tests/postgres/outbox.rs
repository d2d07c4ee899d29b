//! PostgreSQL only: the outbox as applications use it, across
//! transactions and in plain SQL.

use serde_json::json;

use super::store;
use crate::prelude::*;
use crate::{Channel, ClaimScope, DeadLetterKind, Message, Outbox};

fn charge(key: &str) -> Message {
    Message {
        idempotency_key: Some(key.into()),
        ..Message::new("payments", "charge", json!({"amount": 100, "reference": key}))
    }
}

/// What the HTTP API would refuse, the contract refuses too, with
/// `check_violation` and a message naming what is wrong; nothing is
/// written.
#[tokio::test]
async fn the_sql_contract_refuses_what_the_api_would() {
    let (_schema, s) = store().await;
    for (payload, available_at, reference, says) in [
        ("[1, 2]", "NULL", "NULL", "payload must be a JSON object, not array"),
        ("\"text\"", "NULL", "NULL", "payload must be a JSON object, not string"),
        ("{\"a\": 1}", "'infinity'", "NULL", "is not a time within a year from now"),
        ("{\"a\": 1}", "now() + interval '2 years'", "NULL", "is not a time within a year from now"),
        ("{\"a\": 1}", "NULL", "''", "operations_reference_not_blank"),
        ("{\"a\": 1}", "NULL", "'  '", "operations_reference_not_blank"),
    ] {
        let error = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO failwell_outbox (provider, operation, payload, available_at, reference) \
             VALUES ('payments', 'charge', '{payload}', {available_at}, {reference})"
        )))
        .execute(s.pool())
        .await
        .unwrap_err();
        let error = error.as_database_error().unwrap();
        assert_eq!(error.code().as_deref(), Some("23514"), "{error}");
        assert!(error.message().contains(says), "{error}");
    }
    let big = sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload) \
         VALUES ('payments', 'charge', jsonb_build_object('x', repeat('x', 1100000)))",
    )
    .execute(s.pool())
    .await
    .unwrap_err();
    assert!(big.to_string().contains("at most 1048576"), "{big}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM operations").fetch_one(s.pool()).await.unwrap();
    assert_eq!(count, 0);
}

/// What the application inserts is what failwell stores and sends:
/// numbers with all their digits and their notation, keys in their
/// order, whitespace included (the column is `json`); a `jsonb`
/// value still inserts. What failwell could not read back (nesting
/// deeper than 127, `\u0000`) is refused at the insert.
#[tokio::test]
async fn the_sql_contract_stores_the_payload_as_written() {
    let (_schema, s) = store().await;
    let exact = r#"{"z": 1e-400, "a":123456789012345678901234567890,"m":0.1000000000000000055511151231257827,"n":-9223372036854775809,"big":1e309,"s":"\u00e9"}"#;
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', $1::json, 'exact'), ('payments', 'charge', $2::jsonb, 'binary')",
    )
    .bind(exact)
    .bind(r#"{"b": 1, "a": 2}"#)
    .execute(s.pool())
    .await
    .unwrap();
    let stored: String = sqlx::query_scalar("SELECT payload FROM operations WHERE idempotency_key = 'exact'")
        .fetch_one(s.pool())
        .await
        .unwrap();
    assert_eq!(stored, exact);
    let op = s.operation("exact").await.unwrap().unwrap();
    assert_eq!(op.unreadable, None);
    assert_eq!(
        op.payload.to_string(),
        r#"{"z":1e-400,"a":123456789012345678901234567890,"m":0.1000000000000000055511151231257827,"n":-9223372036854775809,"big":1e+309,"s":"é"}"#
    );
    assert_eq!(s.operation("binary").await.unwrap().unwrap().payload.to_string(), r#"{"a":2,"b":1}"#);
    // The same request with its keys in another order is a replay.
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{\"a\": 2, \"b\": 1}', 'binary')",
    )
    .execute(s.pool())
    .await
    .unwrap();

    let nested = |depth: usize| format!("{{\"a\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload) VALUES ('payments', 'charge', $1::json), \
         ('payments', 'charge', '{\"note\": \"$serde_json::private::Number as text\"}')",
    )
    .bind(nested(127))
    .execute(s.pool())
    .await
    .unwrap();
    for (payload, says) in [
        (nested(128), "payload nests arrays and objects deeper than 127 levels"),
        (r#"{"a": "nul \u0000"}"#.to_string(), "unsupported Unicode escape sequence"),
        (r#"{"a": [{"$serde_json::private::Number": "12"}]}"#.to_string(), "serde_json::private::, which"),
        (r#"{"a": {"\u0024serde_json::private::Number": "12"}}"#.to_string(), "serde_json::private::, which"),
        (r#"{"a": 1e131072}"#.to_string(), "value overflows numeric format"),
        // Within numeric, but 131072 digits written out in full.
        (r#"{"a": [1, {"b": 1e131071}]}"#.to_string(), "more than 1000 digits"),
        (r#"{"a": -1.5e-1000}"#.to_string(), "more than 1000 digits"),
    ] {
        let error = sqlx::query(
            "INSERT INTO failwell_outbox (provider, operation, payload) VALUES ('payments', 'charge', $1::json)",
        )
        .bind(&payload)
        .execute(s.pool())
        .await
        .unwrap_err();
        assert!(error.to_string().contains(says), "{error}");
    }
    for column in ["idempotency_key", "ordering_key"] {
        let blank = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO failwell_outbox (provider, operation, payload, {column}) \
             VALUES ('payments', 'charge', '{{}}', ' \t')"
        )))
        .execute(s.pool())
        .await
        .unwrap_err();
        let blank = blank.as_database_error().unwrap();
        assert_eq!(blank.code().as_deref(), Some("23514"), "{blank}");
        assert!(blank.message().contains(&format!("{column} must not be empty or blank")), "{blank}");
    }
    let claimed = s.claim(i64::MAX / 2, 10, 1_000, &ClaimScope::All).await.unwrap();
    assert_eq!(claimed.len(), 4, "every stored message reads back");
    assert!(claimed.iter().all(|c| c.operation.unreadable.is_none()));
    // A replay (the same key and request) with a blank ordering key is refused too.
    let replay = |ordering_key: &'static str| {
        sqlx::query(
            "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, ordering_key) \
             VALUES ('payments', 'charge', '{}', 'k-replay', $1)",
        )
        .bind(ordering_key)
        .execute(s.pool())
    };
    replay("key-1").await.unwrap();
    let blank = replay(" ").await.unwrap_err();
    assert!(blank.to_string().contains("ordering_key must not be empty or blank"), "{blank}");
}

/// A row another program damaged reads through the view as the
/// JSON string of its text, and the other rows still read.
#[tokio::test]
async fn the_view_shows_a_damaged_row_as_its_text() {
    let (_schema, s) = store().await;
    Outbox::enqueue(&mut *s.pool().acquire().await.unwrap(), &charge("fine"), 1).await.unwrap();
    Outbox::enqueue(&mut *s.pool().acquire().await.unwrap(), &charge("damaged"), 1).await.unwrap();
    sqlx::query("UPDATE operations SET payload = '{\"amount\": ' WHERE idempotency_key = 'damaged'")
        .execute(s.pool())
        .await
        .unwrap();
    let rows: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT idempotency_key, payload::jsonb FROM failwell_outbox ORDER BY id")
            .fetch_all(s.pool())
            .await
            .unwrap();
    assert_eq!(rows[0].1["reference"], "fine");
    assert_eq!(rows[1], ("damaged".to_string(), json!("{\"amount\": ")));
}

/// The SQL key derivation (for applications inserting with plain
/// SQL) is the Rust one.
#[tokio::test]
async fn the_provider_key_in_sql_is_the_rust_one() {
    let (_schema, s) = store().await;
    for (provider, operation, intent, group) in
        [("payments", "charge", "order-1", 0), ("p", "o", "ключ ✓", 3), ("", "", "", 7)]
    {
        let sql: String = sqlx::query_scalar("SELECT failwell_provider_key($1, $2, $3, $4)")
            .bind(provider)
            .bind(operation)
            .bind(intent)
            .bind(group as i32)
            .fetch_one(s.pool())
            .await
            .unwrap();
        assert_eq!(sql, failwell_policy::derive_key(provider, operation, intent, group));
    }
    // A NULL part gives NULL, as it did when the functions were STRICT.
    let nulls: (Option<String>, Option<String>, Option<String>) = sqlx::query_as(
        "SELECT failwell_provider_key('p', NULL, 'i', 0), failwell_provider_key('p', 'o', 'i', NULL), \
         failwell_request_hash('p', 'o', NULL)",
    )
    .fetch_one(s.pool())
    .await
    .unwrap();
    assert_eq!(nulls, (None, None, None));
}

/// However an intent comes in — the view, `Outbox::enqueue`, the view again
/// after a refused insert rolled back to a savepoint, an application's own
/// insert into `operations`, all in one transaction — each operation gets
/// exactly one message (the view writes its own; the `operations_created`
/// trigger writes the others, and leaves only the view's own statement to
/// it) and one `created` event: its `created_by`, or a history row when the
/// insert did not set it, never both. Its history starts with that event.
/// Each committing transaction wakes the relays once (`LISTEN
/// failwell_outbox`).
#[tokio::test]
async fn every_way_in_writes_one_message_one_created_event_and_a_notice() {
    let (schema, s) = store().await;
    let mut listener = super::listening(s.pool()).await;
    let view = "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
                VALUES ('payments', 'charge', '{\"amount\": 1}', $1, $2)";
    let mut tx = s.pool().begin().await.unwrap();
    sqlx::query(view).bind("view-1").bind("r1").execute(&mut *tx).await.unwrap();
    // The setting that spares the trigger does not outlive the view's statement.
    let setting: Option<String> = sqlx::query_scalar("SELECT current_setting('failwell.enqueue', true)")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(setting.as_deref().unwrap_or(""), "");
    Outbox::enqueue(&mut *tx, &charge("api-1"), 1).await.unwrap();
    sqlx::query("SAVEPOINT bad").execute(&mut *tx).await.unwrap();
    let refused = sqlx::query(view).bind("view-bad").bind(" ").execute(&mut *tx).await.unwrap_err();
    assert!(refused.to_string().contains("operations_reference_not_blank"), "{refused}");
    sqlx::query("ROLLBACK TO SAVEPOINT bad").execute(&mut *tx).await.unwrap();
    Outbox::enqueue(&mut *tx, &charge("api-2"), 1).await.unwrap();
    sqlx::query(view).bind("view-2").bind("r2").execute(&mut *tx).await.unwrap();
    sqlx::query(
        "INSERT INTO operations (idempotency_key, provider, operation, payload, request_hash, provider_key, \
           created_at_ms, updated_at_ms, changed_by) \
         VALUES ('own-1', 'payments', 'charge', '{}', failwell_request_hash('payments', 'charge', '{}'), \
           failwell_provider_key('payments', 'charge', 'own-1', 0), 7, 7, 'app')",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    super::notice_naming(&mut listener, &schema).await;

    let rows: Vec<(i64, String, i64, i64, Option<String>)> = sqlx::query_as(
        "SELECT o.id, o.idempotency_key, \
           (SELECT count(*) FROM outbox x WHERE x.operation_id = o.id AND x.state = 'pending'), \
           (SELECT count(*) FROM history h WHERE h.operation_id = o.id AND h.change = 'created'), \
           o.created_by \
         FROM operations o ORDER BY o.id",
    )
    .fetch_all(s.pool())
    .await
    .unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(keys, ["view-1", "api-1", "api-2", "view-2", "own-1"]);
    for (id, key, messages, created_rows, created_by) in &rows {
        let expected = if key == "own-1" { (1, 1, None) } else { (1, 0, Some("app")) };
        assert_eq!((*messages, *created_rows, created_by.as_deref()), expected, "{key}");
        let history = s.history(*id).await.unwrap();
        let first = (history[0].subject, history[0].actor.as_str(), history[0].change.as_str());
        assert_eq!(first, ("operation", "app", "created"), "{key}: {history:?}");
    }

    // A transaction that only calls the Rust API wakes the relays as well.
    let mut tx = s.pool().begin().await.unwrap();
    Outbox::enqueue(&mut *tx, &charge("api-3"), 1).await.unwrap();
    tx.commit().await.unwrap();
    super::notice_naming(&mut listener, &schema).await;
}

/// A message whose operation is gone (changed behind failwell's back: no
/// foreign key holds a message to its operation) is set aside by the claim
/// that meets it, with its history row, and never leased again; the
/// others of that claim are delivered.
#[tokio::test]
async fn a_message_whose_operation_is_gone_is_set_aside_alone() {
    let (_schema, s) = store().await;
    for key in ["before", "orphan", "after"] {
        sqlx::query(
            "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
             VALUES ('payments', 'charge', '{\"a\": 1}', $1)",
        )
        .bind(key)
        .execute(s.pool())
        .await
        .unwrap();
    }
    let orphan: i64 = sqlx::query_scalar(
        "UPDATE outbox SET operation_id = 999999 \
         WHERE operation_id = (SELECT id FROM operations WHERE idempotency_key = 'orphan') RETURNING id",
    )
    .fetch_one(s.pool())
    .await
    .unwrap();
    let later = 4_000_000_000_000;
    let claimed = s.claim(later, 10, 1_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["before", "after"]);
    let (state, error, locked): (String, String, Option<i64>) =
        sqlx::query_as("SELECT state, last_error, locked_until_ms FROM outbox WHERE id = $1")
            .bind(orphan)
            .fetch_one(s.pool())
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), error.as_str(), locked),
        ("dead", "stored operation_id: 999999 names no operation; set aside, not sent", None)
    );
    let changes: Vec<String> =
        sqlx::query_scalar("SELECT change FROM history WHERE subject = 'message' AND subject_id = $1")
            .bind(orphan)
            .fetch_all(s.pool())
            .await
            .unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    // Leases of the others run out; only they are claimed again.
    let again = s.claim(later + 10_000, 10, 1_000, &ClaimScope::All).await.unwrap();
    assert_eq!(again.len(), 2);
    // With nothing to send, it cannot be replayed.
    let refused = s.replay(DeadLetterKind::Message, orphan, Channel::Cli, later).await.unwrap_err();
    assert_eq!(refused.to_string(), "payload is gone with the message's operation");
}
