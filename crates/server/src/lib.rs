//! specdec's OpenAI-compatible server.
//!
//! `POST /v1/chat/completions` and `POST /v1/completions` (both streaming with SSE),
//! `GET /v1/models`, `GET /health`, `GET /metrics`. Extensions: Predicted Outputs feed the
//! reference drafter, and a `speculation` field selects the draft method per request; every
//! response reports its speculation statistics. The model runs on one engine thread that
//! batches the requests in flight into shared forwards.

pub mod api;
pub mod error;
pub mod metrics;
mod prediction;
mod routes;
pub mod validate;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use specdec_engine::{load_trie, DraftMethod, EngineError, Loaded, Pools};

pub use error::ApiError;
pub use routes::router;
pub use validate::Frontend;

/// Request bodies beyond this are refused (long prompts with references fit easily).
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("could not start the engine thread: {0}")]
    Thread(std::io::Error),
    #[error("invalid setting: {0}")]
    Config(String),
}

/// Settings of `specdec serve`.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub model: PathBuf,
    /// The id clients pass as `model` (default: the file's stem).
    pub model_id: Option<String>,
    pub api_key: Option<String>,
    pub threads: usize,
    pub max_concurrent: usize,
    pub max_queue: usize,
    pub timeout: Duration,
    pub trie: Option<PathBuf>,
    /// Folder of the named drafting pools (`NAME.trie` each; none: pools live in memory).
    pub pools: Option<PathBuf>,
    pub default_method: DraftMethod,
    pub default_max_draft: usize,
    /// Memory for finished requests' KV caches reused by requests sharing a prefix
    /// (0: off).
    pub prefix_cache_bytes: usize,
}

/// What every handler shares.
pub struct AppState {
    pub frontend: Frontend,
    pub queue: worker::Queue,
    pub metrics: Arc<metrics::Metrics>,
    pub api_key: Option<String>,
    /// Unix seconds at start-up.
    pub started: u64,
}

/// A loaded server: the router's state and the engine thread behind it.
pub struct Server {
    pub state: Arc<AppState>,
    pub engine: std::thread::JoinHandle<()>,
}

fn model_id(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

impl Server {
    /// Loads the model and starts the engine thread.
    pub fn load(config: &ServerConfig) -> Result<Server, ServerError> {
        if config.max_concurrent == 0 || config.max_queue == 0 {
            return Err(ServerError::Config(
                "--max-concurrent and --max-queue must be at least 1".into(),
            ));
        }
        let loaded = Loaded::open(&config.model, config.threads)?;
        let id = config
            .model_id
            .clone()
            .unwrap_or_else(|| model_id(&config.model));
        let frontend = Frontend::new(
            &loaded.meta,
            id,
            config.default_method,
            config.default_max_draft,
        );
        let trie =
            load_trie(config.trie.as_deref(), loaded.meta.config.vocab).map_err(|source| {
                EngineError::Trie {
                    path: config.trie.clone().unwrap_or_default(),
                    source,
                }
            })?;
        let pools = Pools::new(trie, config.trie.clone(), config.pools.clone());
        let model = Arc::new(loaded.model);
        let metrics = Arc::new(metrics::Metrics::new(&frontend.model_id));
        let (queue, rx) = worker::Queue::new(config.max_queue, metrics.clone());
        let engine = worker::spawn(
            model,
            frontend.tokenizer.clone(),
            pools,
            worker::WorkerConfig {
                max_concurrent: config.max_concurrent,
                timeout: config.timeout,
                prefix_cache_bytes: config.prefix_cache_bytes,
            },
            metrics.clone(),
            rx,
        )
        .map_err(ServerError::Thread)?;
        let state = Arc::new(AppState {
            frontend,
            queue,
            metrics,
            api_key: config.api_key.clone(),
            started: routes::unix_now(),
        });
        Ok(Server { state, engine })
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then waits for the engine to
/// finish the requests in flight (and save the trie).
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: Server,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(server.state.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    drop(server.state);
    let engine = server.engine;
    tokio::task::spawn_blocking(move || engine.join())
        .await
        .ok();
    Ok(())
}
