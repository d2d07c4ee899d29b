//! The SQL contract under random input: JSON payloads (numbers beyond every
//! machine type, deep nesting, any unicode, long strings, odd keys) and
//! random column values inserted through `failwell_outbox` while a real
//! `failwell serve` relays to the simulator. Every row is refused at the
//! insert or ends delivered, failed or dead-lettered; the ordinary
//! messages inserted among them are all delivered.
//!
//! The inputs come from a seeded generator: a failure prints its seed, and
//! `FAILWELL_FUZZ_SEED=N` runs that input again.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::helpers::{Gateway, postgres_schema, simulator};

/// Random rows per run, and ordinary messages among them.
const RANDOM_ROWS: usize = 400;
const ORDINARY_ROWS: usize = 40;

/// A JSON number as text: any digits, fraction and exponent the grammar
/// allows, far beyond f64 and i64 (exponents of up to two digits); one in
/// a hundred with a four-digit exponent, mostly beyond the 1000 digits
/// failwell takes written out in full (a payload holds many numbers).
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        99 => "-?(0|[1-9][0-9]{0,45})(\\.[0-9]{1,45})?([eE][+-]?[0-9]{1,2})?",
        1 => "-?(0|[1-9][0-9]{0,45})(\\.[0-9]{1,45})?[eE][+-]?[0-9]{4}",
    ]
}

/// A JSON string as text, of any unicode (U+0000 included, which
/// PostgreSQL refuses at the insert).
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        150 => "\\PC{0,24}",
        10 => any::<String>(),
        1 => "[a-z]{0,3}".prop_map(|s| format!("{s}\u{0}")),
        3 => "x{2000,20000}",
    ]
    .prop_map(|s| serde_json::to_string(&s).unwrap())
}

/// Any JSON value as text, nested up to 8 levels by recursion; deeper
/// nesting comes from [`payload`].
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        number(),
        string(),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec((string(), inner), 0..6).prop_map(|members| {
                let members: Vec<String> = members.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// A payload as the application could write it: usually an object (half
/// of them a charge the simulator can take), sometimes nested 100 to 200
/// levels deep, sometimes not an object at all.
fn payload() -> impl Strategy<Value = String> {
    let members = prop::collection::vec((string(), value()), 0..8);
    let object = (members, prop::option::of(any::<u64>())).prop_map(|(members, charge)| {
        let mut members: Vec<String> = members.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
        if let Some(n) = charge {
            members.push(format!(r#""amount":100,"currency":"eur","reference":"fz-{n}""#));
        }
        format!("{{{}}}", members.join(","))
    });
    prop_oneof![
        8 => object,
        1 => (100usize..200).prop_map(|depth| format!("{{\"deep\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1))),
        1 => value(),
    ]
}

/// A row's other columns: provider, operation, key, reference (any of them
/// may be odd: unknown, empty, blank, absent).
fn columns() -> impl Strategy<Value = (String, String, Option<String>, Option<String>)> {
    (
        prop_oneof![8 => Just("payments".to_string()), 1 => Just("nobody".to_string()), 1 => Just(String::new())],
        prop_oneof![8 => Just("charge".to_string()), 1 => Just("refund".to_string()), 1 => any::<String>()],
        prop::option::of(prop_oneof![8 => "[a-z0-9-]{1,20}", 1 => "\\PC{0,12}", 1 => any::<String>()]),
        prop::option::of(prop_oneof![
            8 => "[a-z0-9-]{1,20}",
            1 => "\\PC{0,12}",
            1 => any::<String>(),
            1 => Just(" ".to_string()),
        ]),
    )
}

#[tokio::test]
async fn every_row_through_the_sql_contract_is_refused_or_ends() {
    let seed: u64 =
        std::env::var("FAILWELL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    let rows = prop::collection::vec((payload(), columns()), RANDOM_ROWS);
    let rows = rows.new_tree(&mut runner).unwrap().current();

    let sim = simulator(|_| {}).await;
    let url = postgres_schema().await;
    let gateway = Gateway::start_edited(&sim.base_url(), "", "", |text| {
        text.lines()
            .map(|l| {
                if l.starts_with("database_url = ") { format!("database_url = \"{url}\"") } else { l.into() }
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let insert = "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
                  VALUES ($1, $2, $3::json, $4, $5) RETURNING id";
    let (mut accepted, mut refused, mut ordinary) =
        (Vec::new(), std::collections::BTreeMap::new(), Vec::new());
    for (i, (payload, (provider, operation, key, reference))) in rows.into_iter().enumerate() {
        let row: Result<i64, sqlx::Error> = sqlx::query_scalar(insert)
            .bind(&provider)
            .bind(&operation)
            .bind(&payload)
            .bind(&key)
            .bind(&reference)
            .fetch_one(&pool)
            .await;
        match row {
            Ok(id) => accepted.push(id),
            // A replay of an earlier row writes nothing and returns nothing.
            Err(sqlx::Error::RowNotFound) => {}
            Err(e) => {
                let code = e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
                let code = code.unwrap_or_else(|| panic!("seed {seed}: not a database refusal: {e}"));
                assert!(
                    ["23502", "23505", "23514", "22P02", "22P05", "22021", "22023"].contains(&code.as_str()),
                    "seed {seed}: insert refused with {code}: {e}"
                );
                *refused.entry(code).or_insert(0) += 1;
            }
        }
        if i % (RANDOM_ROWS / ORDINARY_ROWS) == 0 {
            let reference = format!("ordinary-{seed}-{i}");
            let id: i64 = sqlx::query_scalar(insert)
                .bind("payments")
                .bind("charge")
                .bind(format!(r#"{{"amount":100,"currency":"eur","reference":"{reference}"}}"#))
                .bind(&reference)
                .bind(&reference)
                .fetch_one(&pool)
                .await
                .unwrap();
            ordinary.push(id);
        }
    }
    assert!(
        accepted.len() > RANDOM_ROWS / 2,
        "seed {seed}: most random rows are accepted (refused: {refused:?})"
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT id, status, delivery FROM failwell_outbox WHERE id = ANY($1) AND delivery = 'pending'",
        )
        .bind(accepted.iter().chain(&ordinary).copied().collect::<Vec<i64>>())
        .fetch_all(&pool)
        .await
        .unwrap();
        if open.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "seed {seed}: still pending: {open:?}\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let statuses: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, status FROM failwell_outbox WHERE id = ANY($1) ORDER BY id")
            .bind(&ordinary)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(statuses.iter().all(|(_, s)| s == "succeeded"), "seed {seed}: {statuses:?}");
    let ended: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM failwell_outbox WHERE id = ANY($1) GROUP BY status ORDER BY status",
    )
    .bind(&accepted)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        ended.iter().all(|(s, _)| s == "succeeded" || s == "failed"),
        "seed {seed}: every accepted row ends delivered or failed: {ended:?}"
    );
    println!(
        "seed {seed}: {} random rows accepted ({ended:?}), refused {refused:?}, {} ordinary delivered",
        accepted.len(),
        ordinary.len()
    );
}
