//! Reads a Prometheus text exposition back: the dashboard's data and the tests' checks.

use std::collections::BTreeMap;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of `text` (comments and malformed lines skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.trim().rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        None => (series, BTreeMap::new()),
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"` with `\"`, `\\` and `\n` escapes in values.
fn parse_labels(mut s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    while !s.is_empty() {
        let (key, rest) = s.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim_start_matches(',').to_owned(), value);
        s = rest[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

/// The value of one series, written as in the exposition: `name` or `name{k="v",…}` with the
/// labels in any order.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    let want = parse_line(&format!("{series} 0"))?;
    parse(text)
        .into_iter()
        .find(|s| s.name == want.name && s.labels == want.labels)
        .map(|s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_and_values() {
        let text = "# HELP x y\nx_total 3\ny{a=\"1\",b=\"q\\\"z\"} 2.5\nh_bucket{le=\"+Inf\"} 7\n";
        let s = parse(text);
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].labels["b"], "q\"z");
        assert_eq!(sample(text, "x_total"), Some(3.0));
        assert_eq!(sample(text, "y{b=\"q\\\"z\",a=\"1\"}"), Some(2.5));
        assert_eq!(sample(text, "h_bucket{le=\"+Inf\"}"), Some(7.0));
        assert_eq!(sample(text, "y"), None);
    }
}
