//! The admin API's token and the dashboard in a real browser.

use std::time::{Duration, Instant};

use failwell_sim::Fault;
use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{Gateway, simulator};
use crate::operator::{Sink, TOKEN, admin_get, scrape, tail};

#[tokio::test]
async fn the_admin_api_takes_only_its_token_and_never_shows_it() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1", &tail(&sink)).await;
    sim.script("dead", vec![Fault::Error503]);
    assert!(gateway.charge("dead", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("dead", crate::helpers::SETTLE).await["status"], "failed");
    let url = |path: &str| format!("{}/admin/v1{path}", gateway.base);
    let routes = [
        ("GET", "/status"),
        ("GET", "/dead-letters"),
        ("GET", "/dead-letters/message/1"),
        ("POST", "/dead-letters/message/1/replay"),
        ("DELETE", "/dead-letters/message/1"),
        ("POST", "/dead-letters/ack"),
        ("POST", "/reconcile"),
        ("GET", "/operations/dead/history"),
        ("GET", "/reports"),
        ("GET", "/reports/1"),
        // A method a route does not take, a path no route takes.
        ("PUT", "/status"),
        ("GET", "/nope"),
    ];
    for (method, path) in routes {
        for auth in [
            None,
            Some("Bearer wrong-token"),
            Some(&*format!("Bearer {TOKEN}x")),
            Some(&*format!("Basic {TOKEN}")),
        ] {
            let mut request = gateway.http.request(method.parse().unwrap(), url(path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let r = request.send().await.unwrap();
            assert_eq!(r.headers()["www-authenticate"], "Bearer", "{method} {path}");
            let body = crate::helpers::problem(r, 401, "unauthorized").await;
            assert!(!body.to_string().contains(TOKEN), "{body}");
        }
    }
    for path in ["/admin", "/admin/"] {
        let r = gateway.http.get(format!("{}{path}", gateway.base)).send().await.unwrap();
        crate::helpers::problem(r, 401, "unauthorized").await;
    }
    // The dashboard cannot be framed by another page (clickjacking).
    let login = gateway.http.get(format!("{}/ui/login", gateway.base)).send().await.unwrap();
    assert_eq!(login.headers()["x-frame-options"], "DENY");
    assert!(login.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    for query in ["?limit=0", "?kind=bogus", "?limit=x"] {
        let r =
            gateway.http.get(url(&format!("/dead-letters{query}"))).bearer_auth(TOKEN).send().await.unwrap();
        crate::helpers::problem(r, 400, "invalid-query").await;
    }
    // With the token, the same bad requests are problems too.
    let r = gateway.http.put(url("/status")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(r, 405, "method-not-allowed").await;
    let r = gateway.http.get(url("/nope")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(r, 404, "not-found").await;
    // Over the 64 KiB default. (A client of its own: the server answers and
    // closes the connection of a body it refused unread, so a client still
    // writing it may see the pipe break first; then it sends again.)
    let huge = vec![b' '; 96 << 10];
    let mut tries = 0;
    let r = loop {
        let sent =
            reqwest::Client::new().post(url("/reconcile")).bearer_auth(TOKEN).body(huge.clone()).send().await;
        match sent {
            Ok(r) => break r,
            Err(e) if tries < 5 && e.is_request() => tries += 1,
            Err(e) => panic!("{e:?}"),
        }
    };
    crate::helpers::problem(r, 413, "body-too-large").await;
    // Nothing happened: the dead letter is still there.
    let listed = admin_get(&gateway, "/dead-letters").await;
    let letters = listed["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{listed:#}");
    let id = letters[0]["id"].as_i64().unwrap();
    let r = gateway
        .http
        .post(url(&format!("/dead-letters/message/{id}/replay")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let again = gateway
        .http
        .post(url(&format!("/dead-letters/message/{id}/replay")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(again, 404, "not-a-dead-letter").await;
    let bad = gateway.http.get(url("/dead-letters/letter/1")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(bad, 404, "not-found").await;
    let bad = gateway
        .http
        .post(url("/reconcile"))
        .bearer_auth(TOKEN)
        .body("{\"window_ms\": 0}")
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-request").await;
    let bad = gateway.http.get(url("/reports/abc")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(bad, 400, "invalid-path").await;
    let bad = gateway
        .http
        .get(url("/dead-letters/message/99999999999999999999"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-path").await;
    // The scheme name is case-insensitive.
    let upper = gateway
        .http
        .get(url("/status"))
        .header("authorization", format!("BEARER {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(upper.status(), 200);
    let bad = gateway
        .http
        .post(url("/reconcile"))
        .bearer_auth(TOKEN)
        .body("{\"provider\": \"nope\"}")
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-request").await;
    let history: Value = gateway
        .http
        .get(url("/operations/dead/history"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let changes: Vec<&str> =
        history["history"].as_array().unwrap().iter().filter_map(|h| h["change"].as_str()).collect();
    assert!(changes.contains(&"dead -> pending"), "{history:#}");
    // Neither the token nor the sink's secret URL shows up in logs or metrics.
    let scraped = scrape(&gateway).await;
    for secret in [TOKEN, "secret-path"] {
        assert!(!gateway.log().contains(secret), "{secret} logged");
        assert!(!scraped.contains(secret), "{secret} in /metrics");
    }
}

/// `chromedriver` (Debian's chromium-driver) on a free port, killed on drop.
struct ChromeDriver {
    _child: tokio::process::Child,
    url: String,
}

impl ChromeDriver {
    async fn start() -> ChromeDriver {
        let port = crate::helpers::free_port();
        let program = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let child = Command::new(&program)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {program:?} ({e}): the dashboard test needs Debian's chromium and \
                     chromium-driver (`apt-get install chromium chromium-driver`; `cargo xtask test` installs them)"
                )
            });
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while reqwest::get(format!("{url}/status")).await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ChromeDriver { _child: child, url }
    }
}

#[tokio::test]
async fn the_dashboard_shows_the_numbers_and_replays_a_dead_letter_in_a_real_browser() {
    use fantoccini::{ClientBuilder, Locator};

    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1", &tail(&sink)).await;
    sim.script("ui-dead", vec![Fault::Error503]);
    assert!(gateway.charge("ui-dead", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("ui-dead", crate::helpers::SETTLE).await["status"], "failed");

    let driver = ChromeDriver::start().await;
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"]}),
    );
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a headless Chromium session");

    // Not signed in: the dashboard sends the browser to the sign-in form.
    browser.goto(&format!("{}/ui", gateway.base)).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/ui/login");
    browser.find(Locator::Css("input[name=token]")).await.unwrap().send_keys("not-the-token").await.unwrap();
    browser.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
    let refused = browser.wait().for_element(Locator::Css("p.error")).await.unwrap();
    assert_eq!(refused.text().await.unwrap(), "That is not the admin token.");
    browser.find(Locator::Css("input[name=token]")).await.unwrap().send_keys(TOKEN).await.unwrap();
    browser.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();

    let card = browser.wait().for_element(Locator::Id("integration-payments")).await.unwrap();
    let text = card.text().await.unwrap();
    for expected in ["payments", "breaker", "success rate", "p95 latency", "oldest open", "1 of 1"] {
        assert!(text.contains(expected), "{expected:?} not on the card: {text}");
    }
    let row = browser.find(Locator::Css("#dead-letters tr[id^=dead-message-]")).await.unwrap();
    assert!(row.text().await.unwrap().contains("ui-dead"));
    let screenshot = browser.screenshot().await.unwrap();
    assert!(screenshot.starts_with(b"\x89PNG") && screenshot.len() > 10_000, "{} bytes", screenshot.len());
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("failwell-ui.png"), &screenshot)
        .unwrap();

    // A page of another origin (another port of this host: the same site,
    // so the SameSite cookie goes along) posts the purge form as it loads:
    // refused, nothing purged.
    let id = row.attr("id").await.unwrap().unwrap().rsplit('-').next().unwrap().to_owned();
    let action = format!("{}/ui/dead-letters/message/{id}/purge", gateway.base);
    let evil = format!(
        "<form id=f method=post action=\"{action}\"></form><script>document.getElementById('f').submit()</script>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_url = format!("http://{}/", listener.local_addr().unwrap());
    let app =
        axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(evil) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    browser.goto(&evil_url).await.unwrap();
    browser.wait().for_url(&reqwest::Url::parse(&action).unwrap()).await.unwrap();
    let refused = browser.find(Locator::Css("p.error")).await.unwrap().text().await.unwrap();
    assert!(refused.contains("nothing was changed"), "{refused}");
    browser.goto(&format!("{}/ui", gateway.base)).await.unwrap();
    let row = browser.find(Locator::Css(&format!("#dead-message-{id}"))).await.expect("not purged");

    // Replay it: the script is spent, so the provider takes it now.
    row.find(Locator::Css("button.replay")).await.unwrap().click().await.unwrap();
    browser.wait().for_element(Locator::Id("no-dead-letters")).await.unwrap();
    let notice = browser.find(Locator::Id("notice")).await.unwrap().text().await.unwrap();
    assert!(notice.starts_with("Replayed"), "{notice}");
    let op = gateway.settled("ui-dead", crate::helpers::SETTLE).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["ui-dead"].effects, 1);
    browser.goto(&format!("{}/ui/operations/ui-dead", gateway.base)).await.unwrap();
    let timeline = browser.find(Locator::Id("timeline")).await.unwrap().text().await.unwrap();
    assert!(
        timeline.lines().any(|l| l.contains("operator:ui") && l.contains("dead -> pending")),
        "{timeline}"
    );
    browser.close().await.unwrap();
}
