//! The balance ledger: accounts, transfers, holds, and holds tied to operations.

/// The balance ledger. For the `S` and `store()` in scope, inside [`super::store_tests!`].
macro_rules! ledger_cases {
    () => {
        use crate::{
            Ended, HoldEnd, NewAccount, NewHold, NewTransfer, Opened, Swept, TransferRefusal, TransferResult,
        };
        use failwell_policy::{HoldState, Refused};

        /// Opens `wallet` (floor 0) with `funds` from `world` (no floor),
        /// and `shop` (floor 0), all in EUR.
        async fn funded(s: &S, funds: i64) {
            for (id, floor) in [("world", None), ("wallet", Some(0)), ("shop", Some(0))] {
                let account = NewAccount { id: id.into(), unit: "EUR".into(), floor };
                assert!(matches!(s.open_account(account, 1).await.unwrap(), Opened::Created(_)));
            }
            if funds > 0 {
                let top_up = pay("top-up", "world", "wallet", funds);
                assert!(matches!(s.transfer(vec![top_up], 2).await.unwrap()[..], [TransferResult::Created(_)]));
            }
        }

        fn pay(id: &str, from: &str, to: &str, amount: i64) -> NewTransfer {
            NewTransfer {
                id: id.into(),
                debit_account: from.into(),
                credit_account: to.into(),
                amount,
                pending: false,
                timeout_ms: None,
            }
        }

        fn hold(id: &str, amount: i64) -> NewTransfer {
            NewTransfer { pending: true, ..pay(id, "wallet", "shop", amount) }
        }

        /// `(posted, debits_pending, available)` of `id`, checked against
        /// the sums of its journal.
        async fn figures(s: &S, id: &str) -> (i64, i64, i64) {
            let a = s.account(id).await.unwrap().unwrap();
            let entries = s.entries(id, 0, 10_000).await.unwrap();
            let sum = |f: fn(&crate::Entry) -> i64| entries.iter().map(f).sum::<i64>();
            assert_eq!(
                (a.posted, a.debits_pending, a.credits_pending),
                (sum(|e| e.posted), sum(|e| e.debits_pending), sum(|e| e.credits_pending)),
                "{id}: the balances are the sums of the journal"
            );
            (a.posted, a.debits_pending, a.available)
        }

        fn refusal(result: &TransferResult) -> &TransferRefusal {
            match result {
                TransferResult::Refused { reason, .. } => reason,
                other => panic!("not refused: {other:?}"),
            }
        }

        #[tokio::test]
        async fn an_account_opens_once_and_its_id_and_unit_are_checked() {
            let (_d, s) = store().await;
            let new = |unit: &str, floor| NewAccount { id: "wallet:alice".into(), unit: unit.into(), floor };
            assert!(matches!(s.open_account(new("EUR", Some(0)), 1).await.unwrap(), Opened::Created(_)));
            assert!(matches!(s.open_account(new("EUR", Some(0)), 2).await.unwrap(), Opened::Existing(_)));
            assert!(matches!(s.open_account(new("USD", Some(0)), 3).await.unwrap(), Opened::Differs(_)));
            assert!(matches!(s.open_account(new("EUR", None), 3).await.unwrap(), Opened::Differs(_)));
            for (id, unit) in [("", "EUR"), ("has space", "EUR"), ("ok", ""), ("ok", "seventeen-bytes!!")] {
                let account = NewAccount { id: id.into(), unit: unit.into(), floor: Some(0) };
                let err = s.open_account(account, 4).await.unwrap_err();
                assert!(matches!(err, StoreError::InvalidAccount(_)), "{id:?} {unit:?}: {err:?}");
            }
            // A floor above zero: the account could never hold what it opens with.
            let above = NewAccount { id: "ok".into(), unit: "EUR".into(), floor: Some(1) };
            assert!(matches!(s.open_account(above, 4).await.unwrap_err(), StoreError::InvalidAccount(_)));
            let overdraft = NewAccount { id: "overdraft".into(), unit: "EUR".into(), floor: Some(-500) };
            assert!(matches!(s.open_account(overdraft, 4).await.unwrap(), Opened::Created(_)));
            assert_eq!(s.account("ok").await.unwrap(), None);
            let a = s.account("wallet:alice").await.unwrap().unwrap();
            assert_eq!((a.unit.as_str(), a.floor, a.posted, a.created_at_ms), ("EUR", Some(0), 0, 1));
        }

        #[tokio::test]
        async fn a_batch_applies_each_transfer_once_and_a_refusal_stops_no_other() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            s.open_account(NewAccount { id: "points".into(), unit: "pts".into(), floor: Some(0) }, 3).await.unwrap();
            let batch = vec![
                pay("t1", "wallet", "shop", 60),
                pay("t2", "wallet", "shop", 50),
                pay("t1", "wallet", "shop", 60),
                pay("t1", "wallet", "shop", 61),
                pay("t3", "wallet", "nobody", 1),
                pay("t4", "wallet", "points", 1),
                pay("t5", "wallet", "wallet", 1),
                pay("t6", "wallet", "shop", 0),
                pay("bad id", "wallet", "shop", 1),
                pay("t7", "wallet", "shop", 40),
            ];
            let results = s.transfer(batch, 10).await.unwrap();
            assert!(matches!(&results[0], TransferResult::Created(t) if t.state == HoldState::Posted));
            assert_eq!(
                refusal(&results[1]),
                &TransferRefusal::Rule(Refused::InsufficientFunds { available: 40, floor: 0, amount: 50 })
            );
            assert!(matches!(&results[2], TransferResult::Replayed(t) if t.id == "t1"));
            assert_eq!(refusal(&results[3]), &TransferRefusal::IdReused("t1".into()));
            assert_eq!(refusal(&results[4]), &TransferRefusal::NoAccount("nobody".into()));
            assert!(matches!(refusal(&results[5]), TransferRefusal::UnitMismatch { .. }));
            assert_eq!(refusal(&results[6]), &TransferRefusal::Rule(Refused::SameAccount));
            assert_eq!(refusal(&results[7]), &TransferRefusal::Rule(Refused::NotPositive(0)));
            assert!(matches!(refusal(&results[8]), TransferRefusal::Invalid(_)));
            assert!(matches!(&results[9], TransferResult::Created(_)));
            assert_eq!(figures(&s, "wallet").await, (0, 0, 0));
            assert_eq!(figures(&s, "shop").await, (100, 0, 100));
            assert_eq!(figures(&s, "world").await, (-100, 0, -100));
            // Sent again later: replays, and refusals are not recorded.
            let again = s.transfer(vec![pay("t1", "wallet", "shop", 60), pay("t2", "wallet", "shop", 50)], 20).await.unwrap();
            assert!(matches!(&again[0], TransferResult::Replayed(t) if t.created_at_ms == 10));
            assert!(matches!(refusal(&again[1]), TransferRefusal::Rule(Refused::InsufficientFunds { .. })));
            assert_eq!(s.transfer_by_id("t2").await.unwrap(), None);
            assert_eq!(figures(&s, "wallet").await, (0, 0, 0));
        }

        #[tokio::test]
        async fn a_hold_reserves_then_posts_voids_or_expires_once() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            let timed = NewTransfer { timeout_ms: Some(1_000), ..hold("h3", 10) };
            let results = s.transfer(vec![hold("h1", 30), hold("h2", 50), timed, hold("h4", 11)], 10).await.unwrap();
            assert!(matches!(refusal(&results[3]), TransferRefusal::Rule(Refused::InsufficientFunds { .. })));
            assert_eq!(figures(&s, "wallet").await, (100, 90, 10));
            assert_eq!(s.account("shop").await.unwrap().unwrap().credits_pending, 90);

            let Ended::Now(posted) = s.end_hold("h1", HoldEnd::Post(Some(20)), 20).await.unwrap() else { panic!() };
            assert_eq!((posted.state, posted.posted_amount, posted.ended_by.as_deref()), (HoldState::Posted, Some(20), Some("api")));
            assert!(matches!(s.end_hold("h1", HoldEnd::Post(Some(20)), 21).await.unwrap(), Ended::Already(_)));
            assert!(matches!(
                s.end_hold("h1", HoldEnd::Void, 22).await.unwrap(),
                Ended::Refused(_, TransferRefusal::Rule(Refused::NotPending(HoldState::Posted)))
            ));
            assert!(matches!(
                s.end_hold("h2", HoldEnd::Post(Some(51)), 23).await.unwrap(),
                Ended::Refused(_, TransferRefusal::Rule(Refused::PostExceedsHold { held: 50, amount: 51 }))
            ));
            assert!(matches!(s.end_hold("h2", HoldEnd::Void, 24).await.unwrap(), Ended::Now(_)));
            assert!(matches!(s.end_hold("h2", HoldEnd::Void, 25).await.unwrap(), Ended::Already(_)));
            assert!(matches!(s.end_hold("top-up", HoldEnd::Void, 25).await.unwrap(), Ended::Refused(_, TransferRefusal::Invalid(_))));
            assert_eq!(s.end_hold("nothing", HoldEnd::Void, 25).await.unwrap(), Ended::NotFound);
            assert_eq!(figures(&s, "wallet").await, (80, 10, 70));
            let pending: Vec<String> = s.pending_holds(10).await.unwrap().into_iter().map(|t| t.id).collect();
            assert_eq!(pending, ["h3"]);
            let listed: Vec<String> = s.accounts("", 10).await.unwrap().into_iter().map(|a| a.id).collect();
            assert_eq!(listed, ["shop", "wallet", "world"]);
            assert_eq!(s.accounts("shop", 1).await.unwrap()[0].id, "wallet", "paged by id");

            assert_eq!(s.ledger_stats().await.unwrap().holds_pending, 1);
            assert_eq!(s.settle_holds(1_009, 10).await.unwrap(), Swept::default(), "not yet");
            assert_eq!(s.settle_holds(1_010, 10).await.unwrap(), Swept { expired: 1, ..Swept::default() });
            let h3 = s.transfer_by_id("h3").await.unwrap().unwrap();
            assert_eq!((h3.state, h3.ended_by.as_deref()), (HoldState::Expired, Some("expiry")));
            assert_eq!(figures(&s, "wallet").await, (80, 0, 80));
            assert_eq!(figures(&s, "shop").await, (20, 0, 20));
            assert_eq!(s.ledger_stats().await.unwrap().holds_pending, 0);
            let timeout = NewTransfer { timeout_ms: Some(5), ..pay("t9", "wallet", "shop", 1) };
            assert!(matches!(refusal(&s.transfer(vec![timeout], 30).await.unwrap()[0]), TransferRefusal::Invalid(_)));
        }

        fn with_hold(key: &str, amount: i64) -> NewOperation {
            let hold = NewHold { id: format!("hold-{key}"), debit_account: "wallet".into(), credit_account: "shop".into(), amount };
            NewOperation { hold: Some(hold), ..new_op(key, 70) }
        }

        use crate::tests::settle;

        #[tokio::test]
        async fn an_operations_hold_follows_its_outcome() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            for key in ["ok", "no", "maybe"] {
                assert!(matches!(s.submit(with_hold(key, 30), 10).await.unwrap(), Submitted::Created(_)));
            }
            assert!(matches!(s.submit(with_hold("ok", 30), 11).await.unwrap(), Submitted::Replayed(_)));
            assert!(matches!(s.submit(with_hold("ok", 31), 11).await.unwrap_err(), StoreError::KeyReused { .. }));
            assert!(matches!(s.submit(new_op("ok", 70), 11).await.unwrap(), Submitted::Replayed(_)), "the hold is not part of the request");
            // Too much: neither the hold nor the operation is written.
            let err = s.submit(with_hold("broke", 11), 12).await.unwrap_err();
            assert!(matches!(err, StoreError::HoldRefused(TransferRefusal::Rule(Refused::InsufficientFunds { .. }))), "{err:?}");
            assert_eq!(s.operation("broke").await.unwrap(), None);
            assert_eq!(s.transfer_by_id("hold-broke").await.unwrap(), None);
            let err = s.submit(NewOperation { idempotency_key: "other".into(), reference: None, ..with_hold("ok", 30) }, 12).await.unwrap_err();
            assert!(matches!(err, StoreError::HoldRefused(TransferRefusal::IdReused(_))), "{err:?}");
            let tied = s.transfer_by_id("hold-ok").await.unwrap().unwrap();
            assert_eq!((tied.state, tied.operation.as_deref()), (HoldState::Pending, Some("ok")));
            assert!(matches!(s.end_hold("hold-ok", HoldEnd::Void, 13).await.unwrap(), Ended::Refused(_, TransferRefusal::Invalid(_))));
            assert_eq!(figures(&s, "wallet").await, (100, 90, 10));

            let outcomes = vec![
                ("ok", Transition::Succeeded { provider_ref: None, response: None }),
                ("no", Transition::Failed { error: "declined".into(), response: None }),
                ("maybe", Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 5_000 }),
            ];
            settle(&s, outcomes, 100).await;
            assert_eq!(s.settle_holds(200, 10).await.unwrap(), Swept { posted: 1, voided: 1, ..Swept::default() });
            assert_eq!(s.settle_holds(201, 10).await.unwrap(), Swept::default(), "each once");
            let state = |id: &'static str| async { s.transfer_by_id(id).await.unwrap().unwrap() };
            assert_eq!((state("hold-ok").await.state, state("hold-ok").await.ended_by), (HoldState::Posted, Some("operation".into())));
            assert_eq!(state("hold-no").await.state, HoldState::Voided);
            assert_eq!(state("hold-maybe").await.state, HoldState::Pending, "unknown keeps it");
            assert_eq!(figures(&s, "wallet").await, (70, 30, 40));
            assert_eq!(figures(&s, "shop").await, (30, 0, 30));
        }

        #[tokio::test]
        async fn a_hold_follows_an_outcome_the_providers_events_change() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            s.submit(with_hold("late", 30), 10).await.unwrap();
            // failwell gives up: the dead letter voids the hold.
            settle(&s, vec![("late", Transition::DeadLetter { error: "HTTP 503".into() })], 100).await;
            assert_eq!(s.settle_holds(200, 10).await.unwrap().voided, 1);
            assert_eq!(figures(&s, "wallet").await, (100, 0, 100));
            let state = |id: &'static str| async { s.transfer_by_id(id).await.unwrap().unwrap().state };
            let event = |id: &str, outcome: Outcome, version: i64| reported(id, "ref-late", Reported::Settled(outcome), version);
            // The provider says it charged after all: the hold is posted.
            s.receive(vec![event("evt_1", Outcome::Succeeded, 1)], 300).await.unwrap();
            assert_eq!(s.operation("late").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            assert_eq!(s.settle_holds(400, 10).await.unwrap(), Swept { reposted: 1, ..Swept::default() });
            assert_eq!(s.settle_holds(401, 10).await.unwrap(), Swept::default(), "once");
            assert_eq!((state("hold-late").await, figures(&s, "wallet").await), (HoldState::Posted, (70, 0, 70)));
            // Then that the charge failed: the shop gives the wallet's part back.
            s.receive(vec![event("evt_2", Outcome::Failed, 2)], 500).await.unwrap();
            assert_eq!(s.settle_holds(600, 10).await.unwrap(), Swept { reversed: 1, ..Swept::default() });
            assert_eq!((state("hold-late").await, figures(&s, "wallet").await), (HoldState::Voided, (100, 0, 100)));
            assert_eq!(figures(&s, "shop").await, (0, 0, 0));
            // Succeeded once more, but the wallet was spent meanwhile: the
            // correction waits (it never overdraws) and is made once the
            // wallet can pay.
            assert!(matches!(s.transfer(vec![pay("spend", "wallet", "world", 90)], 650).await.unwrap()[0], TransferResult::Created(_)));
            s.receive(vec![event("evt_3", Outcome::Succeeded, 3)], 700).await.unwrap();
            let swept = s.settle_holds(800, 10).await.unwrap();
            assert_eq!((swept.changed(), swept.refused.len()), (0, 1), "{swept:?}");
            assert!(matches!(swept.refused[0].1, TransferRefusal::Rule(Refused::InsufficientFunds { .. })), "{swept:?}");
            assert_eq!((state("hold-late").await, figures(&s, "wallet").await), (HoldState::Voided, (10, 0, 10)));
            s.transfer(vec![pay("top-up-2", "world", "wallet", 50)], 850).await.unwrap();
            assert_eq!(s.settle_holds(900, 10).await.unwrap(), Swept::default(), "it waits before the next try");
            let later = 800 + crate::FOLLOW_RETRY_MS;
            assert_eq!(s.settle_holds(later, 10).await.unwrap(), Swept { reposted: 1, ..Swept::default() });
            assert_eq!((state("hold-late").await, figures(&s, "wallet").await), (HoldState::Posted, (30, 0, 30)));
            // The journal names each step.
            let events: Vec<String> = s
                .entries("wallet", 0, 100)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.transfer_id == "hold-late")
                .map(|e| e.event)
                .collect();
            assert_eq!(events, ["hold", "void", "repost", "reverse", "repost"]);
        }

        #[tokio::test]
        async fn a_hold_that_cannot_end_does_not_hold_up_the_others() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            // Posting anything more to `full` would overflow its balance.
            for (id, floor) in [("full", Some(0)), ("mint", None)] {
                s.open_account(NewAccount { id: id.into(), unit: "EUR".into(), floor }, 1).await.unwrap();
            }
            let filled = s.transfer(vec![pay("fill", "mint", "full", i64::MAX)], 2).await.unwrap();
            assert!(matches!(filled[0], TransferResult::Created(_)), "{filled:?}");
            let stuck = NewHold { id: "hold-a".into(), debit_account: "wallet".into(), credit_account: "full".into(), amount: 50 };
            s.submit(NewOperation { hold: Some(stuck), ..new_op("a", 70) }, 10).await.unwrap();
            s.submit(with_hold("b", 30), 10).await.unwrap();
            let done = |key| (key, Transition::Succeeded { provider_ref: None, response: None });
            settle(&s, vec![done("a"), done("b")], 100).await;
            // One hold a round: the first cannot be posted, the next round
            // takes the other.
            let first = s.settle_holds(200, 1).await.unwrap();
            assert_eq!((first.changed(), first.refused[0].0.as_str()), (0, "hold-a"), "{first:?}");
            assert_eq!(s.settle_holds(201, 1).await.unwrap(), Swept { posted: 1, ..Swept::default() });
            assert_eq!(s.transfer_by_id("hold-b").await.unwrap().unwrap().state, HoldState::Posted);
            assert_eq!(s.transfer_by_id("hold-a").await.unwrap().unwrap().state, HoldState::Pending);
        }

        #[tokio::test]
        async fn a_dead_letter_whose_hold_was_voided_is_not_replayed() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            s.submit(with_hold("dead", 30), 10).await.unwrap();
            settle(&s, vec![("dead", Transition::DeadLetter { error: "HTTP 400".into() })], 100).await;
            let letter = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap().remove(0);
            assert_eq!(s.settle_holds(200, 10).await.unwrap().voided, 1);
            let err = s.replay(DeadLetterKind::Message, letter.id, Channel::Cli, 300).await.unwrap_err();
            assert!(matches!(&err, StoreError::HoldEnded { state, .. } if state == "voided"), "{err:?}");
            assert_eq!(s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap().len(), 1, "still a dead letter");
            assert_eq!(figures(&s, "wallet").await, (100, 0, 100));
        }

        #[tokio::test]
        async fn the_journal_is_append_only_and_paged() {
            let (_d, s) = store().await;
            funded(&s, 100).await;
            s.transfer(vec![pay("a", "wallet", "shop", 1), pay("b", "wallet", "shop", 2)], 5).await.unwrap();
            let first = s.entries("wallet", 0, 2).await.unwrap();
            assert_eq!(first.iter().map(|e| e.transfer_id.as_str()).collect::<Vec<_>>(), ["top-up", "a"]);
            let next = s.entries("wallet", first[1].id, 2).await.unwrap();
            assert_eq!(next.iter().map(|e| (e.transfer_id.as_str(), e.posted)).collect::<Vec<_>>(), [("b", -2)]);
            for statement in ["UPDATE ledger_entries SET posted = 0", "DELETE FROM ledger_entries"] {
                assert!(sqlx::query(statement).execute(s.pool()).await.is_err(), "{statement}");
            }
        }
    };
}

pub(crate) use ledger_cases;
