//! Test data shared by the engine's unit tests.

use failwell_store::{Operation, OperationStatus};
use serde_json::json;

/// A pending charge of 100 eur with reference `order-1`, never sent.
pub(crate) fn operation() -> Operation {
    Operation {
        id: 5,
        idempotency_key: "order-1".into(),
        provider: "payments".into(),
        operation: "charge".into(),
        reference: Some("order-1".into()),
        payload: json!({"amount": 100, "currency": "eur", "reference": "order-1"}),
        status: OperationStatus::Pending,
        key_group: 0,
        provider_key: "fw_key".into(),
        key_first_sent_at_ms: None,
        attempts: 0,
        provider_ref: None,
        response: None,
        last_error: None,
        dead_letter: false,
        reconcile_attempts: 0,
        effect_possible: false,
        lookup_misses: 0,
        created_at_ms: 0,
        delivery_started_at_ms: 0,
        updated_at_ms: 0,
        unreadable: None,
    }
}
