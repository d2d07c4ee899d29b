//! `failwell webhook verify`, as a person debugging a provider's signatures
//! runs it: body on stdin, verdict on stdout, exit code 0 or 1.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::helpers::binary;

/// Runs `failwell webhook verify ARGS` with `body` on stdin: (exit code, stdout + stderr).
fn verify(args: &[&str], body: &[u8]) -> (i32, String) {
    let mut child = Command::new(binary())
        .args(["webhook", "verify"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap(), text)
}

const STANDARD: [&str; 10] = [
    "--scheme",
    "standard-webhooks",
    "--secret",
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "--header",
    "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
    "--header",
    "webhook-timestamp: 1614265330",
    "--header",
    "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
];

#[test]
fn the_reference_vector_verifies_without_a_timestamp_check_and_is_stale_with_one() {
    let body = br#"{"test": 2432232314}"#;
    let (code, out) = verify(&[&STANDARD[..], &["--tolerance", "0"]].concat(), body);
    assert_eq!((code, out.trim()), (0, "valid (event msg_p5jXN8AQM9LWM0D4loKWxJek)"));
    let (code, out) = verify(&STANDARD, body);
    assert_eq!(code, 1);
    assert!(out.starts_with("invalid: stale timestamp"), "{out}");
}

#[test]
fn a_changed_byte_or_a_malformed_header_is_named() {
    let args = [
        "--scheme",
        "github",
        "--secret",
        "It's a Secret to Everybody",
        "--header",
        "X-Hub-Signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    ];
    assert_eq!(verify(&args, b"Hello, World!").0, 0);
    let (code, out) = verify(&args, b"Hello, World?");
    assert_eq!((code, out.trim()), (1, "invalid: no matching signature"));
    let (code, out) =
        verify(&["--scheme", "stripe", "--secret", "s", "--header", "Stripe-Signature: t=1.5,v1=00"], b"{}");
    assert_eq!(code, 1);
    assert!(out.starts_with("invalid: malformed header stripe-signature"), "{out}");
}

#[test]
fn usage_errors_exit_2() {
    let (code, out) = verify(&["--scheme", "github", "--secret", "s", "--header", "no colon"], b"");
    assert_eq!(code, 2);
    assert!(out.contains("expected 'Name: value'"), "{out}");
    let (code, out) = verify(&["--scheme", "github", "--secret", "s", "--tolerance", "5 days"], b"");
    assert_eq!(code, 2);
    assert!(out.contains("--tolerance"), "{out}");
}
