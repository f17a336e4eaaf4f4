//! HTTP handlers: validate at the edge, enqueue, then answer in one piece or as SSE.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use specdec_engine::{DraftMethod, GenerateOutput};
use tokio::sync::mpsc;

use crate::api::{
    CompletionTokensDetails, ModelCard, ModelList, PromptTokensDetails, SpeculationReport, Usage,
};
use crate::error::ApiError;
use crate::recommend;
use crate::request_id::RequestSpan;
use crate::state::AppState;
use crate::validate::{self, Endpoint, ValidRequest};
use crate::worker::{Event, Job, RecommendJob};

/// Request bodies beyond this are refused. Room for the longest prompt text a 32k-context
/// model takes (4 MiB for Qwen2.5, whose tokens span up to 128 bytes) with 1 MiB of
/// references, even escaped as JSON's worst (6 bytes a byte). What a body costs to parse
/// is bounded by its JSON values (see `json_budget`), not by this.
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// How long a request's body may take to arrive (an extension the router's handlers read;
/// absent, as under a test's `oneshot`, bodies are read without a limit).
#[derive(Clone, Copy, Debug)]
pub struct BodyReadTimeout(pub Duration);

/// The application: every endpoint, with the API key checked on `/v1`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/recommend", post(recommend))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|uri: Uri| async move { ApiError::NotFound(uri.path().to_string()) })
        .method_not_allowed_fallback(|uri: Uri| async move {
            ApiError::MethodNotAllowed(uri.path().to_string())
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(crate::request_id::layer))
        .with_state(state)
}

async fn auth(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(key) = &s.api_key {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if given != Some(key.as_str()) {
            return ApiError::Unauthorized.into_response();
        }
    }
    next.run(req).await
}

/// 200 while the engine serves; 503 with the reason when its thread ended or its last
/// steps all failed.
async fn health(State(s): State<Arc<AppState>>) -> Response {
    match s.metrics.health.check() {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(reason) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unhealthy", "reason": reason})),
        )
            .into_response(),
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 9110, 11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn models(State(s): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: s.frontend.model_id.clone(),
            object: "model",
            created: s.started,
            owned_by: "specdec",
            max_model_len: s.frontend.context_length,
        }],
    })
}

/// The header a gateway sets to name the tenant a request comes from (scoping its
/// prefix-cache reuse; see [`validate::cache_scope`]).
pub const TENANT_HEADER: &str = "x-specdec-tenant";

async fn chat(State(s): State<Arc<AppState>>, req: Request) -> Response {
    generate(s, Endpoint::Chat, req).await
}

async fn completions(State(s): State<Arc<AppState>>, req: Request) -> Response {
    generate(s, Endpoint::Completion, req).await
}

/// `POST /v1/recommend`: parse off the runtime, wait for the engine thread, answer in one
/// piece.
async fn recommend(State(s): State<Arc<AppState>>, req: Request) -> Response {
    match recommend_answer(s, req).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn recommend_answer(s: Arc<AppState>, req: Request) -> Result<serde_json::Value, ApiError> {
    if s.recommender.is_none() {
        return Err(ApiError::RecommendDisabled);
    }
    let span = RequestSpan::of(&req);
    let body = body_bytes(read_body(req).await?)?;
    let state = s.clone();
    let inside = span.clone();
    let valid = off_runtime(move || {
        let _in = inside.enter();
        let rec = state
            .recommender
            .as_ref()
            .ok_or(ApiError::RecommendDisabled)?;
        let checks = recommend::Checks {
            model_id: &state.frontend.model_id,
            has_draft: rec.draft.is_some(),
            limits: rec.limits,
            item_tokens: rec.item_tokens,
            tokenizer: &state.frontend.tokenizer,
        };
        recommend::parse(&checks, &body)
    })
    .await?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let opts = valid.opts.clone();
    s.backend.submit_recommend(RecommendJob {
        request: valid,
        reply: tx,
        arrived: Instant::now(),
        slot: None,
        span,
    })?;
    let found = rx.await.map_err(|_| ApiError::Unavailable)??;
    let mut v = specdec_rec::recommend::answer_json(&found, &opts);
    v["object"] = "recommendation".into();
    v["model"] = s.frontend.model_id.clone().into();
    Ok(v)
}

/// The tenant header's one value, if any. A request carrying it more than once is refused:
/// the first value was taken, so a client could get ahead of a gateway that appends its
/// own, and no order of several values can be trusted. (A proxy that folds repeated lines
/// into one comma-separated value makes a tenant of its own, which no client can take.)
fn tenant_header(headers: &HeaderMap) -> Result<Option<HeaderValue>, ApiError> {
    let mut values = headers.get_all(TENANT_HEADER).iter();
    let first = values.next().cloned();
    let more = values.count();
    if more > 0 {
        return Err(ApiError::invalid(
            TENANT_HEADER,
            format!(
                "the {TENANT_HEADER} header may be sent once; this request has it {} times",
                more + 1
            ),
        ));
    }
    Ok(first)
}

/// Both endpoints: only the tenant header is kept of the request's headers.
async fn generate(s: Arc<AppState>, endpoint: Endpoint, req: Request) -> Response {
    let tenant = match tenant_header(req.headers()) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let span = RequestSpan::of(&req);
    match read_body(req).await {
        Ok(body) => respond(s, endpoint, tenant, body, span).await,
        Err(e) => e.into_response(),
    }
}

/// The body, within the connection's [`BodyReadTimeout`] when
/// it has one: a client that sends half a body does not hold a connection forever.
pub(crate) async fn read_body(req: Request) -> Result<Result<Bytes, BytesRejection>, ApiError> {
    use axum::extract::FromRequest;
    let limit = req.extensions().get::<BodyReadTimeout>().map(|t| t.0);
    let read = Bytes::from_request(req, &());
    match limit {
        Some(d) => tokio::time::timeout(d, read)
            .await
            .map_err(|_| ApiError::BodyTimeout(d.as_secs_f64())),
        None => Ok(read.await),
    }
}

/// What the response needs of the request once the engine owns it.
struct Meta {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
    method: DraftMethod,
    /// Whether a relaxed acceptance rule verifies this request's drafts.
    relaxed: bool,
    /// The rule's name (`strict`, `relaxed`).
    verify: &'static str,
    include_usage: bool,
    prediction: Option<Vec<u32>>,
}

async fn respond(
    s: Arc<AppState>,
    endpoint: Endpoint,
    tenant: Option<HeaderValue>,
    body: Result<Bytes, BytesRejection>,
    span: tracing::Span,
) -> Response {
    match enqueue_off_runtime(s, endpoint, tenant, body, span).await {
        Ok((meta, rx, true)) => stream(meta, rx).into_response(),
        Ok((meta, rx, false)) => match collect(rx).await {
            Ok(out) => Json(whole(&meta, &out)).into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => e.into_response(),
    }
}

type Enqueued = (Meta, mpsc::Receiver<Event>, bool);

/// Most request bodies parsed and tokenized at once. Parsing a body of tens of MB takes
/// seconds of CPU; it runs on blocking threads (never on the runtime's workers, which
/// must stay free for `/health`, streams and the other clients), a few at a time.
pub const MAX_PARSING: usize = 4;

static PARSING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_PARSING);

/// [`enqueue`] on a blocking thread, once one of [`MAX_PARSING`] permits is free.
async fn enqueue_off_runtime(
    s: Arc<AppState>,
    endpoint: Endpoint,
    tenant: Option<HeaderValue>,
    body: Result<Bytes, BytesRejection>,
    span: tracing::Span,
) -> Result<Enqueued, ApiError> {
    off_runtime(move || {
        let inside = span.clone();
        inside.in_scope(|| enqueue(&s, endpoint, tenant.as_ref(), body, span))
    })
    .await
}

/// `parse` on a blocking thread, once one of [`MAX_PARSING`] permits is free.
pub(crate) async fn off_runtime<T: Send + 'static>(
    parse: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = PARSING.acquire().await.map_err(|_| ApiError::Unavailable)?;
    tokio::task::spawn_blocking(parse).await.map_err(|e| {
        tracing::error!("parsing a request failed: {e}");
        ApiError::Internal("parsing the request failed".into())
    })?
}

/// The body's bytes, or the error a body that could not be read answers.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| match e.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(MAX_BODY_BYTES),
        _ => ApiError::Malformed(format!("could not read the body: {e}")),
    })
}

fn enqueue(
    s: &AppState,
    endpoint: Endpoint,
    tenant: Option<&HeaderValue>,
    body: Result<Bytes, BytesRejection>,
    span: tracing::Span,
) -> Result<Enqueued, ApiError> {
    let body = body_bytes(body)?;
    let tenant = match tenant {
        None => None,
        Some(v) => match v.to_str() {
            Ok(t) if t.len() <= validate::MAX_USER_BYTES => Some(t),
            _ => {
                return Err(ApiError::invalid(
                    TENANT_HEADER,
                    format!(
                        "the {TENANT_HEADER} header must be visible ASCII, at most {} bytes",
                        validate::MAX_USER_BYTES
                    ),
                ))
            }
        },
    };
    let ValidRequest {
        mut gen,
        stream,
        include_usage,
        prediction,
        user,
    } = validate::parse(&s.frontend, endpoint, &body)?;
    gen.cache_scope = validate::cache_scope(s.api_key.is_some(), tenant, user.as_deref());
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let meta = Meta {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{}-{n}", s.started),
            Endpoint::Completion => format!("cmpl-{}-{n}", s.started),
        },
        created: unix_now(),
        model: s.frontend.model_id.clone(),
        endpoint,
        method: gen.speculation.method,
        relaxed: gen.speculation.acceptance.is_relaxed(),
        verify: gen.speculation.acceptance.name(),
        include_usage,
        prediction,
    };
    let (tx, rx) = crate::worker::events();
    s.backend.submit(Job {
        gen,
        stream,
        events: tx,
        arrived: Instant::now(),
        slot: None,
        span,
    })?;
    Ok((meta, rx, stream))
}

async fn collect(mut rx: mpsc::Receiver<Event>) -> Result<Box<GenerateOutput>, ApiError> {
    loop {
        match rx.recv().await {
            Some(Event::Text(_)) => {}
            Some(Event::Done(result)) => return result,
            None => return Err(ApiError::Unavailable),
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn usage(meta: &Meta, out: &GenerateOutput) -> Usage {
    let (accepted, rejected) = meta.prediction.as_deref().map_or((0, 0), |p| {
        let copied = out.spec.accepted_by_source.get("reference").copied();
        crate::prediction::accounting(p, &out.token_ids, copied.unwrap_or(0))
    });
    Usage {
        prompt_tokens: out.prompt_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: out.cached_prompt_tokens,
        },
        completion_tokens: out.completion_tokens,
        total_tokens: out.prompt_tokens + out.completion_tokens,
        completion_tokens_details: CompletionTokensDetails {
            accepted_prediction_tokens: accepted,
            rejected_prediction_tokens: rejected,
            reasoning_tokens: 0,
        },
    }
}

fn report(meta: &Meta, out: &GenerateOutput) -> SpeculationReport {
    SpeculationReport {
        method: meta.method.name(),
        relaxed: meta.relaxed,
        verify: meta.verify,
        relaxed_tokens: out.spec.relaxed_tokens,
        drafted_tokens: out.spec.drafted_tokens,
        accepted_tokens: out.spec.accepted_tokens,
        mean_accepted_length: out.spec.mean_accepted_length(out.completion_tokens),
        accepted_by_position: out.spec.accepted_by_position.clone(),
    }
}

fn object(meta: &Meta, chunk: bool) -> &'static str {
    match (meta.endpoint, chunk) {
        (Endpoint::Chat, false) => "chat.completion",
        (Endpoint::Chat, true) => "chat.completion.chunk",
        (Endpoint::Completion, _) => "text_completion",
    }
}

/// A non-streaming response body.
fn whole(meta: &Meta, out: &GenerateOutput) -> Value {
    let finish = out.finish_reason.as_str();
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({"index": 0, "message": {"role": "assistant", "content": out.text},
            "finish_reason": finish, "logprobs": null}),
        Endpoint::Completion => {
            json!({"index": 0, "text": out.text, "finish_reason": finish, "logprobs": null})
        }
    };
    let mut body = envelope(meta, false, json!([choice]));
    body["usage"] = json!(usage(meta, out));
    body["speculation"] = json!(report(meta, out));
    body
}

/// The fields every response body and chunk carries around its `choices`.
fn envelope(meta: &Meta, chunk: bool, choices: Value) -> Value {
    json!({"id": meta.id, "object": object(meta, chunk), "created": meta.created,
        "model": meta.model, "system_fingerprint": null, "choices": choices})
}

/// One streamed chunk: `delta` text (or the role), `finish` on the last.
fn chunk(meta: &Meta, text: Option<&str>, role: bool, finish: Option<&str>) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat => {
            let mut delta = serde_json::Map::new();
            if role {
                delta.insert("role".into(), json!("assistant"));
            }
            if let Some(t) = text {
                delta.insert("content".into(), json!(t));
            }
            json!({"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null})
        }
        Endpoint::Completion => {
            json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": finish, "logprobs": null})
        }
    };
    envelope(meta, true, json!([choice]))
}

struct StreamState {
    meta: Meta,
    rx: mpsc::Receiver<Event>,
    queue: VecDeque<String>,
    done: bool,
}

impl StreamState {
    fn on(&mut self, event: Option<Event>) {
        let meta = &self.meta;
        match event {
            Some(Event::Text(t)) => self
                .queue
                .push_back(chunk(meta, Some(&t), false, None).to_string()),
            Some(Event::Done(Ok(out))) => {
                let mut last = chunk(meta, None, false, Some(out.finish_reason.as_str()));
                last["speculation"] = json!(report(meta, &out));
                self.queue.push_back(last.to_string());
                if meta.include_usage {
                    let mut u = envelope(meta, true, json!([]));
                    u["usage"] = json!(usage(meta, &out));
                    self.queue.push_back(u.to_string());
                }
                self.queue.push_back("[DONE]".into());
                self.done = true;
            }
            Some(Event::Done(Err(e))) => {
                self.queue.push_back(e.body().to_string());
                self.queue.push_back("[DONE]".into());
                self.done = true;
            }
            None => {
                self.queue
                    .push_back(ApiError::Unavailable.body().to_string());
                self.done = true;
            }
        }
    }
}

/// Server-sent events; dropping the stream (client gone) closes the channel, which
/// cancels the generation on the engine thread.
fn stream(
    meta: Meta,
    rx: mpsc::Receiver<Event>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut queue = VecDeque::new();
    if meta.endpoint == Endpoint::Chat {
        queue.push_back(chunk(&meta, Some(""), true, None).to_string());
    }
    let state = StreamState {
        meta,
        rx,
        queue,
        done: false,
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(data) = st.queue.pop_front() {
                return Some((Ok(SseEvent::default().data(data)), st));
            }
            if st.done {
                return None;
            }
            let e = st.rx.recv().await;
            st.on(e);
        }
    });
    Sse::new(events)
}
