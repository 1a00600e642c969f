//! Every refusal leaves as `{"error": {"code", "message"}}` with the status the contract gives.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

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
            Error::Gone(_) => (StatusCode::GONE, "cursor_expired"),
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

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"error": {"code": "invalid_request", "message": "qty must be between 1 and 1000000, got 0"}}))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case word.
    #[schema(value_type = ErrorCode)]
    pub code: &'static str,
    /// What is wrong, for a human.
    pub message: String,
    /// `unknown`: the request may have taken effect (503 only); retry with the same
    /// Idempotency-Key to learn its outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable = false, pattern = "^unknown$")]
    pub outcome: Option<&'static str>,
    /// The request's id (its `X-Request-Id`, given or generated): quote it to find the
    /// request's log lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub request_id: Option<String>,
}

/// The `code` of an error answer (the schema of [`ErrorDetail::code`]; [`ApiError`] carries
/// the word itself).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // a schema: the variants are built only by the test of `ALL`
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    Forbidden,
    NotAdmitted,
    NotFound,
    Conflict,
    CursorExpired,
    PayloadTooLarge,
    RequestTimeout,
    RateLimited,
    Overloaded,
    Internal,
}

impl ErrorCode {
    pub const ALL: [&'static str; 12] = [
        "invalid_request",
        "unauthorized",
        "forbidden",
        "not_admitted",
        "not_found",
        "conflict",
        "cursor_expired",
        "payload_too_large",
        "request_timeout",
        "rate_limited",
        "overloaded",
        "internal",
    ];
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        debug_assert!(ErrorCode::ALL.contains(&self.code), "{}", self.code);
        // A refusal (`overloaded`) is the service doing its job and is only summarised
        // (`refusals.rs`); a part unavailable (nothing changed) is logged at most once a
        // second; any other server error — the engine or ledger failing, an outcome unknown —
        // is logged, each one.
        if self.status == StatusCode::SERVICE_UNAVAILABLE
            && self.code != "overloaded"
            && !self.outcome_unknown
        {
            super::refusals::unavailable(self.code, &self.message);
        } else if self.status.is_server_error() && self.code != "overloaded" {
            tracing::error!(
                status = self.status.as_u16(),
                code = self.code,
                outcome_unknown = self.outcome_unknown,
                message = %self.message,
                "answered a server error"
            );
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                outcome: self.outcome_unknown.then_some("unknown"),
                request_id: super::request_id::current_str(),
            },
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_documented_and_serialises_as_listed() {
        for (i, v) in [
            ErrorCode::InvalidRequest,
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::NotAdmitted,
            ErrorCode::NotFound,
            ErrorCode::Conflict,
            ErrorCode::CursorExpired,
            ErrorCode::PayloadTooLarge,
            ErrorCode::RequestTimeout,
            ErrorCode::RateLimited,
            ErrorCode::Overloaded,
            ErrorCode::Internal,
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(serde_json::to_value(v).unwrap(), ErrorCode::ALL[i]);
        }
        let errors = [
            Error::Invalid(String::new()),
            Error::Unauthorized(String::new()),
            Error::NotFound(String::new()),
            Error::Conflict(String::new()),
            Error::Gone(String::new()),
            Error::Overloaded(String::new()),
            Error::Unavailable(String::new()),
            Error::OutcomeUnknown(String::new()),
        ];
        for e in errors {
            assert!(ErrorCode::ALL.contains(&ApiError::from(e).code));
        }
    }
}
