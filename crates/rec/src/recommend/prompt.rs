//! The recommendation prompt: a plain-text numbered list (no chat template) that ends
//! where an item title starts, so that the model's continuation is ` Title (Year)\n`, the
//! shape of every catalogue entry (see [`ItemCatalogue`](super::ItemCatalogue)):
//!
//! ```text
//! A user watched these movies, oldest first, and then one more:
//! 1. Toy Story (1995)
//! 2. Ice Storm, The (1997)
//! 3.
//! ```
//!
//! The history is the user's most recent [`DEFAULT_HISTORY`] items before the target
//! (see [`history`](super::history) for which ones). The last line is the next number and its
//! dot, with no trailing space: the space belongs to the title's first token, as in the
//! lines above it.
//!
//! Wording: tried on SmolLM2-135M-Instruct, scoring the teacher-forced log-probability of
//! the validation target's catalogue entry for users 1-200 (mean, nats): this format
//! -21.93; the bare list without the instruction -21.85; a longer instruction naming the
//! next number -22.06; `Watched: Title` lines ending in `Watched:` -21.91; the chat
//! template with the titles inline and the answer starting `You will watch:` -28.03; the
//! chat template with this list as the assistant's turn -22.27. The plain formats are
//! within noise of each other; the instruction is kept so that an empty history still says
//! what the list is. Unconstrained greedy decoding (`specdec generate`) writes the right
//! shape, ` The (1991)` then `12.`, for the list formats, but a `- ` bullet after a
//! "The next movie:" line, so that form was dropped.

use crate::error::RecError;
use crate::movielens::Dataset;
use crate::split::{Split, DEFAULT_HISTORY};

use super::history::{history_before, target_of, Target};

/// The first line; the list follows.
const INSTRUCTION: &str = "A user watched these movies, oldest first, and then one more:";

/// The prompt for `user`'s `target`, from their history before it. An error when the user
/// has no such target (unknown, or too few ratings).
pub fn prompt_for_user(
    data: &Dataset,
    split: &Split,
    user: u32,
    target: Target,
) -> Result<String, RecError> {
    if target_of(split, user, target).is_none() {
        return Err(RecError::Invalid(format!(
            "user {user} has no {target:?} target"
        )));
    }
    Ok(history_prompt(data, split, user, target))
}

pub(crate) fn history_prompt(data: &Dataset, split: &Split, user: u32, target: Target) -> String {
    let titles: Vec<String> = history_before(split, user, target, DEFAULT_HISTORY)
        .into_iter()
        .filter_map(|id| Some(data.item(id)?.title_with_year()))
        .collect();
    prompt_for_titles(&titles)
}

/// The prompt for an explicit history, oldest first (`specdec rec recommend --history`,
/// the server). Titles are free text: one the catalogue does not know is listed as given
/// (trimmed, line breaks turned into spaces so that it stays one list line), and blank
/// ones are skipped. An empty history is allowed: the prompt is the instruction and `1.`,
/// so the model recommends from nothing but the instruction.
pub fn prompt_for_titles(history: &[String]) -> String {
    let mut out = format!("{INSTRUCTION}\n");
    let mut n = 0;
    for title in history {
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if !title.is_empty() {
            n += 1;
            out += &format!("{n}. {title}\n");
        }
    }
    out + &format!("{}.", n + 1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::movielens::Rating;
    use crate::recommend::catalogue::tests::tiny_dataset;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn titles_become_a_numbered_list_ending_at_the_next_number() {
        let p = prompt_for_titles(&strings(&["Toy Story (1995)", "Ice Storm, The (1997)"]));
        assert_eq!(
            p,
            "A user watched these movies, oldest first, and then one more:\n\
             1. Toy Story (1995)\n2. Ice Storm, The (1997)\n3."
        );
    }

    #[test]
    fn free_text_is_kept_on_one_line_and_an_empty_history_is_allowed() {
        let p = prompt_for_titles(&strings(&["  my\nfavourite  film ", "", "Heat"]));
        assert!(p.ends_with(":\n1. my favourite film\n2. Heat\n3."), "{p}");
        assert_eq!(prompt_for_titles(&[]), format!("{INSTRUCTION}\n1."));
    }

    /// `tiny_dataset` where user 9 watches items 2, 4, 3, 1 in that order: 1 is test, 3
    /// validation.
    pub(crate) fn one_user() -> (Dataset, Split) {
        let mut data = tiny_dataset();
        data.ratings = [2, 4, 3, 1]
            .iter()
            .enumerate()
            .map(|(t, &item)| Rating {
                user: 9,
                item,
                rating: 5,
                timestamp: t as u64,
            })
            .collect();
        let split = Split::leave_last_out(&data);
        (data, split)
    }

    #[test]
    fn user_prompts_list_the_history_before_the_target() {
        let (data, split) = one_user();
        let test = prompt_for_user(&data, &split, 9, Target::Test).unwrap();
        assert!(
            test.ends_with(":\n1. Ice Storm, The (1997)\n2. Chasing Amy (1997)\n3. unkonwn\n4."),
            "{test}"
        );
        let valid = prompt_for_user(&data, &split, 9, Target::Valid).unwrap();
        assert!(valid.ends_with("\n2. Chasing Amy (1997)\n3."), "{valid}");
        assert!(prompt_for_user(&data, &split, 8, Target::Test).is_err());
    }
}
