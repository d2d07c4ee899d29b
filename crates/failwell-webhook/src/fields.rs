//! Reading single fields (the event id, a reference, a status) out of a
//! webhook body, by JSON Pointer (RFC 6901), from any valid JSON the
//! provider may send: with a UTF-8 byte order mark, with numbers beyond any
//! machine type, or nested deeper than a full parse allows.
//!
//! Only the path to the field is decoded; every other value is skipped
//! without being built (serde's `IgnoredAny`, which serde_json skips with
//! its own stack, so nesting depth does not matter there). The field itself
//! is decoded as a [`Value`].

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A webhook body whose fields are read one JSON Pointer at a time.
#[derive(Clone, Copy, Debug)]
pub struct JsonFields<'a> {
    json: &'a [u8],
}

/// Why a webhook body has no field to read.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    /// The body is not one JSON value (after an optional byte order mark).
    #[error("the body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A pointer that does not start with `/` (and is not empty).
    #[error("{0:?} is not a JSON Pointer (RFC 6901): it must be empty or start with '/'")]
    BadPointer(String),
}

impl<'a> JsonFields<'a> {
    /// The body as received; a leading UTF-8 byte order mark (EF BB BF) is
    /// skipped, as RFC 8259 §8.1 allows a reader to do.
    pub fn new(body: &'a [u8]) -> Self {
        Self { json: body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body) }
    }

    /// The value at `pointer` (`""` is the whole body, `/data/object/id`
    /// a member of members; `~1` and `~0` stand for `/` and `~`, and an
    /// array index is its decimal number), or `None` when the body has
    /// nothing there. The body is checked to be one whole JSON value each
    /// time. Errors: [`FieldError`].
    pub fn at(&self, pointer: &str) -> Result<Option<Value>, FieldError> {
        let tokens = tokens(pointer)?;
        let mut reader = serde_json::Deserializer::from_slice(self.json);
        let found = At { tokens: &tokens }.deserialize(&mut reader).map_err(FieldError::NotJson)?;
        reader.end().map_err(FieldError::NotJson)?;
        Ok(found)
    }
}

/// The reference tokens of a JSON Pointer, unescaped (RFC 6901 §3–4).
fn tokens(pointer: &str) -> Result<Vec<String>, FieldError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer.strip_prefix('/').ok_or_else(|| FieldError::BadPointer(pointer.to_owned()))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

/// Decodes the value at `tokens` below the value being read, skipping
/// everything else.
struct At<'t> {
    tokens: &'t [String],
}

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.tokens.split_first() {
            None => serde::Deserialize::deserialize(d).map(Some),
            Some((wanted, below)) => d.deserialize_any(Below { wanted, below }),
        }
    }
}

/// Looks for the member or item `wanted` of the value being read, and the
/// value at `below` under it.
struct Below<'t> {
    wanted: &'t str,
    below: &'t [String],
}

impl<'de> Visitor<'de> for Below<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Self::Value, A::Error> {
        let Below { wanted, below } = self;
        let mut found = None;
        // The last of duplicate members wins, as in a full parse.
        while let Some(name) = members.next_key::<String>()? {
            if name == wanted {
                found = members.next_value_seed(At { tokens: below })?;
            } else {
                members.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        let Below { wanted, below } = self;
        // RFC 6901: an index is "0" or digits without a leading zero.
        let index = Some(wanted)
            .filter(|t| *t == "0" || (!t.starts_with('0') && t.bytes().all(|b| b.is_ascii_digit())))
            .and_then(|t| t.parse::<usize>().ok());
        let mut found = None;
        let mut at = 0;
        loop {
            let item = if Some(at) == index {
                items.next_element_seed(At { tokens: below })?.map(|v| found = v)
            } else {
                items.next_element::<IgnoredAny>()?.map(drop)
            };
            if item.is_none() {
                return Ok(found);
            }
            at += 1;
        }
    }

    // A scalar has nothing below it.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(body: &str, pointer: &str) -> Option<Value> {
        JsonFields::new(body.as_bytes()).at(pointer).unwrap()
    }

    #[test]
    fn reads_members_and_items_by_pointer() {
        let body = r#"{"id":"evt_1","data":{"object":{"a/b":1,"m~n":2,"list":[10,{"x":"y"}]}}}"#;
        assert_eq!(at(body, "/id"), Some(json!("evt_1")));
        assert_eq!(at(body, "/data/object/a~1b"), Some(json!(1)));
        assert_eq!(at(body, "/data/object/m~0n"), Some(json!(2)));
        assert_eq!(at(body, "/data/object/list/1/x"), Some(json!("y")));
        assert_eq!(at(body, "/data/object/list/01"), None);
        assert_eq!(at(body, "/data/object/list/2"), None);
        assert_eq!(at(body, "/nothing"), None);
        assert_eq!(at(body, "/id/deeper"), None);
        assert_eq!(at(body, ""), Some(serde_json::from_str(body).unwrap()));
    }

    #[test]
    fn reads_what_a_full_parse_cannot() {
        let deep = format!(r#"{{"id":"evt_deep","nested":{}{}}}"#, "[".repeat(5000), "]".repeat(5000));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        assert_eq!(at(&deep, "/id"), Some(json!("evt_deep")));
        assert_eq!(at("\u{feff}{\"id\":\"evt_bom\"}", "/id"), Some(json!("evt_bom")));
        let huge = r#"{"amount":1e400,"tiny":1e-400,"id":"evt_huge"}"#;
        assert_eq!(at(huge, "/id"), Some(json!("evt_huge")));
        assert_eq!(at(huge, "/amount").unwrap().to_string(), "1e+400", "every digit kept");
        assert_eq!(at(r#"{"id":"a","id":"b"}"#, "/id"), Some(json!("b")));
    }

    #[test]
    fn says_why_there_is_nothing() {
        let fields = JsonFields::new(b"{\"id\": \"x\"} trailing");
        assert!(matches!(fields.at("/id"), Err(FieldError::NotJson(_))));
        assert!(matches!(JsonFields::new(b"not json").at("/id"), Err(FieldError::NotJson(_))));
        assert!(matches!(JsonFields::new(b"{}").at("id"), Err(FieldError::BadPointer(_))));
    }
}
