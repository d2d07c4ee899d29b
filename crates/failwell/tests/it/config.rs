//! Invalid configuration fails at start, naming the file, the key and what
//! is wrong; valid environment overrides apply.

use std::process::Output;

use crate::helpers::{Gateway, binary, config_text, free_port, simulator};

fn serve(config: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["serve", "--config"]).arg(config);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Writes a config with `edit` applied and expects a start failure whose
/// message contains every one of `needles`.
fn refused(edit: impl FnOnce(String) -> String, env: &[(&str, &str)], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = config_text("http://127.0.0.1:9", &dir.path().join("f.db"), free_port(), "");
    let edited = edit(text.clone());
    assert!(edited != text || !env.is_empty(), "the edit must apply to the config text");
    std::fs::write(&path, edited).unwrap();
    let out = serve(&path, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in needles {
        let needle = needle.replace("{file}", &path.display().to_string());
        assert!(stderr.contains(&needle), "{needle:?} not in: {stderr}");
    }
    assert!(!stderr.contains("hunter2"), "a secret was echoed: {stderr}");
    assert!(!dir.path().join("f.db").exists(), "nothing is created for a refused config");
}

#[test]
fn unwritable_database_names_the_key() {
    refused(
        |t| {
            let start = t.find("database_url").unwrap();
            let end = start + t[start..].find('\n').unwrap();
            format!("{}database_url = \"sqlite:///proc/nope/f.db\"{}", &t[..start], &t[end..])
        },
        &[],
        &["database_url = \"sqlite:///proc/nope/f.db\"", "unable to open database file"],
    );
}

#[test]
fn missing_file() {
    let out = serve(std::path::Path::new("/nonexistent/failwell.toml"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read config file /nonexistent/failwell.toml")
    );
}

#[test]
fn malformed_toml() {
    refused(|t| t + "\n[providers.payments\n", &[], &["{file}"]);
}

#[test]
fn unknown_key() {
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_msx = 500"),
        &[],
        &["unknown field", "timeout_msx", "{file}"],
    );
}

#[test]
fn wrong_type() {
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = \"fast\""),
        &[],
        &["providers.payments.timeout_ms", "{file}"],
    );
}

#[test]
fn zero_timeout() {
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = 0"),
        &[],
        &["{file}: key `providers.payments.timeout_ms`: must be greater than 0"],
    );
}

#[test]
fn headers_and_body_idle_timeouts_are_checked_against_the_total() {
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = 500\nheaders_timeout_ms = 600"),
        &[],
        &[
            "{file}: key `providers.payments.headers_timeout_ms`: must not exceed timeout_ms (600 ms > 500 ms)",
        ],
    );
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = 500\nbody_idle_timeout_ms = 501"),
        &[],
        &[
            "{file}: key `providers.payments.body_idle_timeout_ms`: must not exceed timeout_ms (501 ms > 500 ms)",
        ],
    );
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = 500\nheaders_timeout_ms = 0"),
        &[],
        &["{file}: key `providers.payments.headers_timeout_ms`: must be greater than 0"],
    );
    refused(
        |t| t.replace("timeout_ms = 500", "timeout_ms = 500\nbody_idle_timeout_ms = \"slow\""),
        &[],
        &["providers.payments.body_idle_timeout_ms", "{file}"],
    );
    refused(
        |t| t,
        &[("FAILWELL_PROVIDERS__PAYMENTS__HEADERS_TIMEOUT_MS", "900")],
        &[
            "environment variable FAILWELL_PROVIDERS__PAYMENTS__HEADERS_TIMEOUT_MS: key `providers.payments.headers_timeout_ms`: must not exceed timeout_ms",
        ],
    );
}

#[tokio::test]
async fn headers_and_body_idle_timeouts_within_the_total_are_accepted() {
    let sim = simulator(|_| {}).await;
    let mut gw =
        Gateway::start(&sim.base_url(), "headers_timeout_ms = 400\nbody_idle_timeout_ms = 500").await;
    assert_eq!(gw.charge("ok-1", 1000).await.status(), 201);
    let op = gw.settled("ok-1", std::time::Duration::from_secs(10)).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    gw.kill().await;
}

#[test]
fn cap_below_base() {
    refused(
        |t| t.replace("cap_ms = 200", "cap_ms = 10"),
        &[],
        &["providers.payments.backoff", "cap (10 ms) must not be below base (20 ms)"],
    );
}

#[test]
fn a_lease_too_short_to_renew() {
    refused(
        |t| t.replace("lease_ms = 3000", "lease_ms = 900"),
        &[],
        &["key `relay.lease_ms`", "900 ms is too short", "at least 1000 ms"],
    );
}

#[test]
fn bad_base_url_operation_path_and_classification() {
    refused(
        |t| t.replace("base_url = \"http://127.0.0.1:9\"", "base_url = \"ftp://x\""),
        &[],
        &["providers.payments.base_url", "http or https"],
    );
    refused(
        |t| t.replace("method = \"POST\"\npath = \"/v1/charges\"", "method = \"POST\"\npath = \"//[::1\""),
        &[],
        &["{file}: key `providers.payments.operations.charge.path`", "\"//[::1\" does not make a URL"],
    );
    refused(
        |t| {
            t.replace(
                "[providers.payments.lookup]\npath = \"/v1/charges\"",
                "[providers.payments.lookup]\npath = \"//[::1\"",
            )
        },
        &[],
        &["{file}: key `providers.payments.lookup.path`", "\"//[::1\" does not make a URL"],
    );
    refused(
        |t| {
            t.replace(
                "classify = { codes = {",
                "classify = { statuses = { \"700\" = \"retryable\" }, codes = {",
            )
        },
        &[],
        &["classify.statuses.700"],
    );
    refused(
        |t| t.replace("codes = { card_declined = \"permanent\" }", "codes = { card_declined = \"maybe\" }"),
        &[],
        &["card_declined", "maybe"],
    );
}

#[test]
fn invalid_environment_override() {
    refused(
        |t| t,
        &[("FAILWELL_RELAY__CONCURRENCY", "0")],
        &[
            "environment variable FAILWELL_RELAY__CONCURRENCY: key `relay.concurrency`: must be between 1 and 10000",
        ],
    );
    refused(
        |t| t,
        &[("FAILWELL_FORWARDER__BATCH_SIZE", "0")],
        &[
            "environment variable FAILWELL_FORWARDER__BATCH_SIZE: key `forwarder.batch_size`: must be greater than 0",
        ],
    );
    refused(
        |t| t,
        &[("FAILWELL_RELAY__LEASE_MS", "9223372036854775808")],
        &["relay.lease_ms", "more than a year"],
    );
    refused(
        |t| t,
        &[("FAILWELL_PROVIDERS__PAYMENTS__TIMEOUT_MS", "abc")],
        &["FAILWELL_PROVIDERS__PAYMENTS__TIMEOUT_MS", "providers.payments.timeout_ms"],
    );
    refused(|t| t, &[("FAILWELL_LISTEN", "nowhere")], &["listen", "nowhere"]);
}

#[tokio::test]
async fn environment_overrides_the_file() {
    let sim = simulator(|_| {}).await;
    let mut gw = Gateway::start(&sim.base_url(), "").await;
    gw.kill().await;
    let port = free_port();
    let out = tokio::process::Command::new(binary())
        .args(["serve", "--config"])
        .arg(&gw.config)
        .env("FAILWELL_LISTEN", format!("127.0.0.1:{port}"))
        // variables that are not configuration keys are left alone
        .env("FAILWELL_LOG", "debug")
        .kill_on_drop(true)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Ok(r) = gw.http.get(format!("http://127.0.0.1:{port}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the FAILWELL_LISTEN override was not applied");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(out);
}

#[test]
fn breaker_bulkhead_budget_and_api_limits_are_checked() {
    // The test config already has a `breaker` line: replace it, or add the line.
    let with = |line: &'static str| {
        move |t: String| match line.strip_prefix("breaker = ") {
            Some(_) => t.replace("breaker = { open_ms = 300, max_open_ms = 1000 }", line),
            None => t.replace("timeout_ms = 500", &format!("timeout_ms = 500\n{line}")),
        }
    };
    refused(
        with("breaker = { failure_rate = 1.5 }"),
        &[],
        &["{file}: key `providers.payments.breaker.failure_rate`: 1.5 is not a ratio in (0, 1]"],
    );
    refused(
        with("breaker = { window = \"sliding\" }"),
        &[],
        &["{file}: key `providers.payments.breaker.window`: \"sliding\": expected \"count\" or \"time\""],
    );
    refused(
        with("breaker = { consecutive_failures = 0, failure_rate = 0 }"),
        &[],
        &["{file}: key `providers.payments.breaker.consecutive_failures`: no trip rule"],
    );
    refused(
        with("breaker = { minimum_calls = 60 }"),
        &[],
        &["{file}: key `providers.payments.breaker.minimum_calls`: 60 exceeds the window of 50 calls"],
    );
    refused(
        with("breaker = { open_ms = 0 }"),
        &[],
        &["{file}: key `providers.payments.breaker.open_ms`: must be greater than 0"],
    );
    refused(
        with("bulkhead = { max_concurrent = 0 }"),
        &[],
        &["{file}: key `providers.payments.bulkhead.max_concurrent`: must be between 1 and 10000"],
    );
    refused(
        with("retry_budget = { ratio = 11.0 }"),
        &[],
        &["{file}: key `providers.payments.retry_budget.ratio`: ratio must be between 0 and 10, got 11"],
    );
    refused(
        with("retry_budget = { ttl_ms = 10 }"),
        &[],
        &["{file}: key `providers.payments.retry_budget.ttl_ms`: ttl must be between 1 s and 1 h"],
    );
    refused(
        |t| {
            t.replace(
                "backoff = { base_ms = 20, cap_ms = 200, jitter = \"full\" }",
                "backoff = { schedule_ms = [100, 0] }",
            )
        },
        &[],
        &["{file}: key `providers.payments.backoff.schedule_ms`: "],
    );
    refused(
        |t| t,
        &[("FAILWELL_API__MAX_CONCURRENT_REQUESTS", "0")],
        &[
            "environment variable FAILWELL_API__MAX_CONCURRENT_REQUESTS: key `api.max_concurrent_requests`: must be between 1 and 10000",
        ],
    );
}

#[test]
fn breaker_conflicts_name_the_key_that_was_set() {
    let breaker = |line: &'static str| {
        move |t: String| t.replace("breaker = { open_ms = 300, max_open_ms = 1000 }", line)
    };
    refused(
        breaker("breaker = { window_calls = 5 }"),
        &[],
        &["{file}: key `providers.payments.breaker.window_calls`: 20 exceeds the window of 5 calls"],
    );
    refused(
        breaker("breaker = { slow_call_rate = 0.5 }"),
        &[],
        &["{file}: key `providers.payments.breaker.slow_call_rate`: needs slow_call_ms"],
    );
    refused(
        breaker("breaker = { open_ms = 5000, max_open_ms = 1000 }"),
        &[],
        &["{file}: key `providers.payments.breaker.max_open_ms`: must not be below the first open period"],
    );
}

#[test]
fn webhook_sources_are_checked() {
    let with = |section: &'static str| move |t: String| t + "\n" + section;
    refused(
        with("[webhooks.pp]\nscheme = \"paypal\"\nsecrets = [\"s\"]\n"),
        &[],
        &["{file}: key `webhooks.pp.scheme`: \"paypal\": expected \"stripe\""],
    );
    refused(
        with("[webhooks.gh]\nscheme = \"github\"\nsecrets = []\n"),
        &[],
        &["{file}: key `webhooks.gh.secrets`: at least one secret is needed"],
    );
    refused(
        with("[webhooks.gh]\nscheme = \"github\"\nsecrets = [\"s\"]\nprefix = \"sha256=\"\n"),
        &[],
        &["{file}: key `webhooks.gh.prefix`: only applies to scheme = \"hmac\""],
    );
    refused(
        with("[webhooks.sw]\nscheme = \"standard_webhooks\"\nsecrets = [\"whsec_!!\"]\n"),
        &[],
        &["{file}: key `webhooks.sw.secrets`: secret 0 is not base64"],
    );
    refused(
        with("[webhooks.h]\nscheme = \"hmac\"\nsecrets = [\"s\"]\n"),
        &[],
        &["key `webhooks.h.header`: scheme = \"hmac\" needs the signature header"],
    );
    let source = "[webhooks.s]\nscheme = \"stripe\"\nsecrets = [\"whsec_x\"]\n";
    let ledger = |fields: &str| format!("{source}[webhooks.s.ledger]\n{fields}\n");
    let mapped = "reference_pointer = \"/r\"\nstatus_pointer = \"/s\"";
    for (section, message) in [
        (
            ledger(&format!("provider = \"bank\"\n{mapped}")),
            "key `webhooks.s.ledger.provider`: \"bank\" is not a configured provider",
        ),
        (
            ledger(&format!("provider = \"payments\"\n{mapped}\nfailed = [\"pending\"]")),
            "key `webhooks.s.ledger.failed`: \"pending\" is also in webhooks.s.ledger.in_progress (given or by default)",
        ),
        (
            ledger("provider = \"payments\"\nreference_pointer = \"\"\nstatus_pointer = \"/s\""),
            "key `webhooks.s.ledger.reference_pointer`: must point into the event",
        ),
        (
            ledger(&format!("provider = \"payments\"\n{mapped}\nversion_pointer = \"created\"")),
            "key `webhooks.s.ledger.version_pointer`: \"created\" is not a JSON pointer",
        ),
        (
            format!(
                "{source}forward = {{ provider = \"app\", path = \"/h\", secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }}\n"
            ),
            "key `webhooks.s.forward.provider`: \"app\" is not a configured provider",
        ),
        (
            format!(
                "{source}forward = {{ provider = \"payments\", path = \"h\", secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }}\n"
            ),
            "key `webhooks.s.forward.path`: \"h\" is not a path starting with '/'",
        ),
        (
            format!(
                "[forwarder]\nlease_ms = 600\n\n{source}forward = {{ provider = \"payments\", path = \"/h\", \
                 secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }}\n"
            ),
            "key `forwarder.lease_ms`: 600 ms is too short",
        ),
        (
            format!(
                "{source}forward = {{ provider = \"payments\", path = \"/h\", secret = \"whsec_!!\" }}\n"
            ),
            "key `webhooks.s.forward.secret`: expected whsec_ followed by a non-empty base64 key",
        ),
    ] {
        refused(move |t: String| t + "\n" + &section, &[], &[&format!("{{file}}: {message}")]);
    }
}

#[test]
fn every_manifest_refusal_names_the_operation_the_rule_and_the_fix() {
    let no_keys =
        |t: String| t.replace("idempotency_header = \"Idempotency-Key\"", "idempotency_keys = false");
    let no_lookup = |t: String| {
        let (start, end) = (
            t.find("[providers.payments.lookup]").unwrap(),
            t.find("[providers.payments.operations.charge]").unwrap(),
        );
        format!("{}{}", &t[..start], &t[end..])
    };
    let key = "{file}: key `providers.payments.operations.charge`: rule";
    type Edit = Box<dyn Fn(String) -> String>;
    let cases: [(Edit, String); 5] = [
        (
            Box::new(move |t| no_keys(t) + "idempotency = \"key_header\"\n"),
            format!(
                "{key} key-header-needs-provider-keys: idempotency = \"key_header\", but the provider is configured \
                 without idempotency keys. Fix: set idempotency_keys = true (and idempotency_header) on the \
                 provider, or idempotency = \"none\"."
            ),
        ),
        (
            Box::new(move |t| no_lookup(t) + "disagreement = { reconcile = \"list_by_reference\" }\n"),
            format!(
                "{key} reconcile-needs-lookup: disagreement.reconcile asks the provider, but the provider has no \
                 lookup configured. Fix: add [providers.payments.lookup], or disagreement = {{ reconcile = \"none\" }} \
                 for an operation that is not money."
            ),
        ),
        (
            Box::new(no_lookup),
            format!(
                "{key} money-needs-reconciliation: a money operation must have a way to find out that failwell and \
                 the provider disagree. Fix: add [providers.payments.lookup] and disagreement = {{ reconcile = \
                 \"list_by_reference\" }}."
            ),
        ),
        (
            Box::new(|t| t + "disagreement = { reconcile = \"none\" }\n"),
            format!(
                "{key} money-needs-reconciliation: a money operation must have a way to find out that failwell and \
                 the provider disagree. Fix: disagreement = {{ reconcile = \"list_by_reference\" }} (the provider \
                 has a lookup)."
            ),
        ),
        (
            Box::new(move |t| {
                no_keys(t)
                    + "disagreement = { reconcile = \"status_lookup\" }\nduplicate_severity = \"goods\"\n"
            }),
            format!(
                "{key} no-safe-retry: a goods operation without an idempotency key and without lookup by reference \
                 cannot be retried after an ambiguous outcome: nothing tells a retry from a second effect. Fix: set \
                 max_attempts = 1 or retry_owner = \"human\", or idempotency = \"key_header\", or disagreement = \
                 {{ reconcile = \"list_by_reference\" }}."
            ),
        ),
    ];
    for (edit, message) in cases {
        refused(edit, &[], &[&message]);
    }
    let read = "\n[providers.payments.operations.find]\nmethod = \"GET\"\npath = \"/v1/charges\"\n\
                encoding = \"json\"\nreference_field = \"reference\"\n";
    for (lines, message) in [
        (
            "on_unavailable = \"queue\"\n",
            "key `providers.payments.operations.find`: rule read-cannot-queue: a read is answered at once; \
             queued, its answer would reach nobody.",
        ),
        (
            "on_unavailable = \"degrade\"\n",
            "key `providers.payments.operations.find.max_stale_ms`: a read with on_unavailable = \"degrade\" \
             needs the oldest answer it may serve stale",
        ),
        (
            "max_stale_ms = 1000\n",
            "key `providers.payments.operations.find.max_stale_ms`: only applies to a read (method = \"GET\") \
             with on_unavailable = \"degrade\"",
        ),
    ] {
        refused(move |t| t + read + lines, &[], &[message]);
    }
    refused(
        |t| t + "on_unavailable = \"wait\"\n",
        &[],
        &[
            "key `providers.payments.operations.charge.on_unavailable`: \"wait\": expected \"reject\", \"queue\", \"degrade\"",
        ],
    );
}

#[test]
fn invalid_cluster_and_pause_settings_name_the_key() {
    refused(
        |t| t + "\n[cluster]\nurl = \"mysql://user:hunter2@db/x\"\n",
        &[],
        &["{file}", "cluster.url", "unsupported cluster URL scheme \"mysql\""],
    );
    refused(
        |t| t + "\n[cluster]\nurl = \"redis:/:hunter2@127.0.0.1:6379\"\n",
        &[],
        &["cluster.url", "unsupported cluster URL scheme none"],
    );
    refused(
        |t| t + "\n[cluster]\nurl = \"redis://127.0.0.1:6379\"\nnamespace = \"a:b\"\n",
        &[],
        &["cluster.namespace", "letters, digits"],
    );
    refused(
        |t| t + "\n[cluster]\nurl = \"redis://127.0.0.1:6379\"\nnamespace = \"\"\n",
        &[],
        &["cluster.namespace"],
    );
    refused(
        |t| t + "\n[cluster]\nurl = \"redis://127.0.0.1:6379\"\nresync_ms = 0\n",
        &[],
        &["cluster.resync_ms", "greater than 0"],
    );
    refused(|t| t + "\n[cluster]\nurl = \"redis://h\"\nport = 1\n", &[], &["cluster.port", "unknown field"]);
    refused(
        |t| t.replace("max_open_ms = 1000", "max_open_ms = 1000, cluster_failures = 0"),
        &[],
        &["providers.payments.breaker.cluster_failures", "between 1 and 10000"],
    );
    refused(
        |t| {
            t.replace(
                "[providers.payments.lookup]",
                "[providers.payments.pause]\nstatuses = [99]\n\n[providers.payments.lookup]",
            )
        },
        &[],
        &["providers.payments.pause.statuses", "99 is not an error status"],
    );
    refused(
        |t| {
            t.replace(
                "breaker = { open_ms = 300, max_open_ms = 1000 }",
                "breaker = { enabled = false }\npause = { after_errors = 3 }",
            )
        },
        &[],
        &["providers.payments.pause.after_errors", "needs breaker.enabled = true"],
    );
    refused(
        |t| {
            t.replace(
                "breaker = { open_ms = 300, max_open_ms = 1000 }",
                "breaker = { enabled = false }\npause = { when = \"always\" }",
            )
        },
        &[],
        &["providers.payments.pause.when", "needs breaker.enabled = true"],
    );
    refused(
        |t| {
            t.replace(
                "[providers.payments.lookup]",
                "[providers.payments.pause]\nwhen = \"sometimes\"\n\n[providers.payments.lookup]",
            )
        },
        &[],
        &["providers.payments.pause.when", "\"sometimes\" is not one of"],
    );
    refused(
        |t| t,
        &[("FAILWELL_PROVIDERS__PAYMENTS__THROTTLE__MIN_RATE_PER_S", "0.000000000000000000000000001")],
        &["providers.payments.throttle.min_rate_per_s", "between 0.01 and 1000000"],
    );
    refused(
        |t| {
            t.replace("[providers.payments.lookup]", "[providers.payments.throttle]\nmax_wait_ms = 9223372036854775807\n\n[providers.payments.lookup]")
        },
        &[],
        &["providers.payments.throttle.max_wait_ms", "at most 3600000"],
    );
    refused(
        |t| {
            t.replace(
                "[providers.payments.lookup]",
                "[providers.payments.throttle]\nwindow = 0\n\n[providers.payments.lookup]",
            )
        },
        &[],
        &["providers.payments.throttle.window", "between 1 and 1000"],
    );
}

#[test]
fn check_describes_a_shared_breaker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.toml");
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../failwell.toml")).unwrap();
    std::fs::write(&path, example + "\n[cluster]\nurl = \"redis://127.0.0.1:6379\"\nnamespace = \"shop\"\n")
        .unwrap();
    let out = std::process::Command::new(binary()).args(["check", "--config"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(
            "shared breaker (redis, namespace \"shop\"): opens in every process on 20 failures anywhere"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "a 429 or a 503 with Retry-After slows the calls (rate cut to 70 % when 10 of the last 100"
        ),
        "{text}"
    );
    assert!(text.contains("paused by a Retry-After when 50 % of the last 100 answers throttle"), "{text}");
}

#[test]
fn invalid_operator_settings_name_the_key_and_never_echo_secrets() {
    refused(|t| t + "\n[admin]\ntoken = \"short-hunter2\"\n", &[], &["{file}", "admin.token", "at least 32"]);
    refused(
        |t| t,
        &[("FAILWELL_ADMIN__TOKEN", "hunter2 hunter2 hunter2 hunter2 hunter2")],
        &["admin.token", "visible ASCII"],
    );
    refused(
        |t| t + "\n[alerts]\nwebhook_url = \"hooks.example/hunter2\"\n",
        &[],
        &["alerts.webhook_url", "is not an http:// or https:// URL"],
    );
    refused(
        |t| {
            t + "\n[alerts]\nwebhook_url = \"http://127.0.0.1:9/x\"\ncheck_interval_ms = 0\noldest_open_age_ms = 1\n"
        },
        &[],
        &["alerts.check_interval_ms", "greater than 0"],
    );
    refused(|t| t + "\n[stats]\nwindow_ms = 0\n", &[], &["stats.window_ms", "greater than 0"]);
    refused(
        |t| t + "\n[providers.payments.compare]\nschedule = \"nightly\"\n",
        &[],
        &["providers.payments.compare.schedule", "daily HH:MM"],
    );
    refused(
        |t| t + "\n[providers.payments.compare]\npage_size = 0\n",
        &[],
        &["providers.payments.compare.page_size", "between 1 and 1000"],
    );
    refused(
        |t| t + "\n[providers.payments.compare]\ntime_unit = \"h\"\n",
        &[],
        &["providers.payments.compare.time_unit", "\"s\" or \"ms\""],
    );
    refused(
        |t| t + "\n[providers.payments.compare]\nreference_pointer = \"reference\"\n",
        &[],
        &["providers.payments.compare.reference_pointer", "JSON pointer"],
    );
    refused(
        |t| {
            let start = t.find("[providers.payments.lookup]").unwrap();
            let end = t.find("[providers.payments.operations.charge]").unwrap();
            format!("{}{}\n[providers.payments.compare]\n", &t[..start], &t[end..])
        },
        &[],
        &["providers.payments.compare", "needs [lookup]"],
    );
}

#[test]
fn the_database_url_names_sqlite_postgres_or_mysql_and_the_pool_size_is_checked() {
    refused(
        |t| {
            let start = t.find("database_url").unwrap();
            let end = start + t[start..].find('\n').unwrap();
            format!("{}database_url = \"mongodb://127.0.0.1/f\"{}", &t[..start], &t[end..])
        },
        &[],
        &[
            "{file}",
            "key `database_url`",
            "expected sqlite://PATH, postgres://USER@HOST:PORT/DATABASE or mysql://USER@HOST:PORT/DATABASE",
        ],
    );
    refused(
        |t| t,
        &[("FAILWELL_DATABASE_MAX_CONNECTIONS", "1")],
        &["key `database_max_connections`", "must be between 2 and 1000"],
    );
}

#[test]
fn an_unreachable_postgres_or_a_missing_schema_is_named() {
    let with_url = |url: &'static str| {
        move |t: String| {
            let start = t.find("database_url").unwrap();
            let end = start + t[start..].find('\n').unwrap();
            format!("{}database_url = \"{url}\"{}", &t[..start], &t[end..])
        }
    };
    refused(
        with_url("postgres://postgres@127.0.0.1:1/test"),
        &[],
        &["connecting to PostgreSQL", "Connection refused"],
    );
    refused(
        with_url("postgres://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dno_such_schema_here"),
        &[],
        &["no schema of the connection's search_path exists", "CREATE SCHEMA"],
    );
}
