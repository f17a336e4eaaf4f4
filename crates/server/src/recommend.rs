//! `POST /v1/recommend`: the K catalogue items a watch history leads the model to, by
//! catalogue-constrained beam search (AtSpeed). The body is parsed into a
//! [`ValidRecommend`] here; the search runs on the engine thread (see
//! [`worker`](crate::worker)), and the handler (in `routes`) answers with what
//! `specdec rec recommend --json` prints, in an envelope.

use std::sync::Arc;

use serde::Deserialize;
use specdec_engine::beam::{BeamOptions, BeamVerify};
use specdec_engine::{ModelMeta, Tokenizer};
use specdec_rec::recommend::service::history_tokens;
use specdec_rec::recommend::{CatalogueSource, ItemCatalogue};

use crate::error::{ApiError, ServerError};

/// Items returned when a request does not say.
pub const DEFAULT_K: usize = 10;

/// Bounds on one `/v1/recommend` search, checked when its body is parsed, before it is
/// queued. A search shares the scheduler's steps with the chats (its rows in their
/// forwards, a bounded share per step), so it no longer holds them back whole; but it
/// holds a place among `--max-concurrent` and its rows slow every step it is in (50
/// titles of 512 bytes with `k: 100` took 35-38 s of engine time), so its cost must be
/// known and bounded before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecommendLimits {
    /// Most items (the beam width) a request may ask for.
    pub max_k: usize,
    /// Most titles in a history.
    pub max_history: usize,
    /// Longest title in a history, in bytes.
    pub max_title_bytes: usize,
    /// Most tokens of the prompt a history makes. Its prefill grows with the square of
    /// its length: 887 tokens took 4.7 s, 3,609 took 38 s (SmolLM2-135M on two busy
    /// vCPUs).
    pub max_history_tokens: usize,
    /// Most work one search may take: see [`RecommendLimits::work`].
    pub max_work: usize,
}

/// What one beam row of one step costs beyond reading the prompt's cache, counted in
/// prompt tokens read: the rest of a forward is paid per row whatever the history.
/// Measured on SmolLM2-135M (two busy vCPUs, MovieLens): 100 beams after 17 prompt tokens
/// took 6.1 s, after 887 tokens 14.5 s of which about 5 s was the prefill, so a row costs
/// about what reading 1,300 prompt tokens does.
pub const ROW_TOKENS: usize = 1024;

impl Default for RecommendLimits {
    /// Room, on MovieLens (items of up to 30 tokens), for `k: 100` after a history of the
    /// size `rec` evaluates with (10 titles, about 200 tokens) and for `k: 64` after 50
    /// typical titles (about 800 tokens; the 50 longest make 1,227 and are refused).
    /// Measured on SmolLM2-135M and two busy vCPUs, those took 6.3 s and 10.3 s, where 50
    /// titles of 512 bytes at `k: 100` took 53 s.
    fn default() -> Self {
        RecommendLimits {
            max_k: 100,
            max_history: 50,
            max_title_bytes: 512,
            max_history_tokens: 1024,
            max_work: 4_000_000,
        }
    }
}

impl RecommendLimits {
    /// The work of a search of width `k` after a prompt of `prompt_tokens`, over a
    /// catalogue whose longest item is `item_tokens`: each of up to `item_tokens` steps
    /// runs `k` rows through the model, each reading the prompt's cache.
    pub fn work(k: usize, item_tokens: usize, prompt_tokens: usize) -> usize {
        k.saturating_mul(item_tokens)
            .saturating_mul(prompt_tokens.saturating_add(ROW_TOKENS))
    }
}

/// What `/v1/recommend` searches: the catalogue, and a draft model to speculate with.
#[derive(Clone)]
pub struct Recommender {
    /// The items recommended from.
    pub catalogue: Arc<ItemCatalogue>,
    /// The longest catalogue entry, in tokens: the most steps a search takes.
    pub item_tokens: usize,
    /// What one request may ask of the search.
    pub limits: RecommendLimits,
    /// The draft model for speculative beam search (AtSpeed), if loaded: the one text
    /// requests draft with, with how its logits are read (its file's
    /// `specdec.draft.scoring`).
    pub draft: Option<specdec_engine::DraftModel>,
}

impl std::fmt::Debug for Recommender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recommender")
            .field("entries", &self.catalogue.len())
            .field("draft", &self.draft.is_some())
            .finish()
    }
}

impl Recommender {
    /// The recommender of the server's `catalogue` and `draft_model`, on the target
    /// `loaded` (none without a catalogue). The draft was checked against the target's
    /// vocabulary when it was loaded, not at the first request.
    pub fn load(
        catalogue: Option<&CatalogueSource>,
        draft_model: Option<&specdec_engine::DraftModel>,
        meta: &ModelMeta,
        limits: RecommendLimits,
    ) -> Result<Option<Recommender>, ServerError> {
        let Some(source) = catalogue else {
            return Ok(None);
        };
        let catalogue = source.load(&meta.tokenizer)?;
        let draft = draft_model.cloned();
        tracing::info!(
            "/v1/recommend: {} catalogue entries from {}, {}",
            catalogue.len(),
            source.describe(),
            if draft.is_some() {
                "with a draft model"
            } else {
                "no draft model"
            }
        );
        let trie = catalogue.trie();
        let item_tokens = (0..trie.len()).map(|e| trie.entry(e).len()).max();
        Ok(Some(Recommender {
            item_tokens: item_tokens.unwrap_or(1),
            catalogue: Arc::new(catalogue),
            limits,
            draft,
        }))
    }
}

/// A `/v1/recommend` body as clients send it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecommendBody {
    /// Optional; when given, the served model's id.
    pub model: Option<String>,
    /// Titles watched, oldest first (a title not in the catalogue stays free text).
    pub history: Vec<String>,
    /// Items to return, 1 to the server's `max_k` (default 10, capped at `max_k`).
    pub k: Option<i64>,
    /// `strict` (the default: plain beam search's list) or `relaxed` (needs a draft).
    pub verify: Option<String>,
    /// Speculate with the server's draft model (default: when it has one).
    pub draft: Option<bool>,
    /// Relaxed verification's seed.
    pub seed: Option<u64>,
    /// A search without a draft: `plain` or `jump-forward` (the default without one).
    pub mode: Option<String>,
}

/// A request the engine thread can run as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidRecommend {
    /// Titles watched, oldest first.
    pub history: Vec<String>,
    /// The search to run.
    pub opts: BeamOptions,
}

fn bad(param: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// What a body is checked against: the served model, whether there is a draft, the
/// limits, and the tokenizer that measures the history's prompt.
pub struct Checks<'a> {
    /// The served model's id.
    pub model_id: &'a str,
    /// Whether the server has a draft model.
    pub has_draft: bool,
    /// What one request may ask.
    pub limits: RecommendLimits,
    /// The catalogue's longest entry, in tokens.
    pub item_tokens: usize,
    /// The target's tokenizer.
    pub tokenizer: &'a Tokenizer,
}

/// Parses a body for the server `checks` describes.
pub fn parse(checks: &Checks<'_>, body: &[u8]) -> Result<ValidRecommend, ApiError> {
    // The history's titles and the few other fields, bounded before the body is parsed.
    let max = checks.limits.max_history.saturating_add(64);
    crate::json_budget::within(body, max).map_err(|over| {
        let history = over.field.as_deref() == Some("history");
        ApiError::Invalid {
            message: format!(
                "the body holds too many JSON values: at most {} titles, {max} values in all",
                checks.limits.max_history
            ),
            param: history.then_some("history"),
        }
    })?;
    let body: RecommendBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::Malformed(format!(
            "the request body is not a valid recommend request: {e}"
        ))
    })?;
    validate(checks, body)
}

fn validate(checks: &Checks<'_>, b: RecommendBody) -> Result<ValidRecommend, ApiError> {
    let Checks {
        model_id,
        has_draft,
        limits,
        item_tokens,
        tokenizer,
    } = *checks;
    if let Some(m) = b.model.as_deref().filter(|m| *m != model_id) {
        return Err(ApiError::UnknownModel {
            requested: crate::error::clip(m),
            served: model_id.to_string(),
        });
    }
    if b.history.len() > limits.max_history {
        return Err(bad(
            "history",
            format!(
                "at most {} titles, got {}",
                limits.max_history,
                b.history.len()
            ),
        ));
    }
    if let Some(t) = b.history.iter().find(|t| t.len() > limits.max_title_bytes) {
        return Err(bad(
            "history",
            format!(
                "a title may be at most {} bytes, got one of {}",
                limits.max_title_bytes,
                t.len()
            ),
        ));
    }
    let k = match b.k {
        None => DEFAULT_K.min(limits.max_k),
        Some(k) if k >= 1 && k as u64 <= limits.max_k as u64 => k as usize,
        Some(k) => {
            return Err(bad(
                "k",
                format!("`k` must be 1 to {}, got {k}", limits.max_k),
            ))
        }
    };
    // The history's lines are bounded above, so measuring its prompt here is cheap, and
    // tells the search's cost before the engine thread is asked to pay it.
    let prompt = history_tokens(tokenizer, &b.history)?.len();
    if prompt > limits.max_history_tokens {
        return Err(bad(
            "history",
            format!(
                "the history makes a prompt of {prompt} tokens, over this server's limit of {}: \
                 send fewer or shorter titles",
                limits.max_history_tokens
            ),
        ));
    }
    let work = RecommendLimits::work(k, item_tokens, prompt);
    if work > limits.max_work {
        let most_k = limits.max_work / RecommendLimits::work(1, item_tokens, prompt).max(1);
        return Err(bad(
            "k",
            format!(
                "a search for {k} items after this history ({prompt} tokens) is over this \
                 server's work limit ({work} > {}, counted as k x {item_tokens} catalogue \
                 tokens x (history tokens + {ROW_TOKENS})): ask for at most {most_k} items, \
                 or send a shorter history",
                limits.max_work
            ),
        ));
    }
    let relaxed = match b.verify.as_deref() {
        None | Some("strict") => false,
        Some("relaxed") => true,
        Some(v) => {
            return Err(bad(
                "verify",
                format!(
                    "`verify` is `strict` or `relaxed`, got `{}`",
                    crate::error::clip(v)
                ),
            ))
        }
    };
    let jump_forward = match b.mode.as_deref() {
        None => None,
        Some("plain") => Some(false),
        Some("jump-forward") => Some(true),
        Some(m) => {
            return Err(bad(
                "mode",
                format!(
                    "`mode` is `plain` or `jump-forward`, got `{}`",
                    crate::error::clip(m)
                ),
            ))
        }
    };
    if b.draft == Some(true) && !has_draft {
        return Err(bad(
            "draft",
            "this server has no draft model: start it with `--draft-model FILE` to speculate",
        ));
    }
    if b.draft == Some(true) && jump_forward.is_some() {
        return Err(bad(
            "mode",
            "`mode` chooses a search without a draft: drop `mode` or `draft`",
        ));
    }
    // A `mode` asks for a search without a draft; otherwise the draft is used when there
    // is one.
    let draft = b.draft.unwrap_or(has_draft && jump_forward.is_none());
    if relaxed && !draft {
        return Err(bad(
            "verify",
            if has_draft {
                "relaxed verification needs the draft model: drop `draft: false` or `mode`"
            } else {
                "relaxed verification needs a draft model: start the server with `--draft-model FILE`"
            },
        ));
    }
    if b.seed.is_some() && !relaxed {
        return Err(bad("seed", "`seed` is for `verify: \"relaxed\"` only"));
    }
    let opts = if draft {
        let verify = if relaxed {
            BeamVerify::Relaxed {
                seed: b.seed.unwrap_or(0),
            }
        } else {
            BeamVerify::Strict
        };
        BeamOptions::speculative(k, verify)
    } else if jump_forward == Some(false) {
        BeamOptions::plain(k)
    } else {
        BeamOptions::jump_forward(k)
    };
    Ok(ValidRecommend {
        history: b.history,
        opts,
    })
}

// On the default model's tokenizer (its token counts are what the limits are checked
// against), so in the real-model tier only (`--features real-models`).
#[cfg(all(test, feature = "real-models"))]
mod tests {
    use super::*;

    fn tokenizer() -> &'static Tokenizer {
        static T: std::sync::OnceLock<Arc<Tokenizer>> = std::sync::OnceLock::new();
        T.get_or_init(|| {
            let path = specdec_model_store::resolve(None, true).expect("default model");
            specdec_engine::ModelMeta::open(&path)
                .expect("model metadata")
                .tokenizer
        })
    }

    fn parsed_with(
        limits: RecommendLimits,
        has_draft: bool,
        body: &str,
    ) -> Result<ValidRecommend, ApiError> {
        let checks = Checks {
            model_id: "smol",
            has_draft,
            limits,
            item_tokens: 30,
            tokenizer: tokenizer(),
        };
        parse(&checks, body.as_bytes())
    }

    fn parsed(has_draft: bool, body: &str) -> Result<ValidRecommend, ApiError> {
        parsed_with(RecommendLimits::default(), has_draft, body)
    }

    #[test]
    fn defaults_are_k_ten_jump_forward_without_a_draft_and_strict_speculation_with_one() {
        let v = parsed(false, r#"{"history": ["Babe (1995)"]}"#).unwrap();
        assert_eq!(v.opts, BeamOptions::jump_forward(10));
        assert_eq!(v.history, ["Babe (1995)"]);
        let v = parsed(true, r#"{"history": []}"#).unwrap();
        assert_eq!(v.opts, BeamOptions::speculative(10, BeamVerify::Strict));
        let v = parsed(true, r#"{"history": [], "mode": "plain", "k": 3}"#).unwrap();
        assert_eq!(v.opts, BeamOptions::plain(3));
        let v = parsed(true, r#"{"history": [], "verify": "relaxed", "seed": 7}"#).unwrap();
        assert_eq!(
            v.opts,
            BeamOptions::speculative(10, BeamVerify::Relaxed { seed: 7 })
        );
        let v = parsed(false, r#"{"history": [], "model": "smol", "draft": false}"#).unwrap();
        assert_eq!(v.opts, BeamOptions::jump_forward(10));
    }

    #[test]
    fn a_search_too_costly_for_the_limits_is_refused_naming_what_to_lower() {
        // Before: 50 titles of 512 bytes at `k: 100` held the engine thread 35-38 s.
        let error = |r: Result<ValidRecommend, ApiError>| match r {
            Err(ApiError::Invalid { param, message }) => (param, message),
            other => panic!("{other:?}"),
        };
        let titles: Vec<String> = (0..50)
            .map(|i| format!("Movie number {i} (1995)"))
            .collect();
        let body = |k: usize| serde_json::json!({"history": titles, "k": k}).to_string();
        let limits = RecommendLimits::default();
        // Within the history limit, over the work limit at k = 100 (items of 30 tokens).
        let prompt = history_tokens(tokenizer(), &titles).unwrap().len();
        assert!(prompt <= limits.max_history_tokens, "{prompt}");
        let (param, message) = error(parsed(false, &body(100)));
        assert_eq!(param, Some("k"));
        let most = limits.max_work / RecommendLimits::work(1, 30, prompt);
        assert!(most < 100, "{most}");
        assert!(
            message.contains(&format!("at most {most} items")),
            "{message}"
        );
        assert!(parsed(false, &body(most)).is_ok());

        let long: Vec<String> = (0..50)
            .map(|i| format!("{i} {}", "word ".repeat(100)))
            .collect();
        let (param, message) = error(parsed(
            false,
            &serde_json::json!({"history": long}).to_string(),
        ));
        assert_eq!(param, Some("history"));
        assert!(
            message.contains(&limits.max_history_tokens.to_string()),
            "{message}"
        );

        // A million titles are refused while the body is counted, not after parsing it.
        let many = format!(r#"{{"history": [{}""]}}"#, "\"\",".repeat(1_000_000));
        let (param, _) = error(parsed(false, &many));
        assert_eq!(param, Some("history"));

        let strict = RecommendLimits { max_k: 5, ..limits };
        let (param, _) = error(parsed_with(strict, false, r#"{"history": [], "k": 6}"#));
        assert_eq!(param, Some("k"));
        assert!(parsed_with(strict, false, r#"{"history": []}"#).is_ok());
    }

    #[test]
    fn inconsistent_requests_name_the_parameter_to_fix() {
        let param = |has_draft, body: &str| match parsed(has_draft, body) {
            Err(ApiError::Invalid { param, .. }) => param,
            other => panic!("{body}: {other:?}"),
        };
        assert_eq!(param(false, r#"{"history": [], "k": 0}"#), Some("k"));
        assert_eq!(param(false, r#"{"history": [], "k": 101}"#), Some("k"));
        assert_eq!(
            param(false, r#"{"history": [], "draft": true}"#),
            Some("draft")
        );
        assert_eq!(
            param(false, r#"{"history": [], "verify": "relaxed"}"#),
            Some("verify")
        );
        assert_eq!(
            param(
                true,
                r#"{"history": [], "verify": "relaxed", "mode": "plain"}"#
            ),
            Some("verify")
        );
        assert_eq!(
            param(true, r#"{"history": [], "draft": true, "mode": "plain"}"#),
            Some("mode")
        );
        assert_eq!(param(true, r#"{"history": [], "seed": 1}"#), Some("seed"));
        assert_eq!(
            param(false, r#"{"history": [], "mode": "fast"}"#),
            Some("mode")
        );
        let limits = RecommendLimits::default();
        let long = format!(
            r#"{{"history": ["{}"]}}"#,
            "a".repeat(limits.max_title_bytes + 1)
        );
        assert_eq!(param(false, &long), Some("history"));
        let many = serde_json::json!({"history": vec!["x"; limits.max_history + 1]}).to_string();
        assert_eq!(param(false, &many), Some("history"));
        assert!(matches!(
            parsed(false, r#"{"history": [], "model": "other"}"#),
            Err(ApiError::UnknownModel { .. })
        ));
        for body in [
            r#"{"history": "Babe"}"#,
            r#"{"history": [], "top_k": 3}"#,
            "{}",
        ] {
            assert!(
                matches!(parsed(false, body), Err(ApiError::Malformed(_))),
                "{body}"
            );
        }
    }
}
