//! Stop strings over streamed text.
//!
//! Text is released only once it can no longer be the start of a stop string, so a client
//! never sees part of a stop sequence that is cut later.

#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What pushing text produced.
#[derive(Debug, PartialEq, Eq)]
pub enum StopEvent {
    /// Text safe to release.
    Text(String),
    /// A stop string matched: the text before it, after which generation ends.
    Stopped(String),
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopEvent {
        self.held.push_str(text);
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let out = self.held[..at].to_string();
            self.held.clear();
            return StopEvent::Stopped(out);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopEvent::Text(out)
    }

    /// Releases whatever is held (generation ended for another reason).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`, on char
/// boundaries.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop.is_char_boundary(n)
                && text.ends_with(&stop[..n])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn holds_back_a_possible_prefix() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abc E"), StopEvent::Text("abc ".into()));
        assert_eq!(m.push("N"), StopEvent::Text(String::new()));
        assert_eq!(m.push("D tail"), StopEvent::Stopped("".into()));
    }

    #[test]
    fn releases_held_text_when_it_diverges() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("xE"), StopEvent::Text("x".into()));
        assert_eq!(m.push("x"), StopEvent::Text("Ex".into()));
        assert_eq!(m.finish(), "");
    }

    proptest! {
        #[test]
        fn streamed_output_equals_cutting_the_whole_text(
            pieces in proptest::collection::vec("[abé ]{0,3}", 0..12),
            stop in "[abé]{1,3}",
        ) {
            let whole: String = pieces.concat();
            let expect = match whole.find(&stop) { Some(i) => whole[..i].to_string(), None => whole.clone() };
            let mut m = StopMatcher::new(vec![stop]);
            let mut got = String::new();
            let mut stopped = false;
            for p in &pieces {
                match m.push(p) {
                    StopEvent::Text(t) => got.push_str(&t),
                    StopEvent::Stopped(t) => { got.push_str(&t); stopped = true; break; }
                }
            }
            if !stopped { got.push_str(&m.finish()); }
            prop_assert_eq!(got, expect);
        }
    }
}
