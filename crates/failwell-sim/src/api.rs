//! Wire shapes of the simulated payments API: the charge object, error bodies and
//! the stored `(status, body)` reply replayed under an idempotency key.
//!
//! Only serialization lives here; it deliberately knows nothing about faults,
//! idempotency rules or routing.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

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
