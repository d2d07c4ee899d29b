//! Wire shapes of the simulated payments API: the charge object, webhook
//! events, error bodies, the stored `(status, body)` reply replayed under an
//! idempotency key, and the derivation of object ids.
//!
//! Only serialization lives here; it deliberately knows nothing about faults,
//! idempotency rules or routing.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A charge as returned by `POST /v1/charges` and the lookups.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Charge {
    /// `"ch_"` followed by 24 lowercase hex digits.
    pub id: String,
    /// Always `"charge"`.
    pub object: &'static str,
    /// Amount in minor units (> 0).
    pub amount: u64,
    /// Lowercase ISO currency code (3 letters).
    pub currency: String,
    /// Caller-supplied business reference.
    pub reference: String,
    /// `"succeeded"` or `"failed"` (declined).
    pub status: &'static str,
    /// Creation time, Unix seconds.
    pub created: u64,
}

/// A webhook event as delivered, serialized in field order:
/// `{"id":"evt_…","object":"event","type":"charge.succeeded","created":<unix s>,
/// "data":{"object":{…}}}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Event {
    /// `"evt_"` followed by 24 lowercase hex digits, the same on every delivery.
    pub id: String,
    /// Always `"event"`.
    pub object: &'static str,
    /// `"charge.pending"`, `"charge.succeeded"` or `"charge.failed"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Creation time of the event (the charge's commit), Unix seconds.
    pub created: u64,
    /// The object the event is about.
    pub data: EventData,
}

/// `{"object": …}` of an [`Event`].
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct EventData {
    /// The charge as of the event.
    pub object: EventCharge,
}

/// The charge inside an [`Event`]: `{"id","object":"charge","status","reference",
/// "amount","currency","version"}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct EventCharge {
    /// The charge's `"ch_…"` id.
    pub id: String,
    /// Always `"charge"`.
    pub object: &'static str,
    /// `"pending"`, `"succeeded"` or `"failed"`.
    pub status: &'static str,
    /// Caller-supplied business reference.
    pub reference: String,
    /// Amount in minor units.
    pub amount: u64,
    /// Lowercase ISO currency code.
    pub currency: String,
    /// Version of the charge object: 1 pending, 2 final.
    pub version: u32,
}

impl Event {
    /// The event `kind` about `charge` in `status` at `version`; its id is
    /// derived from `seed`, the charge id and `kind`, so it is unique per
    /// event and stable across deliveries.
    pub fn about(seed: u64, charge: &Charge, kind: &'static str, status: &'static str, version: u32) -> Self {
        Event {
            id: derived_id("evt", &[&seed.to_le_bytes(), b"event", charge.id.as_bytes(), kind.as_bytes()]),
            object: "event",
            kind,
            created: charge.created,
            data: EventData {
                object: EventCharge {
                    id: charge.id.clone(),
                    object: "charge",
                    status,
                    reference: charge.reference.clone(),
                    amount: charge.amount,
                    currency: charge.currency.clone(),
                    version,
                },
            },
        }
    }
}

/// `"{prefix}_"` followed by 24 lowercase hex digits: the first 12 bytes of
/// `sha256` over the concatenated `parts`.
pub(crate) fn derived_id(prefix: &str, parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    parts.iter().for_each(|p| hasher.update(p));
    let digest = hasher.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}_{hex}")
}

/// A finished answer: HTTP status and JSON body. Stored under idempotency keys
/// (for 200 and 402) and replayed verbatim.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    /// HTTP status code.
    pub status: StatusCode,
    /// JSON body.
    pub body: Value,
}

impl Reply {
    /// A reply with the given status and body.
    pub fn new(status: StatusCode, body: Value) -> Self {
        Reply { status, body }
    }

    /// A reply with body `{"error":{"type":..,"code":..,"message":..}}`.
    pub fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> Self {
        Reply::new(status, error_body(kind, code, message))
    }

    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(code: &str, param: &str, message: &str) -> Self {
        let mut body = error_body("invalid_request_error", code, message);
        body["error"]["param"] = Value::from(param);
        Reply::new(StatusCode::BAD_REQUEST, body)
    }

    /// Turns the reply into a response carrying `Idempotent-Replayed: true`.
    pub fn replayed(self) -> Response {
        let mut response = self.into_response();
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
        response
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

/// `{"error":{"type":kind,"code":code,"message":message}}`.
pub(crate) fn error_body(kind: &str, code: &str, message: &str) -> Value {
    json!({ "error": { "type": kind, "code": code, "message": message } })
}
