//! The fault schedule: purity of [`planned`], the documented profile
//! distributions, and that two simulators with one seed behave alike over HTTP
//! while another seed differs. Fault *delivery* details are in `faults.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::helpers::start;
use crate::{Fault, Profile, SimConfig, Simulator, planned};

fn stormy(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(Profile::Stormy, seed);
    config.hang = Duration::from_millis(10);
    config
}

fn schedule(config: &SimConfig) -> Vec<(Fault, Duration)> {
    (0..200).map(|i| planned(config, &format!("ref-{}", i % 10), i / 10)).collect()
}

#[test]
fn planned_is_pure_and_seed_dependent() {
    let a = schedule(&stormy(42));
    assert_eq!(a, schedule(&stormy(42)));
    assert_ne!(a, schedule(&stormy(43)));
    assert_ne!(a, schedule(&SimConfig::new(Profile::Calm, 42)));
    assert_ne!(planned(&stormy(42), "a", 0), planned(&stormy(42), "b", 0));
}

#[test]
fn profiles_follow_their_documented_distributions() {
    let calm = SimConfig::new(Profile::Calm, 9);
    let outage = SimConfig::new(Profile::Outage, 9);
    let storm = stormy(9);
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut slow = 0;
    let total = 20_000;
    for n in 0..total {
        for config in [&calm, &outage] {
            let (fault, latency) = planned(config, "r", n);
            assert_eq!(fault, Fault::Ok);
            assert!((Duration::from_millis(1)..=Duration::from_millis(5)).contains(&latency));
        }
        let (fault, latency) = planned(&storm, "r", n);
        let fast = (Duration::from_millis(5)..=Duration::from_millis(40)).contains(&latency);
        let tail = (Duration::from_millis(150)..=Duration::from_millis(400)).contains(&latency);
        assert!(fast || tail, "{latency:?}");
        slow += u32::from(tail);
        let name = serde_json::to_value(fault).unwrap();
        *counts.entry(name.as_str().unwrap().to_owned()).or_default() += 1;
    }
    let percent = |n: u32| f64::from(n) * 100.0 / total as f64;
    assert!((1.5..2.5).contains(&percent(slow)), "slow {}", percent(slow));
    let expected = [
        ("timeout_after_commit", 5.0),
        ("reset_after_commit", 3.0),
        ("error_500", 2.0),
        ("error_502", 2.0),
        ("error_503", 2.0),
        ("rate_limited", 3.0),
        ("ok", 83.0),
    ];
    for (name, want) in expected {
        let got = percent(counts.get(name).copied().unwrap_or(0));
        assert!((got - want).abs() < 0.8, "{name}: {got}% vs {want}%");
    }
}

/// Status of a request, or 0 for a connection-level failure.
async fn outcomes(sim: &Simulator) -> BTreeMap<(u64, u64), u16> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut tasks = Vec::new();
    for r in 0..10u64 {
        let client = client.clone();
        let base = sim.base_url();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for n in 0..20u64 {
                let status = client
                    .post(format!("{base}/v1/charges"))
                    .form(&[("amount", "1000"), ("currency", "usd"), ("reference", &format!("ref-{r}"))])
                    .send()
                    .await
                    .map_or(0, |resp| resp.status().as_u16());
                got.push(((r, n), status));
            }
            got
        }));
    }
    let mut all = BTreeMap::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

fn expected_status(fault: Fault) -> u16 {
    match fault {
        Fault::Ok | Fault::TimeoutAfterCommit | Fault::LateCommit => 200,
        Fault::ResetAfterCommit | Fault::ResetBeforeCommit => 0,
        Fault::Error500 => 500,
        Fault::Error502 => 502,
        Fault::Error503 => 503,
        Fault::RateLimited => 429,
    }
}

#[tokio::test]
async fn same_seed_same_http_outcomes() {
    let (a, b) = tokio::join!(start(stormy(7)), start(stormy(7)));
    let (got_a, got_b) = tokio::join!(outcomes(&a), outcomes(&b));
    assert_eq!(got_a, got_b);
    let config = stormy(7);
    let mut committed = 0;
    for (&(r, n), &status) in &got_a {
        let (fault, _) = planned(&config, &format!("ref-{r}"), n);
        assert_eq!(status, expected_status(fault), "ref-{r} #{n} {fault:?}");
        committed +=
            u64::from(matches!(fault, Fault::Ok | Fault::TimeoutAfterCommit | Fault::ResetAfterCommit));
    }
    assert!(got_a.values().any(|&s| s != 200), "200 stormy requests should see faults");
    assert_eq!(a.effects().charges, committed);
    assert_eq!(b.effects().charges, committed);
    let other = start(stormy(8)).await;
    assert_ne!(outcomes(&other).await, got_a);
}

#[test]
fn profile_and_fault_names() {
    for profile in Profile::ALL {
        assert_eq!(profile.to_string().parse::<Profile>().unwrap(), profile);
    }
    assert_eq!("Stormy".parse::<Profile>().unwrap(), Profile::Stormy);
    let err = "windy".parse::<Profile>().unwrap_err().to_string();
    assert!(err.contains("windy") && err.contains("calm, stormy, outage"), "{err}");
    let names = serde_json::to_string(&[
        Fault::Ok,
        Fault::TimeoutAfterCommit,
        Fault::ResetAfterCommit,
        Fault::LateCommit,
        Fault::Error500,
        Fault::Error502,
        Fault::Error503,
        Fault::RateLimited,
    ])
    .unwrap();
    assert_eq!(
        names,
        r#"["ok","timeout_after_commit","reset_after_commit","late_commit","error_500","error_502","error_503","rate_limited"]"#
    );
    let config = SimConfig::new(Profile::Calm, 5);
    assert_eq!(config.key_ttl, Duration::from_secs(86_400));
    assert_eq!(
        (config.decline_suffix, config.hang, config.retry_after_secs, config.outage),
        (2, Duration::from_secs(30), 1, Duration::from_secs(3))
    );
}
