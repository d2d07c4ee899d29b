//! The ledger's plain-SQL contract (`failwell_transfers`, and `hold_id` on
//! `failwell_outbox`), the same cases on SQLite, PostgreSQL and MySQL
//! ([`ledger_contract_cases!`]).

/// Defines the shared tests of the ledger's SQL contract in a module
/// `ledger_contract` of the invoking one, which provides `store()` (a
/// guard, the store and the application's pool, on a database of its own
/// with the application's table `orders (reference, amount)`). `clock` selects the
/// database's clock as the triggers read it, in ms since the Unix epoch;
/// `begin` starts the application's transactions; `insufficient` is what
/// the refusal of an overdraft of 30 from `wallet` (10 available, floor 0)
/// says.
macro_rules! ledger_contract_cases {
    (clock = $clock:literal, begin = $begin:literal, pool = $pool:ty, insufficient = $insufficient:literal $(,)?) => {
        mod ledger_contract {
            use failwell_policy::{HoldState, Refused};
            use serde_json::json;

            use super::store;
            use crate::{
                Account, LedgerStore, Message, NewAccount, NewHold, NewTransfer, Outbox,
                StoreError, Submitted, Swept, Transfer, TransferRefusal, TransferResult, Transition,
            };

            /// The database's clock, in ms since the Unix epoch.
            async fn now_ms(app: &$pool) -> i64 {
                sqlx::query_scalar($clock).fetch_one(app).await.unwrap()
            }

            /// Opens `world` (no floor), `wallet` and `shop` (floor 0) in
            /// EUR and `dollars` in USD; `funds` go from `world` to
            /// `wallet` through failwell_transfers.
            async fn accounts<S: LedgerStore>(s: &S, app: &$pool, funds: i64) {
                for (id, unit, floor) in
                    [("world", "EUR", None), ("wallet", "EUR", Some(0)), ("shop", "EUR", Some(0)), ("dollars", "USD", Some(0))]
                {
                    s.open_account(NewAccount { id: id.into(), unit: unit.into(), floor }, 1).await.unwrap();
                }
                insert(app, &format!("'top-up', 'world', 'wallet', {funds}")).await.unwrap();
            }

            /// Inserts `values` into failwell_transfers: `id, debit_account,
            /// credit_account, amount [, pending, timeout_ms]`.
            async fn insert(app: &$pool, values: &str) -> Result<(), sqlx::Error> {
                let columns = match values.matches(',').count() {
                    3 => "id, debit_account, credit_account, amount",
                    4 => "id, debit_account, credit_account, amount, pending",
                    _ => "id, debit_account, credit_account, amount, pending, timeout_ms",
                };
                sqlx::query(sqlx::AssertSqlSafe(format!("INSERT INTO failwell_transfers ({columns}) VALUES ({values})")))
                    .execute(app)
                    .await
                    .map(drop)
            }

            /// The one number `sql` selects.
            async fn count(app: &$pool, sql: &str) -> i64 {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(app).await.unwrap()
            }

            /// Every account's figures equal the sums of its journal, and
            /// each figure sums to zero over the accounts of a unit.
            async fn balanced<S: LedgerStore>(s: &S) -> Vec<Account> {
                let accounts = s.accounts("", 100).await.unwrap();
                for a in &accounts {
                    let entries = s.entries(&a.id, 0, 10_000).await.unwrap();
                    let sum = |f: fn(&crate::Entry) -> i64| entries.iter().map(f).sum::<i64>();
                    assert_eq!(
                        (a.posted, a.debits_pending, a.credits_pending),
                        (sum(|e| e.posted), sum(|e| e.debits_pending), sum(|e| e.credits_pending)),
                        "{}: the figures are the sums of the journal",
                        a.id
                    );
                }
                for unit in ["EUR", "USD"] {
                    let of_unit = accounts.iter().filter(|a| a.unit == unit);
                    assert_eq!(of_unit.clone().map(|a| a.posted).sum::<i64>(), 0, "{unit}: posted sums to zero");
                    assert_eq!(
                        of_unit.clone().map(|a| a.debits_pending).sum::<i64>(),
                        of_unit.map(|a| a.credits_pending).sum::<i64>(),
                        "{unit}: holds on both sides"
                    );
                }
                accounts
            }

            /// Every refusal names its rule, and writes nothing; the same
            /// id with the same content is a replay, which writes nothing
            /// either, and failwell's Rust path sees it as its own.
            #[tokio::test]
            async fn each_rule_refuses_naming_it_and_a_replay_writes_nothing() {
                let (_d, s, app) = store().await;
                accounts(&s, &app, 10).await;
                insert(&app, "'top-up', 'world', 'wallet', 10").await.unwrap();
                for (values, says) in [
                    ("'pay', 'wallet', 'shop', 30", $insufficient),
                    ("'pay', 'wallet', 'nobody', 3", "credit_account: "),
                    ("'pay', 'nobody', 'shop', 3", "debit_account: "),
                    ("'pay', 'wallet', 'dollars', 3", "units differ"),
                    ("'pay', 'wallet', 'shop', 0", "amount must be a positive integer of minor units"),
                    ("'pay', 'wallet', 'shop', -5", "amount must be a positive integer of minor units"),
                    ("'pay', 'wallet', 'wallet', 3", "debit_account and credit_account must be two different accounts"),
                    ("'pay', 'wallet', 'shop', 3, FALSE, 1000", "timeout_ms is for holds (pending transfers) only"),
                    ("'pay', 'wallet', 'shop', 3, TRUE, 0", "timeout_ms must be more than zero"),
                    ("'a pay', 'wallet', 'shop', 3", "id must be 1 to 255 bytes of printable ASCII without spaces"),
                    // Not a replay of `top-up`, whatever the collation.
                    ("'top-up ', 'world', 'wallet', 10", "id must be 1 to 255 bytes of printable ASCII without spaces"),
                    ("NULL, 'wallet', 'shop', 3", "id, debit_account, credit_account and amount are required"),
                    ("'top-up', 'world', 'wallet', 11", "already used with different content"),
                    ("'top-up', 'world', 'wallet', 10, TRUE", "already used with different content"),
                ] {
                    let error = insert(&app, values).await.unwrap_err().to_string();
                    assert!(error.contains("failwell_transfers: ") && error.contains(says), "{values}: {error}");
                }
                let error = insert(&app, "'pay', 'wallet', 'nobody', 3").await.unwrap_err().to_string();
                assert!(error.contains("does not exist"), "{error}");
                assert_eq!(count(&app, "SELECT COUNT(*) FROM ledger_transfers").await, 1, "only the top-up");
                assert_eq!(count(&app, "SELECT COUNT(*) FROM ledger_entries").await, 2);
                let wallet = s.account("wallet").await.unwrap().unwrap();
                assert_eq!((wallet.posted, wallet.available), (10, 10));

                // The Rust path replays what SQL wrote, and refuses other
                // content under its id.
                let top_up = NewTransfer {
                    id: "top-up".into(),
                    debit_account: "world".into(),
                    credit_account: "wallet".into(),
                    amount: 10,
                    pending: false,
                    timeout_ms: None,
                };
                let other = NewTransfer { amount: 9, ..top_up.clone() };
                let results = s.transfer(vec![top_up, other], 5).await.unwrap();
                assert!(matches!(results[0], TransferResult::Replayed(_)), "{results:?}");
                assert!(matches!(results[1], TransferResult::Refused { reason: TransferRefusal::IdReused(_), .. }));
                // A hold with a timeout, replayed by both paths.
                insert(&app, "'held', 'wallet', 'shop', 4, TRUE, 60000").await.unwrap();
                insert(&app, "'held', 'wallet', 'shop', 4, TRUE, 60000").await.unwrap();
                let held = NewTransfer {
                    id: "held".into(),
                    debit_account: "wallet".into(),
                    credit_account: "shop".into(),
                    amount: 4,
                    pending: true,
                    timeout_ms: Some(60_000),
                };
                assert!(matches!(s.transfer(vec![held], 5).await.unwrap()[0], TransferResult::Replayed(_)));
                let error = insert(&app, "'held', 'wallet', 'shop', 4, TRUE, 60001").await.unwrap_err().to_string();
                assert!(error.contains("already used with different content"), "{error}");
                let error = insert(&app, "'broke', 'wallet', 'shop', 7").await.unwrap_err().to_string();
                assert!(error.contains("failwell_transfers: insufficient funds"), "{error}: 4 of the 10 are held");
                let wallet = balanced(&s).await.into_iter().find(|a| a.id == "wallet").unwrap();
                assert_eq!((wallet.posted, wallet.debits_pending, wallet.available), (10, 4, 6));
                let held = s.transfer_by_id("held").await.unwrap().unwrap();
                assert_eq!((held.state, held.pending, held.unit.as_str()), (HoldState::Pending, true, "EUR"));
                assert_eq!(held.expires_at_ms.map(|at| at - held.created_at_ms), Some(60_000));
            }

            /// A transfer inserted in a transaction that rolls back leaves
            /// nothing: no transfer, no entry, the accounts as they were.
            #[tokio::test]
            async fn a_rolled_back_transfer_leaves_nothing() {
                let (_d, s, app) = store().await;
                accounts(&s, &app, 100).await;
                for (id, commit) in [("rolled-back", false), ("committed", true)] {
                    let mut tx = app.begin_with($begin).await.unwrap();
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO orders (reference, amount) VALUES ('{id}', 30)"
                    )))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount) \
                         VALUES ('{id}', 'wallet', 'shop', 30)"
                    )))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                    if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
                }
                assert_eq!(count(&app, "SELECT COUNT(*) FROM orders").await, 1);
                assert!(s.transfer_by_id("rolled-back").await.unwrap().is_none());
                assert!(s.transfer_by_id("committed").await.unwrap().is_some());
                assert_eq!(count(&app, "SELECT COUNT(*) FROM ledger_entries").await, 4);
                let wallet = balanced(&s).await.into_iter().find(|a| a.id == "wallet").unwrap();
                assert_eq!(wallet.posted, 70);
            }

            /// Transfers inserted at once from several connections, each in
            /// its own transaction, never overdraw: of 12 debits of 15 from
            /// 100, exactly 6 pass; the others are refused.
            #[tokio::test]
            async fn concurrent_inserts_never_overdraw() {
                let (_d, s, app) = store().await;
                accounts(&s, &app, 100).await;
                let tasks: Vec<_> = (0..12)
                    .map(|n| {
                        let app = app.clone();
                        tokio::spawn(async move {
                            let mut tx = app.begin_with($begin).await.unwrap();
                            let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
                                "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount) \
                                 VALUES ('pay-{n}', 'wallet', 'shop', 15)"
                            )))
                            .execute(&mut *tx)
                            .await;
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            match inserted {
                                Ok(_) => tx.commit().await.map(|()| true),
                                Err(e) => {
                                    tx.rollback().await.unwrap();
                                    assert!(e.to_string().contains("insufficient funds"), "{e}");
                                    Ok(false)
                                }
                            }
                        })
                    })
                    .collect();
                let mut passed = 0;
                for task in tasks {
                    passed += i32::from(task.await.unwrap().unwrap());
                }
                assert_eq!(passed, 6);
                let wallet = balanced(&s).await.into_iter().find(|a| a.id == "wallet").unwrap();
                assert_eq!((wallet.posted, wallet.available), (10, 10));
            }

            /// The same requests through failwell_transfers and through
            /// `LedgerStore::transfer` give the same accounts, transfers and
            /// journal.
            #[tokio::test]
            async fn the_sql_path_and_the_rust_path_agree() {
                let ((_d1, sql_store, app), (_d2, rust_store, rust_app)) = (store().await, store().await);
                accounts(&sql_store, &app, 100).await;
                accounts(&rust_store, &rust_app, 100).await;
                let requests = [
                    ("a", "wallet", "shop", 30, false, None),
                    ("b", "wallet", "shop", 50, true, None),
                    ("c", "wallet", "shop", 21, false, None),
                    ("d", "shop", "wallet", 5, true, Some(1_000)),
                    ("a", "wallet", "shop", 30, false, None),
                    ("a", "wallet", "shop", 31, false, None),
                    ("e", "wallet", "dollars", 1, false, None),
                    ("f", "shop", "world", 30, false, None),
                    ("g", "world", "shop", 7, true, None),
                ];
                for (id, debit, credit, amount, pending, timeout) in requests {
                    let timeout_sql = timeout.map_or("NULL".to_owned(), |t: i64| t.to_string());
                    let pending_sql = if pending { "TRUE" } else { "FALSE" };
                    let by_sql =
                        insert(&app, &format!("'{id}', '{debit}', '{credit}', {amount}, {pending_sql}, {timeout_sql}"))
                            .await;
                    let new = NewTransfer {
                        id: id.into(),
                        debit_account: debit.into(),
                        credit_account: credit.into(),
                        amount,
                        pending,
                        timeout_ms: timeout,
                    };
                    let by_rust = rust_store.transfer(vec![new], now_ms(&rust_app).await).await.unwrap().remove(0);
                    assert_eq!(by_sql.is_ok(), !matches!(by_rust, TransferResult::Refused { .. }), "{id}: {by_sql:?} {by_rust:?}");
                }
                let (sql_accounts, rust_accounts) = (balanced(&sql_store).await, balanced(&rust_store).await);
                let figures = |a: &Account| (a.id.clone(), a.unit.clone(), a.floor, a.posted, a.debits_pending, a.credits_pending);
                assert_eq!(
                    sql_accounts.iter().map(figures).collect::<Vec<_>>(),
                    rust_accounts.iter().map(figures).collect::<Vec<_>>()
                );
                let comparable = |t: Transfer| Transfer {
                    expires_at_ms: t.expires_at_ms.map(|at| at - t.created_at_ms),
                    created_at_ms: 0,
                    ..t
                };
                for id in ["top-up", "a", "b", "c", "d", "e", "f", "g"] {
                    let by_sql = sql_store.transfer_by_id(id).await.unwrap().map(comparable);
                    let by_rust = rust_store.transfer_by_id(id).await.unwrap().map(comparable);
                    assert_eq!(by_sql, by_rust, "{id}");
                }
                for account in &sql_accounts {
                    let journal = |entries: Vec<crate::Entry>| {
                        entries
                            .into_iter()
                            .map(|e| (e.transfer_id, e.event, e.posted, e.debits_pending, e.credits_pending))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(
                        journal(sql_store.entries(&account.id, 0, 100).await.unwrap()),
                        journal(rust_store.entries(&account.id, 0, 100).await.unwrap()),
                        "{}",
                        account.id
                    );
                }
                // Each path's transfers are the other's replays: the same
                // request hash.
                let all: Vec<NewTransfer> = requests
                    .iter()
                    .filter(|r| !["c", "e", "f"].contains(&r.0))
                    .map(|&(id, debit, credit, amount, pending, timeout_ms)| NewTransfer {
                        id: id.into(),
                        debit_account: debit.into(),
                        credit_account: credit.into(),
                        amount,
                        pending,
                        timeout_ms,
                    })
                    .filter(|t| t.amount != 31)
                    .collect();
                for result in sql_store.transfer(all, now_ms(&app).await).await.unwrap() {
                    assert!(matches!(result, TransferResult::Replayed(_)), "{result:?}");
                }
            }

            use crate::tests::settle;

            /// Inserts a message of key `key` into failwell_outbox, tied to
            /// hold `hold`.
            async fn enqueue_with_hold(app: &$pool, key: &str, hold: &str) -> Result<(), sqlx::Error> {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, hold_id) \
                     VALUES ('payments', 'charge', '{{\"amount\": 70}}', '{key}', '{hold}')"
                )))
                .execute(app)
                .await
                .map(drop)
            }

            /// A hold made through failwell_transfers and tied to a message
            /// through failwell_outbox.hold_id, in one transaction, is
            /// posted when the operation succeeds and voided when it fails.
            /// A hold that cannot be tied is refused, and nothing written.
            #[tokio::test]
            async fn a_hold_tied_through_failwell_outbox_follows_its_outcome() {
                let (_d, s, app) = store().await;
                accounts(&s, &app, 100).await;
                for key in ["ok", "no"] {
                    let mut tx = app.begin_with($begin).await.unwrap();
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO failwell_transfers (id, debit_account, credit_account, amount, pending) \
                         VALUES ('hold-{key}', 'wallet', 'shop', 30, TRUE)"
                    )))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, hold_id) \
                         VALUES ('payments', 'charge', '{{\"amount\": 70}}', '{key}', 'hold-{key}')"
                    )))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                    tx.commit().await.unwrap();
                }
                // The same message again is a replay; with another hold, refused.
                enqueue_with_hold(&app, "ok", "hold-ok").await.unwrap();
                insert(&app, "'timed', 'wallet', 'shop', 1, TRUE, 60000").await.unwrap();
                insert(&app, "'spare', 'wallet', 'shop', 1, TRUE").await.unwrap();
                for (key, hold, says) in [
                    ("ok", "spare", "already used without this hold_id"),
                    ("x1", "nothing", "names no transfer"),
                    ("x2", "top-up", "is not a hold"),
                    ("x3", "timed", "has none"),
                    ("x4", "hold-ok", "tied to another operation"),
                ] {
                    let error = enqueue_with_hold(&app, key, hold).await.unwrap_err().to_string();
                    assert!(error.contains("failwell_outbox: ") && error.contains(says), "{key} {hold}: {error}");
                }
                assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 2, "nothing written");
                let tied = s.transfer_by_id("hold-ok").await.unwrap().unwrap();
                assert_eq!(tied.operation.as_deref(), Some("ok"));

                let now = now_ms(&app).await + 1;
                settle(
                    &s,
                    vec![
                        ("ok", Transition::Succeeded { provider_ref: None, response: None }),
                        ("no", Transition::Failed { error: "declined".into(), response: None }),
                    ],
                    now,
                )
                .await;
                assert_eq!(s.settle_holds(now + 2, 10).await.unwrap(), Swept { posted: 1, voided: 1, ..Swept::default() });
                assert_eq!(s.transfer_by_id("hold-ok").await.unwrap().unwrap().state, HoldState::Posted);
                assert_eq!(s.transfer_by_id("hold-no").await.unwrap().unwrap().state, HoldState::Voided);
                let error = enqueue_with_hold(&app, "x5", "hold-no").await.unwrap_err().to_string();
                assert!(error.contains("voided"), "{error}");
                let wallet = balanced(&s).await.into_iter().find(|a| a.id == "wallet").unwrap();
                assert_eq!((wallet.posted, wallet.debits_pending), (70, 2));
            }

            /// `Message::hold` makes the hold with the message, in the
            /// caller's transaction, tied to it; a hold the wallet cannot
            /// cover writes neither.
            #[tokio::test]
            async fn a_messages_hold_is_made_and_tied_in_the_same_transaction() {
                let (_d, s, app) = store().await;
                accounts(&s, &app, 100).await;
                let message = |key: &str, amount: i64| Message {
                    idempotency_key: Some(key.into()),
                    hold: Some(NewHold {
                        id: format!("hold-{key}"),
                        debit_account: "wallet".into(),
                        credit_account: "shop".into(),
                        amount,
                    }),
                    ..Message::new("payments", "charge", json!({"amount": 70}))
                };
                let now = now_ms(&app).await;
                let mut tx = s.begin().await.unwrap();
                let submitted = Outbox::enqueue(&mut tx, &message("paid", 30), now).await.unwrap();
                assert!(matches!(submitted, Submitted::Created(_)), "{submitted:?}");
                tx.commit().await.unwrap();
                let mut tx = s.begin().await.unwrap();
                let submitted = Outbox::enqueue(&mut tx, &message("paid", 30), now).await.unwrap();
                assert!(matches!(submitted, Submitted::Replayed(_)), "{submitted:?}");
                let error = Outbox::enqueue(&mut tx, &message("broke", 71), now).await.unwrap_err();
                assert!(
                    matches!(error, StoreError::HoldRefused(TransferRefusal::Rule(Refused::InsufficientFunds { .. }))),
                    "{error:?}"
                );
                tx.rollback().await.unwrap();
                assert_eq!(s.transfer_by_id("hold-paid").await.unwrap().unwrap().operation.as_deref(), Some("paid"));
                assert!(s.transfer_by_id("hold-broke").await.unwrap().is_none());
                assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 1);
            }
        }
    };
}

pub(super) use ledger_contract_cases;
