//! A small UTC `strftime` for templates that print today's date (Llama 3.x's
//! `strftime_now("%d %b %Y")`), without pulling in a date-time crate.

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01 (Howard Hinnant's
/// days-to-civil algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Formats `secs` since the Unix epoch (UTC). Supports %Y %y %m %d %e %H %M %S %b %B %a %A
/// %j %p %%; any other directive is copied through unchanged.
pub(crate) fn strftime(secs: u64, format: &str) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (year, month, day) = civil_from_days(days);
    let month_name = MONTHS[(month - 1) as usize];
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    let yday = days - jan1_days(year) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out += &year.to_string(),
            Some('y') => out += &format!("{:02}", year.rem_euclid(100)),
            Some('m') => out += &format!("{month:02}"),
            Some('d') => out += &format!("{day:02}"),
            Some('e') => out += &format!("{day:>2}"),
            Some('H') => out += &format!("{hour:02}"),
            Some('M') => out += &format!("{minute:02}"),
            Some('S') => out += &format!("{second:02}"),
            Some('b') => out += &month_name[..3],
            Some('B') => out += month_name,
            Some('a') => out += &weekday[..3],
            Some('A') => out += weekday,
            Some('j') => out += &format!("{yday:03}"),
            Some('p') => out += if hour < 12 { "AM" } else { "PM" },
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days from 1970-01-01 to January 1st of `year`.
fn jan1_days(year: i64) -> i64 {
    let y = year - 1;
    let leaps = |y: i64| y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400);
    365 * (year - 1970) + leaps(y) - leaps(1969)
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn formats_known_instants() {
        assert_eq!(
            strftime(0, "%Y-%m-%d %H:%M:%S %a %j"),
            "1970-01-01 00:00:00 Thu 001"
        );
        // 2024-07-26 13:25:09 UTC, a Friday, day 208 of a leap year.
        assert_eq!(
            strftime(1_722_000_309, "%d %b %Y, %A %B %e %y %p %j %% %Q"),
            "26 Jul 2024, Friday July 26 24 PM 208 % %Q"
        );
        assert_eq!(strftime(951_782_400, "%Y-%m-%d"), "2000-02-29");
        assert_eq!(strftime(0, "trailing %"), "trailing %");
    }
}
