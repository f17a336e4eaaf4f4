//! The progress bar of every long run (model fetches, knowledge jobs, teacher beams, draft
//! training, evaluations), so they all look alike: `{bar} pos/len UNIT  elapsed ETA eta
//! message` on stderr, hidden when stderr is not a terminal. It lives in the lowest crate
//! that draws one (a model fetch is the first long wait a user meets), so that jobs run
//! from the libraries show the same bar and only the crates that draw bars build
//! `indicatif`.

use std::io::IsTerminal;

pub use indicatif::ProgressBar;
use indicatif::ProgressStyle;

/// A bar counting to `total` `unit`s on stderr when it is a terminal, else a hidden bar
/// (its methods do nothing; see [`ProgressBar::is_hidden`]).
pub fn bar(total: u64, unit: &str) -> ProgressBar {
    styled(total, &format!("{{pos}}/{{len}} {unit}"))
}

/// [`bar`] for a count of bytes: sizes in KB/MB/GB and the rate.
pub fn byte_bar(total: u64) -> ProgressBar {
    styled(total, "{bytes}/{total_bytes}  {bytes_per_sec}")
}

fn styled(total: u64, count: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(&format!(
        "{{bar:30}} {count}  {{elapsed_precise}} ETA {{eta}}  {{msg}}"
    ))
    .expect("a valid template");
    ProgressBar::new(total).with_style(style)
}
