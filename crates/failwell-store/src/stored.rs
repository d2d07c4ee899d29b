//! The rule for JSON that failwell stores and reads back: what it can read
//! is exactly what it accepts, so a stored value either reads back whole or
//! was refused when it was written.
//!
//! Numbers keep the digits they were written with and objects keep their key
//! order (serde_json's `arbitrary_precision` and `preserve_order`), so what
//! the application stored is what the provider receives. serde_json writes
//! an exponent as `e` with its sign (`1E309` is sent as `1e+309`: the same
//! number, every digit kept). The one limit is
//! nesting: serde_json reads at most [`MAX_NESTING`] arrays and objects
//! inside one another, so deeper values are refused on the way in.

use serde_json::Value;

use crate::StoreError;
use crate::model::{Claimed, Completion, Transition};

/// The deepest nesting of arrays and objects a stored value may have: the
/// outermost object counts as 1. serde_json's reader stops at 128 (its
/// recursion limit counts the container that would exceed it).
pub(crate) const MAX_NESTING: usize = 127;

/// Reads stored JSON text. Errors: serde_json's, with line and column (not
/// JSON, or nested deeper than [`MAX_NESTING`]).
pub(crate) fn json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// Reads stored JSON text that failwell wrote; text that cannot be read
/// (damaged by another program) comes back as a JSON string of itself,
/// with serde_json's error, so one damaged row is shown, not a failed read.
pub(crate) fn json_or_text(text: String) -> (Value, Option<serde_json::Error>) {
    match json(&text) {
        Ok(value) => (value, None),
        Err(e) => (Value::String(text), Some(e)),
    }
}

/// Refuses a payload failwell could not store and read back on every
/// store. Errors: [`StoreError::InvalidPayload`] (nested deeper than
/// [`MAX_NESTING`], or U+0000 in a string or key).
pub(crate) fn check_payload(payload: &Value) -> Result<(), StoreError> {
    let shape = shape(payload);
    if shape.nesting > MAX_NESTING {
        return Err(StoreError::InvalidPayload {
            reason: format!("nests arrays and objects {} levels deep; at most {MAX_NESTING}", shape.nesting),
        });
    }
    if shape.nul {
        return Err(StoreError::InvalidPayload { reason: "holds U+0000 in a string or key".into() });
    }
    Ok(())
}

/// What a claim does with a message whose operation cannot be read back
/// ([`Operation::unreadable`](crate::Operation::unreadable)): it is never
/// sent. Its message is dead-lettered alone, its operation `failed`, with
/// the reason as the last error; when an earlier call of it may have taken
/// effect (an interrupted attempt), the operation is `unknown` instead and
/// reconciliation asks the provider (a lookup sends the reference, not the
/// payload).
pub(crate) fn set_aside(claimed: &Claimed, now_ms: i64) -> Completion {
    let operation = &claimed.operation;
    let error =
        format!("stored {}; never sent", operation.unreadable.as_deref().unwrap_or("value cannot be read"));
    Completion {
        outbox_id: claimed.outbox_id,
        lease_token: claimed.lease_token,
        operation_id: operation.id,
        attempt: None,
        transition: if operation.effect_possible {
            Transition::Unknown { error, reconcile_at_ms: now_ms }
        } else {
            Transition::DeadLetter { error }
        },
    }
}

/// What [`check_payload`] looks at in a value.
struct Shape {
    /// How deeply arrays and objects nest (a scalar is 0, `{}` is 1,
    /// `{"a": [1]}` is 2).
    nesting: usize,
    /// Whether a string or key holds U+0000.
    nul: bool,
}

/// Walks `value` with its own stack, so a value nested deeper than the
/// thread's stack allows is measured, not a crash.
fn shape(value: &Value) -> Shape {
    let mut shape = Shape { nesting: 0, nul: false };
    let mut stack = vec![(value, 0)];
    while let Some((value, above)) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, above + 1))),
            Value::Object(members) => {
                shape.nul |= members.keys().any(|k| k.contains('\0'));
                stack.extend(members.values().map(|member| (member, above + 1)));
            }
            Value::String(s) => {
                shape.nul |= s.contains('\0');
                continue;
            }
            _ => continue,
        }
        shape.nesting = shape.nesting.max(above + 1);
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn reads_exactly_the_nesting_it_accepts() {
        let deepest = json(&nested(MAX_NESTING)).unwrap();
        assert_eq!(shape(&deepest).nesting, MAX_NESTING);
        check_payload(&deepest).unwrap();
        let mut deeper = deepest;
        deeper = Value::Array(vec![deeper]);
        assert!(matches!(check_payload(&deeper), Err(StoreError::InvalidPayload { .. })));
        let error = json(&nested(MAX_NESTING + 1)).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
    }

    #[test]
    fn nesting_counts_containers_not_scalars() {
        assert_eq!(shape(&serde_json::json!(1)).nesting, 0);
        assert_eq!(shape(&serde_json::json!({})).nesting, 1);
        assert_eq!(shape(&serde_json::json!({"a": [1, {"b": []}], "c": 2})).nesting, 4);
    }

    #[test]
    fn refuses_nul_in_strings_and_keys() {
        for payload in [serde_json::json!({"a": "x\u{0}y"}), serde_json::json!({"a": [{"k\u{0}": 1}]})] {
            assert!(matches!(check_payload(&payload), Err(StoreError::InvalidPayload { .. })), "{payload}");
        }
        check_payload(&serde_json::json!({"a": "\\u0000 as text"})).unwrap();
    }

    #[test]
    fn numbers_and_key_order_read_back_as_written() {
        let text = r#"{"z":1e-400,"a":123456789012345678901234567890,"m":0.1000000000000000055511151231257827,"n":-9223372036854775809,"big":1e+309}"#;
        assert_eq!(json(text).unwrap().to_string(), text);
        // serde_json writes an exponent with its sign and a lower-case `e`:
        // the same number, every digit kept.
        assert_eq!(json("[1e309,2E-5,3E+1]").unwrap().to_string(), "[1e+309,2e-5,3e+1]");
    }
}
