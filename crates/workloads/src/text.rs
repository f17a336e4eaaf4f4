//! Small string helpers shared by the builders: byte-budget cuts that respect UTF-8 and prefer
//! natural boundaries, so a shortened document still reads as a document.

/// The default model has an 8192-token context; prompts stay near 1500 tokens (at ~4 bytes a
/// token) so that prompt + generation + template fit with room to spare.
pub(crate) const PROMPT_BUDGET: usize = 6000;

/// The largest char boundary of `s` at or below `n`.
pub(crate) fn floor_boundary(s: &str, n: usize) -> usize {
    if n >= s.len() {
        return s.len();
    }
    (0..=n).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// At most the first `n` bytes of `s`, cut on a char boundary.
pub(crate) fn head(s: &str, n: usize) -> &str {
    &s[..floor_boundary(s, n)]
}

/// At most the last `n` bytes of `s`, cut on a char boundary.
pub(crate) fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `s` cut to at most `max` bytes, at the last paragraph break, else line break, else sentence
/// end in the second half of the allowance; a hard cut only when none exists.
pub(crate) fn cut_to(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let window = head(s, max);
    let half = max / 2;
    let at = [("\n\n", 0), ("\n", 0), (". ", 1)]
        .iter()
        .find_map(|&(sep, keep)| window.rfind(sep).filter(|&i| i >= half).map(|i| i + keep))
        .unwrap_or(window.len());
    window[..at].trim_end()
}

/// Fraction of chars that are ASCII (1.0 for an empty string).
pub(crate) fn ascii_fraction(s: &str) -> f64 {
    let (mut all, mut ascii) = (0usize, 0usize);
    for c in s.chars() {
        all += 1;
        ascii += usize::from(c.is_ascii());
    }
    if all == 0 {
        1.0
    } else {
        ascii as f64 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_prefer_paragraphs_and_respect_utf8() {
        let s = "first paragraph here.\n\nsecond paragraph is longer than the rest";
        assert_eq!(cut_to(s, 40), "first paragraph here.");
        assert_eq!(cut_to(s, 1000), s);
        let u = "ééééé"; // two bytes each
        assert_eq!(head(u, 3), "é");
        assert_eq!(tail(u, 3), "é");
        assert_eq!(cut_to(u, 5), "éé");
        assert!((ascii_fraction("aé") - 0.5).abs() < 1e-9);
    }
}
