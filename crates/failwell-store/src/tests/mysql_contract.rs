//! The outbox contract on MySQL and MariaDB: an application's own
//! connection inserts into the table `failwell_outbox` (migration 0002),
//! and failwell fills the request hash and the provider key, then deletes
//! the row, before it claims the message.

use serde_json::json;
use sqlx::MySqlPool;

use super::mysql::{Database, database};
use crate::prelude::*;
use crate::{ClaimScope, Message, MySqlStore, OperationStatus, Outbox, StoreError, Submitted};

/// A store, and a pool of the application's own (at the server's default
/// isolation, as an application's).
async fn store() -> (Database, MySqlStore, MySqlPool) {
    let (database, url) = database().await;
    let s = MySqlStore::open(&url, 4).await.unwrap();
    let app = MySqlPool::connect(&url).await.unwrap();
    orders_table(&app).await;
    (database, s, app)
}

super::contract_cases::contract_cases!(
    clock =
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)",
    begin = "START TRANSACTION",
    pool = MySqlPool,
    status = "failwell_outbox_status",
    provisional = "mysql:%"
);

super::ledger_contract_cases::ledger_contract_cases!(
    clock =
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)",
    begin = "START TRANSACTION",
    pool = sqlx::MySqlPool,
    insufficient = "insufficient funds: account \"wallet\" has 10 available above its floor of 0, 30 asked",
);

/// Claims whatever is due a moment from now, for a minute.
async fn claim(s: &MySqlStore, app: &MySqlPool) -> Vec<crate::Claimed> {
    s.claim(now_ms(app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap()
}

/// Every insert the API would refuse is refused with SQLSTATE 45000 and a
/// message naming the column; nothing is written.
#[tokio::test]
async fn the_table_refuses_what_the_api_would_naming_the_column() {
    let (_d, _s, app) = store().await;
    let long = "x".repeat(256);
    let cases = [
        ("provider, operation", "'payments', 'charge'", "payload is required"),
        ("provider, payload", "'payments', '{}'", "operation is required"),
        ("operation, payload", "'charge', '{}'", "provider is required"),
        (
            "provider, operation, payload, reference",
            &format!("'payments', 'charge', '{{}}', '{long}'"),
            "reference is longer than 255 bytes",
        ),
        ("provider, operation, payload", "'payments', 'charge', '{'", "payload is not JSON"),
        (
            "provider, operation, payload",
            "'payments', 'charge', CONCAT('{\"x\": \"', REPEAT('x', 1048576), '\"}')",
            "payload is over 1048576 bytes",
        ),
        (
            "provider, operation, payload, available_at",
            "'payments', 'charge', '{}', NOW() + INTERVAL 13 MONTH",
            "available_at is not a time within a year from now",
        ),
    ];
    for &(columns, values, says) in REFUSED.iter().chain(&cases) {
        let error = insert(&app, columns, values).await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains("failwell_outbox: ") && text.contains(says), "{values}: {text}");
        let code = error.as_database_error().and_then(|e| e.code()).unwrap_or_default().into_owned();
        assert_eq!(code, "45000", "{values}: {text}");
    }
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox").await, 0);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 0);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox").await, 0);
}

/// A message is not claimed before failwell has filled it: the trigger
/// holds it, and the claim fills and releases it first.
#[tokio::test]
async fn a_message_is_held_until_filled() {
    let (_d, s, app) = store().await;
    let mut conn = app.acquire().await.unwrap();
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{\"amount\": 1}', 'held')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    // The row's operation_id is the message's id.
    let id: i64 = sqlx::query_scalar("SELECT operation_id FROM failwell_outbox WHERE id = LAST_INSERT_ID()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(id, s.operation("held").await.unwrap().unwrap().id);
    let (hash, locked): (String, Option<i64>) = sqlx::query_as(
        "SELECT o.request_hash, x.locked_until_ms FROM operations o JOIN outbox x ON x.operation_id = o.id",
    )
    .fetch_one(&app)
    .await
    .unwrap();
    assert_eq!((hash.as_str(), locked), ("", Some(i64::MAX)));
    let claimed = claim(&s, &app).await;
    assert_eq!(claimed.len(), 1);
    let expected = crate::outbox::request_hash("payments", "charge", &json!({"amount": 1}));
    assert_eq!(
        count(&app, &format!("SELECT COUNT(*) FROM operations WHERE request_hash = '{expected}'")).await,
        1
    );
}

/// Ordering keys and `available_at` (in the connection's time zone) are kept,
/// shown by the status view, and respected by the claim.
#[tokio::test]
async fn ordering_keys_and_available_at_are_kept() {
    let (_d, s, app) = store().await;
    let columns = "provider, operation, payload, idempotency_key, ordering_key, available_at";
    insert(&app, columns, "'payments', 'charge', '{\"n\": 1}', 'first', 'customer-7', NULL").await.unwrap();
    insert(&app, columns, "'payments', 'charge', '{\"n\": 2}', 'second', 'customer-7', NULL").await.unwrap();
    insert(&app, columns, "'payments', 'charge', '{\"n\": 3}', 'later', NULL, NOW(3) + INTERVAL 1 HOUR")
        .await
        .unwrap();
    let ahead: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MINUTE, NOW(), available_at) FROM failwell_outbox_status WHERE idempotency_key = 'later'",
    )
    .fetch_one(&app)
    .await
    .unwrap();
    assert!((59..=60).contains(&ahead), "{ahead}");
    let now = now_ms(&app).await + 1;
    let claimed = s.claim(now, 10, 86_400_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["first"], "one message of an ordering key at a time, none before its time");
    let op = s.operation("later").await.unwrap().unwrap();
    let claimed = s.claim(now + 3_600_000 + 1_000, 10, 86_400_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["later"]);
    assert!(op.delivery_started_at_ms >= now + 3_590_000, "its delivery counts from available_at: {op:?}");
}

/// A replay the trigger took for the same request (arrays compare as sets
/// there) whose request hash differs: the key's message is set aside,
/// never sent, and the other messages are still delivered.
#[tokio::test]
async fn a_replay_whose_hash_differs_is_set_aside_and_the_others_delivered() {
    let (_d, s, app) = store().await;
    charge(&app, "'before'", "{\"amount\": 1}").await.unwrap();
    charge(&app, "'k'", "{\"items\": [1, 2]}").await.unwrap();
    charge(&app, "'k'", "{\"items\": [2, 1]}").await.unwrap();
    charge(&app, "'after'", "{\"amount\": 2}").await.unwrap();
    assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 3, "the insert took it for a replay");
    let claimed = claim(&s, &app).await;
    let mut keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["after", "before"]);
    let op = s.operation("k").await.unwrap().unwrap();
    assert_eq!(op.status, OperationStatus::Failed);
    let error = op.last_error.unwrap_or_default();
    assert!(error.contains("idempotency key k was used again with a different request"), "{error}");
    assert!(error.ends_with("set aside, not sent"), "{error}");
    assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox WHERE state = 'dead'").await, 1);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox").await, 0);
}

/// Two transactions inserting the same key at once: the second waits for
/// the first, then replays it (or is refused if it holds another request).
#[tokio::test]
async fn concurrent_inserts_of_one_key_make_one_message() {
    let (_d, s, app) = store().await;
    let mut first = app.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{\"amount\": 1}', 'same')",
    )
    .execute(&mut *first)
    .await
    .unwrap();
    let second = tokio::spawn({
        let app = app.clone();
        async move { charge(&app, "'same'", "{\"amount\": 1}").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    first.commit().await.unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 1);
    assert_eq!(claim(&s, &app).await.len(), 1);
}

/// A replay whose request differs, found after the key's message was sent:
/// nothing is taken back, and the refusal is in the operation's history.
#[tokio::test]
async fn a_differing_replay_after_the_send_is_written_to_the_history() {
    let (_d, s, app) = store().await;
    charge(&app, "'k'", "{\"items\": [1, 2]}").await.unwrap();
    assert_eq!(claim(&s, &app).await.len(), 1);
    charge(&app, "'k'", "{\"items\": [2, 1]}").await.unwrap();
    assert!(claim(&s, &app).await.is_empty());
    let detail: String = sqlx::query_scalar("SELECT detail FROM history WHERE `change` = 'request refused'")
        .fetch_one(&app)
        .await
        .unwrap();
    assert!(
        detail.contains("was used again with a different request") && detail.ends_with("not sent"),
        "{detail}"
    );
    assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox WHERE state = 'pending' AND in_flight = 1").await, 1);
}

/// An application's transaction left open after its insert holds up no
/// claim: the committed messages are claimed meanwhile (taking the rows
/// over and reading the due messages lock nothing not committed).
#[tokio::test]
async fn an_open_application_transaction_holds_up_no_claim() {
    let (_d, s, app) = store().await;
    charge(&app, "'committed'", "{\"amount\": 1}").await.unwrap();
    let mut open = app.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
         VALUES ('payments', 'charge', '{\"amount\": 2}', 'open')",
    )
    .execute(&mut *open)
    .await
    .unwrap();
    let claimed = tokio::time::timeout(std::time::Duration::from_secs(5), claim(&s, &app)).await;
    let keys: Vec<String> = claimed
        .expect("the claim waited for the open transaction")
        .iter()
        .map(|c| c.operation.idempotency_key.clone())
        .collect();
    assert_eq!(keys, ["committed"]);
    open.commit().await.unwrap();
    assert_eq!(claim(&s, &app).await.len(), 1);
}

/// Two processes taking over the same rows at once: every message is
/// claimed once, key-less copies of one request included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_take_over_each_row_once() {
    let (_d, url) = database().await;
    let (s, other) = (MySqlStore::open(&url, 4).await.unwrap(), MySqlStore::open(&url, 4).await.unwrap());
    let app = MySqlPool::connect(&url).await.unwrap();
    for n in 0..40 {
        charge(&app, &format!("'key-{n}'"), &format!("{{\"n\": {n}}}")).await.unwrap();
        charge(&app, "NULL", &format!("{{\"copy\": {}}}", n % 10)).await.unwrap();
    }
    let now = now_ms(&app).await + 1;
    let claim_all = |store: MySqlStore| async move {
        let mut keys = Vec::new();
        for _ in 0..20 {
            let claimed = store.claim(now, 7, 60_000, &ClaimScope::All).await.unwrap();
            keys.extend(claimed.into_iter().map(|c| c.operation.idempotency_key));
        }
        keys
    };
    let (a, b) = tokio::join!(tokio::spawn(claim_all(s.clone())), tokio::spawn(claim_all(other)));
    let mut keys: Vec<String> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    keys.sort_unstable();
    let claimed = keys.len();
    keys.dedup();
    assert_eq!(claimed, keys.len(), "a message was claimed twice");
    assert_eq!(keys.len(), 50, "40 keyed messages and 10 distinct key-less requests");
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox").await, 0);
}

/// In a database whose default character set is latin1, a replay of a
/// request holding text latin1 has no letters for is still a replay (the
/// trigger's own variables are utf8mb4): one message.
#[tokio::test]
async fn a_replay_is_one_message_whatever_the_database_default_character_set() {
    let (_d, url) = database().await;
    let name = url.rsplit_once('/').unwrap().1.split('?').next().unwrap().to_owned();
    let app = MySqlPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} CHARACTER SET latin1 COLLATE latin1_swedish_ci"
    )))
    .execute(&app)
    .await
    .unwrap();
    let _s = MySqlStore::open(&url, 2).await.unwrap();
    for _ in 0..2 {
        insert(
            &app,
            "provider, operation, payload, idempotency_key",
            "'payments', 'charge', '{\"name\": \"日本 Zoë\"}', 'cjk'",
        )
        .await
        .unwrap();
    }
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox_status").await, 1);
}

/// A row of `failwell_outbox` that another transaction holds locked (an
/// application's locking read) stops nothing: its message and the others
/// are claimed meanwhile, and the row is deleted once released.
#[tokio::test]
async fn a_locked_row_of_the_table_stops_no_message() {
    let (_d, s, app) = store().await;
    charge(&app, "'held'", "{\"amount\": 1}").await.unwrap();
    let held: i64 = sqlx::query_scalar("SELECT id FROM failwell_outbox").fetch_one(&app).await.unwrap();
    let mut holder = app.begin().await.unwrap();
    sqlx::query("SELECT id FROM failwell_outbox WHERE id = ? LOCK IN SHARE MODE")
        .bind(held)
        .execute(&mut *holder)
        .await
        .unwrap();
    charge(&app, "'free'", "{\"amount\": 2}").await.unwrap();
    let claimed = tokio::time::timeout(std::time::Duration::from_secs(10), claim(&s, &app))
        .await
        .expect("the claim waited for the locked row");
    let mut keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["free", "held"]);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox").await, 1, "the locked row is left");
    holder.commit().await.unwrap();
    assert!(claim(&s, &app).await.is_empty());
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_outbox").await, 0, "deleted once released");
}

/// A row of `failwell_transfers` says whether it was a replay, and the next
/// claim deletes the committed rows (the transfers stay in the ledger);
/// a row not yet committed is not waited for.
#[tokio::test]
async fn failwell_transfers_rows_say_replay_and_are_forgotten() {
    use crate::{LedgerStore, NewAccount};
    let (_d, s, app) = store().await;
    for (id, floor) in [("world", None), ("wallet", Some(0))] {
        s.open_account(NewAccount { id: id.into(), unit: "EUR".into(), floor }, 1).await.unwrap();
    }
    let top_up = "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount) \
                  VALUES ('top-up', 'world', 'wallet', 10)";
    for _ in 0..2 {
        sqlx::query(top_up).execute(&app).await.unwrap();
    }
    let replays: Vec<i64> =
        sqlx::query_scalar("SELECT CAST(replay AS SIGNED) FROM failwell_transfers ORDER BY seq")
            .fetch_all(&app)
            .await
            .unwrap();
    assert_eq!(replays, [0, 1]);
    let mut open = app.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount) \
         VALUES ('later', 'world', 'wallet', 5)",
    )
    .execute(&mut *open)
    .await
    .unwrap();
    assert!(claim(&s, &app).await.is_empty());
    open.commit().await.unwrap();
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM failwell_transfers").await,
        1,
        "the later row, committed since"
    );
    assert!(claim(&s, &app).await.is_empty());
    assert_eq!(count(&app, "SELECT COUNT(*) FROM failwell_transfers").await, 0);
    assert_eq!(s.account("wallet").await.unwrap().unwrap().posted, 15);
}
