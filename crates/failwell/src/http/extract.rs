//! Extractors whose rejections are problem details: a JSON body
//! ([`ApiJson`]) and path parameters ([`ApiPath`]).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path};
use axum::http::header;

use super::problem::{Problem, ProblemType};

/// A JSON body whose rejections are problem details.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .is_some_and(|v| {
                v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
            });
        if !json {
            return Err(Problem::new(
                ProblemType::UnsupportedMediaType,
                "Expected request with `Content-Type: application/json`.",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state).await?;
        // serde reads a struct from an array too; every body here is an
        // object. A body that is not JSON at all (`hello`) is malformed.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|&b| b != b'{') {
            return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                Ok(_) => Problem::new(ProblemType::InvalidBody, "The body must be a JSON object."),
                Err(e) => Problem::new(ProblemType::MalformedJson, format!("The body is not JSON: {e}.")),
            });
        }
        match Json::<T>::from_bytes(&bytes) {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => {
                let kind = match &rejection {
                    JsonRejection::JsonSyntaxError(_) => ProblemType::MalformedJson,
                    _ => ProblemType::InvalidBody,
                };
                Err(Problem::with_status(kind, rejection.status(), rejection.body_text()))
            }
        }
    }
}

/// Path parameters whose rejections (e.g. `abc` for an id) are problem
/// details (`invalid-path`, 400).
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequestParts<S>
    for ApiPath<T>
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Problem> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Self(v)),
            Err(e) => Err(Problem::new(ProblemType::InvalidPath, e.body_text())),
        }
    }
}
