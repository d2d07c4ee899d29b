//! `GET /metrics` follows Prometheus' conventions: every series has
//! `# HELP` and `# TYPE` (`promtool check metrics` finds nothing), every
//! series is one failwell describes, and the series a dashboard needs are
//! there, at zero, from the start.

use std::io::Write;
use std::process::{Command, Stdio};

use failwell::telemetry::SERIES;

use crate::helpers::{Gateway, simulator};

const WEBHOOKS: &str = r#"
[webhooks.stripe]
scheme = "stripe"
secrets = ["whsec_test"]
"#;

#[tokio::test]
async fn metrics_follow_prometheus_conventions_from_the_start() {
    let sim = simulator(|_| {}).await;
    let gateway = Gateway::start_with(&sim.base_url(), "", WEBHOOKS).await;
    let scrape =
        gateway.http.get(format!("{}/metrics", gateway.base)).send().await.unwrap().text().await.unwrap();

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): Debian's prometheus package has it (`cargo xtask test` installs it)")
        });
    promtool.stdin.take().unwrap().write_all(scrape.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&checked.stdout).to_string() + &String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success() && said.trim().is_empty(), "promtool: {said}\n{scrape}");

    let typed: Vec<&str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    for name in &typed {
        assert!(SERIES.iter().any(|s| s.name == *name), "{name} is not described in failwell::telemetry");
    }
    // Present before any event: all but those of a shared breaker (no
    // [cluster] here), of forwards (no forward target here), refusals
    // (labelled by their reason) and comparison results (there is none yet).
    let later = [
        "failwell_cluster_",
        "failwell_forwards_total",
        "failwell_webhook_refused_total",
        "failwell_comparison_discrepancies",
    ];
    for series in SERIES {
        if later.iter().any(|prefix| series.name.starts_with(prefix))
            || series.name == "failwell_comparison_last_run_timestamp_seconds"
        {
            continue;
        }
        assert!(typed.contains(&series.name), "{} is missing from the first scrape:\n{scrape}", series.name);
    }
    assert!(
        scrape.contains("failwell_webhook_received_total{integration=\"stripe\",result=\"new\"} 0"),
        "{scrape}"
    );
}
