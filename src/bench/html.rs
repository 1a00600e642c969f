//! `seckill bench --html FILE`: the report as one self-contained HTML page (inline SVG and
//! CSS, no script, no outside request), so a user can attach a single file to a ticket: the
//! latency percentile curve (HDR plot, corrected and uncorrected), throughput over time, the
//! outcome split and the verification result, beside the text report's figures.

use std::fmt::Write as _;

use super::report::{BenchReport, Percentile};
use super::timeline::Sample;

/// Plot area of every chart, in SVG user units.
const W: f64 = 720.0;
const H: f64 = 260.0;
/// Margins: left (axis labels), top, right, bottom.
const ML: f64 = 64.0;
const MT: f64 = 16.0;
const MR: f64 = 36.0;
const MB: f64 = 40.0;

/// Text with `&`, `<`, `>` and quotes escaped for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" upper bound for an axis holding values up to `max`.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= max {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

/// An SVG chart frame with y ticks (0 … `y_max`, 5 steps) and the given x ticks
/// (position 0…1, label); returns the SVG up to (not including) its series and `</svg>`.
fn frame(
    title: &str,
    y_label: &str,
    y_max: f64,
    x_ticks: &[(f64, String)],
    x_label: &str,
) -> String {
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let mut s = format!(
        "<figure><figcaption>{}</figcaption><svg viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let y = MT + ph - ph * i as f64 / 5.0;
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{ML}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"tick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            ML + pw,
            ML - 6.0,
            y + 4.0,
            fmt_num(v)
        );
    }
    for (pos, label) in x_ticks {
        let x = ML + pw * pos;
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MT}\" y2=\"{}\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            MT + ph,
            MT + ph + 16.0,
            esc(label)
        );
    }
    let _ = write!(
        s,
        "<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text class=\"axis\" x=\"14\" y=\"{}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 14 {})\">{}</text>",
        ML + pw / 2.0,
        H - 4.0,
        esc(x_label),
        MT + ph / 2.0,
        MT + ph / 2.0,
        esc(y_label)
    );
    s
}

/// A polyline of points (x 0…1, y 0…y_max) in the plot area.
fn series(points: &[(f64, f64)], y_max: f64, class: &str) -> String {
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| {
            let px = ML + pw * x.clamp(0.0, 1.0);
            let py = MT + ph - ph * (y / y_max).clamp(0.0, 1.0);
            format!("{px:.1},{py:.1}")
        })
        .collect();
    format!("<polyline class=\"{class}\" points=\"{}\"/>", pts.join(" "))
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The HDR plot: x is the percentile in "nines" (log10 of 1 / (1 − q)), up to 99.999%.
fn latency_chart(curve: &[Percentile]) -> String {
    const NINES: f64 = 5.0;
    let nines = |p: f64| {
        let q = (p / 100.0).min(1.0 - 1e-5);
        (-(1.0 - q).log10() / NINES).clamp(0.0, 1.0)
    };
    let y_max = nice_max(
        curve
            .iter()
            .map(|p| p.corrected_ms.max(p.uncorrected_ms))
            .fold(0.0, f64::max),
    );
    let ticks: Vec<(f64, String)> = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64 / NINES, l.to_string()))
        .collect();
    let mut s = frame(
        "Latency by percentile (HDR)",
        "latency (ms)",
        y_max,
        &ticks,
        "percentile",
    );
    let pts = |f: fn(&Percentile) -> f64| -> Vec<(f64, f64)> {
        curve.iter().map(|p| (nines(p.percentile), f(p))).collect()
    };
    s += &series(&pts(|p| p.uncorrected_ms), y_max, "s2");
    s += &series(&pts(|p| p.corrected_ms), y_max, "s1");
    s += "</svg><p class=\"legend\"><span class=\"k1\"></span> corrected for coordinated \
          omission (or from scheduled send with <code>--rate</code>) \
          <span class=\"k2\"></span> as measured</p></figure>";
    s
}

/// Requests and wins per second between consecutive samples.
fn throughput_chart(timeline: &[Sample]) -> String {
    let t_end = timeline.last().map_or(1.0, |s| s.t_s).max(1e-3);
    let rates: Vec<(f64, f64, f64)> = timeline
        .windows(2)
        .filter(|w| w[1].t_s > w[0].t_s)
        .map(|w| {
            let dt = w[1].t_s - w[0].t_s;
            (
                w[1].t_s / t_end,
                (w[1].done - w[0].done) as f64 / dt,
                (w[1].won - w[0].won) as f64 / dt,
            )
        })
        .collect();
    let y_max = nice_max(rates.iter().map(|r| r.1.max(r.2)).fold(0.0, f64::max));
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| (i as f64 / 5.0, format!("{:.1}s", t_end * i as f64 / 5.0)))
        .collect();
    let mut s = frame(
        "Throughput over time",
        "per second",
        y_max,
        &ticks,
        "time since the storm started",
    );
    s += &series(
        &rates.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        y_max,
        "s1",
    );
    s += &series(
        &rates.iter().map(|r| (r.0, r.2)).collect::<Vec<_>>(),
        y_max,
        "s3",
    );
    s += "</svg><p class=\"legend\"><span class=\"k1\"></span> requests answered \
          <span class=\"k3\"></span> won</p></figure>";
    s
}

/// Horizontal bars: every outcome, every non-2xx status and the transport errors.
fn outcome_chart(r: &BenchReport) -> String {
    let mut rows: Vec<(String, u64)> = r.outcomes.iter().map(|(k, v)| (k.clone(), *v)).collect();
    rows.extend(r.non_2xx.iter().map(|(k, v)| (format!("HTTP {k}"), *v)));
    if r.transport_errors > 0 {
        rows.push(("no answer".into(), r.transport_errors));
    }
    let total: u64 = rows.iter().map(|r| r.1).sum::<u64>().max(1);
    let mut s = String::from("<figure><figcaption>Outcomes</figcaption><table class=\"bars\">");
    for (label, n) in rows {
        let pct = 100.0 * n as f64 / total as f64;
        let _ = write!(
            s,
            "<tr><th>{}</th><td class=\"n\">{n}</td><td class=\"n\">{pct:.1}%</td>\
             <td class=\"bar\"><div style=\"width:{pct:.2}%\"></div></td></tr>",
            esc(&label)
        );
    }
    s += "</table></figure>";
    s
}

fn verification(r: &BenchReport) -> String {
    let Some(v) = &r.verification else {
        return "<section class=\"verdict skip\"><h2>Verification skipped</h2>\
                <p>The run had <code>--no-verify</code>.</p></section>"
            .into();
    };
    let mut s = String::new();
    let _ = write!(
        s,
        "<section class=\"verdict {}\"><h2>{}</h2><p>{}.</p>",
        if v.violations.is_empty() {
            "ok"
        } else {
            "fail"
        },
        if v.violations.is_empty() {
            "OK: every invariant holds".to_owned()
        } else {
            format!("FAILED: {} violation(s)", v.violations.len())
        },
        esc(&v.ledger_summary()),
    );
    if !v.violations.is_empty() {
        s += "<ul>";
        for x in &v.violations {
            let _ = write!(
                s,
                "<li>[invariant {}] {:?}: {}{}</li>",
                x.invariant.number(),
                x.invariant,
                esc(&x.message),
                if x.orders.is_empty() {
                    String::new()
                } else {
                    format!(
                        " — orders {}",
                        esc(&x.orders[..x.orders.len().min(20)].join(", "))
                    )
                }
            );
        }
        s += "</ul>";
    }
    s += "</section>";
    s
}

fn summary(r: &BenchReport) -> String {
    let l = &r.latency_ms;
    let rows = [
        ("Target", format!("{} campaign {}", r.url, r.campaign)),
        ("Concurrency", r.plan.connections.to_string()),
        ("Duration", format!("{:.3} s", r.seconds)),
        ("Requests", r.requests.to_string()),
        (
            "Requests per second",
            format!(
                "{:.2} (claims processed: {:.2}/s)",
                r.requests_per_second, r.claims_per_second
            ),
        ),
        (
            "Latency (ms)",
            format!(
                "p50 {:.3} · p90 {:.3} · p99 {:.3} · p99.9 {:.3} · max {:.3} ({})",
                l.p50, l.p90, l.p99, l.p999, l.max, r.latency_mode
            ),
        ),
        (
            "Non-2xx · no answer · outcome unknown",
            format!(
                "{} · {} · {}",
                r.non_2xx.values().sum::<u64>(),
                r.transport_errors,
                r.unknown_outcomes
            ),
        ),
    ];
    let mut s = String::from("<table class=\"summary\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    s += "</table>";
    s
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:760px;\
color:#222}h1{font-size:20px}h2{font-size:16px;margin:0 0 6px}figure{margin:18px 0}\
figcaption{font-weight:600;margin-bottom:4px}svg{width:100%;height:auto;background:#fafafa}\
.grid{stroke:#ddd;stroke-width:1}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}\
polyline{fill:none;stroke-width:2}.s1{stroke:#1f77b4}.s2{stroke:#aaa;stroke-dasharray:4 3}\
.s3{stroke:#2ca02c}.legend span{display:inline-block;width:18px;height:3px;vertical-align:middle;\
margin:0 4px 0 12px}.k1{background:#1f77b4}.k2{background:#aaa}.k3{background:#2ca02c}\
table{border-collapse:collapse}.summary th{text-align:left;padding:2px 16px 2px 0;font-weight:500;\
color:#555}.bars{width:100%}.bars th{text-align:left;font-weight:500;padding-right:12px;\
white-space:nowrap}.bars .n{text-align:right;padding-right:12px}.bar{width:60%}.bar div{height:12px;\
background:#1f77b4}.verdict{padding:10px 14px;border-radius:4px;margin:18px 0}\
.ok{background:#e8f5e9}.fail{background:#ffebee}.skip{background:#eee}";

/// The whole page.
pub fn render(r: &BenchReport) -> String {
    let mut s = String::from("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = write!(
        s,
        "<title>seckill bench: {}</title><style>{STYLE}</style></head><body>\
         <h1>seckill bench: {}</h1>",
        esc(&r.plan.describe()),
        esc(&r.plan.describe())
    );
    s += &verification(r);
    s += &summary(r);
    s += &latency_chart(&r.latency_percentiles);
    s += &throughput_chart(&r.timeline);
    s += &outcome_chart(r);
    s += "</body></html>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_axes_are_round() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.3), 10.0);
        assert_eq!(nice_max(0.42), 0.5);
        assert_eq!(nice_max(1234.0), 2000.0);
    }
}
