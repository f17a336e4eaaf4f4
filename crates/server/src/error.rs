//! Every way a request can fail, and the one place that maps them to HTTP.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Most characters of client input an error message repeats.
pub const MAX_ECHO_CHARS: usize = 256;

/// Most characters of any error message (a backstop: input echoed by parsers, such as an
/// unknown field's name, is cut here).
const MAX_MESSAGE_CHARS: usize = 2048;

/// `input` cut to [`MAX_ECHO_CHARS`] characters, marked when cut.
pub fn clip(input: &str) -> String {
    clip_to(input, MAX_ECHO_CHARS)
}

fn clip_to(input: &str, max: usize) -> String {
    match input.char_indices().nth(max) {
        None => input.to_string(),
        Some((at, _)) => format!("{}... ({} bytes in all)", &input[..at], input.len()),
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Loading the model or the drafting state failed.
    #[error(transparent)]
    Engine(#[from] specdec_engine::EngineError),
    /// The engine thread could not be spawned.
    #[error("could not start the engine thread: {0}")]
    Thread(std::io::Error),
    /// A server setting is out of range or inconsistent.
    #[error("invalid setting: {0}")]
    Config(String),
    /// The `--catalogue` for `/v1/recommend` could not be loaded.
    #[error("loading the recommendation catalogue: {0}")]
    Catalogue(#[from] specdec_rec::RecError),
    /// `--shared-state` could not start (a Redis that is down is not an error).
    #[error(transparent)]
    SharedState(#[from] specdec_shared_state::SharedStateError),
}

/// A request's failure, sent to the client as OpenAI's error body with its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON, or not the shape of a request.
    #[error("{0}")]
    Malformed(String),
    /// A parameter is out of range, unsupported or inconsistent.
    #[error("{message}")]
    Invalid {
        /// What is wrong, and how to fix it.
        message: String,
        /// The request field at fault, when there is one.
        param: Option<&'static str>,
    },
    /// The prompt and `max_tokens` do not fit the context (the engine's
    /// `EngineError::ContextOverflow`, whose message says what to fix).
    #[error(transparent)]
    ContextLength(specdec_engine::EngineError),
    /// The request names a model other than the one served.
    #[error("the model `{requested}` does not exist; this server serves `{served}`")]
    UnknownModel {
        /// The model the request named.
        requested: String,
        /// The model this server serves.
        served: String,
    },
    /// The API key is missing or wrong.
    #[error("missing or wrong API key: send `Authorization: Bearer <key>`")]
    Unauthorized,
    /// The body did not arrive in time (seconds allowed).
    #[error("the request body did not arrive within {0} s")]
    BodyTimeout(f64),
    /// The body is over the size limit (bytes allowed).
    #[error("the request body is over the limit of {0} bytes")]
    TooLarge(usize),
    /// No route for the path.
    #[error("no route for {}", clip(.0))]
    NotFound(String),
    /// The route does not take this HTTP method.
    #[error("{} does not accept this HTTP method", clip(.0))]
    MethodNotAllowed(String),
    /// Too many requests running or queued (the limit).
    #[error("the server is at capacity ({0} requests running or queued); retry shortly")]
    QueueFull(usize),
    /// The client holds the most connections one client may (the limit).
    #[error(
        "this client has {0} connections open, the most one client may hold: send requests \
         on those (keep-alive) or close some"
    )]
    TooManyConnections(usize),
    /// The request ran past the server's timeout (seconds).
    #[error("the request did not finish within the server's timeout of {0} s")]
    Timeout(u64),
    /// `/v1/recommend` without a catalogue loaded.
    #[error(
        "recommendation is not enabled on this server: start it with `specdec serve --catalogue \
         movielens` (or `--catalogue FILE`, a file of titles one per line)"
    )]
    RecommendDisabled,
    /// The engine has stopped taking requests.
    #[error("the engine is shutting down")]
    Unavailable,
    /// A named drafting pool's files could not be loaded. What went wrong (with the
    /// server's paths) is logged, not sent: clients learn the pool, not the file system.
    #[error(
        "the drafting pool `{0}` could not be loaded on the server (its files are damaged \
         or unreadable; the server's log says why): use another pool, or none"
    )]
    PoolUnavailable(String),
    /// A client's own quota of named drafting pools is used up (retrying does not help:
    /// it must reuse a pool it has).
    #[error("{0}")]
    PoolLimit(String),
    /// A server fault. The message is sent to the client, so it says what failed, never
    /// the server's paths or internals (those are logged where the error is made).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// An [`ApiError::Invalid`] blaming `param`.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            message: message.into(),
            param: Some(param),
        }
    }

    /// The HTTP status the error is sent with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Malformed(_)
            | ApiError::Invalid { .. }
            | ApiError::ContextLength(_)
            | ApiError::PoolLimit(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownModel { .. } | ApiError::NotFound(_) | ApiError::RecommendDisabled => {
                StatusCode::NOT_FOUND
            }
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::QueueFull(_) | ApiError::TooManyConnections(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PoolUnavailable(_) | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// OpenAI's `error.type` and `error.code`.
    fn kind(&self) -> (&'static str, Option<&'static str>) {
        match self {
            ApiError::Malformed(_) | ApiError::Invalid { .. } => ("invalid_request_error", None),
            ApiError::TooLarge(_) => ("invalid_request_error", Some("request_too_large")),
            ApiError::BodyTimeout(_) => ("invalid_request_error", Some("request_timeout")),
            ApiError::ContextLength(_) => {
                ("invalid_request_error", Some("context_length_exceeded"))
            }
            ApiError::UnknownModel { .. } => ("invalid_request_error", Some("model_not_found")),
            ApiError::NotFound(_) => ("invalid_request_error", Some("not_found")),
            ApiError::RecommendDisabled => ("invalid_request_error", Some("recommend_not_enabled")),
            ApiError::MethodNotAllowed(_) => ("invalid_request_error", Some("method_not_allowed")),
            ApiError::Unauthorized => ("invalid_request_error", Some("invalid_api_key")),
            ApiError::QueueFull(_) => ("rate_limit_error", Some("rate_limit_exceeded")),
            ApiError::TooManyConnections(_) => ("rate_limit_error", Some("too_many_connections")),
            ApiError::Timeout(_) => ("timeout_error", Some("timeout")),
            ApiError::Unavailable => ("server_error", Some("unavailable")),
            ApiError::PoolLimit(_) => ("invalid_request_error", Some("pool_limit_exceeded")),
            ApiError::PoolUnavailable(_) => ("server_error", Some("pool_unavailable")),
            ApiError::Internal(_) => ("server_error", None),
        }
    }

    /// The OpenAI error object, as JSON (also sent as a stream's last event).
    pub fn body(&self) -> serde_json::Value {
        let (kind, code) = self.kind();
        let param = match self {
            ApiError::Invalid { param, .. } => *param,
            ApiError::ContextLength(_) => Some("messages"),
            ApiError::UnknownModel { .. } => Some("model"),
            ApiError::PoolUnavailable(_) | ApiError::PoolLimit(_) => Some("speculation"),
            _ => None,
        };
        let message = clip_to(&self.to_string(), MAX_MESSAGE_CHARS);
        json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The one place errors become statuses, so the one place server faults are logged.
        if self.status().is_server_error() {
            tracing::error!("answering {}: {self}", self.status());
        }
        let mut res = (self.status(), axum::Json(self.body())).into_response();
        match self {
            ApiError::QueueFull(_) | ApiError::TooManyConnections(_) => {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::Unauthorized => {
                res.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::BodyTimeout(_) => {
                // The rest of the body may still come: the connection cannot be reused.
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        res
    }
}

/// The message a client gets for a server fault whose details are logged (engine and
/// I/O errors name the server's files).
const SEE_THE_LOG: &str = "the request failed on the server; its log says why";

impl From<specdec_engine::EngineError> for ApiError {
    /// A request's own mistake is the client's to fix and is sent as it is; a server fault
    /// is logged in full here and sent without its details.
    fn from(e: specdec_engine::EngineError) -> Self {
        use specdec_engine::EngineError as E;
        match e {
            E::InvalidRequest(m) => ApiError::Invalid {
                message: m,
                param: None,
            },
            e @ E::ContextOverflow { .. } => ApiError::ContextLength(e),
            e @ E::PoolLimit { .. } => ApiError::PoolLimit(e.to_string()),
            E::Pool { pool, source } => {
                tracing::error!("drafting pool `{pool}` could not be loaded: {source}");
                ApiError::PoolUnavailable(clip(&pool))
            }
            other => {
                tracing::error!("a request failed in the engine: {other}");
                ApiError::Internal(SEE_THE_LOG.into())
            }
        }
    }
}

impl From<specdec_rec::RecError> for ApiError {
    /// A history that cannot become a prompt, or a search the request's options make
    /// impossible, is the client's to fix; anything else is the server's fault.
    fn from(e: specdec_rec::RecError) -> Self {
        use specdec_rec::RecError as R;
        match e {
            R::Engine(e) => e.into(),
            R::Invalid(m) => ApiError::invalid("history", m),
            other => {
                tracing::error!("a recommendation failed: {other}");
                ApiError::Internal(SEE_THE_LOG.into())
            }
        }
    }
}
