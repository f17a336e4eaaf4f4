//! The knowledge prompts of docs/recsys.md: one per user (profile and recent rated history, then a
//! request to analyse their tastes) and one per item (title, year and genres, then a request
//! to introduce the movie). The job wraps each in the model's chat template.
//!
//! Wording: the default SmolLM2-135M-Instruct loops under greedy decoding whatever the
//! prompt (it repeats a sentence or a list line before 256 tokens), so the aim is prose
//! that starts on topic and repeats late. Tried with `specdec generate --chat --max-tokens
//! 256 --draft none` on three users and three items each, counting distinct sentences:
//! - users, history as a bullet list (`- Title (year), genres: 4/5`): the list echoed back
//!   and degenerating into `- The (1996)` lines; a numbered list: `1. Comedy: 4/5` lines;
//!   five headings to fill: the prompt's first sentence repeated;
//! - users, a profile sentence, the history inline, then "Write a paragraph analysing this
//!   viewer's ...": the profile sentence echoed twice in three; the request first and the
//!   data after: a list once, a restated profile once;
//! - (kept) users, `User profile: ...` and the history inline on two lines, then "Write a
//!   short paragraph analysing this user's movie tastes ...": prose about the user's tastes
//!   all three times (36-100% distinct sentences);
//! - items, `Movie: T. Genres: G.` then "Introduce this movie ...": a `- Director:` list;
//!   "Write a short introduction to the movie T, a G film ...": prose, 19-56% distinct;
//! - (kept) items, "Describe the movie T. Genres: G. Write two or three paragraphs of prose
//!   about its ...": prose, 62-82% distinct.

use crate::movielens::{Dataset, Item, Rating, User};

/// The aspects docs/recsys.md asks about.
const USER_ASPECTS: &str = "the genres and eras they prefer, directors and actors they may \
     like, the moods and themes they enjoy, and what they rate low";
const ITEM_ASPECTS: &str = "genre, director and main cast, setting, plot and themes, mood, \
     intended audience, and how it was received";

/// The user's knowledge prompt. `history` is oldest first (see `Split::history`); ratings of
/// items unknown to `data` are skipped (a `Dataset` has none).
pub fn user_prompt(data: &Dataset, user: &User, history: &[Rating]) -> String {
    let gender = match user.gender.as_str() {
        "F" => "female",
        "M" => "male",
        other => other,
    };
    let rated: Vec<String> = history
        .iter()
        .filter_map(|r| {
            let item = data.item(r.item)?;
            let title = item.title_with_year();
            Some(format!("{title} [{}] {}/5", genres(item), r.rating))
        })
        .collect();
    format!(
        "User profile: {gender}, age {age}, {occupation}.\n\
         Recently rated movies (oldest first, rating out of 5): {rated}.\n\n\
         Write a short paragraph analysing this user's movie tastes: {USER_ASPECTS}. Refer \
         to the movies above.",
        age = user.age,
        occupation = user.occupation,
        rated = rated.join("; "),
    )
}

/// The item's knowledge prompt.
pub fn item_prompt(item: &Item) -> String {
    format!(
        "Describe the movie {title}. Genres: {genres}. Write two or three paragraphs of prose \
         about its {ITEM_ASPECTS}.",
        title = item.title_with_year(),
        genres = genres(item),
    )
}

fn genres(item: &Item) -> String {
    if item.genres.is_empty() {
        "unknown".to_string()
    } else {
        item.genres.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Dataset {
        let user = User {
            id: 7,
            age: 24,
            gender: "F".into(),
            occupation: "technician".into(),
            zip_code: "85711".into(),
        };
        let items = vec![
            Item {
                id: 1,
                title: "Toy Story".into(),
                year: Some(1995),
                genres: vec!["Animation".into(), "Children's".into(), "Comedy".into()],
            },
            Item {
                id: 2,
                title: "Ice Storm, The".into(),
                year: Some(1997),
                genres: vec!["Drama".into()],
            },
        ];
        Dataset::from_parts(vec![user], items, vec![]).unwrap()
    }

    fn rating(item: u32, rating: u8) -> Rating {
        Rating {
            user: 7,
            item,
            rating,
            timestamp: 0,
        }
    }

    #[test]
    fn user_prompt_has_profile_history_in_order_and_the_request() {
        let data = data();
        let p = user_prompt(&data, &data.users[0], &[rating(2, 2), rating(1, 5)]);
        assert!(
            p.starts_with("User profile: female, age 24, technician.\n"),
            "{p}"
        );
        let history = "(oldest first, rating out of 5): Ice Storm, The (1997) [Drama] 2/5; \
                       Toy Story (1995) [Animation, Children's, Comedy] 5/5.\n";
        assert!(p.contains(history), "oldest first: {p}");
        for aspect in [
            "genres",
            "eras",
            "directors",
            "actors",
            "moods",
            "themes",
            "rate low",
        ] {
            assert!(p.contains(aspect), "{aspect}: {p}");
        }
        assert!(p.contains("Refer to the movies above."));
    }

    #[test]
    fn item_prompt_has_title_year_genres_and_the_aspects() {
        let data = data();
        let p = item_prompt(&data.items[1]);
        assert!(
            p.starts_with("Describe the movie Ice Storm, The (1997). Genres: Drama. "),
            "{p}"
        );
        let toy = item_prompt(&data.items[0]);
        assert!(
            toy.contains("Genres: Animation, Children's, Comedy."),
            "{toy}"
        );
        for aspect in [
            "genre", "director", "cast", "setting", "plot", "themes", "mood", "audience",
            "received",
        ] {
            assert!(p.contains(aspect), "{aspect}: {p}");
        }
    }
}
