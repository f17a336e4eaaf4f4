//! What a run did (the summary) and how it shows while running: a progress bar on a
//! terminal, a plain line every few seconds otherwise (logs of a pod or a CI job).

use std::time::{Duration, Instant};

use crate::progress::ProgressBar;

/// Counts of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Records this run set out to generate (its shard, less those already done).
    pub total: usize,
    /// Records generated and written.
    pub done: usize,
    /// Records skipped because the output already had them (`--resume`).
    pub already_done: usize,
    /// Records of other shards.
    pub other_shards: usize,
    /// Records the engine refused or failed on.
    pub failed: usize,
    /// Input lines that are not valid records.
    pub malformed: usize,
    /// Records never admitted because a stop was asked.
    pub not_started: usize,
    /// Whether records were left unstarted: a stop was asked (Ctrl-C, SIGTERM) while some
    /// still waited (see `not_started`).
    pub interrupted: bool,
    /// Pool saves that failed.
    pub save_failures: usize,
    /// Tokens generated, over the records done.
    pub completion_tokens: usize,
    /// Decode forwards (what mean accepted length divides by).
    pub decode_steps: usize,
    /// Tokens kept only because of a relaxed rule.
    pub relaxed_tokens: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Summary {
    /// Whether every record of the input was generated or already there, and the pools
    /// were saved (an interrupted run that did so counts: it resumes).
    pub fn succeeded(&self) -> bool {
        self.failed == 0 && self.malformed == 0 && self.save_failures == 0
    }

    /// Generated tokens per second of wall time.
    pub fn tokens_per_second(&self) -> f64 {
        self.completion_tokens as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Tokens per decode forward, bonus included.
    pub fn mean_accepted_length(&self) -> f64 {
        self.completion_tokens as f64 / self.decode_steps.max(1) as f64
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records done, {} skipped as already done, {} failed, {} malformed lines",
            self.done, self.already_done, self.failed, self.malformed
        )?;
        if self.other_shards > 0 {
            write!(f, ", {} in other shards", self.other_shards)?;
        }
        if self.interrupted {
            write!(f, ", {} not started (stopped)", self.not_started)?;
        }
        if self.save_failures > 0 {
            write!(f, ", {} pool saves failed", self.save_failures)?;
        }
        write!(
            f,
            "; {} tokens in {:.1} s, {:.1} tok/s, MAL {:.2}, {} relaxed tokens",
            self.completion_tokens,
            self.elapsed.as_secs_f64(),
            self.tokens_per_second(),
            self.mean_accepted_length(),
            self.relaxed_tokens
        )
    }
}

/// The running display.
pub struct Progress {
    bar: Option<ProgressBar>,
    start: Instant,
    last_line: Instant,
    every: Duration,
    /// Tokens emitted so far, those of records still in flight included.
    live_tokens: usize,
}

impl Progress {
    /// A bar when stderr is a terminal, else a line every `every`.
    pub fn for_stderr(total: usize, every: Duration) -> Self {
        let bar = Some(crate::progress::bar(total as u64, "records")).filter(|b| !b.is_hidden());
        let now = Instant::now();
        Progress {
            bar,
            start: now,
            last_line: now,
            every,
            live_tokens: 0,
        }
    }

    /// Tokens emitted in the last step.
    pub fn tokens(&mut self, n: usize) {
        self.live_tokens += n;
    }

    fn rate(&self) -> f64 {
        self.live_tokens as f64 / self.start.elapsed().as_secs_f64().max(1e-9)
    }

    /// Shows `s` on the bar, or as a line if one is due.
    pub fn update(&mut self, s: &Summary) {
        let finished = s.done + s.failed;
        match &self.bar {
            Some(bar) => {
                // The message first: setting the position may draw.
                bar.set_message(format!(
                    "{:.1} tok/s  MAL {:.2}  {} failed",
                    self.rate(),
                    s.mean_accepted_length(),
                    s.failed
                ));
                bar.set_position(finished as u64);
            }
            None if self.last_line.elapsed() >= self.every => {
                self.last_line = Instant::now();
                let elapsed = self.start.elapsed().as_secs_f64();
                let left = s.total.saturating_sub(finished);
                let eta = if finished > 0 {
                    format!("{:.0} s", elapsed / finished as f64 * left as f64)
                } else {
                    "?".into()
                };
                eprintln!(
                    "knowledge: {finished}/{} records ({} failed), {:.1} tok/s, MAL {:.2}, \
                     {elapsed:.0} s elapsed, ETA {eta}",
                    s.total,
                    s.failed,
                    self.rate(),
                    s.mean_accepted_length()
                );
            }
            None => {}
        }
    }

    /// A message on stderr, above the bar if there is one.
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(bar) => bar.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    /// Clears the bar (the summary line follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_every_count_and_success_needs_no_failures() {
        let mut s = Summary {
            done: 3,
            already_done: 2,
            completion_tokens: 30,
            decode_steps: 10,
            elapsed: Duration::from_secs(2),
            ..Summary::default()
        };
        assert!(s.succeeded());
        let line = s.to_string();
        for part in [
            "3 records done",
            "2 skipped",
            "0 failed",
            "0 malformed",
            "15.0 tok/s",
            "MAL 3.00",
        ] {
            assert!(line.contains(part), "{part} in {line}");
        }
        s.malformed = 1;
        assert!(!s.succeeded());
        s.malformed = 0;
        s.save_failures = 1;
        assert!(!s.succeeded());
    }
}
