//! Parsing and validation of `POST /v1/charges` bodies, form-urlencoded or JSON
//! (chosen by `Content-Type`: `application/json` means JSON, anything else form).
//!
//! It turns bytes into [`ChargeParams`] or a 400 [`Reply`]; it deliberately does
//! not count requests, apply faults or touch the idempotency store.

use std::collections::HashMap;

use serde_json::Value;

use crate::api::Reply;
use crate::state::ChargeParams;

/// The raw fields of a charge request, before validation.
#[derive(Debug, Default)]
pub(crate) struct RawFields {
    fields: HashMap<String, Value>,
}

impl RawFields {
    /// Parses the body according to its content type. A JSON body that is not a
    /// JSON object is a 400 `parameter_invalid` on param `body`.
    pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Self, Reply> {
        let is_json = content_type.is_some_and(|ct| {
            let essence = ct.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        if !is_json {
            return Ok(RawFields {
                fields: decode_form(body).into_iter().map(|(k, v)| (k, Value::String(v))).collect(),
            });
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(RawFields { fields: map.into_iter().collect() }),
            _ => Err(Reply::invalid("parameter_invalid", "body", "The request body must be a JSON object.")),
        }
    }

    /// The `reference` if it is a non-empty string (used to count the request
    /// before full validation).
    pub fn reference(&self) -> Option<&str> {
        match self.fields.get("reference") {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// Validates `amount` (integer > 0), `currency` (3 ASCII letters, lowercased)
    /// and `reference` (non-empty string), in that order.
    pub fn validate(&self) -> Result<ChargeParams, Reply> {
        let amount = match self.fields.get("amount") {
            None | Some(Value::Null) => return Err(missing("amount")),
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        let amount = match amount {
            Some(a) if a > 0 => a,
            _ => {
                return Err(Reply::invalid(
                    "parameter_invalid",
                    "amount",
                    "amount must be a positive integer in minor units.",
                ));
            }
        };
        let currency = match self.fields.get("currency") {
            None | Some(Value::Null) => return Err(missing("currency")),
            Some(Value::String(s)) if s.len() == 3 && s.bytes().all(|b| b.is_ascii_alphabetic()) => {
                s.to_ascii_lowercase()
            }
            Some(_) => {
                return Err(Reply::invalid(
                    "parameter_invalid",
                    "currency",
                    "currency must be a three-letter ISO code.",
                ));
            }
        };
        let reference = match self.fields.get("reference") {
            None | Some(Value::Null) => return Err(missing("reference")),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(Reply::invalid(
                    "parameter_invalid",
                    "reference",
                    "reference must be a non-empty string.",
                ));
            }
        };
        Ok(ChargeParams { amount, currency, reference })
    }
}

fn missing(param: &str) -> Reply {
    Reply::invalid("parameter_missing", param, &format!("Missing required param: {param}."))
}

/// Decodes `application/x-www-form-urlencoded` (`+` is a space, `%XX` escapes,
/// invalid UTF-8 replaced). Later duplicates win.
pub(crate) fn decode_form(body: &[u8]) -> HashMap<String, String> {
    body.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |&b| b == b'=');
            let key = parts.next().unwrap_or_default();
            let value = parts.next().unwrap_or_default();
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(input: &[u8]) -> String {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < input.len() => match (hex(input[i + 1]), hex(input[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}
