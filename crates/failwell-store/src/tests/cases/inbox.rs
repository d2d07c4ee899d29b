//! The webhook inbox: events stored once, applied to the ledger, and forwarded.

/// The webhook inbox: events stored once, applied to the ledger, and forwarded. For the `S` and `store()` in scope, inside [`super::store_tests!`].
macro_rules! inbox_cases {
    () => {
        #[tokio::test]
        async fn a_webhook_event_is_stored_once_however_often_it_comes() {
            let (_d, s) = store().await;
            let event = |payload: &[u8]| NewEvent {
                integration: "stripe".into(),
                event_id: "evt_1".into(),
                payload: payload.to_vec(),
                headers: json!({"stripe-signature": "t=1,v1=00"}),
                report: None,
                forward: false,
            };
            let body = "{\"amount\": 12345678901234567890, \"note\": \"caf\u{e9} \u{1f600}\"}".as_bytes();
            assert_eq!(s.receive(vec![event(body)], 10).await.unwrap(), vec![Received::New]);
            assert_eq!(
                s.receive(vec![event(b"a later, different delivery")], 20).await.unwrap(),
                vec![Received::Duplicate]
            );
            let concurrent: Vec<_> = (0..16)
                .map(|_| {
                    let (s, e) = (s.clone(), event(body));
                    tokio::spawn(async move { s.receive(vec![e], 30).await })
                })
                .collect();
            for r in concurrent {
                assert_eq!(r.await.unwrap().unwrap(), vec![Received::Duplicate]);
            }
            assert_eq!(s.counts().await.unwrap().inbox_events, 1);
            let stored: Vec<u8> = sqlx::query_scalar("SELECT payload FROM inbox_events WHERE event_id = 'evt_1'")
                .fetch_one(s.pool())
                .await
                .unwrap();
            assert_eq!(stored, body, "stored byte for byte, the first delivery's");
            let rewrite = sqlx::query("UPDATE inbox_events SET headers = '{}'").execute(s.pool()).await;
            assert!(rewrite.is_err(), "received events are append-only");
            let second = NewEvent { event_id: "evt_2".into(), ..event(b"{}") };
            let batch = vec![second.clone(), second, event(body)];
            assert_eq!(
                s.receive(batch, 40).await.unwrap(),
                vec![Received::New, Received::Duplicate, Received::Duplicate],
                "within one batch too, the first delivery stores and the others are duplicates"
            );
            let feed = s.events_after(0, 10, usize::MAX).await.unwrap();
            let ids: Vec<_> = feed.iter().map(|e| e.event_id.as_str()).collect();
            assert_eq!(ids, vec!["evt_1", "evt_2"], "in the order of first receipt, duplicates not repeated");
            assert!(feed[0].seq < feed[1].seq);
            assert_eq!(feed[0].payload, body);
            assert_eq!(feed[0].headers["stripe-signature"], "t=1,v1=00");
            assert_eq!(s.events_after(feed[0].seq, 10, usize::MAX).await.unwrap()[0].event_id, "evt_2");
            let one = s.events_after(0, 10, 1).await.unwrap();
            assert_eq!(one.len(), 1, "a page stops at its byte budget, but holds at least one event");
            assert!(s.events_after(feed[1].seq, 10, usize::MAX).await.unwrap().is_empty());
        }

        async fn effects(s: &S, event_id: &str) -> Vec<Option<LedgerEffect>> {
            let record = s.event("sim", event_id).await.unwrap().unwrap();
            record.steps.iter().filter(|step| step.kind == "ledger").map(|step| step.effect).collect()
        }

        #[tokio::test]
        async fn events_settle_operations_monotonically_and_close_their_messages() {
            let (_d, s) = store().await;
            s.submit(new_op("a", 1000), 0).await.unwrap();
            let claimed = s.claim(1, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            // The provider's events overtake the relay's own attempt.
            let pending = reported("evt_p", "ref-a", Reported::InProgress, 1);
            let succeeded = reported("evt_s", "ref-a", Reported::Settled(Outcome::Succeeded), 2);
            s.receive(vec![pending.clone()], 2).await.unwrap();
            assert_eq!(effects(&s, "evt_p").await, vec![Some(LedgerEffect::Noted)]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Pending);
            s.receive(vec![succeeded], 3).await.unwrap();
            assert_eq!(effects(&s, "evt_s").await, vec![Some(LedgerEffect::Resolved)]);
            let op = s.operation("a").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Succeeded);
            assert_eq!(op.provider_ref.as_deref(), Some("ch_ref-a"), "the provider's id, from the event");
            let seen: Vec<_> = s.operation_events(op.id).await.unwrap().into_iter().map(|e| e.event_id).collect();
            assert_eq!(seen, ["evt_p", "evt_s"], "the operation's history shows what the events did");
            // The attempt in flight lost its lease: its timeout cannot make it unknown.
            let late = Completion {
                outbox_id: claimed.outbox_id,
                operation_id: op.id,
                lease_token: claimed.lease_token,
                attempt: Some(record(Outcome::Unknown)),
                transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 5 },
            };
            assert_eq!(s.complete(vec![late], 4).await.unwrap(), vec![Recorded::SettledElsewhere]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            assert!(s.claim(1_000_000, 10, 1000, &ClaimScope::All).await.unwrap().is_empty(), "nothing left to deliver");
            // An older event redelivered, or a newer one in progress, never regresses it.
            let again = NewEvent { event_id: "evt_p2".into(), ..pending };
            s.receive(vec![again], 5).await.unwrap();
            assert_eq!(effects(&s, "evt_p2").await, vec![Some(LedgerEffect::Stale)]);
            s.receive(vec![reported("evt_p3", "ref-a", Reported::InProgress, 9)], 6).await.unwrap();
            assert_eq!(effects(&s, "evt_p3").await, vec![Some(LedgerEffect::WouldRegress)]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            s.receive(vec![reported("evt_x", "ref-nobody", Reported::InProgress, 1)], 7).await.unwrap();
            assert_eq!(effects(&s, "evt_x").await, vec![Some(LedgerEffect::NoOperation)]);
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.resolved_by_events, counts.succeeded), (1, 1));
        }

        #[tokio::test]
        async fn an_event_resolves_an_unknown_operation() {
            let (_d, s) = store().await;
            s.submit(new_op("u", 1000), 0).await.unwrap();
            let claimed = s.claim(1, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let unknown = Completion {
                outbox_id: claimed.outbox_id,
                operation_id: claimed.operation.id,
                lease_token: claimed.lease_token,
                attempt: Some(record(Outcome::Unknown)),
                transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 100 },
            };
            assert_eq!(s.complete(vec![unknown], 2).await.unwrap(), vec![Recorded::Applied]);
            s.receive(vec![reported("evt_f", "ref-u", Reported::Settled(Outcome::Failed), 3)], 3).await.unwrap();
            let op = s.operation("u").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed);
            assert!(s.due_unknown(1_000_000, 10).await.unwrap().is_empty(), "no lookup left to make");
            assert_eq!(effects(&s, "evt_f").await, vec![Some(LedgerEffect::Resolved)]);
        }

        #[tokio::test]
        async fn forwards_are_leased_retried_deferred_and_dead_lettered() {
            let (_d, s) = store().await;
            let event = NewEvent { forward: true, report: None, ..reported("evt_1", "r", Reported::InProgress, 1) };
            s.receive(vec![event.clone(), event], 0).await.unwrap();
            let first = s.claim_forwards(0, 10, 1000).await.unwrap();
            assert_eq!(first.len(), 1, "one forward however many deliveries");
            assert_eq!((first[0].attempts, first[0].event.payload.as_slice()), (1, b"evt_1".as_slice()));
            assert!(s.claim_forwards(500, 10, 1000).await.unwrap().is_empty(), "leased");
            let done = |c: &crate::ClaimedForward, transition| ForwardCompletion {
                id: c.id,
                lease_token: c.lease_token,
                event_seq: c.event.seq,
                step: None,
                transition,
            };
            let retry = ForwardTransition::Retry { available_at_ms: 2000, delay_ms: 900, error: "HTTP 500".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&first[0], retry)], 1100).await.unwrap(),
                vec![Recorded::Applied]
            );
            assert!(s.claim_forwards(1999, 10, 1000).await.unwrap().is_empty(), "not due before its retry");
            let second = s.claim_forwards(2000, 10, 1000).await.unwrap();
            assert_eq!((second[0].attempts, second[0].previous_delay_ms), (2, 900));
            // A result under the first claim's token is refused.
            let stale = done(&first[0], ForwardTransition::Delivered);
            assert_eq!(s.complete_forwards(vec![stale], 2001).await.unwrap(), vec![Recorded::LeaseLost]);
            let defer = ForwardTransition::Defer { available_at_ms: 2500, reason: "breaker open".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&second[0], defer)], 2002).await.unwrap(),
                vec![Recorded::Applied]
            );
            let third = s.claim_forwards(2500, 10, 1000).await.unwrap();
            assert_eq!(third[0].attempts, 2, "a deferral gives its attempt back");
            let dead = ForwardTransition::DeadLetter { error: "HTTP 500".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&third[0], dead)], 2600).await.unwrap(),
                vec![Recorded::Applied]
            );
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.forwards_pending, counts.forward_dead_letters), (0, 1));
            let record = s.event("sim", "evt_1").await.unwrap().unwrap();
            assert_eq!((record.forward_state.as_deref(), record.forward_attempts), (Some("dead"), 2));
        }

        #[tokio::test]
        async fn one_batch_applies_its_events_in_arrival_order() {
            let (_d, s) = store().await;
            s.submit(new_op("b", 1000), 0).await.unwrap();
            let batch = vec![
                reported("evt_v2", "ref-b", Reported::Settled(Outcome::Succeeded), 2),
                reported("evt_v1", "ref-b", Reported::InProgress, 1),
                reported("evt_v3", "ref-b", Reported::Settled(Outcome::Failed), 3),
            ];
            s.receive(batch, 1).await.unwrap();
            assert_eq!(effects(&s, "evt_v2").await, vec![Some(LedgerEffect::Resolved)]);
            assert_eq!(effects(&s, "evt_v1").await, vec![Some(LedgerEffect::Stale)]);
            assert_eq!(effects(&s, "evt_v3").await, vec![Some(LedgerEffect::Changed)]);
            assert_eq!(s.operation("b").await.unwrap().unwrap().status, OperationStatus::Failed);
            // A tie (Stripe's `created` is in seconds): settling an open operation wins.
            s.submit(new_op("t", 1000), 2).await.unwrap();
            let tie = vec![
                reported("evt_t1", "ref-t", Reported::InProgress, 7),
                reported("evt_t2", "ref-t", Reported::Settled(Outcome::Succeeded), 7),
            ];
            s.receive(tie, 3).await.unwrap();
            assert_eq!(effects(&s, "evt_t2").await, vec![Some(LedgerEffect::Resolved)]);
            assert_eq!(s.operation("t").await.unwrap().unwrap().status, OperationStatus::Succeeded);
        }

        #[tokio::test]
        async fn an_event_contradicting_our_own_answer_is_a_conflict_and_dead_letters_stay_unless_it_succeeded() {
            let (_d, s) = store().await;
            for key in ["ok", "dead"] {
                s.submit(new_op(key, 1000), 0).await.unwrap();
            }
            let finish = |c: &crate::Claimed, transition| Completion {
                outbox_id: c.outbox_id,
                operation_id: c.operation.id,
                lease_token: c.lease_token,
                attempt: Some(record(Outcome::Failed)),
                transition,
            };
            let claimed = s.claim(1, 2, 60_000, &ClaimScope::All).await.unwrap();
            let by_key = |k: &str| claimed.iter().find(|c| c.operation.idempotency_key == k).unwrap();
            let done = Transition::Succeeded { provider_ref: Some("ch_1".into()), response: None };
            let dead = Transition::DeadLetter { error: "out of attempts".into() };
            s.complete(vec![finish(by_key("ok"), done), finish(by_key("dead"), dead)], 2).await.unwrap();
            // Our call said succeeded; an event says failed and nothing orders them.
            s.receive(vec![reported("evt_c", "ref-ok", Reported::Settled(Outcome::Failed), 1)], 3).await.unwrap();
            assert_eq!(effects(&s, "evt_c").await, vec![Some(LedgerEffect::Conflict)]);
            let op = s.operation("ok").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Unknown, "a status lookup decides");
            assert!(op.last_error.unwrap().starts_with("conflict: "));
            assert_eq!(s.due_unknown(3, 10).await.unwrap().len(), 1, "due at once");
            // The provider confirms the dead letter's failure: it stays a dead letter...
            s.receive(vec![reported("evt_d1", "ref-dead", Reported::Settled(Outcome::Failed), 1)], 4).await.unwrap();
            assert!(s.operation("dead").await.unwrap().unwrap().dead_letter);
            // ...until the provider says it succeeded after all: replaying it would charge twice.
            s.receive(vec![reported("evt_d2", "ref-dead", Reported::Settled(Outcome::Succeeded), 2)], 5)
                .await
                .unwrap();
            let op = s.operation("dead").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Succeeded, false));
            // A dead letter's `failed` is failwell giving up, not the provider: a
            // first event saying succeeded resolves it (no conflict).
            s.submit(new_op("gave-up", 1000), 6).await.unwrap();
            let c = s.claim(7, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let dead = Transition::DeadLetter { error: "503 x 5".into() };
            s.complete(vec![finish(&c, dead)], 8).await.unwrap();
            let event = reported("evt_g", "ref-gave-up", Reported::Settled(Outcome::Succeeded), 1);
            s.receive(vec![event], 9).await.unwrap();
            assert_eq!(effects(&s, "evt_g").await, vec![Some(LedgerEffect::Resolved)]);
            let op = s.operation("gave-up").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Succeeded, false));
        }

        #[tokio::test]
        async fn two_results_for_one_forward_in_one_batch_are_judged_by_their_own_lease() {
            let (_d, s) = store().await;
            let event = NewEvent { forward: true, report: None, ..reported("evt_f", "r", Reported::InProgress, 1) };
            s.receive(vec![event], 0).await.unwrap();
            let old = s.claim_forwards(0, 1, 100).await.unwrap().remove(0);
            let new = s.claim_forwards(100, 1, 100).await.unwrap().remove(0);
            let steps = s.event("sim", "evt_f").await.unwrap().unwrap().steps;
            assert!(steps[0].detail.starts_with("interrupted: "), "the cut-short attempt is recorded: {steps:?}");
            let result = |c: &crate::ClaimedForward, transition| ForwardCompletion {
                id: c.id,
                lease_token: c.lease_token,
                event_seq: c.event.seq,
                step: None,
                transition,
            };
            let retry = ForwardTransition::Retry { available_at_ms: 9_000, delay_ms: 1, error: "late".into() };
            let batch = vec![result(&old, retry), result(&new, ForwardTransition::Delivered)];
            assert_eq!(s.complete_forwards(batch, 150).await.unwrap(), vec![Recorded::LeaseLost, Recorded::Applied]);
            assert_eq!(s.event("sim", "evt_f").await.unwrap().unwrap().forward_state.as_deref(), Some("done"));
        }

        #[tokio::test]
        async fn a_late_answer_keeps_its_provider_id_or_is_a_conflict() {
            let (_d, s) = store().await;
            for key in ["same", "other"] {
                s.submit(new_op(key, 1000), 0).await.unwrap();
            }
            let claimed = s.claim(1, 2, 60_000, &ClaimScope::All).await.unwrap();
            let answer = |key: &str| {
                let c = claimed.iter().find(|c| c.operation.idempotency_key == key).unwrap();
                Completion {
                    outbox_id: c.outbox_id,
                    operation_id: c.operation.id,
                    lease_token: c.lease_token,
                    attempt: Some(record(Outcome::Succeeded)),
                    transition: Transition::Succeeded {
                        provider_ref: Some(format!("ch_call_{key}")),
                        response: None,
                    },
                }
            };
            // Events overtake both calls; one agrees (without an object id), one does not.
            let mut agrees = reported("evt_same", "ref-same", Reported::Settled(Outcome::Succeeded), 1);
            if let Some(Ok(report)) = &mut agrees.report {
                report.provider_ref = None;
            }
            let contradicts = reported("evt_other", "ref-other", Reported::Settled(Outcome::Failed), 1);
            s.receive(vec![agrees, contradicts], 2).await.unwrap();
            let recorded = s.complete(vec![answer("same"), answer("other")], 3).await.unwrap();
            assert_eq!(recorded, vec![Recorded::SettledElsewhere, Recorded::Conflict]);
            let same = s.operation("same").await.unwrap().unwrap();
            assert_eq!(
                (same.status, same.provider_ref.as_deref()),
                (OperationStatus::Succeeded, Some("ch_call_same"))
            );
            let other = s.operation("other").await.unwrap().unwrap();
            assert_eq!(other.status, OperationStatus::Unknown, "charged or not: a status lookup decides");
            // Events that ordered the outcomes (succeeded, then returned) are newer
            // than a late succeeded answer: no conflict.
            s.submit(new_op("returned", 1000), 4).await.unwrap();
            let c = s.claim(5, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let events = vec![
                reported("evt_r1", "ref-returned", Reported::Settled(Outcome::Succeeded), 1),
                reported("evt_r2", "ref-returned", Reported::Settled(Outcome::Failed), 2),
            ];
            s.receive(events, 6).await.unwrap();
            let late = Completion {
                outbox_id: c.outbox_id,
                operation_id: c.operation.id,
                lease_token: c.lease_token,
                attempt: Some(record(Outcome::Succeeded)),
                transition: Transition::Succeeded { provider_ref: None, response: None },
            };
            assert_eq!(s.complete(vec![late], 7).await.unwrap(), vec![Recorded::SettledElsewhere]);
            assert_eq!(s.operation("returned").await.unwrap().unwrap().status, OperationStatus::Failed);
            assert!(other.last_error.unwrap().starts_with("conflict: the provider answered our call succeeded"));
        }
    };
}

pub(crate) use inbox_cases;
