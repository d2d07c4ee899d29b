//! `failwell demo` end to end: the report's shape, failwell's promises, the
//! naive client's double charges, and the same seed giving the same faults.

use serde_json::Value;

use crate::helpers::binary;

const KEYS: [&str; 12] = [
    "intents",
    "provider_effects",
    "double_effects",
    "lost",
    "unknown_remaining",
    "declined",
    "dead_letters",
    "attempts",
    "rate_limited",
    "paused_s",
    "p95_ms",
    "elapsed_s",
];

async fn demo(args: &[&str]) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = tokio::process::Command::new(binary())
        .arg("demo")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("double effects"), "the table is printed: {stdout}");
    // Written to a file or a pipe, the report holds no colour codes and no
    // log lines: what failwell logged is in a file whose path it names.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for text in [&stdout, &stderr] {
        assert!(!text.contains('\x1b'), "no escape codes: {text}");
        assert!(!text.contains(" WARN ") && !text.contains(" INFO "), "no log lines: {text}");
    }
    let log = stderr
        .lines()
        .find_map(|l| l.split_once("lines): ").map(|(_, path)| path.to_string()))
        .unwrap_or_else(|| panic!("the log's path is printed: {stderr}"));
    assert!(std::path::Path::new(&log).is_file(), "{log}");
    std::fs::remove_file(log).unwrap();
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (out.status.code(), report)
}

#[tokio::test]
async fn stormy_demo_keeps_failwells_promises_and_is_reproducible() {
    let (code, first) = demo(&["--orders", "300", "--seed", "5", "--profile", "stormy"]).await;
    assert_eq!(code, Some(0), "{first:#}");
    let object = first.as_object().unwrap();
    assert_eq!(object.keys().collect::<Vec<_>>(), ["failwell", "naive", "webhooks"]);
    // The provider's webhooks: duplicated and reordered, each stored once,
    // and some settle an operation before failwell's own calls or lookups.
    let w = &first["webhooks"];
    let n = |key: &str| w[key].as_u64().unwrap();
    assert!(n("sent") > 300, "a pending and an outcome event per charge: {w:#}");
    assert_eq!(n("received"), n("sent"), "every event stored once: {w:#}");
    assert!(n("duplicates_absorbed") > 0, "{w:#}");
    assert!(n("deliveries") > n("sent"), "the provider delivered some events more than once: {w:#}");
    assert!(n("resolved_by_webhook") > 0, "{w:#}");
    for side in ["failwell", "naive"] {
        let mut keys: Vec<&str> = first[side].as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = KEYS.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want, "{side}");
        assert_eq!(first[side]["intents"], 300);
    }
    let f = &first["failwell"];
    assert_eq!(
        (f["double_effects"].as_u64(), f["lost"].as_u64(), f["unknown_remaining"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    let n = &first["naive"];
    assert!(n["double_effects"].as_u64().unwrap() > 0, "the naive client double-charges: {n:#}");
    // every order is accounted for by failwell: charged once, declined, or a dead letter
    let accounted = f["provider_effects"].as_u64().unwrap()
        + f["declined"].as_u64().unwrap()
        + f["dead_letters"].as_u64().unwrap();
    assert_eq!(accounted, 300, "{f:#}");

    let (_, second) = demo(&["--orders", "300", "--seed", "5", "--profile", "stormy"]).await;
    for key in ["provider_effects", "double_effects", "declined", "attempts"] {
        assert_eq!(first["naive"][key], second["naive"][key], "same seed, same faults: naive {key}");
    }
    assert_eq!(first["failwell"]["declined"], second["failwell"]["declined"]);
    let (_, other) = demo(&["--orders", "300", "--seed", "6", "--profile", "stormy"]).await;
    assert_ne!(
        (&first["naive"]["double_effects"], &first["naive"]["attempts"]),
        (&other["naive"]["double_effects"], &other["naive"]["attempts"]),
        "another seed, other faults"
    );
}

#[tokio::test]
async fn outage_demo_recovers_without_loss() {
    let (code, report) = demo(&["--orders", "100", "--seed", "1", "--profile", "outage"]).await;
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["failwell"]["unknown_remaining"], 0);
    assert_eq!(report["failwell"]["double_effects"], 0);
}

#[tokio::test]
async fn against_a_rate_limit_failwell_slows_down_while_the_naive_client_keeps_hitting_it() {
    let args = ["--orders", "400", "--seed", "3", "--profile", "calm", "--rate-limit", "100"];
    let (code, report) = demo(&args).await;
    assert_eq!(code, Some(0), "{report:#}");
    let (f, n) = (&report["failwell"], &report["naive"]);
    assert_eq!(f["double_effects"], 0);
    assert_eq!(f["provider_effects"].as_u64().unwrap() + f["declined"].as_u64().unwrap(), 400, "{f:#}");
    let (f_429, n_429) = (f["rate_limited"].as_u64().unwrap(), n["rate_limited"].as_u64().unwrap());
    assert!(n_429 > 0, "the naive client met the limit: {n:#}");
    assert!(f_429 < n_429, "failwell met the limit less often ({f_429}) than the naive client ({n_429})");
    assert_eq!(n["paused_s"], 0.0, "the naive client never pauses");
}

#[tokio::test]
async fn stormy_demo_with_wallets_leaves_no_wallet_debited_for_a_failed_charge() {
    let (code, report) = demo(&["--orders", "300", "--seed", "8", "--profile", "stormy", "--wallet"]).await;
    assert_eq!(code, Some(0), "{report:#}");
    let (f, w) = (&report["failwell"], &report["wallet"]);
    let n = |key: &str| w[key].as_u64().unwrap_or_else(|| panic!("{key} in {w:#}"));
    assert_eq!(n("holds"), 300, "each order held its wallet part: {w:#}");
    // Each hold followed its charge: posted with the charges the provider
    // made, voided with the orders that failed for good.
    assert_eq!(n("posted"), f["provider_effects"].as_u64().unwrap(), "{report:#}");
    assert_eq!(
        n("voided"),
        f["declined"].as_u64().unwrap() + f["dead_letters"].as_u64().unwrap(),
        "{report:#}"
    );
    assert!(n("voided") > 0, "some charges failed: {report:#}");
    for key in [
        "pending_remaining",
        "debited_for_failed_charge",
        "released_for_paid_charge",
        "refunded_twice",
        "balance_mismatches",
    ] {
        assert_eq!(n(key), 0, "{key}: {w:#}");
    }
    assert_eq!(f["double_effects"], 0);
}

#[test]
fn demo_refuses_a_zero_arrival_rate() {
    let out = std::process::Command::new(binary()).args(["demo", "--arrival-rate", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--arrival-rate"), "{out:?}");
}

#[test]
fn demo_refuses_zero_orders() {
    let out = std::process::Command::new(binary()).args(["demo", "--orders", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--orders must be at least 1"));
}
