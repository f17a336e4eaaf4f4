//! The evaluation users (docs/recsys.md, "Splits"): every user with a target, in id order, with
//! the target item and the recommendation prompt built from the history before it (see
//! [`history`](super::history) for which items).

use crate::movielens::Dataset;
use crate::split::Split;

use super::history::Target;

/// One evaluation user: the item to find and the prompt to find it from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalCase {
    /// The user's id.
    pub user: u32,
    /// The held-out item id (a hit on any id of its catalogue entry counts).
    pub target_item: u32,
    /// The prompt from their history before the target.
    pub prompt: String,
}

/// Every user with a `target` (all 943 for MovieLens), by id, with their prompt
/// ([`prompt_for_user`](super::prompt::prompt_for_user)).
pub fn eval_cases(data: &Dataset, split: &Split, target: Target) -> Vec<EvalCase> {
    let held = match target {
        Target::Test => &split.test,
        Target::Valid => &split.valid,
    };
    held.iter()
        .map(|r| EvalCase {
            user: r.user,
            target_item: r.item,
            prompt: super::prompt::history_prompt(data, split, r.user, target),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::prompt::prompt_for_user;
    use crate::recommend::prompt::tests::one_user;

    #[test]
    fn each_case_carries_the_users_prompt() {
        let (data, split) = one_user();
        let test = prompt_for_user(&data, &split, 9, Target::Test).unwrap();
        let cases = eval_cases(&data, &split, Target::Test);
        assert_eq!(cases.len(), 1);
        assert_eq!((cases[0].user, cases[0].target_item), (9, 1));
        assert_eq!(cases[0].prompt, test);
    }
}
