//! One recommendation end to end: a history becomes the prompt, constrained beam search
//! writes the K best catalogue entries, and they come back as titles with their item ids.
//! `specdec rec recommend` and the server's `/v1/recommend` both answer through here, so
//! they return the same list.

use serde::Serialize;
use specdec_engine::beam::{BeamOptions, BeamOutput, BeamRunner, BeamStats, BeamVerify};
use specdec_tokenizer::Tokenizer;

use super::{prompt_for_titles, ItemCatalogue};
use crate::RecError;

/// One recommended item.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommended {
    /// The entry's identifier, e.g. `Toy Story (1995)`.
    pub title: String,
    /// Every item id the title names (empty for a catalogue of bare titles).
    pub item_ids: Vec<u32>,
    /// Cumulative log-probability of the title's tokens (its newline included).
    pub score: f64,
}

/// The K best items, best first, and how the search went.
#[derive(Clone, Debug)]
pub struct Recommendation {
    /// The items, best first.
    pub items: Vec<Recommended>,
    /// What the beam search did.
    pub stats: BeamStats,
}

/// The prompt's tokens for a history, oldest first. Titles are text: special-token text in
/// them stays text.
pub fn history_tokens(tok: &Tokenizer, history: &[String]) -> Result<Vec<u32>, RecError> {
    let prompt = prompt_for_titles(history);
    tok.encode(&prompt, false)
        .map_err(|e| RecError::Invalid(format!("the history could not be tokenized: {e}")))
}

/// Recommends after each history, all searched together.
pub fn recommend(
    runner: &mut BeamRunner<'_>,
    catalogue: &ItemCatalogue,
    tok: &Tokenizer,
    histories: &[Vec<String>],
    opts: &BeamOptions,
) -> Result<Vec<Recommendation>, RecError> {
    let prompts: Vec<Vec<u32>> = histories
        .iter()
        .map(|h| history_tokens(tok, h))
        .collect::<Result<_, _>>()?;
    let outs = runner.run(catalogue.trie(), &prompts, opts)?;
    Ok(outs.into_iter().map(|o| named(catalogue, o)).collect())
}

/// A search's entries as titles and item ids.
pub fn named(catalogue: &ItemCatalogue, out: BeamOutput) -> Recommendation {
    Recommendation {
        items: out
            .items
            .iter()
            .map(|r| Recommended {
                title: catalogue.title(r.entry).to_string(),
                item_ids: catalogue.item_ids(r.entry).to_vec(),
                score: r.score,
            })
            .collect(),
        stats: out.stats,
    }
}

/// How a search with `opts` is named in answers and logs.
pub fn mode_name(opts: &BeamOptions) -> &'static str {
    match (&opts.draft, opts.jump_forward) {
        (Some(d), _) if d.verify == BeamVerify::Strict => "strict speculative",
        (Some(_), _) => "relaxed speculative",
        (None, true) => "jump-forward",
        (None, false) => "plain",
    }
}

/// The answer `specdec rec recommend --json` prints and `/v1/recommend` returns (the
/// server adds its envelope): the items, best first, and how the search went.
pub fn answer_json(rec: &Recommendation, opts: &BeamOptions) -> serde_json::Value {
    let s = &rec.stats;
    serde_json::json!({
        "items": rec.items,
        "speculation": {
            "mode": mode_name(opts),
            "relaxed": s.relaxed,
            "target_forwards": s.decode_forwards(),
            "draft_forwards": s.draft_forwards,
            "steps": s.steps,
            "rounds": s.rounds,
            "accepted_steps_per_round": s.accepted_per_round(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_search_and_lists_the_items_best_first() {
        let rec = Recommendation {
            items: vec![Recommended {
                title: "Babe (1995)".into(),
                item_ids: vec![8],
                score: -1.5,
            }],
            stats: BeamStats {
                target_forwards: 4,
                relaxed: true,
                ..BeamStats::default()
            },
        };
        let v = answer_json(
            &rec,
            &BeamOptions::speculative(1, BeamVerify::Relaxed { seed: 1 }),
        );
        assert_eq!(v["items"][0]["title"], "Babe (1995)");
        assert_eq!(v["items"][0]["item_ids"][0], 8);
        assert_eq!(v["speculation"]["mode"], "relaxed speculative");
        assert_eq!(v["speculation"]["relaxed"], true);
        assert_eq!(v["speculation"]["target_forwards"], 3);
        assert_eq!(mode_name(&BeamOptions::plain(1)), "plain");
        assert_eq!(mode_name(&BeamOptions::jump_forward(1)), "jump-forward");
        assert_eq!(
            mode_name(&BeamOptions::speculative(1, BeamVerify::Strict)),
            "strict speculative"
        );
    }
}
