//! The webhook sources an instance is configured with (`[webhooks.NAME]`):
//! how a delivery is verified, and how its event maps to the operations
//! ledger ([`LedgerMapping`]).

use std::collections::BTreeMap;

use failwell_policy::{NotApplicable, Outcome, Reported};
use failwell_store::EventReport;
use failwell_webhook::{JsonFields, Verifier};
use serde_json::Value;

/// One configured webhook source (`[webhooks.NAME]`).
#[derive(Clone, Debug)]
pub struct WebhookSource {
    /// The signature check.
    pub verifier: Verifier,
    /// JSON pointer to the event id in the body, for schemes whose headers
    /// carry none (Stripe: `/id`).
    pub event_id_pointer: String,
    /// The largest body accepted, in bytes (413 past it).
    pub max_body_bytes: usize,
    /// Whether new events are forwarded to the application.
    pub forward: bool,
    /// How events map to the operations ledger (`None`: they do not).
    pub ledger: Option<LedgerMapping>,
}

/// Where an integration's events say which of our operations they are
/// about, what happened to it, and how new the news is
/// (`[webhooks.NAME.ledger]`).
#[derive(Clone, Debug)]
pub struct LedgerMapping {
    /// The provider our operations went to.
    pub provider: String,
    /// JSON pointer to our reference in the event, e.g.
    /// `/data/object/reference`.
    pub reference_pointer: String,
    /// JSON pointer to the object's status, e.g. `/data/object/status`.
    pub status_pointer: String,
    /// JSON pointer to the event's version: an integer, or a string of
    /// digits (provider-side creation time or object version; larger is
    /// newer), e.g. `/created`.
    pub version_pointer: String,
    /// Statuses meaning the provider acted.
    pub succeeded: Vec<String>,
    /// Statuses meaning the provider refused or certainly did not act.
    pub failed: Vec<String>,
    /// Statuses meaning the object is still in progress.
    pub in_progress: Vec<String>,
    /// Event types that report on operations (e.g. `charge.succeeded`);
    /// empty: every type. Other events are recorded as not applicable, so a
    /// refund's `succeeded` never settles the charge it refunds.
    pub types: Vec<String>,
    /// JSON pointer to the event's type, e.g. `/type`.
    pub type_pointer: String,
    /// JSON pointer to the provider's id of the object, e.g.
    /// `/data/object/id` (kept on the operation an event settles).
    pub id_pointer: String,
}

impl LedgerMapping {
    /// What the event `body` reports, or why it reports nothing this
    /// mapping can apply (not JSON, a field missing, an unmapped status).
    pub fn report(&self, body: &[u8]) -> Result<EventReport, NotApplicable> {
        let event = JsonFields::new(body);
        let field = |pointer: &str| match event.at(pointer) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(NotApplicable::Missing(pointer.to_owned())),
            Err(e) => Err(NotApplicable::Unreadable(e.to_string())),
        };
        let text = |pointer: &str| match field(pointer)? {
            Value::String(s) => Ok(s),
            _ => Err(NotApplicable::NotText(pointer.to_owned())),
        };
        if !self.types.is_empty() {
            let kind = text(&self.type_pointer)?;
            if !self.types.contains(&kind) {
                return Err(NotApplicable::OtherType(kind));
            }
        }
        // A reference may be an integer, as in `POST /v1/operations`.
        let reference = match field(&self.reference_pointer)? {
            Value::String(s) => s,
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => return Err(NotApplicable::Reference(self.reference_pointer.clone())),
        };
        let status = text(&self.status_pointer)?;
        let version = field(&self.version_pointer)?;
        let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
        let version = version
            .as_i64()
            .or_else(|| version.as_str().filter(|v| digits(v)).and_then(|v| v.parse().ok()))
            .ok_or_else(|| NotApplicable::Version(self.version_pointer.clone()))?;
        let listed = |list: &[String]| list.contains(&status);
        let reported = if listed(&self.succeeded) {
            Reported::Settled(Outcome::Succeeded)
        } else if listed(&self.failed) {
            Reported::Settled(Outcome::Failed)
        } else if listed(&self.in_progress) {
            Reported::InProgress
        } else {
            return Err(NotApplicable::Status(status));
        };
        let provider_ref = match event.at(&self.id_pointer) {
            Ok(Some(Value::String(id))) => Some(id),
            _ => None,
        };
        Ok(EventReport { provider: self.provider.clone(), reference, reported, version, provider_ref })
    }
}

/// The configured webhook sources, by integration name.
pub type Webhooks = BTreeMap<String, WebhookSource>;

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(types: &[&str]) -> LedgerMapping {
        LedgerMapping {
            provider: "payments".into(),
            reference_pointer: "/data/object/reference".into(),
            status_pointer: "/data/object/status".into(),
            version_pointer: "/created".into(),
            succeeded: vec!["succeeded".into()],
            failed: vec!["failed".into()],
            in_progress: vec!["pending".into()],
            types: types.iter().map(|t| t.to_string()).collect(),
            type_pointer: "/type".into(),
            id_pointer: "/data/object/id".into(),
        }
    }

    fn event(kind: &str, status: &str, created: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"{kind}","created":{created},"data":{{"object":{{"reference":"o-1","status":"{status}"}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn an_event_reports_what_its_fields_say_or_why_not() {
        let report = mapping(&[]).report(&event("charge.succeeded", "succeeded", "1700000000")).unwrap();
        assert_eq!(
            (report.reference.as_str(), report.reported, report.version),
            ("o-1", Reported::Settled(Outcome::Succeeded), 1_700_000_000)
        );
        let quoted = mapping(&[]).report(&event("charge.pending", "pending", "\"42\"")).unwrap();
        assert_eq!((quoted.reported, quoted.version), (Reported::InProgress, 42));
        let refused = [
            (mapping(&[]).report(b"not json"), "not applicable: the body is not JSON"),
            (
                mapping(&[]).report(&event("x", "refunded", "1")),
                "not applicable: status \"refunded\" is not mapped",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "1.5")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "null")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(&event("x", "succeeded", "\"+3\"")),
                "not applicable: \"/created\" is not an integer",
            ),
            (
                mapping(&[]).report(br#"{"created":1}"#),
                "not applicable: nothing at \"/data/object/reference\"",
            ),
            (
                mapping(&["charge.succeeded"]).report(&event("refund.succeeded", "succeeded", "1")),
                "not applicable: event type \"refund.succeeded\" is not in types",
            ),
        ];
        for (result, reason) in refused {
            let why = result.unwrap_err().to_string();
            assert!(why.starts_with(reason), "{why:?} does not start with {reason:?}");
        }
    }

    #[test]
    fn any_valid_json_event_reports() {
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        let body = format!(
            "\u{feff}{{\"extra\":{deep},\"amount\":1e400,\"type\":\"x\",\"created\":7,\
             \"data\":{{\"object\":{{\"reference\":\"o-1\",\"status\":\"failed\",\"id\":\"ch_1\"}}}}}}"
        );
        let report = mapping(&[]).report(body.as_bytes()).unwrap();
        assert_eq!(
            (report.reference.as_str(), report.reported, report.version, report.provider_ref.as_deref()),
            ("o-1", Reported::Settled(Outcome::Failed), 7, Some("ch_1"))
        );
    }
}
