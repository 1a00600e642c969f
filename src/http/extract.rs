//! Extractors that turn every malformed input into a clear 4xx before a handler runs.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::AppState;
use crate::domain::IdempotencyKey;

/// A JSON body whose rejections use the API's error format.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A JSON extractor's rejection in the API's error format (413, 408 or 400 with the cause).
pub(super) fn json_rejection(r: JsonRejection) -> ApiError {
    if super::timed_body::is_timeout(&r) {
        return body_late();
    }
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return body_too_large();
    }
    let message = match &r {
        JsonRejection::MissingJsonContentType(_) => {
            "expected a body with content-type: application/json".to_owned()
        }
        JsonRejection::JsonSyntaxError(e) => format!("body is not valid JSON: {}", source(e)),
        JsonRejection::JsonDataError(e) => format!("body does not match the schema: {}", source(e)),
        other => other.body_text(),
    };
    ApiError::invalid(message)
}

/// 408: the body did not arrive within its deadline.
pub(super) fn body_late() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "the request body did not arrive in time; nothing was changed",
    )
}

/// 413: the body is over the route's limit.
pub(super) fn body_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body is larger than this route accepts",
    )
}

fn source(e: &dyn std::error::Error) -> String {
    let mut err: &dyn std::error::Error = e;
    while let Some(inner) = err.source() {
        err = inner;
    }
    err.to_string()
}

/// A path with the API's error format.
pub struct PathArg<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathArg<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathArg(p.0))
            .map_err(|r: PathRejection| ApiError::invalid(r.body_text()))
    }
}

/// A query string with the API's error format.
pub struct QueryArg<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryArg<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryArg(q.0))
            .map_err(|r: QueryRejection| {
                ApiError::invalid(format!("bad query string: {}", source(&r)))
            })
    }
}

/// Proof that the request carries a token whose scopes allow the route
/// (`super::auth::required`). An admin change (a route needing
/// `admin`) is logged with the token's name.
pub struct Caller;

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let route = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map_or("", |m| m.as_str());
        let need = super::auth::required(&parts.method, route);
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .map(|h| h.to_str().unwrap_or(""));
        let token = state.credentials.authorize(header, need)?;
        if need == super::auth::Scope::Admin {
            tracing::info!(token = %token.name, method = %parts.method, route, "admin change");
        }
        Ok(Caller)
    }
}

/// The optional `Idempotency-Key` header, validated.
pub struct IdemHeader(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for IdemHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdemHeader(None));
        };
        let key = value
            .to_str()
            .map_err(|_| ApiError::invalid("Idempotency-Key must be visible ASCII"))?;
        Ok(IdemHeader(Some(IdempotencyKey::new(key)?)))
    }
}
