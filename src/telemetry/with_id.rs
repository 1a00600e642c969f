//! Every log line written while a request is served carries its `request_id`
//! (`crate::http::request_id`), so a buyer's quoted id finds the lines of that request.
//!
//! The id is read from the request's task-local at the moment a line is formatted, not kept
//! in a span: a span per request would cost every claim of a storm, while this costs only
//! the lines actually written. The wrapped format writes the line; the id is put in it as a
//! `request_id` field (JSON) or a `request_id=…` suffix (text).

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// A format that adds the current request's id to each line of `F`.
pub struct WithRequestId<F> {
    pub inner: F,
    pub json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(id) = crate::http::request_id::current_str() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&with_id(&line, &id, self.json))
    }
}

/// `line` with `id` in it.
fn with_id(line: &str, id: &str, json: bool) -> String {
    if json {
        if let Some(rest) = line.strip_prefix('{') {
            let quoted = serde_json::to_string(id).unwrap_or_default();
            return format!("{{\"request_id\":{quoted},{rest}");
        }
    }
    let (body, end) = match line.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (line, ""),
    };
    format!("{body} request_id={id}{end}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_id_goes_in_as_a_field_or_a_suffix() {
        let j = super::with_id("{\"level\":\"INFO\"}\n", "r\"1", true);
        let v: serde_json::Value = serde_json::from_str(j.trim()).unwrap();
        assert_eq!(v["request_id"], "r\"1");
        assert_eq!(v["level"], "INFO");
        assert_eq!(
            super::with_id("INFO a: b\n", "abc-1", false),
            "INFO a: b request_id=abc-1\n"
        );
    }
}
