//! Parse, don't validate: a request body becomes a [`ValidRequest`] here or an error that
//! says what to fix. Nothing past this module sees raw client input.

use std::sync::Arc;

use specdec_engine::{
    Acceptance, CacheScope, ChatMessage, ChatTemplate, DraftMethod, GenerateRequest, ModelMeta,
    PoolName, Speculation, SpeculationSpec, Tenant, Tokenizer,
};

use crate::api::{Content, OneOrMany, PromptInput, RequestBody};
use crate::error::ApiError;

mod options;
mod unsupported;

use options::{content_bytes, reference_param, reference_sizes, sampling, speculation};
use unsupported::reject_unsupported;

/// Most messages a chat request may hold (fewer where the context is smaller: see
/// [`Frontend::max_messages`]).
pub const MAX_MESSAGES: usize = 4096;
/// Temperatures below this decode greedily, as 0 does (`sampling` says why).
pub const MIN_TEMPERATURE: f64 = 1e-5;
/// Largest draft tree a request may ask for.
pub const MAX_DRAFT_LIMIT: usize = 128;
/// Most stop strings a request may give.
pub const MAX_STOPS: usize = 16;
/// Longest stop string, in bytes: text that may still start a stop is held back from a
/// stream, so a stop's length is also how far a stream may lag.
pub const MAX_STOP_BYTES: usize = 512;
/// Most texts in `speculation.references`.
pub const MAX_REFERENCES: usize = 64;
/// Most bytes of reference text one request may carry (`prediction` and
/// `speculation.references` together), checked before anything is tokenized.
pub const MAX_REFERENCE_BYTES: usize = 1 << 20;
/// Most reference tokens one request may carry, together: what drafters index at most.
pub const MAX_REFERENCE_TOKENS: usize = specdec_engine::MAX_REFERENCE_TOKENS;

/// Which endpoint a body was sent to: each takes its own fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: `messages`.
    Chat,
    /// `/v1/completions`: `prompt`.
    Completion,
}

/// What the edge needs to turn bodies into engine requests.
#[derive(Clone)]
pub struct Frontend {
    /// The id requests must name in `model`.
    pub model_id: String,
    /// The model's context length.
    pub context_length: usize,
    /// The most bytes one token spans: prompt text longer than `context_length` times
    /// this cannot fit, and is refused before it is tokenized.
    pub max_token_bytes: usize,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template messages are rendered with.
    pub template: Arc<ChatTemplate>,
    /// The draft method of requests that name none.
    pub default_method: DraftMethod,
    /// Most draft nodes per step for requests that do not say.
    pub default_max_draft: usize,
}

impl Frontend {
    /// The edge of a server for the model `meta` describes.
    pub fn new(
        meta: &ModelMeta,
        model_id: String,
        default_method: DraftMethod,
        default_max_draft: usize,
    ) -> Frontend {
        Frontend {
            model_id,
            context_length: meta.config.context_length,
            max_token_bytes: meta.tokenizer.max_token_bytes(),
            tokenizer: meta.tokenizer.clone(),
            template: meta.template.clone(),
            default_method,
            default_max_draft,
        }
    }
}

impl Frontend {
    /// Prompt text longer than this cannot fit the context.
    pub fn max_prompt_bytes(&self) -> usize {
        self.context_length.saturating_mul(self.max_token_bytes)
    }

    /// Most messages a chat request may hold: [`MAX_MESSAGES`], and no more than the
    /// context has tokens, since every chat template marks each message with at least one
    /// token of its own (ChatML's `<|im_start|>`, Llama 3's `<|start_header_id|>`, Gemma's
    /// `<start_of_turn>`).
    pub fn max_messages(&self) -> usize {
        MAX_MESSAGES.min(self.context_length)
    }

    /// Most JSON values a request body may hold (see the `json_budget` module):
    /// room for a prompt of as many token ids as the context holds, [`MAX_MESSAGES`]
    /// messages of a few content parts each, and the other fields.
    pub fn max_json_values(&self) -> usize {
        self.context_length
            .saturating_add(MAX_MESSAGES * VALUES_PER_MESSAGE)
            .saturating_add(VALUES_BESIDES)
    }
}

/// JSON values a message may take in [`Frontend::max_json_values`]: its object, role and
/// content (5), and two text parts (11 more).
const VALUES_PER_MESSAGE: usize = 16;
/// JSON values for everything but the prompt and messages: the top level's scalars, 16
/// stop strings, 64 references, and room to spare.
const VALUES_BESIDES: usize = 4096;

/// A request the engine can run as it is.
#[derive(Debug)]
pub struct ValidRequest {
    /// What the engine runs.
    pub gen: GenerateRequest,
    /// Whether the response streams (SSE).
    pub stream: bool,
    /// Whether a streamed response ends with a usage chunk.
    pub include_usage: bool,
    /// The `prediction`'s tokens, when one was given.
    pub prediction: Option<Vec<u32>>,
    /// OpenAI's `user`: the end user, which scopes prefix-cache reuse (see
    /// [`cache_scope`]).
    pub user: Option<String>,
}

/// The longest `user` (and tenant header) accepted, in bytes.
pub const MAX_USER_BYTES: usize = 256;

/// Whose cached prompt prefixes a request may reuse. A hit's length is reported (and
/// shortens the response time), so reuse across clients would leak their prompts; the
/// rule is that requests share only with requests naming the same tenant:
///
/// - a request naming a tenant (the `X-Specdec-Tenant` header a gateway sets, the body's
///   `user`, or both) shares with requests naming the same one;
/// - a request naming none shares nothing when the server requires an API key (one key is
///   commonly shared by many clients, so it tells no one apart), and shares with the other
///   anonymous requests on a server without a key (anyone can call it as anyone: it is a
///   single-user server).
pub fn cache_scope(api_key_required: bool, header: Option<&str>, user: Option<&str>) -> CacheScope {
    let header = header.filter(|h| !h.is_empty());
    let user = user.filter(|u| !u.is_empty());
    match (header, user) {
        (None, None) if api_key_required => CacheScope::Private,
        (None, None) => CacheScope::Shared,
        // Length-prefixed, so no two pairs make the same identity.
        (h, u) => {
            let h = h.unwrap_or("");
            CacheScope::Tenant(Tenant::new(format!("{}:{h}{}", h.len(), u.unwrap_or(""))))
        }
    }
}

/// Parses and validates a body for `endpoint`.
pub fn parse(fe: &Frontend, endpoint: Endpoint, body: &[u8]) -> Result<ValidRequest, ApiError> {
    let max = fe.max_json_values();
    crate::json_budget::within(body, max).map_err(|over| {
        let param = ["messages", "prompt", "stop", "speculation", "prediction"]
            .into_iter()
            .find(|p| over.field.as_deref() == Some(*p));
        let field = match &over.field {
            Some(f) => format!("`{}`", crate::error::clip(f)),
            None => "the body".into(),
        };
        ApiError::Invalid {
            message: format!(
                "{field} holds too many JSON values: a request may hold at most {max} in all \
                 (a prompt of at most {} token ids, at most {} messages); refused before \
                 parsing",
                fe.context_length,
                fe.max_messages()
            ),
            param,
        }
    })?;
    let body: RequestBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::Malformed(format!("the request body is not a valid request: {e}"))
    })?;
    validate(fe, endpoint, body)
}

fn bad(param: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

fn unsupported(param: &'static str, what: &str) -> ApiError {
    bad(
        param,
        format!("`{param}` is not supported by specdec: {what}"),
    )
}

fn text_of(content: &Content, param: &'static str) -> Result<String, ApiError> {
    match content {
        Content::Text(t) => Ok(t.clone()),
        Content::Parts(parts) => {
            let mut out = String::new();
            for p in parts {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => out.push_str(t),
                    ("text", None) => return Err(bad(param, "a text part needs `text`")),
                    (other, _) => {
                        return Err(bad(
                            param,
                            format!(
                                "content parts of type `{}` are not supported; this model reads text only",
                                crate::error::clip(other)
                            ),
                        ))
                    }
                }
            }
            Ok(out)
        }
    }
}

/// Refuses, before tokenizing, prompt text that cannot fit the context whatever its
/// tokens (30 MB bodies tokenized on every core stalled the server and took gigabytes):
/// `bytes` of text are at least `bytes / max_token_bytes` tokens, and the template adds
/// at least `marks` more.
fn too_long_to_tokenize(fe: &Frontend, bytes: usize, marks: usize) -> Result<(), ApiError> {
    let at_least = bytes.div_ceil(fe.max_token_bytes).saturating_add(marks);
    if at_least <= fe.context_length {
        return Ok(());
    }
    Err(specdec_engine::EngineError::ContextOverflow {
        prompt: at_least,
        max_tokens: 1,
        limit: fe.context_length,
    }
    .into())
}

/// The prompt's tokens; a token-id prompt is moved out of `body` (it can be large).
fn prompt_tokens(
    fe: &Frontend,
    endpoint: Endpoint,
    body: &mut RequestBody,
) -> Result<Vec<u32>, ApiError> {
    let tok = &fe.tokenizer;
    // A completion prompt is the client's raw text: special tokens in it are parsed.
    let encode = |text: &str, param| {
        tok.encode_prompt(text)
            .map_err(|e| bad(param, format!("could not tokenize: {e}")))
    };
    let tokens = match endpoint {
        Endpoint::Chat => {
            if body.prompt.is_some() {
                return Err(bad(
                    "prompt",
                    "chat completions take `messages`, not `prompt`",
                ));
            }
            let messages = body
                .messages
                .as_ref()
                .ok_or_else(|| bad("messages", "`messages` is required"))?;
            if messages.is_empty() {
                return Err(bad("messages", "`messages` must hold at least one message"));
            }
            let max = fe.max_messages();
            if messages.len() > max {
                return Err(bad(
                    "messages",
                    format!(
                        "`messages` may hold at most {max} messages (each takes at least one \
                         token of the context of {} tokens), got {}",
                        fe.context_length,
                        messages.len()
                    ),
                ));
            }
            // Bounded before anything is copied or rendered: the content's bytes, and one
            // token per message for the template's mark of it (a million empty messages
            // cost 21 s and 3 GB to render and tokenize when only content was counted).
            let bytes: usize = messages
                .iter()
                .filter_map(|m| m.content.as_ref())
                .map(content_bytes)
                .sum();
            too_long_to_tokenize(fe, bytes, messages.len())?;
            let mut chat = Vec::with_capacity(messages.len());
            for m in messages {
                let role = match m.role.as_str() {
                    "system" | "developer" => "system",
                    "user" => "user",
                    "assistant" => "assistant",
                    other => {
                        return Err(bad(
                            "messages",
                            format!(
                            "role `{}` is not supported (use system, developer, user or assistant)",
                            crate::error::clip(other)
                        ),
                        ))
                    }
                };
                if m.tool_calls.is_some() || m.tool_call_id.is_some() {
                    return Err(unsupported("messages", "tool calls are not supported"));
                }
                if m.refusal.is_some() {
                    return Err(unsupported(
                        "messages",
                        "a message's `refusal` is not supported; send its text as `content`",
                    ));
                }
                let content = match &m.content {
                    Some(c) => text_of(c, "messages")?,
                    None => {
                        return Err(bad(
                            "messages",
                            format!("a `{role}` message needs `content`"),
                        ))
                    }
                };
                chat.push(ChatMessage::new(role, content));
            }
            // Contents are text: special-token strings in them do not become control tokens.
            tok.encode_chat(&fe.template, &chat, true).map_err(|e| {
                bad(
                    "messages",
                    format!("the chat template rejected these messages: {e}"),
                )
            })?
        }
        Endpoint::Completion => {
            if body.messages.is_some() {
                return Err(bad(
                    "messages",
                    "completions take `prompt`; use /v1/chat/completions for `messages`",
                ));
            }
            let one = || bad("prompt", "exactly one prompt per request is served");
            match body
                .prompt
                .take()
                .ok_or_else(|| bad("prompt", "`prompt` is required"))?
            {
                PromptInput::Text(t) => {
                    too_long_to_tokenize(fe, t.len(), 0)?;
                    encode(&t, "prompt")?
                }
                PromptInput::Texts(v) if v.len() == 1 => {
                    too_long_to_tokenize(fe, v[0].len(), 0)?;
                    encode(&v[0], "prompt")?
                }
                PromptInput::Tokens(ids) => ids,
                PromptInput::TokenLists(mut v) if v.len() == 1 => v.swap_remove(0),
                _ => return Err(one()),
            }
        }
    };
    let vocab = fe.tokenizer.vocab_size();
    if let Some(&bad_id) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(bad(
            "prompt",
            format!("token id {bad_id} is outside the vocabulary of {vocab}"),
        ));
    }
    if tokens.is_empty() {
        return Err(bad("prompt", "the prompt is empty"));
    }
    Ok(tokens)
}

fn validate(
    fe: &Frontend,
    endpoint: Endpoint,
    mut body: RequestBody,
) -> Result<ValidRequest, ApiError> {
    let model = body
        .model
        .as_deref()
        .ok_or_else(|| bad("model", "`model` is required"))?;
    if model != fe.model_id {
        return Err(ApiError::UnknownModel {
            requested: crate::error::clip(model),
            served: fe.model_id.clone(),
        });
    }
    reject_unsupported(&body)?;
    let spec = body.speculation.take().unwrap_or_default();
    reference_sizes(body.prediction.as_ref(), &spec)?;
    if endpoint == Endpoint::Completion && body.max_completion_tokens.is_some() {
        return Err(bad(
            "max_completion_tokens",
            "completions take `max_tokens`",
        ));
    }
    let prompt = prompt_tokens(fe, endpoint, &mut body)?;
    let sampling = sampling(&body)?;
    let room = fe.context_length.saturating_sub(prompt.len());
    let max_tokens = match body.max_completion_tokens.or(body.max_tokens) {
        Some(m) if m < 1 => {
            return Err(bad(
                "max_tokens",
                format!("max_tokens must be at least 1, got {m}"),
            ))
        }
        Some(m) => usize::try_from(m).unwrap_or(usize::MAX),
        None => room,
    };
    if max_tokens == 0 || max_tokens > room {
        return Err(specdec_engine::EngineError::ContextOverflow {
            prompt: prompt.len(),
            max_tokens: max_tokens.max(1),
            limit: fe.context_length,
        }
        .into());
    }
    let stop = match body.stop.take() {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) if v.len() <= MAX_STOPS => v,
        Some(OneOrMany::Many(v)) => {
            return Err(bad(
                "stop",
                format!("at most {MAX_STOPS} stop sequences, got {}", v.len()),
            ))
        }
    };
    if let Some(long) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(bad(
            "stop",
            format!(
                "a stop sequence may hold at most {MAX_STOP_BYTES} bytes, got {}",
                long.len()
            ),
        ));
    }
    let stream = body.stream.unwrap_or(false);
    if body.stream_options.is_some() && !stream {
        return Err(bad(
            "stream_options",
            "`stream_options` needs `stream: true`",
        ));
    }
    let include_usage = body
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);

    let encode_ref = |text: &str, param| {
        fe.tokenizer
            .encode(text, false)
            .map_err(|e| bad(param, format!("could not tokenize: {e}")))
    };
    let mut references = Vec::new();
    let mut prediction = None;
    if let Some(p) = &body.prediction {
        if p.kind != "content" {
            return Err(bad(
                "prediction",
                format!(
                    "prediction type must be `content`, got `{}`",
                    crate::error::clip(&p.kind)
                ),
            ));
        }
        let tokens = encode_ref(&text_of(&p.content, "prediction")?, "prediction")?;
        references.push(tokens.clone());
        prediction = Some(tokens);
    }
    let default = SpeculationSpec {
        method: match fe.default_method {
            // A prediction asks for copying even where the server drafts nothing by default.
            DraftMethod::None if prediction.is_some() => DraftMethod::Reference,
            m => m,
        },
        acceptance: Acceptance::Strict,
    };
    let parsed = speculation(&spec, &default, &sampling)?;
    let max_draft = match spec.max_draft_tokens {
        None => fe.default_max_draft,
        Some(n) if (0..=MAX_DRAFT_LIMIT as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(bad(
                "speculation",
                format!("speculation.max_draft_tokens must be in [0, {MAX_DRAFT_LIMIT}], got {n}"),
            ))
        }
    };
    for r in spec.references.iter().flatten() {
        references.push(encode_ref(r, "speculation")?);
    }
    let tokens: usize = references.iter().map(Vec::len).sum();
    if tokens > MAX_REFERENCE_TOKENS {
        return Err(bad(
            reference_param(&body),
            format!(
                "`speculation.references` and `prediction` may hold at most {MAX_REFERENCE_TOKENS} tokens together, got {tokens}"
            ),
        ));
    }
    let pool = spec
        .pool
        .as_deref()
        .map(PoolName::parse)
        .transpose()
        .map_err(|e| bad("speculation", format!("speculation.pool: {e}")))?;
    if body.user.as_ref().is_some_and(|u| u.len() > MAX_USER_BYTES) {
        return Err(bad(
            "user",
            format!("`user` is at most {MAX_USER_BYTES} bytes"),
        ));
    }
    Ok(ValidRequest {
        user: body.user.take(),
        gen: GenerateRequest {
            prompt,
            max_tokens,
            sampling,
            stop,
            speculation: Speculation {
                max_draft,
                references,
                pool,
                ..parsed.into()
            },
            cache_scope: CacheScope::Shared,
        },
        stream,
        include_usage,
        prediction,
    })
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn prefix_cache_scopes_follow_the_tenant_rule() {
        assert_eq!(cache_scope(false, None, None), CacheScope::Shared);
        assert_eq!(cache_scope(true, None, None), CacheScope::Private);
        assert_eq!(cache_scope(true, Some(""), Some("")), CacheScope::Private);
        let t = |h, u| cache_scope(true, h, u);
        assert_eq!(t(None, Some("a")), cache_scope(false, None, Some("a")));
        assert_ne!(t(None, Some("a")), t(None, Some("b")));
        assert_ne!(t(Some("a"), None), t(None, Some("a")));
        assert_ne!(t(Some("ab"), Some("c")), t(Some("a"), Some("bc")));
        assert!(matches!(t(Some("g"), None), CacheScope::Tenant(_)));
    }
}
