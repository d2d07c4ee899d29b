//! The store's behaviour, written once and run on each database: the
//! invoking module defines `S` (the store type) and `store()` (a fresh,
//! migrated store and whatever keeps it alive).

/// Every store test, for the `S` and `store()` in scope.
macro_rules! store_tests {
    () => {
        use failwell_policy::{Outcome, Reported};
        use serde_json::json;

        use crate::prelude::*;

        use crate::{
            AttemptKind, AttemptRecord, Channel, ClaimScope, Completion, DeadLetterFilter, DeadLetterKind, EventReport,
            ForwardCompletion, ForwardTransition, LedgerEffect, Message, NewEvent, NewOperation, OperationStatus,
            Outbox, Received, Reconciled, Recorded, Resolution, StoreError, Submitted, Transition,
        };

        fn new_op(key: &str, amount: i64) -> NewOperation {
            NewOperation {
                idempotency_key: key.into(),
                provider: "payments".into(),
                operation: "charge".into(),
                reference: Some(format!("ref-{key}")),
                payload: json!({"amount": amount, "currency": "eur", "reference": format!("ref-{key}")}),
                hold: None,
            }
        }

        fn message(key: &str, amount: i64) -> Message {
            let op = new_op(key, amount);
            Message {
                idempotency_key: Some(op.idempotency_key),
                reference: op.reference,
                ..Message::new(op.provider, op.operation, op.payload)
            }
        }

        /// A webhook event of the `sim` integration reporting `reported`
        /// about the `payments` operation with `reference`.
        fn reported(event_id: &str, reference: &str, reported: Reported, version: i64) -> NewEvent {
            NewEvent {
                integration: "sim".into(),
                event_id: event_id.into(),
                payload: event_id.as_bytes().to_vec(),
                headers: json!({}),
                report: Some(Ok(EventReport {
                    provider: "payments".into(),
                    reference: reference.into(),
                    reported,
                    version,
                    provider_ref: Some(format!("ch_{reference}")),
                })),
                forward: false,
            }
        }

        use crate::tests::record;

        crate::tests::cases::intents::intent_cases!();
        crate::tests::cases::delivery::delivery_cases!();
        crate::tests::cases::inbox::inbox_cases!();
        crate::tests::cases::operator::operator_cases!();
        crate::tests::cases::ledger::ledger_cases!();
        crate::tests::cases::ledger_model::ledger_model_cases!();
    };
}

pub(crate) mod concurrent;
pub(crate) mod delivery;
pub(crate) mod inbox;
pub(crate) mod intents;
pub(crate) mod ledger;
pub(crate) mod ledger_model;
pub(crate) mod operator;

pub(super) use store_tests;
