//! The progress bar of every long rec run (knowledge jobs, teacher beams, draft training,
//! evaluations), so they all look alike: `{bar} pos/len UNIT  elapsed ETA eta  message` on
//! stderr, hidden when stderr is not a terminal. It lives here rather than in the command
//! line so that jobs run from the library show the same bar, and rather than in a low crate
//! so that only the crates that draw bars build `indicatif`.

use std::io::IsTerminal;

pub use indicatif::ProgressBar;
use indicatif::ProgressStyle;

/// A bar counting to `total` `unit`s on stderr when it is a terminal, else a hidden bar
/// (its methods do nothing; see [`ProgressBar::is_hidden`]).
pub fn bar(total: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(&format!(
        "{{bar:30}} {{pos}}/{{len}} {unit}  {{elapsed_precise}} ETA {{eta}}  {{msg}}"
    ))
    .expect("a valid template");
    ProgressBar::new(total).with_style(style)
}
