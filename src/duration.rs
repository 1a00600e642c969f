//! Durations on the command line: one reading for every flag of every subcommand.
//!
//! A number and its unit (`250ms`, `1.5s`, `30s`, `2m`, `1h`, `7d`), or `0`. Any other bare number
//! is refused: `seckill lock` once read one as milliseconds and `seckill bench` as seconds, so
//! an operator who moved a value from one to the other was off by a thousand.

use std::time::Duration;

/// Parses `250ms`, `1.5s`, `30s`, `2m`, `1h`, `7d` or `0`.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("{s:?} needs a unit: 250ms, 30s, 2m or 1h"))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 250ms, 30s, 2m or 1h"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?} (ms, s, m, h, d)")),
    };
    if !secs.is_finite() || secs < 0.0 || num.starts_with(['+', '-']) {
        return Err(format!("{s:?} is not a duration like 250ms, 30s, 2m or 1h"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn a_duration_is_a_number_and_its_unit() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse(" 0s "), Ok(Duration::ZERO));
        assert_eq!(parse("0"), Ok(Duration::ZERO), "zero is zero in any unit");
        for bad in [
            "", "s", "250", "3", "-1s", "+1s", "10w", "ten", "1e400s", "NaNs",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
