//! What operators read and do, comparison windows and reports, and the alert outbox.

/// What operators read and do, comparison windows and reports, and the alert outbox. For the `S` and `store()` in scope, inside [`super::store_tests!`].
macro_rules! operator_cases {
    () => {
        /// Submits `key` at `at` and dead-letters it after one failed call.
        async fn dead_letter(s: &S, key: &str, at: i64) -> i64 {
            s.submit(new_op(key, 100), at).await.unwrap();
            let c = s.claim(at, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let dead = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(AttemptRecord { started_at_ms: at, ..record(Outcome::Failed) }),
                transition: Transition::DeadLetter { error: "attempts exhausted: HTTP 503".into() },
            };
            s.complete(vec![dead], at + 10).await.unwrap();
            c.outbox_id
        }

        #[tokio::test]
        async fn a_replayed_dead_letter_is_delivered_again_under_the_same_key_with_fresh_attempts() {
            let (_d, s) = store().await;
            let id = dead_letter(&s, "k1", 100).await;
            let listed = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap();
            assert_eq!(listed.len(), 1);
            let letter = &listed[0];
            assert_eq!((letter.kind, letter.id, letter.key.as_str()), (DeadLetterKind::Message, id, "k1"));
            assert_eq!((letter.attempts, letter.dead_at_ms), (1, 110));
            assert_eq!(letter.payload["amount"], 100);
            assert_eq!(letter.last_error.as_deref(), Some("attempts exhausted: HTTP 503"));
            let before = s.operation("k1").await.unwrap().unwrap();

            assert!(s.replay(DeadLetterKind::Message, id, Channel::Cli, 5_000).await.unwrap());
            assert!(!s.replay(DeadLetterKind::Message, id, Channel::Cli, 5_001).await.unwrap(), "no longer dead");
            assert!(s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap().is_empty());
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Pending, false));
            assert_eq!(op.provider_key, before.provider_key, "the same idempotency key");
            assert_eq!((op.created_at_ms, op.delivery_started_at_ms), (100, 5_000));
            let c = s.claim(5_000, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            assert_eq!((c.attempts, c.interrupted), (1, false), "attempts count afresh");
            let history = s.history(op.id).await.unwrap();
            let changes: Vec<(&str, &str, &str)> =
                history.iter().map(|h| (h.subject, h.actor.as_str(), h.change.as_str())).collect();
            assert_eq!(
                changes,
                vec![
                    ("operation", "api", "created"),
                    ("attempt", "relay", "call 1: HTTP 200, failed, 2 ms"),
                    ("message", "relay", "pending -> dead"),
                    ("operation", "relay", "pending -> failed"),
                    ("message", "operator:cli", "dead -> pending"),
                    ("operation", "operator:cli", "failed -> pending"),
                ]
            );
        }

        #[tokio::test]
        async fn purge_removes_a_dead_letter_for_good_and_the_history_says_who() {
            let (_d, s) = store().await;
            let id = dead_letter(&s, "k1", 100).await;
            assert!(!s.purge(DeadLetterKind::Forward, id, Channel::Api, 200).await.unwrap(), "wrong kind");
            assert!(s.purge(DeadLetterKind::Message, id, Channel::Api, 200).await.unwrap());
            assert!(!s.purge(DeadLetterKind::Message, id, Channel::Api, 201).await.unwrap());
            assert!(!s.replay(DeadLetterKind::Message, id, Channel::Api, 202).await.unwrap(), "gone");
            assert_eq!(s.counts().await.unwrap().dead_letters, 0);
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed);
            let last = s.history(op.id).await.unwrap().pop().unwrap();
            assert_eq!((last.at_ms, last.actor.as_str(), last.change.as_str()), (200, "operator:api", "purged"));
            // The history itself cannot be rewritten.
            assert!(sqlx::query("DELETE FROM history").execute(s.pool()).await.is_err());
        }

        #[tokio::test]
        async fn the_four_numbers_follow_the_calls_the_queue_and_the_acknowledgements() {
            let (_d, s) = store().await;
            let known = vec!["payments".to_owned(), "idle".to_owned()];
            dead_letter(&s, "d1", 1_000).await;
            s.ack_dead_letters(Channel::Cli, 2_000).await.unwrap();
            dead_letter(&s, "d2", 3_000).await;
            // Two open messages, the older created at 4_000; one answered call.
            s.submit(new_op("open1", 1), 4_000).await.unwrap();
            s.submit(new_op("open2", 1), 6_000).await.unwrap();
            let stats = s.stats(10_000, 60_000, &known).await.unwrap();
            assert_eq!(stats.last_ack_ms, Some(2_000));
            let names: Vec<&str> = stats.integrations.iter().map(|i| i.integration.as_str()).collect();
            assert_eq!(names, vec!["idle", "payments"]);
            let idle = &stats.integrations[0];
            assert_eq!((idle.calls, idle.success_ratio, idle.depth, idle.oldest_open_age_ms), (0, None, 0, None));
            let p = &stats.integrations[1];
            assert_eq!((p.calls, p.answered, p.success_ratio, p.p95_ms), (2, 0, Some(0.0), Some(2)));
            assert_eq!((p.depth, p.oldest_open_age_ms), (2, Some(6_000)));
            assert_eq!((p.dead_letters, p.dead_letters_unacked), (2, 1));
            // Calls older than the window are not counted.
            let later = s.stats(100_000, 60_000, &known).await.unwrap();
            assert_eq!(later.integrations[1].calls, 0);
            s.ack_dead_letters(Channel::Ui, 20_000).await.unwrap();
            let acked = s.stats(20_000, 60_000, &known).await.unwrap();
            assert_eq!((acked.integrations[1].dead_letters, acked.integrations[1].dead_letters_unacked), (2, 0));
            // Operations waiting for a lookup or for a person, per integration
            // and in the counts (an index of their own on PostgreSQL).
            assert_eq!((acked.integrations[1].unknown, acked.integrations[1].needs_human), (0, 0));
            for (key, status) in [("open1", "unknown"), ("open2", "needs_human"), ("d1", "needs_human")] {
                sqlx::query("UPDATE operations SET status = $1 WHERE idempotency_key = $2")
                    .bind(status)
                    .bind(key)
                    .execute(s.pool())
                    .await
                    .unwrap();
            }
            let waiting = s.stats(20_000, 60_000, &known).await.unwrap();
            let (idle, p) = (&waiting.integrations[0], &waiting.integrations[1]);
            assert_eq!((idle.unknown, idle.needs_human, p.unknown, p.needs_human), (0, 0, 1, 2));
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.pending, counts.unknown, counts.needs_human), (0, 1, 2));
        }

        #[tokio::test]
        async fn the_latest_report_of_each_provider_is_found_however_many_follow() {
            let (_d, s) = store().await;
            let report = |provider: &str, at: i64| crate::NewReport {
                provider: provider.into(),
                window_from_ms: 0,
                window_to_ms: at,
                started_at_ms: at,
                finished_at_ms: at,
                actor: "schedule".into(),
                ours: 0,
                theirs: 0,
                discrepancies: vec![],
                report: json!({}),
                text: String::new(),
                alert: false,
            };
            s.save_report(report("payments", 1)).await.unwrap();
            s.save_report(report("shipping", 2)).await.unwrap();
            for at in 3..300 {
                s.save_report(report("payments", at)).await.unwrap();
            }
            let latest = s.latest_reports().await.unwrap();
            let got: Vec<(&str, i64)> = latest.iter().map(|r| (r.provider.as_str(), r.finished_at_ms)).collect();
            assert_eq!(got, vec![("payments", 299), ("shipping", 2)]);
            assert_eq!(
                s.reports(2).await.unwrap().iter().map(|r| r.finished_at_ms).collect::<Vec<_>>(),
                vec![299, 298]
            );
            assert_eq!(s.report(2).await.unwrap().unwrap().provider, "shipping");
        }

        #[tokio::test]
        async fn a_comparison_window_is_taken_once_unless_its_run_was_abandoned() {
            let (_d, s) = store().await;
            let (day, next) = ((0, 86_400_000), (86_400_000, 172_800_000));
            assert!(s.claim_comparison("payments", day, 5, 100).await.unwrap());
            assert!(!s.claim_comparison("payments", day, 6, 100).await.unwrap(), "claimed already");
            assert!(s.claim_comparison("payments", next, 7, 100).await.unwrap());
            assert!(s.claim_comparison("shipping", day, 8, 100).await.unwrap());
            s.finish_comparison("payments", next, 9).await.unwrap();
            s.finish_comparison("shipping", day, 9).await.unwrap();
            assert_eq!(s.abandoned_comparisons(4).await.unwrap(), []);
            assert_eq!(s.abandoned_comparisons(105).await.unwrap(), [("payments".to_owned(), day)]);
            // Its process died: taken over once the claim is a lease old.
            assert!(!s.claim_comparison("payments", day, 104, 100).await.unwrap(), "not yet");
            assert!(s.claim_comparison("payments", day, 105, 100).await.unwrap(), "taken over");
            assert!(!s.claim_comparison("payments", day, 106, 100).await.unwrap(), "claimed again");
            assert_eq!(s.abandoned_comparisons(104).await.unwrap(), [], "claimed again at 105");
            s.finish_comparison("payments", day, 110).await.unwrap();
            for (provider, window) in [("payments", day), ("payments", next), ("shipping", day)] {
                assert!(!s.claim_comparison(provider, window, 10_000, 100).await.unwrap(), "finished");
            }
            assert_eq!(s.abandoned_comparisons(10_000).await.unwrap(), []);
        }

        #[tokio::test]
        async fn alerts_are_queued_with_their_transition_and_sent_at_least_once_in_order() {
            use crate::prelude::*;
            use crate::{Alert, AlertBody, AlertClaim, AlertSent, NewAlert};
            let (_d, s) = store().await;
            let alert = |kind: &str, text: &str, at_ms| NewAlert {
                kind: kind.into(),
                subject: "payments".into(),
                text: text.into(),
                details: json!({ "said": text }),
                at_ms,
            };
            let text = |alert: &Option<Alert>| -> String {
                match &alert.as_ref().expect("an alert is due").body {
                    AlertBody::Message { text, details } => {
                        assert_eq!(details["said"], json!(text));
                        text.clone()
                    }
                    AlertBody::Report(id) => format!("report {id}"),
                }
            };
            let age = "oldest_open_age";
            assert!(s.set_alert(age, "payments", true, 1, Some(alert(age, "raised", 1))).await.unwrap());
            assert!(
                !s.set_alert(age, "payments", true, 2, Some(alert(age, "raised again", 2))).await.unwrap(),
                "firing already: nothing queued"
            );
            assert_eq!(s.firing_alerts(age).await.unwrap(), ["payments"]);
            assert!(s.set_alert(age, "payments", false, 3, Some(alert(age, "resolved", 3))).await.unwrap());
            assert!(!s.set_alert(age, "payments", false, 4, None).await.unwrap(), "resolved already");
            s.queue_alert(alert("comparison_failed", "failed", 5)).await.unwrap();
            assert_eq!(s.claim_alert(AlertClaim::Due, 0, 1_000).await.unwrap(), None, "not due yet");

            // In order per kind and subject: the resolve waits for the raise.
            let raised = s.claim_alert(AlertClaim::Due, 10, 1_000).await.unwrap();
            assert_eq!((text(&raised), raised.as_ref().unwrap().attempts), ("raised".to_owned(), 1));
            let failed_alert = s.claim_alert(AlertClaim::Due, 10, 1_000).await.unwrap();
            assert_eq!(text(&failed_alert), "failed");
            assert_eq!(s.claim_alert(AlertClaim::Due, 11, 1_000).await.unwrap(), None, "all held");
            let failed = AlertSent::Failed { error: "sink down".into(), retry_at_ms: 500 };
            assert!(s.alert_sent(raised.as_ref().unwrap(), failed.clone()).await.unwrap());
            assert!(s.alert_sent(failed_alert.as_ref().unwrap(), AlertSent::At(12)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 499, 1_000).await.unwrap(), None, "retried at 500");
            let again = s.claim_alert(AlertClaim::Due, 500, 1_000).await.unwrap();
            assert_eq!((text(&again), again.as_ref().unwrap().attempts), ("raised".to_owned(), 2));
            // Its sender died: once the lease is over another one sends it.
            assert_eq!(s.claim_alert(AlertClaim::Due, 1_499, 1_000).await.unwrap(), None);
            let taken_over = s.claim_alert(AlertClaim::Due, 1_500, 1_000).await.unwrap();
            assert_eq!((text(&taken_over), taken_over.as_ref().unwrap().attempts), ("raised".to_owned(), 3));
            // The first sender, late, cannot undo what the second records.
            assert!(s.alert_sent(taken_over.as_ref().unwrap(), AlertSent::At(1_501)).await.unwrap());
            assert!(!s.alert_sent(again.as_ref().unwrap(), failed).await.unwrap(), "its claim was taken over");
            let last = s.claim_alert(AlertClaim::Due, 1_502, 1_000).await.unwrap();
            assert_eq!(text(&last), "resolved");
            assert!(s.alert_sent(last.as_ref().unwrap(), AlertSent::At(1_503)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 100_000, 1_000).await.unwrap(), None, "all sent");
            // One the sink refuses for good is set aside: the next one is no
            // longer held back by it.
            s.queue_alert(alert(age, "refused", 200_000)).await.unwrap();
            s.queue_alert(alert(age, "next", 200_001)).await.unwrap();
            let refused = s.claim_alert(AlertClaim::Due, 200_002, 1_000).await.unwrap();
            assert_eq!(text(&refused), "refused");
            assert_eq!(s.claim_alert(AlertClaim::Due, 200_002, 1_000).await.unwrap(), None, "next waits");
            let refused = refused.unwrap();
            assert_eq!(refused.raised_at_ms, 200_000);
            let given_up = AlertSent::GivenUp { error: "HTTP 413".into(), at_ms: 200_003 };
            assert!(s.alert_sent(&refused, given_up).await.unwrap());
            let next = s.claim_alert(AlertClaim::Due, 200_004, 1_000).await.unwrap();
            assert_eq!(text(&next), "next");
            assert!(s.alert_sent(next.as_ref().unwrap(), AlertSent::At(200_005)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 900_000, 1_000).await.unwrap(), None, "the refused one never again");
        }
    };
}

pub(crate) use operator_cases;
