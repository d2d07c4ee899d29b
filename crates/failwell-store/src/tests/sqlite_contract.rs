//! The outbox contract on SQLite: an application's own connection inserts
//! into the view `failwell_outbox` (migration 0010), and failwell fills the
//! request hash and the provider key before it claims the message.

use serde_json::json;
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;

use crate::prelude::*;
use crate::{ClaimScope, Message, OperationStatus, Outbox, SqliteStore, StoreError, Submitted, Synchronous};

/// A store, and a pool of the application's own (another connection to
/// the same file, as another process would open it).
async fn store() -> (tempfile::TempDir, SqliteStore, SqlitePool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let s = SqliteStore::open(&format!("sqlite://{}", path.display()), Synchronous::Normal).await.unwrap();
    let options = SqliteConnectOptions::new().filename(&path).busy_timeout(std::time::Duration::from_secs(5));
    let app = SqlitePool::connect_with(options).await.unwrap();
    orders_table(&app).await;
    (dir, s, app)
}

super::contract_cases::contract_cases!(
    clock = "SELECT CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)",
    begin = "BEGIN IMMEDIATE",
    pool = SqlitePool,
    status = "failwell_outbox",
    provisional = "sqlite:%"
);

super::ledger_contract_cases::ledger_contract_cases!(
    clock = "SELECT CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)",
    begin = "BEGIN IMMEDIATE",
    pool = sqlx::SqlitePool,
    insufficient =
        "insufficient funds: the debit account's available balance less the amount would be below its floor",
);

/// Every insert the API would refuse is refused, naming the column; nothing
/// is written.
#[tokio::test]
async fn the_view_refuses_what_the_api_would_naming_the_column() {
    let (_d, _s, app) = store().await;
    let deep = format!("{{\"a\": {}{}}}", "[".repeat(127), "]".repeat(127));
    let cases = [
        ("provider, operation", "'payments', 'charge'", "provider, operation and payload are required"),
        ("provider, payload", "'payments', '{}'", "provider, operation and payload are required"),
        ("provider, operation, payload", "'payments', 'charge', '{'", "payload must be JSON text"),
        ("provider, operation, payload", "'payments', 'charge', x'7b7d'", "payload must be JSON text"),
        (
            "provider, operation, payload",
            "'payments', 'charge', json_object('x', printf('%.1048576c', 'x'))",
            "payload is over 1048576 bytes",
        ),
        (
            "provider, operation, payload",
            &format!("'payments', 'charge', '{deep}'"),
            "deeper than 127 levels",
        ),
        (
            "provider, operation, payload",
            "'payments', 'charge', '{\"a\": [{\"\\u0024serde_json::private::Number\": \"1\"}]}'",
            "$serde_json::private::",
        ),
        (
            "provider, operation, payload, available_at",
            "'payments', 'charge', '{}', 'soon'",
            "available_at is not a time SQLite reads",
        ),
        (
            "provider, operation, payload, available_at",
            "'payments', 'charge', '{}', datetime('now', '+13 months')",
            "available_at is not a time within a year from now",
        ),
        (
            "provider, operation, payload, available_at",
            "'payments', 'charge', '{}', unixepoch('now', '+2 years')",
            "available_at is not a time within a year from now",
        ),
    ];
    for &(columns, values, says) in REFUSED.iter().chain(&cases) {
        let error = insert(&app, columns, values).await.unwrap_err().to_string();
        assert!(error.contains("failwell_outbox: ") && error.contains(says), "{values}: {error}");
    }
    // One level less deep is taken.
    let deepest = format!("{{\"a\": {}{}}}", "[".repeat(125), "]".repeat(125));
    charge(&app, "'deepest'", &deepest).await.unwrap();
    assert_eq!(count(&app, "SELECT count(*) FROM operations").await, 1);
}

/// Rows whose key is not UTF-8 text (`CAST(x'…' AS TEXT)`) are set aside
/// one by one, their keys left as stored; the others are still claimed.
#[tokio::test]
async fn rows_whose_text_is_not_utf8_are_set_aside_and_the_others_delivered() {
    let (_d, s, app) = store().await;
    let payload = r#"{"amount": 1}"#;
    charge(&app, "CAST(x'6bff' AS TEXT)", payload).await.unwrap();
    charge(&app, "CAST(x'6dff' AS TEXT)", r#"{"amount": 2}"#).await.unwrap();
    charge(&app, "'good'", r#"{"amount": 3}"#).await.unwrap();
    let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].operation.idempotency_key, "good");
    let dead = count(
        &app,
        "SELECT count(*) FROM outbox WHERE state = 'dead' AND last_error LIKE \
        'idempotency_key is not UTF-8 text; set aside%'",
    )
    .await;
    assert_eq!(dead, 2);
    let kept = count(
        &app,
        "SELECT count(*) FROM operations WHERE idempotency_key IN \
        (CAST(x'6bff' AS TEXT), CAST(x'6dff' AS TEXT))",
    )
    .await;
    assert_eq!(kept, 2, "the keys are left as stored");
    // A later claim is not stopped by them.
    charge(&app, "'later'", r#"{"amount": 4}"#).await.unwrap();
    let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].operation.idempotency_key, "later");
}

/// Ordering keys and `available_at` (ISO-8601 text or Unix seconds) are
/// kept, shown as ISO-8601 UTC, and respected by the claim.
#[tokio::test]
async fn ordering_keys_and_available_at_are_kept() {
    let (_d, s, app) = store().await;
    let columns = "provider, operation, payload, idempotency_key, ordering_key, available_at";
    insert(&app, columns, "'payments', 'charge', '{\"n\": 1}', 'first', 'customer-7', NULL").await.unwrap();
    insert(&app, columns, "'payments', 'charge', '{\"n\": 2}', 'second', 'customer-7', NULL").await.unwrap();
    // Two days ahead, written with an offset of one hour.
    let (written, utc): (String, String) = sqlx::query_as(
        "SELECT strftime('%Y-%m-%dT%H:%M:%S+01:00', 'now', '+2 days'), \
         strftime('%Y-%m-%dT%H:%M:%S.000Z', 'now', '+2 days', '-1 hour')",
    )
    .fetch_one(&app)
    .await
    .unwrap();
    insert(&app, columns, &format!("'payments', 'charge', '{{\"n\": 3}}', 'later-text', NULL, '{written}'"))
        .await
        .unwrap();
    insert(&app, columns, "'payments', 'charge', '{\"n\": 4}', 'later-unix', NULL, unixepoch('now') + 3600")
        .await
        .unwrap();
    let shown: String =
        sqlx::query_scalar("SELECT available_at FROM failwell_outbox WHERE idempotency_key = 'later-text'")
            .fetch_one(&app)
            .await
            .unwrap();
    assert_eq!(shown, utc);
    let now = now_ms(&app).await + 1;
    let claimed = s.claim(now, 10, 86_400_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["first"], "one message of an ordering key at a time, none before its time");
    let later = now + 3_600_000 + 1_000;
    let claimed = s.claim(later, 10, 86_400_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["later-unix"]);
}

#[tokio::test]
async fn a_transfer_id_holding_u0000_is_refused() {
    let (_d, s, app) = store().await;
    for (id, floor) in [("world", None), ("shop", Some(0))] {
        s.open_account(crate::NewAccount { id: id.into(), unit: "EUR".into(), floor }, 1).await.unwrap();
    }
    let error = sqlx::query(
        "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount) \
         VALUES ('t-' || char(0) || 'x', 'world', 'shop', 5)",
    )
    .execute(&app)
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("id must be 1 to 255 bytes of printable ASCII"), "{error}");
    let transfers: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM ledger_transfers").fetch_one(&app).await.unwrap();
    assert_eq!(transfers, 0);
}
