//! Stop strings over streamed text.
//!
//! Text is released only once it can no longer be the start of a stop string, so a client
//! never sees part of a stop sequence that is cut later.

/// Matches stop strings with one Knuth-Morris-Pratt automaton each, over bytes: a push
/// costs time in proportion to the new text (times the number of stops), never to the
/// stops' lengths or to the text held back.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<Stop>,
    held: String,
    /// Where in `held` the earliest-starting complete match begins, while a stop that
    /// started before it may still complete (then that one wins).
    hit: Option<usize>,
}

#[derive(Clone, Debug)]
struct Stop {
    text: Vec<u8>,
    /// `fail[i]`: length of the longest proper prefix of `text[..=i]` that is also its
    /// suffix.
    fail: Vec<usize>,
    /// Length of the longest prefix of `text` the text so far ends with.
    state: usize,
}

impl Stop {
    fn new(text: String) -> Stop {
        let text = text.into_bytes();
        let mut fail = vec![0; text.len()];
        let mut k = 0;
        for i in 1..text.len() {
            while k > 0 && text[i] != text[k] {
                k = fail[k - 1];
            }
            if text[i] == text[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Stop {
            text,
            fail,
            state: 0,
        }
    }

    /// Advances over byte `b`; true when the whole stop string now ends the text.
    fn step(&mut self, b: u8) -> bool {
        let mut k = self.state;
        while k > 0 && self.text[k] != b {
            k = self.fail[k - 1];
        }
        if self.text[k] == b {
            k += 1;
        }
        if k == self.text.len() {
            // Go on matching: an overlapping later occurrence is still tracked.
            self.state = self.fail[k - 1];
            return true;
        }
        self.state = k;
        false
    }
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
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(Stop::new)
                .collect(),
            held: String::new(),
            hit: None,
        }
    }

    /// Appends newly decoded `text`: returns what can be released, holding back any tail that
    /// may still begin a stop string, or the text before the first stop string matched.
    pub fn push(&mut self, text: &str) -> StopEvent {
        let base = self.held.len();
        self.held.push_str(text);
        for (i, &b) in text.as_bytes().iter().enumerate() {
            let len = base + i + 1;
            for stop in &mut self.stops {
                if stop.step(b) {
                    let at = len - stop.text.len();
                    self.hit = Some(self.hit.map_or(at, |h| h.min(at)));
                }
            }
            // A match is final once no stop's partial match starts before it.
            if let Some(h) = self.hit {
                let earlier = self.stops.iter().any(|s| s.state > 0 && len - s.state < h);
                if !earlier {
                    let out = self.held[..h].to_string();
                    self.reset();
                    return StopEvent::Stopped(out);
                }
            }
        }
        // Each state is a proper prefix of its stop that ends the text; such a suffix of
        // valid UTF-8 starts on a char boundary, as does a match.
        let keep = self.stops.iter().map(|s| s.state).max().unwrap_or(0);
        let mut cut = self.held.len() - keep;
        if let Some(h) = self.hit {
            cut = cut.min(h);
        }
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        self.hit = self.hit.map(|h| h - cut);
        StopEvent::Text(out)
    }

    fn reset(&mut self) {
        self.held.clear();
        self.hit = None;
        for stop in &mut self.stops {
            stop.state = 0;
        }
    }

    /// Releases whatever is held (generation ended for another reason).
    pub fn finish(&mut self) -> String {
        // A complete match still waiting on an earlier partial one is the stop after all.
        let out = match self.hit {
            Some(h) => self.held[..h].to_string(),
            None => std::mem::take(&mut self.held),
        };
        self.reset();
        out
    }
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

    #[test]
    fn long_stop_strings_cost_time_in_proportion_to_the_new_text() {
        // Before: 16 stops of 2 MB made every token cost a scan of each stop.
        let stops: Vec<String> = (0..16)
            .map(|i| format!("{}{i}", "a".repeat(4096)))
            .collect();
        let mut m = StopMatcher::new(stops);
        let t = std::time::Instant::now();
        let mut released = 0;
        for _ in 0..20_000 {
            match m.push("a") {
                StopEvent::Text(t) => released += t.len(),
                StopEvent::Stopped(_) => panic!("no stop string matches"),
            }
        }
        // A run of `a`s may still start any stop: only what is longer than them is out.
        assert_eq!(released, 20_000 - 4096);
        assert_eq!(m.push("7"), StopEvent::Stopped(String::new()));
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
    }

    #[test]
    fn the_earliest_starting_stop_wins() {
        let mut m = StopMatcher::new(vec!["abcd".into(), "bc".into()]);
        assert_eq!(m.push("xab"), StopEvent::Text("x".into()));
        assert_eq!(m.push("cd"), StopEvent::Stopped(String::new()));
    }

    /// What a client receives when `pieces` are pushed in order and generation then ends.
    fn stream(mut m: StopMatcher, pieces: &[String]) -> String {
        let mut got = String::new();
        for p in pieces {
            match m.push(p) {
                StopEvent::Text(t) => got.push_str(&t),
                StopEvent::Stopped(t) => return got + &t,
            }
        }
        got + &m.finish()
    }

    proptest! {
        #[test]
        fn several_stops_stream_as_cutting_the_whole_text(
            pieces in proptest::collection::vec("[abé ]{0,3}", 0..12),
            stops in proptest::collection::vec("[abé]{1,4}", 1..4),
        ) {
            let whole: String = pieces.concat();
            let first = stops.iter().filter_map(|s| whole.find(s.as_str())).min();
            let expect = first.map_or(whole.clone(), |i| whole[..i].to_string());
            prop_assert_eq!(stream(StopMatcher::new(stops), &pieces), expect);
        }

        #[test]
        fn streamed_output_equals_cutting_the_whole_text(
            pieces in proptest::collection::vec("[abé ]{0,3}", 0..12),
            stop in "[abé]{1,3}",
        ) {
            let whole: String = pieces.concat();
            let expect = match whole.find(&stop) { Some(i) => whole[..i].to_string(), None => whole.clone() };
            prop_assert_eq!(stream(StopMatcher::new(vec![stop]), &pieces), expect);
        }
    }
}
