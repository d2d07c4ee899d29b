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
    "standard_webhooks",
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
    let (code, out) = verify(&["--scheme", "github", "--secret", "s", "--tolerance", "abc"], b"");
    assert_eq!(code, 2);
    assert!(out.contains("--tolerance \"abc\": expected a whole number"), "{out}");
}

mod inbox {
    //! `POST /webhooks/{integration}` on the real binary.

    use hmac::{Hmac, Mac};
    use serde_json::Value;
    use sha2::Sha256;

    use crate::helpers::{Gateway, problem, simulator};

    const SOURCES: &str = r#"
[webhooks.gh]
scheme = "github"
secrets = ["It's a Secret to Everybody"]

[webhooks.stripe]
scheme = "stripe"
secrets = ["whsec_old", "whsec_test"]
max_body_bytes = 1024
"#;

    fn sign(secret: &str, parts: &[&[u8]]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        parts.iter().for_each(|p| mac.update(p));
        hex::encode(mac.finalize().into_bytes())
    }

    async fn gateway() -> (failwell_sim::Simulator, Gateway) {
        let sim = simulator(|_| {}).await;
        let gw = Gateway::start_with(&sim.base_url(), "", SOURCES).await;
        (sim, gw)
    }

    async fn github(
        gw: &Gateway,
        delivery: &str,
        body: &[u8],
        signature: Option<String>,
    ) -> reqwest::Response {
        let mut request = gw
            .http
            .post(format!("{}/webhooks/gh", gw.base))
            .header("X-GitHub-Delivery", delivery)
            .body(body.to_vec());
        if let Some(signature) = signature {
            request = request.header("X-Hub-Signature-256", signature);
        }
        request.send().await.unwrap()
    }

    #[tokio::test]
    async fn an_event_is_stored_once_and_duplicates_are_absorbed() {
        let (_sim, gw) = gateway().await;
        let body = "{\"action\":\"opened\",\"n\":12345678901234567890,\"t\":\"caf\u{e9} \u{1f600} \\u2028\"}"
            .as_bytes();
        let signature = format!("sha256={}", sign("It's a Secret to Everybody", &[body]));
        let first = github(&gw, "d-1", body, Some(signature.clone())).await;
        assert_eq!(first.status(), 200);
        let answer: Value = first.json().await.unwrap();
        assert_eq!((answer["event_id"].as_str(), answer["received"].as_str()), (Some("d-1"), Some("new")));
        let again: Value = github(&gw, "d-1", body, Some(signature)).await.json().await.unwrap();
        assert_eq!(again["received"], "duplicate");
        assert_eq!(gw.counts().await["inbox_events"], 1);
        let later = b"{\"action\":\"closed\"}";
        let signature = format!("sha256={}", sign("It's a Secret to Everybody", &[later]));
        assert_eq!(github(&gw, "d-2", later, Some(signature)).await.status(), 200);
        // The pull feed: in the order of first receipt, bodies byte for byte.
        let feed = |query: &str| gw.http.get(format!("{}/v1/events{query}", gw.base)).send();
        let page: Value = feed("?limit=1").await.unwrap().json().await.unwrap();
        assert_eq!(page["events"][0]["event_id"], "d-1");
        assert_eq!(page["events"][0]["payload"].as_str().unwrap().as_bytes(), body);
        assert_eq!(page["events"][0]["headers"]["x-github-delivery"], "d-1");
        let next = page["next"].as_i64().unwrap();
        let page: Value = feed(&format!("?after={next}")).await.unwrap().json().await.unwrap();
        let ids: Vec<_> = page["events"].as_array().unwrap().iter().map(|e| e["event_id"].clone()).collect();
        assert_eq!(ids, vec!["d-2"]);
        problem(feed("?limit=0").await.unwrap(), 400, "invalid-query").await;
        problem(feed("?after=abc").await.unwrap(), 400, "invalid-query").await;
    }

    #[tokio::test]
    async fn each_refusal_has_its_own_problem_and_stores_nothing() {
        let (_sim, gw) = gateway().await;
        let body = b"{}";
        let good = format!("sha256={}", sign("It's a Secret to Everybody", &[body]));
        problem(github(&gw, "x", body, None).await, 400, "missing-signature-header").await;
        problem(github(&gw, "x", body, Some("md5=00".into())).await, 400, "malformed-signature-header").await;
        problem(github(&gw, "x", b"{ }", Some(good)).await, 401, "invalid-signature").await;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let stripe = |t: u64, body: &'static [u8]| {
            let signature =
                format!("t={t},v1={}", sign("whsec_test", &[t.to_string().as_bytes(), b".", body]));
            gw.http
                .post(format!("{}/webhooks/stripe", gw.base))
                .header("Stripe-Signature", signature)
                .body(body)
                .send()
        };
        let event = b"{\"id\":\"evt_1\",\"type\":\"charge.succeeded\"}";
        problem(stripe(now - 600, event).await.unwrap(), 401, "stale-timestamp").await;
        problem(stripe(now + 600, event).await.unwrap(), 401, "future-timestamp").await;
        problem(stripe(now, &[b' '; 2000]).await.unwrap(), 413, "body-too-large").await;
        let missing = problem(stripe(now, b"{\"no\":\"id\"}").await.unwrap(), 400, "missing-event-id").await;
        assert_eq!(missing["detail"], "The body has no event id at \"/id\".");
        let not_json = problem(stripe(now, b"{\"id\":").await.unwrap(), 400, "missing-event-id").await;
        assert!(not_json["detail"].as_str().unwrap().contains("the body is not JSON"), "{not_json}");
        let unknown = gw.http.post(format!("{}/webhooks/nope", gw.base)).body("{}").send().await.unwrap();
        problem(unknown, 404, "unknown-integration").await;
        assert_eq!(gw.counts().await["inbox_events"], 0);
        // The Stripe event id comes from the body; a rotated-in secret verifies.
        let ok: Value = stripe(now, event).await.unwrap().json().await.unwrap();
        assert_eq!((ok["event_id"].as_str(), ok["received"].as_str()), (Some("evt_1"), Some("new")));
        // Any valid JSON body has its id read: with a byte order mark, with
        // numbers beyond every machine type, nested deeper than a full parse
        // allows (within the body limit).
        let deep = format!(r#"{{"nested":{}{},"id":"evt_deep"}}"#, "[".repeat(450), "]".repeat(450));
        let deep: &'static [u8] = Box::leak(deep.into_bytes().into_boxed_slice());
        for (body, id) in [
            (&b"\xEF\xBB\xBF{\"id\":\"evt_bom\"}"[..], "evt_bom"),
            (&b"{\"amount\":1e400,\"tiny\":-1e-400,\"id\":\"evt_huge\"}"[..], "evt_huge"),
            (deep, "evt_deep"),
        ] {
            let r = stripe(now, body).await.unwrap();
            assert_eq!(r.status(), 200, "{id}: {}", r.text().await.unwrap());
            let ok: Value = r.json().await.unwrap();
            assert_eq!(ok["event_id"], id);
        }
    }
}

mod conformance {
    //! Deliveries signed by the providers' official libraries (npm `stripe`,
    //! `standardwebhooks`, `@octokit/webhooks-methods`, pinned in
    //! `conformance/package.json`, installed on first use): failwell accepts
    //! them, and refuses them re-serialised, with a byte changed, with a
    //! rotated-out secret, or with a stale or future timestamp.

    use std::path::PathBuf;
    use std::process::Command;
    use std::time::{SystemTime, UNIX_EPOCH};

    use failwell::webhook::{SchemeName, VerifyArgs, verify};
    use serde_json::Value;

    /// Installs the signing libraries (once) and returns the directory.
    fn signer() -> PathBuf {
        static READY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        READY
            .get_or_init(|| {
                let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webhook-conformance");
                std::fs::create_dir_all(&dir).unwrap();
                let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/conformance");
                for file in ["package.json", "sign.mjs"] {
                    std::fs::copy(source.join(file), dir.join(file)).unwrap();
                }
                if !dir.join("node_modules/stripe").exists() {
                    let status = Command::new("npm")
                        .args(["install", "--no-audit", "--no-fund", "--silent"])
                        .current_dir(&dir)
                        .status()
                        .expect("npm (Node.js) is needed to sign webhooks with the official libraries");
                    assert!(status.success(), "npm install of the signing libraries failed");
                }
                dir
            })
            .clone()
    }

    fn cases(now: u64) -> Vec<Value> {
        let dir = signer();
        let out = Command::new("node").arg(dir.join("sign.mjs")).arg(now.to_string()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn check(case: &Value, secret: &str, body: &[u8], now: u64) -> Result<(), String> {
        let scheme = match case["scheme"].as_str().unwrap() {
            "stripe" => SchemeName::Stripe,
            "standard-webhooks" => SchemeName::StandardWebhooks,
            _ => SchemeName::Github,
        };
        let headers = case["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("{}: {}", h[0].as_str().unwrap(), h[1].as_str().unwrap()))
            .collect();
        let args = VerifyArgs {
            scheme,
            secrets: vec![secret.to_owned()],
            headers,
            tolerance: "300s".into(),
            hmac_header: "x-signature".into(),
            hmac_encoding: "hex".into(),
            hmac_prefix: None,
        };
        verify(&args, body, UNIX_EPOCH + std::time::Duration::from_secs(now))
            .unwrap()
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn official_libraries_signatures_verify_and_every_alteration_is_refused() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let cases = cases(now);
        assert_eq!(cases.len(), 14);
        for case in &cases {
            let secret = case["secret"].as_str().unwrap();
            let body = case["body"].as_str().unwrap().as_bytes();
            let what = format!("{} {} {}", case["scheme"], case["label"], case["body"]);
            match case["label"].as_str().unwrap() {
                "stale" => assert!(
                    check(case, secret, body, now).unwrap_err().starts_with("stale timestamp"),
                    "{what}"
                ),
                "future" => {
                    assert!(
                        check(case, secret, body, now).unwrap_err().starts_with("future timestamp"),
                        "{what}"
                    )
                }
                _ => {
                    assert_eq!(check(case, secret, body, now), Ok(()), "{what}");
                    let mut changed = body.to_vec();
                    changed[body.len() / 2] ^= 1;
                    assert_eq!(
                        check(case, secret, &changed, now).unwrap_err(),
                        "no matching signature",
                        "{what}"
                    );
                    // As a proxy that reformats JSON would pass it on.
                    let reserialised =
                        serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(body).unwrap()).unwrap();
                    assert_ne!(reserialised, body, "the payloads are chosen to change when re-serialised");
                    assert_eq!(
                        check(case, secret, &reserialised, now).unwrap_err(),
                        "no matching signature",
                        "{what}"
                    );
                    let rotated_out =
                        if case["scheme"] == "standard-webhooks" { "whsec_dGVzdA==" } else { "whsec_old" };
                    assert_eq!(
                        check(case, rotated_out, body, now).unwrap_err(),
                        "no matching signature",
                        "{what}"
                    );
                }
            }
        }
    }
}
