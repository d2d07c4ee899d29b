//! The balance ledger for an operator: `failwell ledger …` (the real
//! binary) on SQLite and PostgreSQL, and the dashboard's ledger pages.

use failwell_sim::{Fault, Simulator};
use failwell_store::{NewHold, NewOperation, Store, StoreOptions, Synchronous};
use serde_json::{Value, json};

use crate::helpers::{Gateway, on_database, postgres_schema, simulator};
use crate::operator::{TOKEN, cli, not_pending};

/// A gateway whose provider calls are tried once and whose unknown
/// operations stay unknown (the reconciler runs once an hour), with the
/// dashboard on; on PostgreSQL (a fresh schema) or SQLite. Also returns a
/// handle to its store.
async fn start(postgres: bool) -> (Simulator, Gateway, Store) {
    let sim = simulator(|_| {}).await;
    let schema = if postgres { Some(postgres_schema().await) } else { None };
    let gateway = Gateway::start_edited(
        &sim.base_url(),
        "max_attempts = 1\nreconcile_after_ms = 300",
        &format!("[admin]\ntoken = \"{TOKEN}\"\n"),
        |text| {
            let text = text.replace("[reconciler]\ninterval_ms = 50", "[reconciler]\ninterval_ms = 3600000");
            match &schema {
                Some(url) => on_database(&text, url),
                None => text,
            }
        },
    )
    .await;
    let url =
        schema.unwrap_or_else(|| format!("sqlite://{}", gateway.dir.path().join("failwell.db").display()));
    let options = StoreOptions { synchronous: Synchronous::Normal, max_connections: 2 };
    let store = Store::open(&url, options).await.unwrap();
    (sim, gateway, store)
}

/// `failwell ledger ARGS`: exit code, stdout, stderr.
async fn ledger(gateway: &Gateway, args: &[&str]) -> (i32, String, String) {
    cli(gateway, &[&["ledger"], args].concat()).await
}

/// `failwell ledger ARGS --json`, which must succeed, parsed.
async fn ledger_json(gateway: &Gateway, args: &[&str]) -> Value {
    let (code, out, err) = ledger(gateway, &[args, &["--json"]].concat()).await;
    assert_eq!(code, 0, "ledger {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ledger {args:?} --json: {e}\n{out}"))
}

/// `failwell ledger ARGS`, which must be refused (exit 2) saying `reason`.
async fn refused(gateway: &Gateway, args: &[&str], reason: &str) {
    let (code, out, err) = ledger(gateway, args).await;
    assert_eq!(code, 2, "ledger {args:?}: {out}{err}");
    assert!(err.contains(reason), "ledger {args:?}: {err:?} should say {reason:?}");
}

/// An account's four figures, as `[posted, debits_pending, credits_pending, available]`.
async fn figures(gateway: &Gateway, id: &str) -> [i64; 4] {
    let a = &ledger_json(gateway, &["account", id]).await["account"];
    ["posted", "debits_pending", "credits_pending", "available"].map(|f| a[f].as_i64().unwrap())
}

/// Submits operation `key` (a charge) with hold `hold` of `amount` from
/// `wallet:alice`, straight into the store; the provider's answer is lost,
/// so it stays `unknown` and its hold pending.
async fn order_with_hold(
    sim: &Simulator,
    gateway: &Gateway,
    store: &Store,
    key: &str,
    hold: &str,
    amount: i64,
) {
    sim.script(key, vec![Fault::ResetAfterCommit]);
    let op = NewOperation {
        idempotency_key: key.into(),
        provider: "payments".into(),
        operation: "charge".into(),
        reference: Some(key.into()),
        payload: json!({"amount": amount, "currency": "eur", "reference": key}),
        hold: Some(NewHold {
            id: hold.into(),
            debit_account: "wallet:alice".into(),
            credit_account: "shop:EUR".into(),
            amount,
        }),
    };
    store.submit(op, failwell_engine::now_ms()).await.unwrap();
    assert_eq!(not_pending(gateway, key).await["status"], "unknown");
}

async fn command_line(postgres: bool) {
    let (sim, gateway, store) = start(postgres).await;
    let g = &gateway;

    // Open, open again (nothing changes), open otherwise (refused).
    let opened = ledger_json(g, &["open", "wallet:alice", "--unit", "EUR"]).await;
    assert_eq!(
        (&opened["result"], &opened["account"]["floor"]),
        (&json!("created"), &json!(0)),
        "{opened:#}"
    );
    let (code, out, _) = ledger(g, &["open", "wallet:alice", "--unit", "EUR", "--floor", "0"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("exists already") && out.contains("nothing changed"), "{out}");
    let again = ledger_json(g, &["open", "wallet:alice", "--unit", "EUR"]).await;
    assert_eq!(again["result"], "existing");
    refused(g, &["open", "wallet:alice", "--unit", "USD"], "exists with unit EUR and floor 0").await;
    refused(g, &["open", "wallet:alice", "--unit", "EUR", "--floor", "-100"], "nothing changed").await;
    let world = ledger_json(g, &["open", "world:EUR", "--unit", "EUR", "--no-floor"]).await;
    assert_eq!(world["account"]["floor"], Value::Null);
    let (code, out, _) = ledger(g, &["open", "shop:EUR", "--unit", "EUR", "--floor", "-500"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("opened") && out.contains("floor -500"), "{out}");
    ledger(g, &["open", "bonus:alice", "--unit", "points"]).await;

    // A top-up, replayed; its id with other content is refused.
    let (code, out, err) = ledger(g, &["transfer", "top-up-1", "world:EUR", "wallet:alice", "5000"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("transfer top-up-1 made"), "{out}");
    let (code, out, _) = ledger(g, &["transfer", "top-up-1", "world:EUR", "wallet:alice", "5000"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("replayed") && out.contains("nothing changed"), "{out}");
    let replayed = ledger_json(g, &["transfer", "top-up-1", "world:EUR", "wallet:alice", "5000"]).await;
    assert_eq!((&replayed["result"], &replayed["transfer"]["state"]), (&json!("replayed"), &json!("posted")));
    refused(
        g,
        &["transfer", "top-up-1", "world:EUR", "wallet:alice", "6000"],
        "already used with different content",
    )
    .await;
    assert_eq!(figures(g, "wallet:alice").await, [5000, 0, 0, 5000]);

    // A debit beyond the balance is refused; nothing is written.
    let before = ledger_json(g, &["account", "wallet:alice"]).await;
    refused(
        g,
        &["transfer", "too-much", "wallet:alice", "shop:EUR", "9000"],
        "transfer \"too-much\" refused: insufficient funds: 5000 available above the floor of 0, 9000 asked",
    )
    .await;
    refused(
        g,
        &["transfer", "to-nobody", "wallet:alice", "nobody", "1"],
        "account \"nobody\" does not exist",
    )
    .await;
    refused(g, &["transfer", "mixed", "wallet:alice", "bonus:alice", "1"], "in EUR").await;
    assert_eq!(ledger_json(g, &["account", "wallet:alice"]).await, before, "nothing was written");
    assert_eq!(ledger(g, &["show", "too-much"]).await.0, 1, "no such transfer");

    // A hold, posted in part, posted again the same way; anything else is refused.
    let hold =
        ["transfer", "hold-1", "wallet:alice", "shop:EUR", "3000", "--pending", "--timeout-ms", "600000"];
    let made = ledger_json(g, &hold).await;
    assert_eq!((&made["result"], &made["transfer"]["state"]), (&json!("created"), &json!("pending")));
    assert_eq!(figures(g, "wallet:alice").await, [5000, 3000, 0, 2000]);
    let holds = ledger_json(g, &["holds"]).await;
    let listed = &holds["holds"][0];
    assert_eq!((&listed["id"], &listed["operation"]), (&json!("hold-1"), &Value::Null), "{holds:#}");
    assert!(listed["age_ms"].as_i64().is_some_and(|age| age >= 0), "{holds:#}");
    let (code, table, _) = ledger(g, &["holds"]).await;
    assert_eq!(code, 0);
    assert!(table.starts_with("HOLD") && table.contains("hold-1"), "{table}");
    let (code, out, err) = ledger(g, &["post", "hold-1", "--amount", "2500"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("hold hold-1 posted"), "{out}");
    assert_eq!(figures(g, "wallet:alice").await, [2500, 0, 0, 2500]);
    assert_eq!(figures(g, "shop:EUR").await, [2500, 0, 0, 2500]);
    let again = ledger_json(g, &["post", "hold-1", "--amount", "2500"]).await;
    assert_eq!((&again["result"], &again["transfer"]["posted_amount"]), (&json!("already"), &json!(2500)));
    refused(g, &["post", "hold-1"], "hold \"hold-1\" not posted: the hold is posted already").await;
    refused(g, &["void", "hold-1"], "hold \"hold-1\" not voided: the hold is posted already").await;
    refused(g, &["post", "top-up-1"], "is not a hold").await;
    let shown = ledger_json(g, &["show", "hold-1"]).await;
    assert_eq!((&shown["state"], &shown["posted_amount"]), (&json!("posted"), &json!(2500)), "{shown:#}");
    assert_eq!(figures(g, "wallet:alice").await, [2500, 0, 0, 2500], "nothing more moved");

    // A hold that expires.
    ledger_json(
        g,
        &["transfer", "hold-2", "wallet:alice", "shop:EUR", "1000", "--pending", "--timeout-ms", "1"],
    )
    .await;
    store.settle_holds(failwell_engine::now_ms() + 60_000, 100).await.unwrap();
    let (code, out, _) = ledger(g, &["show", "hold-2"]).await;
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.split_whitespace().eq(["state", "expired"])), "{out}");
    assert_eq!(ledger(g, &["holds"]).await.1, "no pending holds\n");
    assert_eq!(figures(g, "wallet:alice").await, [2500, 0, 0, 2500]);
    refused(g, &["void", "hold-2"], "the hold is expired already").await;

    // A hold tied to an operation: its outcome ends it, not an operator.
    order_with_hold(&sim, g, &store, "order-1", "order-1-wallet", 700).await;
    let holds = ledger_json(g, &["holds"]).await;
    assert_eq!(holds["holds"][0]["operation"], "order-1", "{holds:#}");
    refused(g, &["post", "order-1-wallet"], "is tied to operation \"order-1\"").await;
    refused(g, &["void", "order-1-wallet"], "is tied to operation \"order-1\"").await;
    assert_eq!(figures(g, "wallet:alice").await, [2500, 700, 0, 1800]);

    // The journal, a page at a time.
    let page = ledger_json(g, &["account", "wallet:alice", "--limit", "3"]).await;
    let events = |page: &Value| -> Vec<String> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{} {}", e["transfer_id"], e["event"]))
            .collect()
    };
    assert_eq!(events(&page), ["\"top-up-1\" \"transfer\"", "\"hold-1\" \"hold\"", "\"hold-1\" \"post\""]);
    let next = page["next_after"].as_i64().expect("a next page").to_string();
    let rest = ledger_json(g, &["account", "wallet:alice", "--after", &next]).await;
    assert_eq!(
        events(&rest),
        ["\"hold-2\" \"hold\"", "\"hold-2\" \"expire\"", "\"order-1-wallet\" \"hold\""],
        "{rest:#}"
    );
    assert_eq!(rest["next_after"], Value::Null);
    let (code, text, _) = ledger(g, &["account", "wallet:alice", "--limit", "3"]).await;
    assert_eq!(code, 0);
    // Labels in one column, as wide as "credits pending".
    let field = |label: &str, value: &str| format!("{label:<15}  {value}\n");
    assert!(text.starts_with(&field("account", "wallet:alice")), "{text}");
    assert!(text.contains(&field("available", "1800")) && text.contains("more entries: --after"), "{text}");

    // The accounts, a page at a time, in aligned columns.
    let first = ledger_json(g, &["accounts", "--limit", "2"]).await;
    let ids = |page: &Value| -> Vec<String> {
        page["accounts"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(&first), ["bonus:alice", "shop:EUR"]);
    let rest = ledger_json(g, &["accounts", "--after", first["next_after"].as_str().unwrap()]).await;
    assert_eq!(
        (ids(&rest), &rest["next_after"]),
        (vec!["wallet:alice".into(), "world:EUR".into()], &Value::Null)
    );
    let (code, table, _) = ledger(g, &["accounts"]).await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ACCOUNT") && lines.len() == 5, "{table}");
    assert!(lines.iter().all(|l| l.len() == lines[0].len()), "aligned columns:\n{table}");
    let world: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(world, ["world:EUR", "EUR", "none", "-5000", "0", "0", "-5000"], "{table}");

    // What does not exist: exit 1.
    for args in [&["account", "nobody"][..], &["show", "nobody"], &["post", "nobody"], &["void", "nobody"]] {
        let (code, _, err) = ledger(g, args).await;
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("\"nobody\""), "{err}");
    }
    // Arguments the ledger never sees: refused by the command line.
    for args in [
        &["transfer", "t", "world:EUR", "wallet:alice", "0"][..],
        &["transfer", "t", "a", "b", "1", "--timeout-ms", "5"],
    ] {
        assert_eq!(ledger(g, args).await.0, 2, "{args:?}");
    }
    store.close().await;
}

#[tokio::test]
async fn the_ledger_from_the_command_line_on_sqlite() {
    command_line(false).await;
}

#[tokio::test]
async fn the_ledger_from_the_command_line_on_postgres() {
    command_line(true).await;
}

/// Signs in to the dashboard; returns the session cookie.
async fn session(gateway: &Gateway) -> String {
    let no_redirects =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = no_redirects
        .post(format!("{}/ui/login", gateway.base))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
}

#[tokio::test]
async fn the_dashboard_shows_accounts_holds_and_journals_escaped() {
    let (sim, gateway, store) = start(false).await;
    let g = &gateway;
    let hostile = "<b>x</b>\"'&";
    for (id, floor) in [("wallet:alice", "0"), ("shop:EUR", "0"), (hostile, "0")] {
        assert_eq!(ledger(g, &["open", id, "--unit", "EUR", "--floor", floor]).await.0, 0);
    }
    ledger_json(g, &["open", "world:EUR", "--unit", "EUR", "--no-floor"]).await;
    ledger_json(g, &["transfer", "top-up-1", "world:EUR", "wallet:alice", "5000"]).await;
    ledger_json(g, &["transfer", "<i>gift</i>", "world:EUR", hostile, "42"]).await;
    ledger_json(g, &["transfer", "hold-1", "wallet:alice", "shop:EUR", "300", "--pending"]).await;
    order_with_hold(&sim, g, &store, "order-<1>", "order-1-wallet", 700).await;

    // Not signed in: to the sign-in form.
    let no_redirects =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    for path in ["/ui/ledger", "/ui/ledger/accounts/wallet%3Aalice"] {
        let r = no_redirects.get(format!("{}{path}", g.base)).send().await.unwrap();
        assert_eq!(
            (r.status().as_u16(), &r.headers()["location"]),
            (303, &"/ui/login".parse().unwrap()),
            "{path}"
        );
    }
    let cookie = session(g).await;
    let get = |path: String| {
        let request = g.http.get(format!("{}{path}", g.base)).header("Cookie", &cookie);
        async move { request.send().await.unwrap() }
    };
    let page = |path: &str| {
        let r = get(path.to_owned());
        async move {
            let r = r.await;
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };

    let ledger_page = page("/ui/ledger").await;
    assert!(page("/ui").await.contains("href=\"/ui/ledger\""), "linked from the dashboard");
    for expected in [
        // Accounts with their figures: wallet:alice posted 5000, pending 1000.
        "<a href=\"/ui/ledger/accounts/wallet%3Aalice\">wallet:alice</a></td><td>EUR</td><td>0</td><td>5000</td><td>1000</td><td>0</td><td>4000</td>",
        "<td>none</td><td>-5042</td>",
        // Holds with their age and operation, oldest first.
        "<td>hold-1</td>",
        "<a href=\"/ui/operations/order%2D%3C1%3E\">order-&lt;1&gt;</a>",
        // The hostile id, escaped as text and encoded in the link.
        "<a href=\"/ui/ledger/accounts/%3Cb%3Ex%3C%2Fb%3E%22%27%26\">&lt;b&gt;x&lt;/b&gt;&quot;'&amp;</a>",
    ] {
        assert!(ledger_page.contains(expected), "{expected:?} not on\n{ledger_page}");
    }
    assert!(
        ledger_page.find("hold-1").unwrap() < ledger_page.find("order-1-wallet").unwrap(),
        "oldest first"
    );
    assert!(!ledger_page.contains("<b>x") && !ledger_page.contains("<i>"), "{ledger_page}");

    let account = page("/ui/ledger/accounts/%3Cb%3Ex%3C%2Fb%3E%22%27%26").await;
    assert!(account.contains("<dt>available</dt><dd>42</dd>"), "{account}");
    assert!(account.contains("<td>&lt;i&gt;gift&lt;/i&gt;</td><td>transfer</td><td>42</td>"), "{account}");
    assert!(!account.contains("<b>x") && !account.contains("<i>gift"), "{account}");

    let wallet = page("/ui/ledger/accounts/wallet%3Aalice").await;
    for expected in [
        "<td>top-up-1</td><td>transfer</td><td>5000</td>",
        "<td>order-1-wallet</td><td>hold</td><td>0</td><td>700</td>",
    ] {
        assert!(wallet.contains(expected), "{expected:?} not on\n{wallet}");
    }
    // The next page of the journal: after the top-up's entry.
    let first_entry = wallet.split("<tr><td>").nth(1).unwrap().split('<').next().unwrap().to_owned();
    let later = page(&format!("/ui/ledger/accounts/wallet%3Aalice?after={first_entry}")).await;
    assert!(!later.contains("top-up-1") && later.contains("order-1-wallet"), "{later}");
    let later = page("/ui/ledger?after=world%3AEUR").await;
    assert!(later.contains("id=\"no-accounts\"") && later.contains("hold-1"), "{later}");

    crate::helpers::problem(get("/ui/ledger/accounts/nobody".into()).await, 404, "not-found").await;
    crate::helpers::problem(
        get("/ui/ledger/accounts/wallet%3Aalice?after=x".into()).await,
        400,
        "invalid-query",
    )
    .await;
    // Read-only: no route takes a post.
    let r = g
        .http
        .post(format!("{}/ui/ledger", g.base))
        .header("Cookie", &cookie)
        .header("Sec-Fetch-Site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    store.close().await;
}
