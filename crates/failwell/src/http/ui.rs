//! The dashboard at `/ui`: server-rendered HTML, no scripts, no build step.
//! One page with a card per integration (the four numbers and the breaker
//! state), the dead letters with replay and purge buttons, and the
//! comparison reports; a page per report and per operation's history; the
//! balance ledger's accounts, holds and journals (`ui/ledger.rs`).
//!
//! Signing in takes the `[admin] token` once (a form); the session cookie
//! holds a value derived from it, never the token, and is `HttpOnly`,
//! `SameSite=Strict` and good for 12 hours (or until "Sign out"). A page of
//! another origin cannot make a signed-in browser post a replay: every
//! `POST` must come from a page of this origin (`Sec-Fetch-Site:
//! same-origin`, or, from a browser that does not send it, an `Origin`
//! naming this `Host`), as in the Fetch Metadata and Origin checks of the
//! OWASP "Cross-Site Request Forgery Prevention Cheat Sheet"; `SameSite`
//! alone would let another port of the same host, or a sibling subdomain,
//! through. Without `[admin]` the dashboard answers 404.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use failwell_engine::compare::rfc3339;
use failwell_store::{AlertState, Channel, DeadLetterFilter, DeadLetterKind, OperationStatus};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::extract::ApiPath;
use super::problem::{Problem, ProblemType};
use super::state::AppState;
use crate::ops;
use crate::ops::OpsError;

mod ledger;

const COOKIE: &str = "failwell_session";

/// How long a dashboard session lasts (s).
const SESSION_S: i64 = 12 * 60 * 60;

/// The dashboard's routes, all below `/ui`.
pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    let signed_in = Router::new()
        .route("/ui", get(dashboard))
        .route("/ui/reports/{id}", get(report))
        .route("/ui/operations/{key}", get(operation))
        .route("/ui/ledger", get(ledger::ledger))
        .route("/ui/ledger/accounts/{id}", get(ledger::account))
        .route("/ui/dead-letters/{kind}/{id}/replay", post(replay))
        .route("/ui/dead-letters/{kind}/{id}/purge", post(purge))
        .route("/ui/dead-letters/ack", post(ack))
        .route("/ui/operations/{key}/resolve", post(resolve))
        .route("/ui/logout", post(logout))
        .layer(axum::middleware::from_fn_with_state(state, session));
    Router::new()
        .route("/ui/login", get(login_page).post(login))
        .merge(signed_in)
        .layer(axum::middleware::map_response(no_framing))
}

/// No page of the dashboard may be shown in a frame of another page: a
/// click inside such a frame would come from this origin (clickjacking).
/// `X-Frame-Options: DENY` and the CSP `frame-ancestors 'none'` say so; the
/// CSP also allows no scripts and no resources from elsewhere.
async fn no_framing(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "frame-ancestors 'none'; default-src 'self'; style-src 'unsafe-inline'",
        ),
    );
    response
}

fn page(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · failwell" }
                    style { (maud::PreEscaped(STYLE)) }
                }
                body {
                    header {
                        a href="/ui" { "failwell" } " · " (title)
                        @if title != "Sign in" {
                            nav { a href="/ui" { "Dashboard" } a href="/ui/ledger" { "Ledger" } }
                            form.inline.logout method="post" action="/ui/logout" { button type="submit" { "Sign out" } }
                        }
                    }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}\
header{background:#1f2a44;color:#fff;padding:10px 20px;font-weight:600}header a{color:#fff;text-decoration:none}\
main{padding:16px 20px}.cards{display:flex;flex-wrap:wrap;gap:12px}\
.card{background:#fff;border:1px solid #dde;border-radius:6px;padding:12px 16px;min-width:230px}\
.card h3{margin:0 0 6px}.card dl{display:grid;grid-template-columns:auto auto;gap:2px 12px;margin:0}\
.card dd{margin:0;text-align:right;font-variant-numeric:tabular-nums}\
.state-open,.state-forced_open,.warn{color:#b00020;font-weight:600}.state-half_open{color:#b36b00;font-weight:600}\
.state-closed{color:#1b7f3b}table{border-collapse:collapse;background:#fff;width:100%}\
th,td{border-bottom:1px solid #e4e6eb;padding:5px 8px;text-align:left;vertical-align:top}\
form.inline{display:inline}form.logout{float:right}nav{float:right;margin-right:16px}nav a{margin-left:14px}button{cursor:pointer}pre{background:#fff;border:1px solid #dde;padding:10px;overflow:auto}\
.error{color:#b00020}.notice{background:#e8f4ea;border:1px solid #b7dcc0;padding:6px 10px}";

/// Rejects a request without the session cookie (back to the sign-in page),
/// and a `POST` that did not come from a page of this origin (403).
async fn session(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = &state.admin.token else { return disabled() };
    // Reading is safe from anywhere (the browser keeps the answer from
    // another origin); changing something is not.
    let get = matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    if !get && !same_origin(request.headers()) {
        tracing::warn!(path = %request.uri().path(), "dashboard post from another origin refused");
        return (
            StatusCode::FORBIDDEN,
            page(
                "Refused",
                html! { p.error { "This form was not sent from this dashboard: nothing was changed." } },
            ),
        )
            .into_response();
    }
    if cookie(request.headers()).is_some_and(|c| token.session_matches(c, now_s(), SESSION_S)) {
        return next.run(request).await;
    }
    if get {
        Redirect::to("/ui/login").into_response()
    } else {
        (StatusCode::UNAUTHORIZED, page("Sign in", html! { p.error { "Sign in first." } })).into_response()
    }
}

/// Whether a state-changing request comes from a page of this origin: the
/// browser's `Sec-Fetch-Site` says `same-origin` (or `none`: typed by the
/// user), or, without it, `Origin`'s host and port are the request's
/// `Host`. A request with neither header is refused: every browser that
/// posts a form sends one of them.
fn same_origin(headers: &HeaderMap) -> bool {
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value("sec-fetch-site") {
        return site == "same-origin" || site == "none";
    }
    let (Some(origin), Some(host)) = (value(header::ORIGIN.as_str()), value(header::HOST.as_str())) else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(scheme, authority)| matches!(scheme, "http" | "https") && authority == host)
}

fn now_s() -> i64 {
    failwell_engine::now_ms() / 1000
}

fn disabled() -> Response {
    Problem::new(ProblemType::AdminDisabled, "The dashboard is off: set [admin] token.").into_response()
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

fn login_form(error: Option<&str>) -> Html<String> {
    page(
        "Sign in",
        html! {
            @if let Some(error) = error { p.error { (error) } }
            form method="post" action="/ui/login" {
                label { "Admin token " input type="password" name="token" autocomplete="current-password" autofocus; }
                " " button type="submit" { "Sign in" }
            }
        },
    )
}

async fn login_page(State(state): State<Arc<AppState>>) -> Response {
    if state.admin.token.is_none() {
        return disabled();
    }
    login_form(None).into_response()
}

/// The sign-in form's body.
#[derive(Deserialize)]
struct Login {
    token: String,
}

async fn login(
    State(state): State<Arc<AppState>>,
    form: Result<Form<Login>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(token) = &state.admin.token else { return disabled() };
    match form {
        Ok(Form(login)) if token.matches(login.token.trim()) => {
            let cookie = format!(
                "{COOKIE}={}; Path=/ui; Max-Age={SESSION_S}; HttpOnly; SameSite=Strict",
                token.session(now_s())
            );
            ([(header::SET_COOKIE, cookie)], Redirect::to("/ui")).into_response()
        }
        _ => (StatusCode::UNAUTHORIZED, login_form(Some("That is not the admin token."))).into_response(),
    }
}

/// Ends the session: the browser forgets the cookie.
async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

/// What the dashboard says after an action sent the browser back to it
/// (`/ui?notice=…`; only these fixed texts are ever shown).
#[derive(Deserialize)]
struct Notice {
    notice: Option<String>,
}

impl Notice {
    fn text(&self) -> Option<&'static str> {
        Some(match self.notice.as_deref()? {
            "replayed" => "Replayed: the entry is due now, with the same idempotency key.",
            "purged" => "Purged.",
            "acknowledged" => "Acknowledged: dead letters since the last look start from zero.",
            "gone" => "Nothing was done: that entry is not a dead letter (any more).",
            _ => return None,
        })
    }
}

async fn dashboard(
    State(state): State<Arc<AppState>>,
    Query(notice): Query<Notice>,
) -> Result<Response, Problem> {
    let stats = ops::stats(&state.store, &state.providers, state.admin.stats_window).await?;
    let letters = state.store.dead_letters(DeadLetterFilter::default(), 100).await?;
    let reports = state.store.reports(20).await?;
    let breaker = |name: &str| {
        state
            .providers
            .get(name)
            .and_then(|c| c.guards().breaker.as_ref().map(|b| b.state().as_str()))
            .unwrap_or("none")
    };
    let body = html! {
        @if let Some(text) = notice.text() { p.notice id="notice" { (text) } }
        h2 { "Integrations" }
        p { "Success rate and p95 over the last " (ops::human_ms(stats.window_ms as i64)) "." }
        div.cards {
            @for i in &stats.integrations {
                div.card id={ "integration-" (i.integration) } {
                    h3 { (i.integration) }
                    dl {
                        dt { "breaker" } dd class={ "state-" (breaker(&i.integration)) } { (breaker(&i.integration)) }
                        dt { "success rate" } dd { (ops::ratio(i)) }
                        dt { "p95 latency" } dd { (i.p95_ms.map_or_else(|| "-".into(), |ms| ops::human_ms(ms as i64))) }
                        dt { "open entries" } dd { (i.depth) }
                        dt { "oldest open" } dd { (i.oldest_open_age_ms.map_or_else(|| "-".into(), ops::human_ms)) }
                        dt { "unknown" } dd class=[(i.unknown > 0).then_some("warn")] { (i.unknown) }
                        dt { "needs a human" } dd class=[(i.needs_human > 0).then_some("warn")] { (i.needs_human) }
                        dt { "dead letters since last look" } dd class=[(i.dead_letters_unacked > 0).then_some("warn")] {
                            (i.dead_letters_unacked) " of " (i.dead_letters)
                        }
                    }
                }
            }
        }
        h2 { "Dead letters" }
        @if letters.is_empty() {
            p id="no-dead-letters" { "No dead letters." }
        } @else {
            form.inline method="post" action="/ui/dead-letters/ack" {
                button id="ack" type="submit" { "I have looked at these (acknowledge)" }
            }
            table id="dead-letters" {
                tr { th { "kind" } th { "integration" } th { "key" } th { "attempts" } th { "given up" } th { "last error" } th {} }
                @for d in &letters {
                    tr id={ "dead-" (d.kind.as_str()) "-" (d.id) } {
                        td { (d.kind.as_str()) }
                        td { (d.integration) }
                        td {
                            @if d.kind == DeadLetterKind::Message {
                                a href={ "/ui/operations/" (encode(&d.key)) } { (d.key) }
                            } @else { (d.key) }
                        }
                        td { (d.attempts) }
                        td { (rfc3339(d.dead_at_ms)) }
                        td { (d.last_error.as_deref().unwrap_or("-")) }
                        td {
                            form.inline method="post" action={ "/ui/dead-letters/" (d.kind.as_str()) "/" (d.id) "/replay" } {
                                button.replay type="submit" { "Replay" }
                            }
                            " "
                            form.inline method="post" action={ "/ui/dead-letters/" (d.kind.as_str()) "/" (d.id) "/purge" } {
                                button.purge type="submit" { "Purge" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Comparison reports" }
        @if reports.is_empty() {
            p { "No comparison has run yet (" code { "failwell reconcile run" } ")." }
        } @else {
            table id="reports" {
                tr { th { "report" } th { "provider" } th { "window" } th { "ours" } th { "theirs" } th { "discrepancies" } th { "alert" } }
                @for r in &reports {
                    tr {
                        td { a href={ "/ui/reports/" (r.id) } { "#" (r.id) } }
                        td { (r.provider) }
                        td { (rfc3339(r.window_from_ms)) " – " (rfc3339(r.window_to_ms)) }
                        td { (r.ours) } td { (r.theirs) }
                        td class=[(r.discrepancies > 0).then_some("warn")] { (r.discrepancies) }
                        td { (alert_state(r)) }
                    }
                }
            }
        }
    };
    Ok(page("Dashboard", body).into_response())
}

/// What became of a report's alert: when the sink took it, or that it is
/// queued (with the last error, if a send failed), or `-` (none needed).
fn alert_state(r: &failwell_store::Report) -> String {
    match r.alert_state() {
        AlertState::Queued { last_error: Some(error) } => format!("queued, last send failed: {error}"),
        AlertState::Queued { last_error: None } => "queued".into(),
        AlertState::Sent { at_ms } => rfc3339(at_ms),
        AlertState::GivenUp { error } => error.to_owned(),
        AlertState::None => "-".into(),
    }
}

fn encode(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn report(State(state): State<Arc<AppState>>, ApiPath(id): ApiPath<i64>) -> Result<Response, Problem> {
    let Some(r) = state.store.report(id).await? else {
        return Err(Problem::new(ProblemType::ReportNotFound, format!("No report {id}.")));
    };
    Ok(page(&format!("Report {id}"), html! { pre id="report-text" { (r.text) } }).into_response())
}

async fn operation(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
) -> Result<Response, Problem> {
    let Some((op, history)) = ops::timeline(&state.store, &key).await? else {
        return Err(Problem::new(ProblemType::OperationNotFound, "No operation has this idempotency key."));
    };
    let open = matches!(op.status, OperationStatus::Unknown | OperationStatus::NeedsHuman);
    let body = html! {
        pre id="timeline" { (ops::timeline_text(&op, &history)) }
        @if open {
            h3 { "Resolve by hand" }
            p { "After checking with the provider: what happened? The note is kept in the history." }
            form method="post" action={ "/ui/operations/" (encode(&key)) "/resolve" } {
                label { "Note " input type="text" name="note" required size="50"; }
                " "
                label { "Provider id " input type="text" name="provider_ref" size="24"; }
                " "
                button name="status" value="succeeded" type="submit" { "It succeeded" }
                " "
                button name="status" value="failed" type="submit" { "It failed" }
            }
        }
    };
    Ok(page(&format!("Operation {key}"), body).into_response())
}

async fn replay(
    State(state): State<Arc<AppState>>,
    ApiPath((k, id)): ApiPath<(String, i64)>,
) -> Result<Response, Problem> {
    let dead_kind = super::admin::kind(&k)?;
    match crate::ops::replay(&state.store, dead_kind, id, Channel::Ui).await {
        Ok(()) => super::admin::wake(&state, dead_kind),
        Err(OpsError::NotADeadLetter { .. }) => return Ok(Redirect::to("/ui?notice=gone").into_response()),
        Err(e) => return Err(e.into()),
    }
    Ok(Redirect::to("/ui?notice=replayed").into_response())
}

async fn purge(
    State(state): State<Arc<AppState>>,
    ApiPath((k, id)): ApiPath<(String, i64)>,
) -> Result<Response, Problem> {
    match crate::ops::purge(&state.store, super::admin::kind(&k)?, id, Channel::Ui).await {
        Ok(()) => Ok(Redirect::to("/ui?notice=purged").into_response()),
        Err(OpsError::NotADeadLetter { .. }) => Ok(Redirect::to("/ui?notice=gone").into_response()),
        Err(e) => Err(e.into()),
    }
}

/// The "resolve by hand" form.
#[derive(Deserialize)]
struct ResolveForm {
    status: String,
    note: String,
    provider_ref: Option<String>,
}

async fn resolve(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
    form: Result<Form<ResolveForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, Problem> {
    let Form(form) = form.map_err(|e| {
        Problem::with_status(ProblemType::InvalidBody, StatusCode::BAD_REQUEST, e.body_text())
    })?;
    let provider_ref = form.provider_ref.filter(|r| !r.trim().is_empty());
    super::admin::settle(&state, &key, &form.status, provider_ref, form.note, Channel::Ui).await?;
    Ok(Redirect::to(&format!("/ui/operations/{}", encode(&key))).into_response())
}

async fn ack(State(state): State<Arc<AppState>>) -> Result<Response, Problem> {
    crate::ops::acknowledge(&state.store, Channel::Ui).await?;
    Ok(Redirect::to("/ui?notice=acknowledged").into_response())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn only_posts_from_this_origin_pass() {
        let same = super::same_origin;
        assert!(same(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(same(&headers(&[("sec-fetch-site", "none")])));
        for site in ["same-site", "cross-site"] {
            // Fetch metadata wins over an Origin that would match.
            let h = headers(&[("sec-fetch-site", site), ("origin", "http://a:1"), ("host", "a:1")]);
            assert!(!same(&h), "{site}");
        }
        assert!(same(&headers(&[("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:8080")])));
        assert!(same(&headers(&[("origin", "https://ops.example"), ("host", "ops.example")])));
        for origin in ["http://127.0.0.1:8081", "null", "http://127.0.0.1", "ftp://127.0.0.1:8080"] {
            assert!(!same(&headers(&[("origin", origin), ("host", "127.0.0.1:8080")])), "{origin}");
        }
        assert!(!same(&headers(&[("host", "127.0.0.1:8080")])), "neither header");
        assert!(!same(&headers(&[("origin", "http://127.0.0.1:8080")])), "no Host");
    }
}
