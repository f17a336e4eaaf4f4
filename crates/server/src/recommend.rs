//! `POST /v1/recommend`: the K catalogue items a watch history leads the model to, by
//! catalogue-constrained beam search (AtSpeed). The body is parsed into a
//! [`ValidRecommend`] here; the search runs on the engine thread (see
//! [`worker`](crate::worker)), and the answer is the one `specdec rec recommend --json`
//! prints, in an envelope.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use specdec_engine::beam::{BeamOptions, BeamVerify, DraftScoring};
use specdec_engine::{Loaded, Model};
use specdec_rec::recommend::{answer_json, ItemCatalogue};

use crate::error::ApiError;
use crate::worker::RecommendJob;
use crate::{AppState, ServerConfig, ServerError};

/// Items a request may ask for at most (the beam width).
pub const MAX_K: usize = 100;
/// Items returned when a request does not say.
pub const DEFAULT_K: usize = 10;
/// Most titles in a history.
pub const MAX_HISTORY: usize = 50;
/// Longest title in a history, in bytes.
pub const MAX_TITLE_BYTES: usize = 512;

/// What `/v1/recommend` searches: the catalogue, and a draft model to speculate with.
#[derive(Clone)]
pub struct Recommender {
    pub catalogue: Arc<ItemCatalogue>,
    pub draft: Option<Arc<Model>>,
    /// How the draft's logits are read (its file's `specdec.draft.scoring`).
    pub draft_scoring: DraftScoring,
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
    /// The recommender `config` asks for, on the target `loaded` (none without a
    /// catalogue). A draft is checked against the target's vocabulary here (by
    /// `load_draft`), not at the first request.
    pub fn load(
        config: &ServerConfig,
        loaded: &Loaded,
    ) -> Result<Option<Recommender>, ServerError> {
        let Some(source) = &config.catalogue else {
            return Ok(None);
        };
        let catalogue = source.load(&loaded.meta.tokenizer)?;
        let (draft, draft_scoring) = match &config.draft_model {
            Some(path) => {
                let d = specdec_engine::load_draft(path, &loaded.meta, config.threads)?;
                (Some(Arc::new(d.model)), d.draft_scoring)
            }
            None => (None, DraftScoring::default()),
        };
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
        Ok(Some(Recommender {
            catalogue: Arc::new(catalogue),
            draft,
            draft_scoring,
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
    pub history: Vec<String>,
    pub opts: BeamOptions,
}

fn bad(param: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// Parses a body for a server serving `model_id`, with a draft model or not.
pub fn parse(model_id: &str, has_draft: bool, body: &[u8]) -> Result<ValidRecommend, ApiError> {
    let body: RecommendBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::Malformed(format!(
            "the request body is not a valid recommend request: {e}"
        ))
    })?;
    validate(model_id, has_draft, body)
}

fn validate(model_id: &str, has_draft: bool, b: RecommendBody) -> Result<ValidRecommend, ApiError> {
    if let Some(m) = b.model.as_deref().filter(|m| *m != model_id) {
        return Err(ApiError::UnknownModel {
            requested: crate::error::clip(m),
            served: model_id.to_string(),
        });
    }
    if b.history.len() > MAX_HISTORY {
        return Err(bad(
            "history",
            format!("at most {MAX_HISTORY} titles, got {}", b.history.len()),
        ));
    }
    if let Some(t) = b.history.iter().find(|t| t.len() > MAX_TITLE_BYTES) {
        return Err(bad(
            "history",
            format!(
                "a title may be at most {MAX_TITLE_BYTES} bytes, got one of {}",
                t.len()
            ),
        ));
    }
    let k = match b.k {
        None => DEFAULT_K,
        Some(k) if (1..=MAX_K as i64).contains(&k) => k as usize,
        Some(k) => return Err(bad("k", format!("`k` must be 1 to {MAX_K}, got {k}"))),
    };
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

/// The handler: parse off the runtime, wait for the engine thread, answer in one piece.
pub(crate) async fn handle(State(s): State<Arc<AppState>>, req: Request) -> Response {
    match answer(s, req).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn answer(s: Arc<AppState>, req: Request) -> Result<serde_json::Value, ApiError> {
    let Some(rec) = &s.recommender else {
        return Err(ApiError::RecommendDisabled);
    };
    let has_draft = rec.draft.is_some();
    let body = crate::routes::body_bytes(crate::routes::read_body(req).await?)?;
    let model_id = s.frontend.model_id.clone();
    let valid = crate::routes::off_runtime(move || parse(&model_id, has_draft, &body)).await?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let opts = valid.opts.clone();
    s.queue.submit_recommend(RecommendJob {
        request: valid,
        reply: tx,
        arrived: Instant::now(),
        slot: None,
    })?;
    let found = rx.await.map_err(|_| ApiError::Unavailable)??;
    let mut v = answer_json(&found, &opts);
    v["object"] = "recommendation".into();
    v["model"] = s.frontend.model_id.clone().into();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(has_draft: bool, body: &str) -> Result<ValidRecommend, ApiError> {
        parse("smol", has_draft, body.as_bytes())
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
        let long = format!(r#"{{"history": ["{}"]}}"#, "a".repeat(MAX_TITLE_BYTES + 1));
        assert_eq!(param(false, &long), Some("history"));
        let many = serde_json::json!({"history": vec!["x"; MAX_HISTORY + 1]}).to_string();
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
