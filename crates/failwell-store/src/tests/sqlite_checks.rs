//! SQLite stores any value in any column: the schema's checks (migration
//! 0009) refuse what failwell could not read, and a row damaged before they
//! existed is set aside alone.

use serde_json::json;

use crate::prelude::*;

use crate::{ClaimScope, DeadLetterFilter, NewOperation, OperationStatus, SqliteStore, Synchronous};

async fn store(keys: &[&str]) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = SqliteStore::open(&url, Synchronous::Normal).await.unwrap();
    for key in keys {
        let op = NewOperation {
            idempotency_key: (*key).into(),
            provider: "payments".into(),
            operation: "charge".into(),
            reference: Some(format!("ref-{key}")),
            payload: json!({"amount": 100}),
            hold: None,
        };
        s.submit(op, 1).await.unwrap();
    }
    (dir, s)
}

/// `UPDATE outbox SET {set}` of the message of `key`.
fn damage(set: &str, key: &str) -> String {
    format!(
        "UPDATE outbox SET {set} WHERE operation_id = (SELECT id FROM operations WHERE idempotency_key = '{key}')"
    )
}

/// Every write the re-attacks made behind failwell's back is refused,
/// naming the column; the message goes on as if nothing was tried.
#[tokio::test]
async fn the_schema_refuses_what_failwell_could_not_read() {
    let (_d, s) = store(&["k"]).await;
    let refused = [
        (damage("attempts = 1.5", "k"), "outbox.attempts must be a count from 0 to 2147483647"),
        (damage("attempts = -1", "k"), "outbox.attempts must be a count"),
        (damage("dead_at_ms = 'yesterday'", "k"), "outbox.dead_at_ms must be milliseconds since 1970 or NULL"),
        (damage("last_error = x'00ff'", "k"), "outbox.last_error must be text or NULL"),
        (damage("provider = x'00'", "k"), "outbox.provider must be text"),
        (damage("updated_at_ms = -9223372036854775808", "k"), "outbox.updated_at_ms must be milliseconds"),
        (damage("available_at_ms = 'soon'", "k"), "outbox.available_at_ms must be milliseconds"),
        (damage("locked_until_ms = 'later'", "k"), "outbox.locked_until_ms must be milliseconds"),
        (damage("in_flight = 2", "k"), "outbox.in_flight must be 0 or 1"),
        (damage("operation_id = 999", "k"), "outbox.operation_id must name an operation"),
        (damage("operation_id = 'one'", "k"), "outbox.operation_id must name an operation"),
        ("UPDATE operations SET attempts = 'many'".into(), "operations.attempts must be a count"),
        ("UPDATE operations SET payload = x'7b7d'".into(), "operations.payload must be text"),
        ("UPDATE operations SET effect_possible = 0.5".into(), "operations.effect_possible must be 0 or 1"),
        ("UPDATE operations SET id = 77".into(), "operations.id cannot change"),
        ("DELETE FROM operations".into(), "an operation with an outbox message cannot be deleted"),
        (
            "INSERT INTO attempts (operation_id, kind, attempt_no, started_at_ms, duration_ms, outcome, decision) \
             VALUES (1, 'call', 1, 1, 'long', 'unknown', 'x')"
                .into(),
            "attempts.duration_ms must be an integer",
        ),
    ];
    // Another program's connection, with foreign keys off as SQLite's own
    // default has them.
    let mut other = s.pool().acquire().await.unwrap();
    sqlx::query("PRAGMA foreign_keys = OFF").execute(&mut *other).await.unwrap();
    for (statement, says) in &refused {
        let error =
            sqlx::query(sqlx::AssertSqlSafe(statement.as_str())).execute(&mut *other).await.unwrap_err();
        assert!(error.to_string().contains(says), "{statement}: {error}");
    }
    sqlx::query("PRAGMA foreign_keys = ON").execute(&mut *other).await.unwrap();
    drop(other);
    // Writes of values failwell reads are taken, as before.
    sqlx::query(sqlx::AssertSqlSafe(damage("available_at_ms = 5, last_error = 'noted'", "k")))
        .execute(s.pool())
        .await
        .unwrap();
    let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].attempts, claimed[0].operation.unreadable.as_deref()), (1, None));
}

/// Rows damaged before the schema checked them (the checks dropped here to
/// write them) are set aside alone: the claim dead-letters a message
/// without its operation and says why, a damaged time in flight still
/// records its interrupted attempt, dead letters with damaged columns are
/// listed with the damage named, and the others are claimed once.
#[tokio::test]
async fn damage_stored_before_the_checks_is_set_aside_alone() {
    let keys = [
        "before",
        "orphan",
        "text-id",
        "stale-lease",
        "dead-real",
        "dead-text",
        "dead-null",
        "dead-blob",
        "after",
    ];
    let (_d, s) = store(&keys).await;
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' \
         AND (name LIKE '%checked%' OR name IN ('operations_keep_messages', 'operations_id_kept'))",
    )
    .fetch_all(s.pool())
    .await
    .unwrap();
    assert!(triggers.len() > 50, "{triggers:?}");
    let mut old = s.pool().acquire().await.unwrap();
    sqlx::query("PRAGMA foreign_keys = OFF").execute(&mut *old).await.unwrap();
    for name in &triggers {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TRIGGER {name}"))).execute(&mut *old).await.unwrap();
    }
    let dead = "state = 'dead', dead_at_ms = 5, last_error = 'gave up'";
    for statement in [
        damage("operation_id = 999", "orphan"),
        damage("operation_id = 'one'", "text-id"),
        damage("in_flight = 1, locked_until_ms = 0, updated_at_ms = -9223372036854775808", "stale-lease"),
        damage(&format!("{dead}, attempts = 1.5"), "dead-real"),
        damage(&format!("{dead}, attempts = 1, dead_at_ms = 'yesterday'"), "dead-text"),
        damage(&format!("{dead}, attempts = 1, dead_at_ms = NULL"), "dead-null"),
        damage(&format!("{dead}, last_error = x'00ff'"), "dead-blob"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement.as_str())).execute(&mut *old).await.unwrap();
    }
    sqlx::query("PRAGMA foreign_keys = ON").execute(&mut *old).await.unwrap();
    drop(old);

    let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
    let mut keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["after", "before", "stale-lease"]);
    let stale = claimed.iter().find(|c| c.operation.idempotency_key == "stale-lease").unwrap();
    assert!(stale.interrupted && stale.operation.effect_possible);
    let history = s.attempts(stale.operation.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!((history[0].started_at_ms, history[0].duration_ms), (10, 0));
    assert!(s.claim(20, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty());

    let listed = s.dead_letters(DeadLetterFilter::default(), 20).await.unwrap();
    let mut errors: Vec<(String, String)> =
        listed.iter().map(|d| (d.key.clone(), d.last_error.clone().unwrap_or_default())).collect();
    errors.sort();
    for (key, says) in [
        ("", "stored operation_id: 999 names no operation; set aside, not sent"),
        ("", "stored operation_id: "),
        ("dead-blob", "stored last_error: "),
        ("dead-real", "gave up; stored attempts: "),
        ("dead-text", "gave up; stored dead_at_ms: "),
        ("dead-null", "gave up; stored dead_at_ms: is NULL"),
    ] {
        assert!(
            errors.iter().any(|(k, error)| k == key && error.starts_with(says)),
            "no dead letter {key:?} saying {says:?} in {errors:?}"
        );
    }
    assert_eq!(listed.len(), 6);
    assert_eq!(listed.iter().find(|d| d.key == "dead-null").map(|d| d.dead_at_ms), Some(0));
    for key in ["before", "after"] {
        assert_eq!(s.operation(key).await.unwrap().unwrap().status, OperationStatus::Pending);
    }
}

/// A provider name that is not UTF-8 passes every type check (SQLite calls
/// it text): the statistics of every integration are still read, that one
/// shown with U+FFFD for the bytes that cannot be.
#[tokio::test]
async fn a_name_that_is_not_utf8_does_not_fail_the_statistics() {
    let (_d, s) = store(&["fine", "bytes"]).await;
    sqlx::query("UPDATE operations SET provider = CAST(x'70ff' AS TEXT) WHERE idempotency_key = 'bytes'")
        .execute(s.pool())
        .await
        .unwrap();
    let stats = s.stats(10, 60_000, &["payments".to_owned()]).await.unwrap();
    let names: Vec<(&str, u64)> =
        stats.integrations.iter().map(|i| (i.integration.as_str(), i.depth)).collect();
    assert_eq!(names, [("payments", 1), ("p\u{fffd}", 1)]);
}

/// An operation's history stays readable whatever another program wrote
/// into it: text that is not UTF-8 (copied from a message's `last_error` by
/// the history trigger) shows U+FFFD, a time that is not an integer reads
/// as 0 with the damage named.
#[tokio::test]
async fn a_damaged_history_row_does_not_hide_the_history() {
    let (_d, s) = store(&["k"]).await;
    let op = s.operation("k").await.unwrap().unwrap();
    sqlx::query(
        "UPDATE outbox SET state = 'dead', dead_at_ms = 5, last_error = CAST(x'6f6f7073ff' AS TEXT) \
         WHERE operation_id = $1",
    )
    .bind(op.id)
    .execute(s.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change) \
         VALUES ('operation', $1, $1, 1.5, 'app', 'odd')",
    )
    .bind(op.id)
    .execute(s.pool())
    .await
    .unwrap();
    let history = s.history(op.id).await.unwrap();
    assert!(history.iter().any(|e| e.detail.as_deref() == Some("oops\u{fffd}")), "{history:?}");
    let odd = history.iter().find(|e| e.change == "odd").unwrap();
    assert_eq!(odd.at_ms, 0);
    assert!(odd.detail.as_deref().is_some_and(|d| d.starts_with("stored at_ms: ")), "{odd:?}");
}

/// `OR REPLACE` deletes the row a new one collides with; the delete
/// triggers see it, so an operation with a message is never replaced away.
#[tokio::test]
async fn an_operation_with_a_message_cannot_be_replaced_away() {
    let (_d, s) = store(&["a", "b"]).await;
    for statement in [
        "UPDATE OR REPLACE operations SET reference = 'ref-b' WHERE idempotency_key = 'a'",
        "INSERT OR REPLACE INTO operations (idempotency_key, provider, operation, payload, request_hash, status, \
         provider_key, created_at_ms, updated_at_ms, changed_by) \
         VALUES ('b', 'payments', 'charge', '{}', 'h', 'pending', 'fw_x', 1, 1, 'app')",
    ] {
        let refused = sqlx::query(statement).execute(s.pool()).await.unwrap_err();
        assert!(
            refused.to_string().contains("an operation with an outbox message cannot be deleted"),
            "{refused}"
        );
    }
    for key in ["a", "b"] {
        assert_eq!(s.operation(key).await.unwrap().unwrap().reference, Some(format!("ref-{key}")));
    }
}

/// A stored payload that is not UTF-8 passes the type check (SQLite calls
/// it text): the operation is read with the bytes shown lossily (U+FFFD)
/// and the damage named, and the claim sets it aside alone.
#[tokio::test]
async fn a_payload_that_is_not_utf8_is_shown_lossily_and_set_aside() {
    let (_d, s) = store(&["bytes", "fine"]).await;
    sqlx::query(
        r#"UPDATE operations SET payload = CAST(x'7b2261223aff7d' AS TEXT) WHERE idempotency_key = 'bytes'"#,
    )
    .execute(s.pool())
    .await
    .unwrap();
    let op = s.operation("bytes").await.unwrap().unwrap();
    assert_eq!(op.payload, serde_json::json!("{\"a\":\u{fffd}}"));
    assert!(op.unreadable.as_deref().is_some_and(|why| why.starts_with("payload: ")), "{op:?}");
    let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["fine"]);
    let letters = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].key.as_str(), &letters[0].payload),
        ("bytes", &serde_json::json!("{\"a\":\u{fffd}}"))
    );
}
