//! The 429 answer as the OpenAPI document states it, shared by the claim route's
//! `#[utoipa::path]` (`claim.rs`) and the document's components (`openapi.rs`).

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

/// The answers a 429 carries: `Retry-After` and the `RateLimit-*` headers of the limit that
/// refused (`RateLimit-Limit` and `RateLimit-Policy` when the limit has a rate).
pub fn rate_limited_response() -> utoipa::openapi::Response {
    let string = || utoipa::openapi::schema::Type::String;
    let int = || utoipa::openapi::schema::Type::Integer;
    let h = |ty: utoipa::openapi::schema::Type, d: &str| {
        HeaderBuilder::new()
            .schema(Some(utoipa::openapi::ObjectBuilder::new().schema_type(ty)))
            .description(Some(d))
            .build()
    };
    ResponseBuilder::new()
        .description("Refused by a rate limit before it was processed; nothing changed.")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .header("Retry-After", h(int(), "Seconds until a claim is allowed."))
        .header("RateLimit-Remaining", h(int(), "Always 0 on a refusal."))
        .header(
            "RateLimit-Reset",
            h(int(), "Seconds until the limit is fully reset."),
        )
        .header(
            "RateLimit-Limit",
            h(int(), "Claims per window of the refusing limit."),
        )
        .header(
            "RateLimit-Policy",
            h(
                string(),
                "`N;w=SECONDS;burst=B;comment=\"LABEL\"` of the refusing limit.",
            ),
        )
        .build()
}

/// A 429 as `#[utoipa::path(responses(...))]` takes it.
pub struct RateLimited;

impl utoipa::IntoResponses for RateLimited {
    fn responses() -> std::collections::BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        [("429".to_owned(), rate_limited_response().into())].into()
    }
}
