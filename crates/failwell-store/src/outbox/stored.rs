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
use crate::{Claimed, Completion, Transition};

/// The deepest nesting of arrays and objects a stored value may have: the
/// outermost object counts as 1. serde_json's reader stops at 128 (its
/// recursion limit counts the container that would exceed it).
pub const MAX_NESTING: usize = 127;

/// Reads stored JSON text. Errors: serde_json's, with line and column (not
/// JSON, or nested deeper than [`MAX_NESTING`]).
pub(crate) fn json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// Reads a stored payload (JSON text) that is to be sent: it must be one
/// failwell would have taken on every path in ([`check_object`],
/// [`check_payload`]). Errors: [`StoreError::InvalidPayload`] saying why
/// (not JSON serde_json reads, not an object, too deep, …).
pub(crate) fn sendable(text: &str) -> Result<Value, StoreError> {
    let value = json(text)
        .map_err(|e| StoreError::InvalidPayload { reason: format!("is not JSON failwell reads: {e}") })?;
    check_object(&value)?;
    check_payload(&value)?;
    Ok(value)
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

/// The prefix of the object keys serde_json's reader takes for its own
/// markers (`$serde_json::private::Number`, `…::RawValue`): an object with
/// such a key reads back as something else, so no payload may hold one.
pub const RESERVED_KEY_PREFIX: &str = "$serde_json::private::";

/// The most digits a number may have before and after its decimal point,
/// written out in full. PostgreSQL's `jsonb` keeps `1e131071` in a few
/// bytes but writes it as 131072 digits wherever it becomes text (as the
/// request hash does), so a small payload could cost the database
/// megabytes per number; the bound keeps that cost near the payload's
/// size. It is also well within what PostgreSQL's `numeric` holds.
pub const MAX_NUMBER_DIGITS: i128 = 1_000;
/// The largest exponent written: `0e99999999999` is zero, but PostgreSQL's
/// `numeric` input refuses an exponent from 2^30 on (`numeric.c`).
const MAX_EXPONENT: i128 = i32::MAX as i128 / 2;

/// What a payload must be, as the HTTP API and the SQL contract say: a JSON
/// object (its fields are the request's body, or its form fields). Errors:
/// [`StoreError::InvalidPayload`] naming what it is instead.
pub(crate) fn check_object(payload: &Value) -> Result<(), StoreError> {
    not_an_object(payload).map_or(Ok(()), |reason| Err(StoreError::InvalidPayload { reason }))
}

/// Why `payload` is not a JSON object (`is an array, not a JSON object`),
/// or `None` when it is one.
pub(crate) fn not_an_object(payload: &Value) -> Option<String> {
    let what = match payload {
        Value::Object(_) => return None,
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
    };
    Some(format!("is {what}, not a JSON object"))
}

/// Refuses a payload failwell could not store and read back on every
/// store. Errors: [`StoreError::InvalidPayload`] (nested deeper than
/// [`MAX_NESTING`], U+0000 in a string or key, a key starting with
/// [`RESERVED_KEY_PREFIX`], or a number with more than
/// [`MAX_NUMBER_DIGITS`] digits before or after its decimal point).
pub(crate) fn check_payload(payload: &Value) -> Result<(), StoreError> {
    let shape = shape(payload);
    let refuse = |reason: String| Err(StoreError::InvalidPayload { reason });
    if shape.nesting > MAX_NESTING {
        return refuse(format!(
            "nests arrays and objects {} levels deep; at most {MAX_NESTING}",
            shape.nesting
        ));
    }
    if shape.nul {
        return refuse("holds U+0000 in a string or key".into());
    }
    if let Some(key) = shape.reserved {
        return refuse(format!("holds the key {key:?}, which serde_json reserves for itself"));
    }
    if let Some(number) = shape.out_of_range {
        let shown: String = number.chars().take(40).collect();
        return refuse(format!(
            "holds the number {shown}{}, which has more than {MAX_NUMBER_DIGITS} digits before or after the \
             decimal point written out in full",
            if shown.len() < number.len() { "…" } else { "" }
        ));
    }
    Ok(())
}

/// A JSON number's text taken apart: its mantissa's digits (leading zeros
/// included), how many of them follow the decimal point, and its exponent.
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    fraction: usize,
    exponent: i128,
}

impl Decimal {
    /// `None` when the exponent does not fit an i128 (far beyond any limit).
    fn parse(text: &str) -> Option<Self> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i128>().ok()?),
            None => (unsigned, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = int.bytes().chain(frac.bytes()).collect();
        Some(Self { negative, digits, fraction: frac.len(), exponent })
    }

    /// The power of ten of the highest and of the lowest non-zero digit;
    /// `None` for zero.
    fn span(&self) -> Option<(i128, i128)> {
        let first = self.digits.iter().position(|&b| b != b'0')?;
        let last = self.digits.iter().rposition(|&b| b != b'0')?;
        let point = (self.digits.len() - self.fraction) as i128 + self.exponent;
        Some((point - 1 - first as i128, point - 1 - last as i128))
    }

    /// The same value: sign, non-zero digits and their place (so `12.50`,
    /// `1.25e1` and `125e-1` are one value).
    fn same_value(&self, other: &Decimal) -> bool {
        let significant = |d: &Decimal| {
            d.span().map(|(high, low)| {
                let digits: Vec<u8> = d.digits.iter().copied().skip_while(|&b| b == b'0').collect();
                let kept = (high - low + 1) as usize;
                (d.negative, digits[..kept].to_vec(), high)
            })
        };
        significant(self) == significant(other)
    }
}

/// Whether the JSON number `text`, written out in full, has at most
/// [`MAX_NUMBER_DIGITS`] digits before its decimal point and as many after
/// (as PostgreSQL writes it: the digits after the point as written, less
/// the exponent; trailing zeros count).
fn number_in_bounds(text: &str) -> bool {
    let Some(number) = Decimal::parse(text) else { return false };
    let scale = number.fraction as i128 - number.exponent;
    number.exponent.abs() < MAX_EXPONENT
        && scale <= MAX_NUMBER_DIGITS
        && number.span().is_none_or(|(high, _)| high < MAX_NUMBER_DIGITS)
}

/// A copy of `value` whose numbers are written as serde_json wrote them
/// before numbers kept their digits, wherever that form is the same value:
/// an integer of 64 bits as itself, a number an f64 holds exactly as that
/// f64 (`12.50` as `12.5`, `1e2` as `100.0`); any other number as written
/// (an f64 would change it). SQLite's request hash is taken over it, so the
/// hashes (and the keys derived from them) of the payloads earlier versions
/// stored unchanged stay valid: the same request enqueued again is still
/// one message, while two numbers an f64 cannot tell apart stay two.
pub(crate) fn hash_form(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::Number(if let Some(u) = n.as_u64() {
            u.into()
        } else if let Some(i) = n.as_i64() {
            i.into()
        } else {
            let text = n.to_string();
            n.as_f64()
                .and_then(serde_json::Number::from_f64)
                .filter(|f| {
                    let f = f.to_string();
                    matches!((Decimal::parse(&text), Decimal::parse(&f)), (Some(a), Some(b)) if a.same_value(&b))
                })
                .unwrap_or_else(|| n.clone())
        }),
        Value::Array(items) => Value::Array(items.iter().map(hash_form).collect()),
        Value::Object(members) => {
            let mut members: serde_json::Map<String, Value> =
                members.iter().map(|(k, v)| (k.clone(), hash_form(v))).collect();
            members.sort_keys();
            Value::Object(members)
        }
        other => other.clone(),
    }
}

/// The first object key of the JSON `text` that starts with
/// [`RESERVED_KEY_PREFIX`] once its escapes are read (`"\u0024serde…"` is
/// one), if any. Reads the text as tokens, so a string *value* with that
/// text is no key. Meant for text serde_json accepted as JSON.
pub fn reserved_key_in(text: &str) -> Option<String> {
    // Only a `\u` escape makes a key read as text it does not hold; without
    // one, such a key holds the prefix as written.
    if !text.contains(RESERVED_KEY_PREFIX) && !text.contains("\\u") {
        return None;
    }
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(offset) = bytes[at..].iter().position(|&b| b == b'"') {
        let start = at + offset;
        let mut end = start + 1;
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let token = text.get(start..=end.min(bytes.len() - 1))?;
        at = end + 1;
        let is_key = bytes[at.min(bytes.len())..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':');
        if is_key
            && let Ok(key) = serde_json::from_str::<String>(token)
            && key.starts_with(RESERVED_KEY_PREFIX)
        {
            return Some(key);
        }
    }
    None
}

/// The last error of a message set aside by a claim because of its stored
/// `operation_id`: `why` says what is wrong with it (it cannot be read, or
/// "N names no operation").
pub(crate) fn operation_id_set_aside(why: &str) -> String {
    format!("stored operation_id: {why}; set aside, not sent")
}

/// Dead-letters the claimed message `$1` alone, with last error `$2`, at
/// `$3` (ms): a claim's statement for a message it cannot pair with an
/// operation ([`operation_id_set_aside`]).
pub(crate) const SET_ASIDE_MESSAGE: &str = "UPDATE outbox SET state = 'dead', last_error = $2, dead_at_ms = $3, \
     in_flight = 0, locked_until_ms = NULL, lease_token = NULL, updated_at_ms = $3, changed_by = 'relay' \
     WHERE id = $1";

/// What a claim does with a message whose operation cannot be read back
/// ([`Operation::unreadable`](crate::Operation::unreadable)): it is never
/// sent. Its message is dead-lettered alone, its operation `failed`, with
/// the reason as the last error; when an earlier call of it may have taken
/// effect (an interrupted attempt), the operation is `unknown` instead and
/// reconciliation asks the provider (a lookup sends the reference, not the
/// payload).
pub(crate) fn set_aside(claimed: &Claimed, now_ms: i64) -> Completion {
    let operation = &claimed.operation;
    let error = format!(
        "stored {}; set aside, not sent",
        operation.unreadable.as_deref().unwrap_or("value cannot be read")
    );
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
struct Shape<'v> {
    /// How deeply arrays and objects nest (a scalar is 0, `{}` is 1,
    /// `{"a": [1]}` is 2).
    nesting: usize,
    /// Whether a string or key holds U+0000.
    nul: bool,
    /// A key starting with [`RESERVED_KEY_PREFIX`].
    reserved: Option<&'v str>,
    /// A number with more than [`MAX_NUMBER_DIGITS`] digits before or
    /// after its decimal point.
    out_of_range: Option<String>,
}

/// Walks `value` with its own stack, so a value nested deeper than the
/// thread's stack allows is measured, not a crash.
fn shape(value: &Value) -> Shape<'_> {
    let mut shape = Shape { nesting: 0, nul: false, reserved: None, out_of_range: None };
    let mut stack = vec![(value, 0)];
    while let Some((value, above)) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, above + 1))),
            Value::Object(members) => {
                for key in members.keys() {
                    shape.nul |= key.contains('\0');
                    if key.starts_with(RESERVED_KEY_PREFIX) {
                        shape.reserved.get_or_insert(key);
                    }
                }
                stack.extend(members.values().map(|member| (member, above + 1)));
            }
            Value::String(s) => {
                shape.nul |= s.contains('\0');
                continue;
            }
            Value::Number(n) => {
                let text = n.to_string();
                if shape.out_of_range.is_none() && !number_in_bounds(&text) {
                    shape.out_of_range = Some(text);
                }
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
    fn numbers_are_bounded_as_written_out_in_full() {
        let thousand_after = format!("0.{}1", "0".repeat(999));
        for fits in [
            "0",
            "-0",
            "1e999",
            "9.9e999",
            "1e-1000",
            "12.50",
            "-1e-400",
            "1e309",
            "1.00000e995",
            "0e-1000",
            thousand_after.as_str(),
        ] {
            assert!(number_in_bounds(fits), "{fits}");
        }
        let many_zeros = format!("1.{}", "0".repeat(1001));
        for beyond in [
            "1e1000",
            "10e999",
            "1e-1001",
            "1.5e-1000",
            "1.0e-1000",
            "0e-2000",
            "1e131071",
            "0e999999999999999999999999",
            "0.0e2147483647",
            "1e999999999999999999999999999999999999999",
            many_zeros.as_str(),
        ] {
            assert!(!number_in_bounds(beyond), "{beyond}");
        }
        let big: Value = json(r#"{"a":[1e1000]}"#).unwrap();
        assert!(matches!(check_payload(&big), Err(StoreError::InvalidPayload { .. })));
    }

    #[test]
    fn finds_reserved_keys_behind_escapes_and_never_in_values() {
        for (text, found) in [
            (r#"{"a":{"$serde_json::private::Number":"1"}}"#, true),
            (r#"{"a":{"\u0024serde_json::private::RawValue" : "{}"}}"#, true),
            (r#"{"note":"$serde_json::private::Number","b":["$serde_json::private::x"]}"#, false),
            (r#"{"a\"b":{"c":"\\"}, "d": 1}"#, false),
            (r#"{"\u0024serde\u005fjson::private::Number":"1"}"#, true),
            (r#"{"\\u0024serde_json::private::Number":"1"}"#, false),
        ] {
            assert_eq!(reserved_key_in(text).is_some(), found, "{text}");
        }
    }

    #[test]
    fn refuses_the_keys_serde_json_reserves() {
        let mut members = serde_json::Map::new();
        members.insert("$serde_json::private::Number".into(), Value::String("12".into()));
        let payload = serde_json::json!({"amount": Value::Object(members)});
        assert!(matches!(check_payload(&payload), Err(StoreError::InvalidPayload { .. })));
    }

    #[test]
    fn the_hash_form_is_the_one_of_earlier_versions() {
        let payload = json(
            r#"{"b":12.50,"a":[1e2,-7,18446744073709551615,1e400,0.1000000000000000055511151231257827,12345678901234567890123,0.5e-3]}"#,
        )
        .unwrap();
        assert_eq!(
            hash_form(&payload).to_string(),
            r#"{"a":[100.0,-7,18446744073709551615,1e+400,0.1000000000000000055511151231257827,12345678901234567890123,0.0005],"b":12.5}"#
        );
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
