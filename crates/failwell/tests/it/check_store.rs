//! `failwell check` names the store (never a password), says whether it is
//! reachable and migrated, and what the application's and failwell's
//! database users need there: on SQLite, PostgreSQL and MySQL or MariaDB.
//! It creates and changes nothing.

use failwell_store::{MySqlStore, PostgresStore, SqliteStore, Synchronous};

use crate::helpers::{binary, config_text, free_port, mysql_database, on_database, postgres_schema};

/// `failwell check` on a configuration whose store is at `url`: its
/// standard output, once it exited 0.
fn check(url: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("failwell.toml");
    let text = config_text("http://127.0.0.1:9", &dir.path().join("unused.db"), free_port(), "");
    std::fs::write(&path, on_database(&text, url)).unwrap();
    let out = std::process::Command::new(binary()).args(["check", "--config"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("payments.charge: POST"), "the manifest follows: {text}");
    assert!(!text.contains("hunter2"), "a password was printed: {text}");
    text
}

/// `state` of a store with every migration of `database` (a folder of
/// `failwell-store/migrations`) applied.
fn migrated(database: &str) -> String {
    let folder = format!("{}/../failwell-store/migrations/{database}", env!("CARGO_MANIFEST_DIR"));
    let n = std::fs::read_dir(folder).unwrap().count();
    format!("state                   reachable; failwell's store is migrated ({n} of {n} migrations)")
}

/// Asserts every one of `lines` starts a line of `text` (after its indent).
fn has_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.lines().any(|l| l.trim_start().starts_with(line)), "{line:?} not in:\n{text}");
    }
}

#[tokio::test]
async fn check_names_an_sqlite_file_and_what_an_application_beside_failwell_sets() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let url = format!("sqlite://{}", db.display());
    let path = db.display();
    let needs = format!(
        "the application's user  write access to {path} and its directory (SQLite writes {path}-wal and \
         {path}-shm beside it); the file in WAL mode (failwell sets it, the file keeps it); a busy timeout"
    );
    let text = check(&url);
    has_lines(
        &text,
        &[
            &format!("store: SQLite, file {path}"),
            "state                   not created yet: `failwell serve` creates the file at its first start",
            &needs,
            &format!("failwell's user         read and write access to {path} and its directory"),
        ],
    );
    assert!(text.contains("BEGIN IMMEDIATE"), "{text}");
    assert!(!db.exists(), "check created the file");

    let store = SqliteStore::open(&url, Synchronous::Normal).await.unwrap();
    failwell_store::Backend::close(&store).await;
    let text = check(&url);
    has_lines(&text, &["store: SQLite 3.", &format!("{}; journal mode wal", migrated("sqlite")), &needs]);
    assert!(text.contains(&format!(", file {path}\n")), "{text}");
}

#[tokio::test]
async fn check_names_a_postgres_schema_and_the_rights_the_contract_needs() {
    let url = postgres_schema().await;
    // Trusted local connections take no password: it is only not printed.
    let url = url.replace("postgres://postgres@", "postgres://postgres:hunter2@");
    let schema = url.rsplit_once("%3D").unwrap().1.to_owned();
    let needs = format!(
        "the application's user  INSERT, and SELECT to read the status, on the view failwell_outbox; the view's \
         trigger runs with the application's rights, so also SELECT, INSERT, UPDATE on operations and outbox, \
         and USAGE on the schema {schema}"
    );
    let text = check(&url);
    has_lines(
        &text,
        &[
            "store: PostgreSQL 1",
            "state                   reachable; holds no failwell store yet: `failwell serve` creates it at start",
            &needs,
            &format!(
                "failwell's user         CREATE and USAGE on the schema {schema}: it creates its tables"
            ),
        ],
    );
    assert!(
        text.contains(&format!(", database test on 127.0.0.1:5432 as user postgres, schema {schema}\n")),
        "{text}"
    );

    let store = PostgresStore::open(&url, 2).await.unwrap();
    failwell_store::Backend::close(&store).await;
    has_lines(&check(&url), &[&migrated("postgres")]);
}

/// The rights `failwell check` names for a PostgreSQL application's user
/// are needed (the view's alone are refused: its trigger runs with the
/// application's rights) and enough, for a plain insert and a scheduled one.
#[tokio::test]
async fn the_rights_named_for_a_postgres_application_are_needed_and_enough() {
    use sqlx::Connection;
    let url = postgres_schema().await;
    let schema = url.rsplit_once("%3D").unwrap().1.to_owned();
    let store = PostgresStore::open(&url, 2).await.unwrap();
    failwell_store::Backend::close(&store).await;
    let role = format!("{schema}_app");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let run = async |conn: &mut sqlx::PgConnection, sql: String| {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await.map(drop)
    };
    let insert = |key: &str, scheduled: &str| {
        format!(
            "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference{}) \
             VALUES ('payments', 'charge', '{{\"amount\": 1}}', '{key}', '{key}'{})",
            if scheduled.is_empty() { "" } else { ", ordering_key, available_at" },
            scheduled
        )
    };
    run(&mut conn, format!("CREATE ROLE {role}")).await.unwrap();
    run(&mut conn, format!("GRANT USAGE ON SCHEMA {schema} TO {role}")).await.unwrap();
    run(&mut conn, format!("GRANT INSERT, SELECT ON failwell_outbox TO {role}")).await.unwrap();
    run(&mut conn, format!("SET ROLE {role}")).await.unwrap();
    let refused = run(&mut conn, insert("rights-1", "")).await.unwrap_err();
    assert!(refused.to_string().contains("permission denied for table operations"), "{refused}");
    run(&mut conn, "RESET ROLE".into()).await.unwrap();
    run(&mut conn, format!("GRANT SELECT, INSERT, UPDATE ON operations, outbox TO {role}")).await.unwrap();
    run(&mut conn, format!("SET ROLE {role}")).await.unwrap();
    run(&mut conn, insert("rights-1", "")).await.unwrap();
    run(&mut conn, insert("rights-2", ", 'k', now() + interval '1 hour'")).await.unwrap();
    let status: String =
        sqlx::query_scalar("SELECT status FROM failwell_outbox WHERE idempotency_key = 'rights-2'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(status, "pending");
    run(&mut conn, "RESET ROLE".into()).await.unwrap();
    run(&mut conn, format!("DROP OWNED BY {role}")).await.unwrap();
    run(&mut conn, format!("DROP ROLE {role}")).await.unwrap();
}

#[tokio::test]
async fn check_names_mysql_or_mariadb_its_version_and_the_contract_table() {
    let database = mysql_database().await;
    let needs = "the application's user  INSERT on failwell_outbox, the outbox contract's table, and SELECT on \
                 the view failwell_outbox_status to read the status; the table's triggers run with the rights of \
                 their definer, failwell's user";
    let name = database.url.rsplit_once('/').unwrap().1;
    let text = check(&database.url);
    has_lines(
        &text,
        &[
            "state                   reachable; holds no failwell store yet",
            needs,
            &format!(
                "failwell's user         CREATE, CREATE VIEW, ALTER, DROP, INDEX, TRIGGER and SELECT, INSERT, UPDATE, DELETE on the database {name}"
            ),
        ],
    );
    let store = text.lines().find(|l| l.starts_with("store: ")).unwrap();
    assert!(
        store.starts_with("store: MariaDB 1") || store.starts_with("store: MySQL 8"),
        "the server and its version: {store}"
    );
    assert!(store.ends_with(&format!(", database {name} on 127.0.0.1:3306 as user root")), "{store}");

    let opened = MySqlStore::open(&database.url, 2).await.unwrap();
    failwell_store::Backend::close(&opened).await;
    has_lines(&check(&database.url), &[&migrated("mysql")]);

    // A server that is not there, and a password the server refuses: said
    // (once), the password never printed, and the check still passes.
    let text = check("mysql://root:hunter2@127.0.0.1:1/shop");
    has_lines(
        &text,
        &[
            "store: MySQL or MariaDB, database shop on 127.0.0.1:1 as user root",
            "state                   not reachable: database error: connecting to MySQL: ",
        ],
    );
    let mut refused = reqwest::Url::parse(&database.url).unwrap();
    refused.set_password(Some("hunter2")).unwrap();
    let text = check(refused.as_str());
    let state = text.lines().find(|l| l.trim_start().starts_with("state")).unwrap();
    assert!(
        state.starts_with(
            "  state                   not reachable: database error: connecting to MySQL: error returned from \
             database: 1045 (28000): Access denied for user 'root'@"
        ) && state.ends_with("(using password: YES)"),
        "{state}"
    );
    assert_eq!(state.matches("Access denied").count(), 1, "{state}");
}

/// The rights `failwell check` names on MySQL or MariaDB are enough:
/// failwell's user, with those alone, creates its store; the application's
/// user, with `INSERT` on `failwell_outbox` and `SELECT` on
/// `failwell_outbox_status` alone, enqueues (the trigger runs with its
/// definer's rights) and reads the status, and reads nothing else.
#[tokio::test]
async fn the_rights_named_for_mysql_are_enough() {
    use sqlx::Connection;
    let database = mysql_database().await;
    let name = database.url.rsplit_once('/').unwrap().1.to_owned();
    let mut root = sqlx::MySqlConnection::connect(&database.url).await.unwrap();
    let as_user = |user: &str| {
        let mut url = reqwest::Url::parse(&database.url).unwrap();
        url.set_username(user).unwrap();
        url.set_password(Some("secret")).unwrap();
        url.to_string()
    };
    let (failwell, app) = (format!("{name}_fw"), format!("{name}_app"));
    for sql in [
        format!("CREATE USER '{failwell}'@'%' IDENTIFIED BY 'secret'"),
        format!("CREATE USER '{app}'@'%' IDENTIFIED BY 'secret'"),
        format!(
            "GRANT CREATE, CREATE VIEW, ALTER, DROP, INDEX, TRIGGER, SELECT, INSERT, UPDATE, DELETE ON {name}.* \
             TO '{failwell}'@'%'"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut root).await.unwrap();
    }
    let store = MySqlStore::open(&as_user(&failwell), 2).await.unwrap();
    failwell_store::Backend::close(&store).await;
    for sql in [
        format!("GRANT INSERT ON {name}.failwell_outbox TO '{app}'@'%'"),
        format!("GRANT SELECT ON {name}.failwell_outbox_status TO '{app}'@'%'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut root).await.unwrap();
    }
    let mut conn = sqlx::MySqlConnection::connect(&as_user(&app)).await.unwrap();
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference, ordering_key, \
         available_at) VALUES ('payments', 'charge', '{\"amount\": 1}', 'rights-1', 'rights-1', 'k', \
         NOW() + INTERVAL 1 HOUR)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let status: String =
        sqlx::query_scalar("SELECT status FROM failwell_outbox_status WHERE idempotency_key = 'rights-1'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(status, "pending");
    let refused = sqlx::query("SELECT COUNT(*) FROM operations").execute(&mut conn).await.unwrap_err();
    assert!(refused.to_string().contains("denied"), "{refused}");
    conn.close().await.unwrap();
    for user in [failwell, app] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP USER '{user}'@'%'"))).execute(&mut root).await.unwrap();
    }
}
