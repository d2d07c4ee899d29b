use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn status(status: u16) -> Observed<'static> {
    Observed::Response { status, error_code: None, retry_after: None }
}

#[test]
fn default_table() {
    let c = Classifier::default();
    let retry = Classification::Retryable { retry_after: None };
    let table = [
        (408, retry),
        (429, retry),
        (503, retry),
        (409, Classification::Ambiguous),
        (500, Classification::Ambiguous),
        (502, Classification::Ambiguous),
        (504, Classification::Ambiguous),
        (599, Classification::Ambiguous),
        (400, Classification::Permanent),
        (401, Classification::Permanent),
        (402, Classification::Permanent),
        (403, Classification::Permanent),
        (404, Classification::Permanent),
        (422, Classification::Permanent),
    ];
    for (s, want) in table {
        assert_eq!(c.classify(status(s)), want, "status {s}");
    }
}

#[test]
fn transport_failures_split_on_whether_the_request_was_sent() {
    let c = Classifier::default();
    assert_eq!(
        c.classify(Observed::Transport(TransportFailure::NotSent)),
        Classification::Retryable { retry_after: None }
    );
    assert_eq!(c.classify(Observed::Transport(TransportFailure::AfterSend)), Classification::Ambiguous);
}

#[test]
fn error_code_rule_beats_status_rule_beats_default() {
    let statuses = BTreeMap::from([(500, Class::Retryable), (402, Class::Retryable)]);
    let codes = BTreeMap::from([("card_declined".to_string(), Class::Permanent)]);
    let c = Classifier::new(statuses, codes);
    assert_eq!(c.classify(status(500)), Classification::Retryable { retry_after: None });
    let declined = Observed::Response { status: 402, error_code: Some("card_declined"), retry_after: None };
    assert_eq!(c.classify(declined), Classification::Permanent);
    let other = Observed::Response { status: 402, error_code: Some("processing_error"), retry_after: None };
    assert_eq!(c.classify(other), Classification::Retryable { retry_after: None });
}

#[test]
fn retry_after_is_kept_on_retryable() {
    let c = Classifier::default();
    let wait = Some(Duration::from_secs(3));
    let observed = Observed::Response { status: 429, error_code: None, retry_after: wait };
    assert_eq!(c.classify(observed), Classification::Retryable { retry_after: wait });
}

const RETRY: Classification = Classification::Retryable { retry_after: None };
const AMBIGUOUS: Classification = Classification::Ambiguous;
const PERMANENT: Classification = Classification::Permanent;

fn sent() -> Observed<'static> {
    Observed::Transport(TransportFailure::AfterSend)
}

fn not_sent() -> Observed<'static> {
    Observed::Transport(TransportFailure::NotSent)
}

#[test]
fn repeatable_methods_are_the_idempotent_ones_or_keyed() {
    let table = [
        ("GET", false, true),
        ("HEAD", false, true),
        ("OPTIONS", false, true),
        ("TRACE", false, true),
        ("PUT", false, true),
        ("DELETE", false, true),
        ("POST", false, false),
        ("PATCH", false, false),
        ("CONNECT", false, false),
        ("get", false, false),
        ("POST", true, true),
        ("PATCH", true, true),
        ("GET", true, true),
    ];
    for (method, keyed, want) in table {
        assert_eq!(is_repeatable(method, keyed), want, "{method} keyed={keyed}");
    }
}

#[test]
fn request_default_table() {
    let c = Classifier::default();
    // (observed, repeatable, not repeatable)
    let table = [
        (not_sent(), RETRY, RETRY),
        (sent(), RETRY, AMBIGUOUS),
        (status(408), RETRY, RETRY),
        (status(429), RETRY, RETRY),
        (status(503), RETRY, RETRY),
        (status(500), RETRY, AMBIGUOUS),
        (status(502), RETRY, AMBIGUOUS),
        (status(504), RETRY, AMBIGUOUS),
        (status(501), RETRY, AMBIGUOUS),
        (status(599), RETRY, AMBIGUOUS),
        (status(409), AMBIGUOUS, AMBIGUOUS),
        (status(400), PERMANENT, PERMANENT),
        (status(401), PERMANENT, PERMANENT),
        (status(402), PERMANENT, PERMANENT),
        (status(403), PERMANENT, PERMANENT),
        (status(404), PERMANENT, PERMANENT),
        (status(410), PERMANENT, PERMANENT),
        (status(422), PERMANENT, PERMANENT),
        (status(451), PERMANENT, PERMANENT),
        (status(302), RETRY, AMBIGUOUS),
    ];
    for (observed, repeatable, not_repeatable) in table {
        assert_eq!(c.classify_request(observed, true), repeatable, "{observed:?} repeatable");
        assert_eq!(c.classify_request(observed, false), not_repeatable, "{observed:?} not repeatable");
    }
}

#[test]
fn request_classification_by_method_and_key() {
    let c = Classifier::default();
    // (method, keyed, observed, want)
    let table = [
        ("POST", false, status(502), AMBIGUOUS),
        ("POST", true, status(502), RETRY),
        ("GET", false, status(502), RETRY),
        ("DELETE", false, status(504), RETRY),
        ("PATCH", false, sent(), AMBIGUOUS),
        ("PATCH", true, sent(), RETRY),
        ("POST", false, not_sent(), RETRY),
        ("POST", false, status(503), RETRY),
        ("PUT", false, status(409), AMBIGUOUS),
        ("GET", false, status(404), PERMANENT),
    ];
    for (method, keyed, observed, want) in table {
        assert_eq!(
            c.classify_request(observed, is_repeatable(method, keyed)),
            want,
            "{method} {keyed} {observed:?}"
        );
    }
}

#[test]
fn request_overrides_win_code_over_status_over_default() {
    let statuses = BTreeMap::from([
        (500, Class::Permanent),
        (502, Class::Retryable),
        (504, Class::Ambiguous),
        (402, Class::Retryable),
    ]);
    let codes = BTreeMap::from([
        ("card_declined".to_string(), Class::Permanent),
        ("in_progress".to_string(), Class::Ambiguous),
    ]);
    let c = Classifier::new(statuses, codes);
    let coded = |status, code| Observed::Response { status, error_code: Some(code), retry_after: None };
    // (observed, repeatable, want)
    let table = [
        (status(500), true, PERMANENT),
        (status(500), false, PERMANENT),
        (status(502), false, RETRY),
        (status(504), true, AMBIGUOUS),
        (status(402), false, RETRY),
        (coded(402, "card_declined"), false, PERMANENT),
        (coded(502, "card_declined"), true, PERMANENT),
        (coded(502, "in_progress"), true, AMBIGUOUS),
        (coded(503, "unknown_code"), false, RETRY),
        (coded(500, "unknown_code"), true, PERMANENT),
    ];
    for (observed, repeatable, want) in table {
        assert_eq!(c.classify_request(observed, repeatable), want, "{observed:?} repeatable={repeatable}");
    }
}

#[test]
fn request_classification_keeps_retry_after_on_retryable() {
    let c = Classifier::default();
    let wait = Some(Duration::from_secs(3));
    for s in [429, 503, 502] {
        let observed = Observed::Response { status: s, error_code: None, retry_after: wait };
        assert_eq!(
            c.classify_request(observed, true),
            Classification::Retryable { retry_after: wait },
            "{s}"
        );
    }
    let observed = Observed::Response { status: 502, error_code: None, retry_after: wait };
    assert_eq!(c.classify_request(observed, false), AMBIGUOUS);
}

#[test]
fn classify_is_unchanged_by_the_request_aware_rules() {
    // The relay's reading: an ambiguous outcome stays ambiguous whatever the method.
    let c = Classifier::default();
    for s in [500, 502, 504, 409] {
        assert_eq!(c.classify(status(s)), AMBIGUOUS, "{s}");
    }
    assert_eq!(c.classify(sent()), AMBIGUOUS);
}

#[test]
fn outage_table() {
    let statuses =
        BTreeMap::from([(500, Class::Permanent), (429, Class::Ambiguous), (402, Class::Retryable)]);
    let codes = BTreeMap::from([
        ("card_declined".to_string(), Class::Permanent),
        ("rate_limit".to_string(), Class::Retryable),
    ]);
    let configured = Classifier::new(statuses, codes);
    let coded = |status, code| Observed::Response { status, error_code: Some(code), retry_after: None };
    // (classifier, observed, counts)
    let default = Classifier::default();
    let table = [
        (&default, not_sent(), true),
        (&default, sent(), true),
        (&default, status(500), true),
        (&default, status(502), true),
        (&default, status(503), true),
        (&default, status(504), true),
        (&default, status(599), true),
        (&default, status(408), true),
        (&default, status(429), true),
        (&default, status(409), false),
        (&default, status(400), false),
        (&default, status(401), false),
        (&default, status(403), false),
        (&default, status(404), false),
        (&default, status(422), false),
        (&default, status(302), false),
        (&configured, status(500), false),
        (&configured, status(502), true),
        (&configured, status(429), true),
        (&configured, status(402), false),
        (&configured, coded(402, "card_declined"), false),
        (&configured, coded(503, "card_declined"), false),
        (&configured, coded(503, "rate_limit"), true),
        (&configured, coded(400, "rate_limit"), false),
    ];
    for (c, observed, want) in table {
        assert_eq!(c.counts_as_outage(observed), want, "{observed:?} with {c:?}");
    }
}
