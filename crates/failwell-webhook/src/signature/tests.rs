use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::*;

fn at(unix: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
    }
    map
}

fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    hex::encode(mac(key, parts).finalize().into_bytes())
}

/// The `v1` hex of a `Stripe-Signature` value made by [`stripe_signature`].
fn stripe_v1(header: &str) -> &str {
    header.split_once(",v1=").unwrap().1
}

const FIVE_MIN: Option<Duration> = Some(Duration::from_secs(300));

#[test]
fn standard_webhooks_reference_vector() {
    let v =
        Verifier::new(Scheme::StandardWebhooks, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()], FIVE_MIN)
            .unwrap();
    let h = headers(&[
        ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
    ]);
    let body = br#"{"test": 2432232314}"#;
    let ok = v.verify(&h, body, at(1_614_265_330)).unwrap();
    assert_eq!(ok.event_id.as_deref(), Some("msg_p5jXN8AQM9LWM0D4loKWxJek"));
    assert_eq!(ok.timestamp, Some(1_614_265_330));
    assert_eq!(
        v.verify(&h, br#"{"test":2432232314}"#, at(1_614_265_330)),
        Err(VerifyError::NoMatchingSignature)
    );
    assert!(matches!(
        v.verify(&h, body, at(1_614_265_330 + 301)),
        Err(VerifyError::StaleTimestamp { age_s: 301, .. })
    ));
    assert!(matches!(
        v.verify(&h, body, at(1_614_265_330 - 301)),
        Err(VerifyError::FutureTimestamp { ahead_s: 301, .. })
    ));
}

#[test]
fn standard_webhooks_signing_matches_the_reference_vector() {
    let signed = standard_webhooks_signature(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        br#"{"test": 2432232314}"#,
    );
    assert_eq!(signed.as_deref(), Ok("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    // The prefix is optional, as for the verifier.
    assert_eq!(
        standard_webhooks_signature(
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#
        ),
        signed
    );
    assert_eq!(
        standard_webhooks_signature("whsec_!!", "m", 1, b"{}"),
        Err(SecretError::NotBase64 { index: 0 })
    );
    assert_eq!(standard_webhooks_signature("", "m", 1, b"{}"), Err(SecretError::Empty { index: 0 }));
}

#[test]
fn signed_deliveries_verify_and_a_changed_byte_does_not() {
    let body = "{\"id\":\"evt_1\",\"note\":\"caf\u{e9} \u{1f600}\"}".as_bytes();
    let mut changed = body.to_vec();
    changed[3] ^= 1;
    let now = at(1_700_000_000);

    let secret = "whsec_test_secret";
    let stripe = Verifier::new(Scheme::Stripe, &[secret.into()], FIVE_MIN).unwrap();
    let h = headers(&[("stripe-signature", &stripe_signature(secret, 1_700_000_000, body))]);
    assert_eq!(stripe.verify(&h, body, now).unwrap().timestamp, Some(1_700_000_000));
    assert_eq!(stripe.verify(&h, &changed, now), Err(VerifyError::NoMatchingSignature));
    let other = headers(&[("stripe-signature", &stripe_signature("whsec_other", 1_700_000_000, body))]);
    assert_eq!(stripe.verify(&other, body, now), Err(VerifyError::NoMatchingSignature));

    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let standard = Verifier::new(Scheme::StandardWebhooks, &[secret.into()], FIVE_MIN).unwrap();
    let signature = standard_webhooks_signature(secret, "msg_1", 1_700_000_000, body).unwrap();
    let h = headers(&[
        ("webhook-id", "msg_1"),
        ("webhook-timestamp", "1700000000"),
        ("webhook-signature", &signature),
    ]);
    assert_eq!(standard.verify(&h, body, now).unwrap().event_id.as_deref(), Some("msg_1"));
    assert_eq!(standard.verify(&h, &changed, now), Err(VerifyError::NoMatchingSignature));
    let h = headers(&[
        ("webhook-id", "msg_2"),
        ("webhook-timestamp", "1700000000"),
        ("webhook-signature", &signature),
    ]);
    assert_eq!(standard.verify(&h, body, now), Err(VerifyError::NoMatchingSignature), "the id is signed");
}

#[test]
fn github_documented_example() {
    let v = Verifier::new(Scheme::GitHub, &["It's a Secret to Everybody".into()], None).unwrap();
    let h = headers(&[
        ("x-hub-signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ]);
    let ok = v.verify(&h, b"Hello, World!", at(1_700_000_000)).unwrap();
    assert_eq!(ok.event_id.as_deref(), Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"));
    assert_eq!(v.verify(&h, b"Hello, World?", at(1_700_000_000)), Err(VerifyError::NoMatchingSignature));
}

#[test]
fn stripe_uses_the_secret_literally_and_accepts_any_v1() {
    let secret = "whsec_test_secret";
    let body = "{\"id\":\"evt_1\",\"amount\":12345678901234567890,\"note\":\"caf\u{e9} \u{1f600} \\u2028\"}"
        .as_bytes();
    let signed = stripe_signature(secret, 1_700_000_000, body);
    assert_eq!(stripe_v1(&signed), hmac_hex(secret.as_bytes(), &[b"1700000000.", body]));
    let v = Verifier::new(Scheme::Stripe, &[secret.into()], FIVE_MIN).unwrap();
    let header = format!("t=1700000000,v1={},v1={},v0=ignored", "ab".repeat(32), stripe_v1(&signed));
    let ok = v.verify(&headers(&[("stripe-signature", &header)]), body, at(1_700_000_100)).unwrap();
    assert_eq!(ok.timestamp, Some(1_700_000_000));
    // A secret base64-decoded (as Standard Webhooks does) would not verify.
    let decoded = Verifier::new(Scheme::StandardWebhooks, &["whsec_dGVzdA==".into()], FIVE_MIN).unwrap();
    assert!(decoded.verify(&headers(&[("stripe-signature", &header)]), body, at(1_700_000_100)).is_err());
}

#[test]
fn rotation_accepts_any_active_secret() {
    let body = b"{}";
    let sig = hmac_hex(b"new", &[body]);
    let h = headers(&[("x-hub-signature-256", &format!("sha256={sig}"))]);
    let both = Verifier::new(Scheme::GitHub, &["old".into(), "new".into()], None).unwrap();
    assert!(both.verify(&h, body, at(1_700_000_000)).is_ok());
    let rotated_out = Verifier::new(Scheme::GitHub, &["old".into()], None).unwrap();
    assert_eq!(rotated_out.verify(&h, body, at(1_700_000_000)), Err(VerifyError::NoMatchingSignature));
}

#[test]
fn shopify_and_generic_hmac() {
    let body = b"{\"id\":1}";
    let raw = mac(b"shh", &[body]).finalize().into_bytes();
    let b64 = BASE64.encode(raw);
    let v = Verifier::new(Scheme::Shopify, &["shh".into()], None).unwrap();
    let h = headers(&[("x-shopify-hmac-sha256", &b64), ("x-shopify-webhook-id", "w-1")]);
    assert_eq!(v.verify(&h, body, at(1_700_000_000)).unwrap().event_id.as_deref(), Some("w-1"));
    let generic = Scheme::Hmac {
        header: "x-signature".into(),
        encoding: Encoding::Hex,
        prefix: Some("sha256=".into()),
        event_id_header: Some("x-event-id".into()),
    };
    let v = Verifier::new(generic, &["shh".into()], None).unwrap();
    let h = headers(&[("x-signature", &format!("sha256={}", hex::encode(raw))), ("x-event-id", "e-9")]);
    assert_eq!(v.verify(&h, body, at(1_700_000_000)).unwrap().event_id.as_deref(), Some("e-9"));
    let h = headers(&[("x-signature", &hex::encode(raw))]);
    assert_eq!(v.verify(&h, body, at(1_700_000_000)).unwrap_err().kind(), "malformed_header");
}

#[test]
fn each_refusal_is_distinct() {
    let v = Verifier::new(Scheme::Stripe, &["s".into()], FIVE_MIN).unwrap();
    let check = |value: Option<&str>| {
        let h = value.map_or_else(HeaderMap::new, |v| headers(&[("stripe-signature", v)]));
        v.verify(&h, b"{}", at(1_000)).unwrap_err()
    };
    assert_eq!(check(None), VerifyError::MissingHeader("stripe-signature"));
    for bad in [
        "t=abc,v1=00",
        "t=Infinity,v1=00",
        "t=1.5,v1=00",
        "t=-5,v1=00",
        "t=,v1=00",
        "v1=00",
        "t=1000",
        "garbage",
    ] {
        assert_eq!(check(Some(bad)).kind(), "malformed_header", "{bad}");
    }
    assert_eq!(check(Some("t=1000,v1=00")), VerifyError::NoMatchingSignature);
    assert_eq!(check(Some("t=1,v1=00")).kind(), "stale_timestamp");
    assert_eq!(check(Some("t=9999,v1=00")).kind(), "future_timestamp");
    let twice = {
        let mut h = headers(&[("stripe-signature", "t=1000,v1=00")]);
        h.append("stripe-signature", HeaderValue::from_static("t=1000,v1=00"));
        v.verify(&h, b"{}", at(1_000)).unwrap_err()
    };
    assert_eq!(twice.kind(), "malformed_header");
}

#[test]
fn secrets_are_checked() {
    assert_eq!(Verifier::new(Scheme::GitHub, &[], None).unwrap_err(), SecretError::None);
    assert_eq!(
        Verifier::new(Scheme::GitHub, &["".into()], None).unwrap_err(),
        SecretError::Empty { index: 0 }
    );
    assert_eq!(
        Verifier::new(Scheme::StandardWebhooks, &["whsec_!!".into()], None).unwrap_err(),
        SecretError::NotBase64 { index: 0 }
    );
    // `whsec_` alone decodes to an empty key, with which anyone could sign.
    assert_eq!(
        Verifier::new(
            Scheme::StandardWebhooks,
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(), "whsec_".into()],
            None
        )
        .unwrap_err(),
        SecretError::Empty { index: 1 }
    );
    assert_eq!(standard_webhooks_signature("whsec_", "m", 1, b"{}"), Err(SecretError::Empty { index: 0 }));
    assert_eq!(
        Verifier::new(Scheme::Stripe, &["whsec_".into()], None).unwrap_err(),
        SecretError::Empty { index: 0 }
    );
    let v = Verifier::new(Scheme::GitHub, &["top secret".into()], None).unwrap();
    assert!(!format!("{v:?}").contains("top secret"), "secrets are never printed");
}

#[test]
fn tolerance_none_disables_the_timestamp_check() {
    let v = Verifier::new(Scheme::Stripe, &["s".into()], None).unwrap();
    let h = headers(&[("stripe-signature", &stripe_signature("s", 5, b"{}"))]);
    assert!(v.verify(&h, b"{}", at(2_000_000_000)).is_ok());
}

proptest! {
    #[test]
    fn header_parsers_never_panic(value in "[ -~]{0,200}", body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let schemes = [
            Scheme::Stripe,
            Scheme::GitHub,
            Scheme::Shopify,
            Scheme::Hmac { header: "x-sig".into(), encoding: Encoding::Base64, prefix: None, event_id_header: None },
        ];
        for scheme in schemes {
            let name = match &scheme {
                Scheme::Stripe => "stripe-signature",
                Scheme::GitHub => "x-hub-signature-256",
                Scheme::Shopify => "x-shopify-hmac-sha256",
                _ => "x-sig",
            };
            let v = Verifier::new(scheme, &["s".into()], FIVE_MIN).unwrap();
            if let Ok(header) = HeaderValue::from_str(&value) {
                let mut h = HeaderMap::new();
                h.insert(HeaderName::from_static(name), header);
                prop_assert!(v.verify(&h, &body, at(1_000)).is_err());
            }
        }
        let v = Verifier::new(Scheme::StandardWebhooks, &["whsec_dGVzdA==".into()], FIVE_MIN).unwrap();
        if let Ok(header) = HeaderValue::from_str(&value) {
            let mut h = headers(&[("webhook-id", "m"), ("webhook-timestamp", "1000")]);
            h.insert("webhook-signature", header.clone());
            prop_assert!(v.verify(&h, &body, at(1_000)).is_err());
            let mut h = headers(&[("webhook-id", "m"), ("webhook-signature", "v1,AAAA")]);
            h.insert("webhook-timestamp", header);
            prop_assert!(v.verify(&h, &body, at(1_000)).is_err());
        }
    }
}
