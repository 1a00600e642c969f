//! Every refusal leaves as `{"error": {"code", "message"}}` with the status the contract gives.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::domain::Error;

/// Set on a 503 whose request may have taken effect (the ledger failed mid-commit); clients
/// and the bench count it like a lost answer.
pub const OUTCOME: HeaderName = HeaderName::from_static("seckill-outcome");

/// An API error: status, stable code, human message.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Extra headers; they replace the defaults (e.g. a computed `Retry-After`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The request may have taken effect: the body says `"outcome": "unknown"` and the
    /// `Seckill-Outcome: unknown` header is set.
    pub outcome_unknown: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
            outcome_unknown: false,
        }
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// 503 `overloaded`: refused before processing to protect the service.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = match &e {
            Error::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Error::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Error::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Error::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Error::Overloaded(_) => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            Error::Unavailable(_) | Error::OutcomeUnknown(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "internal")
            }
        };
        let mut err = Self::new(status, code, e.to_string());
        err.outcome_unknown = matches!(e, Error::OutcomeUnknown(_));
        err
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": {"code": self.code, "message": self.message}});
        if self.outcome_unknown {
            body["error"]["outcome"] = json!("unknown");
        }
        let mut resp = (self.status, Json(body)).into_response();
        if self.outcome_unknown {
            resp.headers_mut()
                .insert(OUTCOME, HeaderValue::from_static("unknown"));
        }
        if matches!(
            self.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        for (name, value) in self.headers {
            resp.headers_mut().insert(name, value);
        }
        resp
    }
}
