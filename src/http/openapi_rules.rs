//! Input rules of `crate::domain::validate` that the derive attributes cannot state, written
//! into the generated document: a body that takes exactly one of two fields, the pattern of
//! every campaign id and lock name in a path and of every `Idempotency-Key`, and the rules of
//! each code in a list. With them the document is as strict as the server (schemathesis sends
//! schema-valid requests and checks they are not refused, `scripts/schemathesis.sh`). One
//! answer shape is corrected too: a `#[serde(flatten)]` optional group of fields (the campaign
//! view's holds) comes out of the derive as "this object *or null*", which no answer is.

use serde_json::{json, Value};

/// `[A-Za-z0-9_-]`, 1–64 characters: campaign ids and lock names.
pub const ID_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";
/// No control character (Unicode Cc), as `validate::printable` checks.
pub const PRINTABLE_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";
/// Visible ASCII, no leading or trailing space (HTTP trims those), 1–255 characters.
const IDEMPOTENCY_KEY_PATTERN: &str = "^[\\x21-\\x7E]([\\x20-\\x7E]{0,253}[\\x21-\\x7E])?$";

/// Applies the rules to the serialised document.
pub fn apply(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    fold_optional_flatten(schemas, "CampaignView", "HoldsView");
    exactly_one_of(&mut schemas["NewCampaignBody"], "stock", "integer", "codes");
    exactly_one_of(&mut schemas["RestockBody"], "units", "integer", "codes");
    for body in ["NewCampaignBody", "RestockBody"] {
        schemas[body]["properties"]["codes"]["items"] = json!({
            "type": "string", "minLength": 1, "maxLength": 128, "pattern": PRINTABLE_PATTERN,
        });
        schemas[body]["properties"]["codes"]["uniqueItems"] = json!(true);
    }
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for op in item.values_mut() {
            // `get_mut`, not indexing: indexing a missing key would insert a null.
            let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
                continue;
            };
            for p in params {
                let named = |n: &str| p["name"] == n;
                let pattern = if named("Idempotency-Key") {
                    IDEMPOTENCY_KEY_PATTERN
                } else if p["in"] == "path"
                    && ((named("id") && path.starts_with("/v1/campaigns/")) || named("name"))
                {
                    ID_PATTERN
                } else {
                    continue;
                };
                p["schema"]["pattern"] = json!(pattern);
            }
        }
    }
}

/// `schema` takes exactly one of `a` (of type `a_type`) and `b` (an array).
fn exactly_one_of(schema: &mut Value, a: &str, a_type: &str, b: &str) {
    schema["oneOf"] = json!([
        {"required": [a], "properties": {a: {"type": a_type}, b: {"type": "null"}}},
        {"required": [b], "properties": {b: {"type": "array"}, a: {"type": "null"}}},
    ]);
}

/// `schema` derived as `allOf: [{oneOf: [{$ref: inner}, {type: null}]}, {object}]` (a flattened
/// `Option<inner>`) becomes the object with `inner`'s properties added as optional ones: the
/// answer carries all of them or none, never a null.
fn fold_optional_flatten(schemas: &mut Value, schema: &str, inner: &str) {
    let Some(parts) = schemas[schema]["allOf"].as_array().cloned() else {
        return;
    };
    let inner_ref = format!("#/components/schemas/{inner}");
    let is_inner = |v: &Value| {
        v["oneOf"]
            .as_array()
            .is_some_and(|o| o.iter().any(|x| x["$ref"] == inner_ref.as_str()))
    };
    let Some(mut object) = parts.iter().find(|p| !is_inner(p)).cloned() else {
        return;
    };
    let added = schemas[inner]["properties"].clone();
    if let (Some(props), Some(added)) = (object["properties"].as_object_mut(), added.as_object()) {
        for (k, v) in added {
            props.insert(k.clone(), v.clone());
        }
    }
    if let Some(d) = schemas[schema].get("description").cloned() {
        object["description"] = d;
    }
    schemas[schema] = object;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_add_constraints_and_nothing_else() {
        let mut doc =
            serde_json::to_value(<crate::http::openapi::ApiDoc as utoipa::OpenApi>::openapi())
                .unwrap();
        let before = doc.clone();
        apply(&mut doc);
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let had = before["paths"][path][method].get("parameters").is_some();
                assert_eq!(op.get("parameters").is_some(), had, "{method} {path}");
            }
        }
        let claim = &doc["paths"]["/v1/campaigns/{id}/claims"]["post"]["parameters"];
        assert_eq!(claim[0]["schema"]["pattern"], ID_PATTERN);
        assert_eq!(claim[1]["schema"]["pattern"], IDEMPOTENCY_KEY_PATTERN);
        let body = &doc["components"]["schemas"]["NewCampaignBody"];
        assert_eq!(body["oneOf"].as_array().unwrap().len(), 2);
        assert_eq!(body["properties"]["codes"]["uniqueItems"], true);
        // The campaign view: one object, the holds' fields optional, no null alternative.
        let view = &doc["components"]["schemas"]["CampaignView"];
        assert!(view.get("allOf").is_none(), "{view}");
        assert_eq!(view["type"], "object");
        for f in ["hold_seconds", "pending", "remaining"] {
            assert!(view["properties"][f].is_object(), "{f}: {view}");
        }
        let required = view["required"].as_array().unwrap();
        assert!(!required
            .iter()
            .any(|r| r == "pending" || r == "hold_seconds"));
    }
}
