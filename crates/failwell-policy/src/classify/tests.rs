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
