//! The OpenAPI 3.1 document of the HTTP API, generated from the handlers'
//! own annotations and the types they answer with (utoipa), served at
//! `GET /openapi.json` and committed as `docs/openapi.json` (a test holds
//! the two equal). Every error response is `application/problem+json`
//! ([`Problem`]), its `type` one of [`ProblemType`].

use axum::Json;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder, Schema};
use utoipa::{OpenApi, PartialSchema, ToSchema};

use super::problem::{Problem, ProblemType};

/// The document's root: every path, schema and shared response.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "failwell",
        description = "Deliver operations to unreliable providers exactly once, take their webhooks in once, and answer for every outcome.",
        license(name = "Apache-2.0")
    ),
    paths(
        super::operations::submit,
        super::operations::show,
        super::ledger::accounts::open,
        super::ledger::accounts::list,
        super::ledger::accounts::show,
        super::ledger::transfers::create,
        super::ledger::transfers::batch,
        super::ledger::transfers::show,
        super::ledger::transfers::post,
        super::ledger::transfers::void,
        super::providers::providers,
        super::metrics::prometheus,
        super::health::health,
        super::events::feed,
        super::events::event,
        super::webhooks::receive,
        super::read::read,
        super::admin::status,
        super::admin::list,
        super::admin::show,
        super::admin::replay,
        super::admin::purge,
        super::admin::ack,
        super::admin::reconcile,
        super::admin::history,
        super::admin::resolve,
        super::admin::reports,
        super::admin::report,
        openapi_json,
    ),
    components(schemas(ProblemBody), responses(Problem)),
    modifiers(&AdminToken),
    tags(
        (name = "operations", description = "Record intents and follow them to their outcome"),
        (name = "ledger", description = "Balances that never overdraw: accounts, transfers and holds"),
        (name = "reads", description = "Reads answered at once by the provider"),
        (name = "events", description = "The webhook inbox"),
        (name = "providers", description = "The guards around each provider"),
        (name = "health", description = "Health, metrics and this document"),
        (name = "admin", description = "Operator actions (bearer token of [admin])")
    )
)]
pub struct ApiDoc;

/// The admin API's bearer token, as a security scheme.
struct AdminToken;

impl utoipa::Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document, as served and committed.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "health",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object)))]
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}

/// The body of every error: an RFC 9457 problem detail.
pub(crate) struct ProblemBody;

impl PartialSchema for ProblemBody {
    fn schema() -> RefOr<Schema> {
        let types: Vec<String> = ProblemType::ALL.iter().map(|t| t.uri()).collect();
        ObjectBuilder::new()
            .description(Some("An RFC 9457 problem detail; docs/PROBLEMS.md says what each type means."))
            .property("type", ObjectBuilder::new().schema_type(Type::String).enum_values(Some(types)))
            .required("type")
            .property("title", ObjectBuilder::new().schema_type(Type::String))
            .required("title")
            .property(
                "status",
                ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(400)).maximum(Some(599)),
            )
            .required("status")
            .property("detail", ObjectBuilder::new().schema_type(Type::String))
            .required("detail")
            .into()
    }
}

impl ToSchema for ProblemBody {
    fn name() -> std::borrow::Cow<'static, str> {
        "Problem".into()
    }
}

impl<'s> utoipa::ToResponse<'s> for Problem {
    fn response() -> (&'s str, RefOr<utoipa::openapi::Response>) {
        let content =
            ContentBuilder::new().schema(Some(utoipa::openapi::Ref::from_schema_name("Problem"))).build();
        (
            "Problem",
            ResponseBuilder::new()
                .description("A problem detail (RFC 9457): nothing was written")
                .content("application/problem+json", content)
                .into(),
        )
    }
}
