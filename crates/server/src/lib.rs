//! specdec's OpenAI-compatible server.
//!
//! `POST /v1/chat/completions` and `POST /v1/completions` (both streaming with SSE),
//! `GET /v1/models`, `GET /health`, `GET /metrics`, and `POST /v1/recommend` (generative
//! recommendation by catalogue-constrained beam search, with `--catalogue`). Extensions: Predicted Outputs feed the
//! reference drafter, and a `speculation` field selects the draft method per request; every
//! response reports its speculation statistics. The model runs on one engine thread that
//! batches the requests in flight into shared forwards.
//!
//! Modules: [`api`] (the wire format), [`validate`] (bodies into engine requests; the
//! `speculation` field's method and verification rule), `routes` and `connections` (HTTP),
//! [`worker`] (the engine thread and its queue), [`recommend`] (`/v1/recommend`: AtSpeed's
//! speculative beam search when a draft model is loaded), `prediction` (Predicted Outputs
//! accounting), [`metrics`] and [`error`].

pub mod api;
pub mod backend;
mod connections;
pub mod error;
mod json_budget;
pub mod metrics;
mod prediction;
pub mod recommend;
pub mod request_id;
mod routes;
mod state;
pub mod validate;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use specdec_engine::{
    DraftMethod, DraftModel, Loaded, ModelMeta, PoolLimits, PoolName, Pools, Target,
};
use specdec_rec::recommend::CatalogueSource;

pub use backend::Backend;
pub use error::{ApiError, ServerError};
pub use recommend::{RecommendLimits, Recommender};
pub use routes::{router, BodyReadTimeout, MAX_BODY_BYTES};
pub use state::AppState;
pub use validate::Frontend;

/// Settings of `specdec serve`.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The GGUF model served.
    pub model: PathBuf,
    /// The id clients pass as `model` (default: the file's stem).
    pub model_id: Option<String>,
    /// The key clients must send as `Authorization: Bearer <key>` (none: no key needed).
    pub api_key: Option<String>,
    /// Kernel threads for the model's forwards.
    pub threads: usize,
    /// Requests generated together (batched into shared forwards).
    pub max_concurrent: usize,
    /// Requests running or waiting at most; more are refused with 429.
    pub max_queue: usize,
    /// A request running longer is ended with a timeout error.
    pub timeout: Duration,
    /// The global pool's trie file (its history index beside it); none: the global pool lives in
    /// memory only.
    pub trie: Option<PathBuf>,
    /// Folder of the named drafting pools (`NAME.trie` and `NAME.history` each; none:
    /// pools live in memory).
    pub pools: Option<PathBuf>,
    /// The most tokens each pool's history index holds (oldest requests evicted first).
    pub history_tokens: usize,
    /// The draft method of requests that name none.
    pub default_method: DraftMethod,
    /// Most draft nodes per step for requests that do not say.
    pub default_max_draft: usize,
    /// Memory for finished requests' KV caches reused by requests sharing a prefix
    /// (0: off).
    pub prefix_cache_bytes: usize,
    /// The catalogue `/v1/recommend` recommends from (none: the endpoint is off).
    pub catalogue: Option<CatalogueSource>,
    /// A draft model of the target's vocabulary: text requests draft with it
    /// (`speculation.method: "model"`, and as a part of `auto`), and `/v1/recommend`'s
    /// speculative beam search with a catalogue.
    pub draft_model: Option<PathBuf>,
    /// What `/v1/recommend` may ask of one search.
    pub recommend: RecommendLimits,
    /// Bounds on the drafting pools clients create.
    pub pool_limits: PoolLimits,
    /// Named pools every tenant reads and feeds (the operator's choice); all other pools
    /// are their tenant's own.
    pub shared_pools: Vec<PoolName>,
    /// `redis://HOST[:PORT][/DB]`: replicas of this model share what their requests teach
    /// the drafting pools through it (none: this server learns alone).
    pub shared_state: Option<String>,
}

impl ServerConfig {
    /// The defaults of `specdec serve` for the model at `model`.
    pub fn new(model: PathBuf) -> Self {
        ServerConfig {
            model,
            model_id: None,
            api_key: None,
            threads: 2,
            max_concurrent: 8,
            max_queue: 64,
            timeout: Duration::from_secs(600),
            trie: None,
            pools: None,
            history_tokens: 1 << 20,
            default_method: DraftMethod::Auto,
            default_max_draft: 32,
            prefix_cache_bytes: 512 << 20,
            catalogue: None,
            draft_model: None,
            recommend: RecommendLimits::default(),
            pool_limits: SERVER_POOL_LIMITS,
            shared_pools: Vec::new(),
            shared_state: None,
        }
    }
}

/// Pool bounds of a server: a client's requests can create pools, so memory, files and
/// the time of a save stay bounded whatever they ask.
pub const SERVER_POOL_LIMITS: PoolLimits = PoolLimits {
    max_loaded: 64,
    max_named: 64,
    max_saved_tenants: 4096,
};

/// A loaded server: the router's state and the engine thread behind it.
pub struct Server {
    /// The state the router serves from.
    pub state: Arc<AppState>,
    /// The engine thread; it ends once its queue is closed and the work in flight is done,
    /// after saving the drafting state.
    pub engine: std::thread::JoinHandle<()>,
}

fn model_id(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// Longest `--served-model-name`.
pub const MAX_MODEL_ID_CHARS: usize = 256;

/// A served model id is 1 to [`MAX_MODEL_ID_CHARS`] characters, none of them control
/// characters (it appears in responses, headers of logs, and `/metrics` lines).
pub fn check_model_id(id: &str) -> Result<(), ServerError> {
    let n = id.chars().count();
    if n == 0 || n > MAX_MODEL_ID_CHARS {
        return Err(ServerError::Config(format!(
            "the served model name must be 1 to {MAX_MODEL_ID_CHARS} characters, got {n}"
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(ServerError::Config(
            "the served model name may not contain control characters (such as a newline)".into(),
        ));
    }
    Ok(())
}

/// What a server runs: a target, its tokenizer, template and configuration, and the
/// draft model beside it. [`Server::load`] makes one from the model file; tests of the
/// server give a fake target and a tokenizer of its vocabulary instead.
pub struct Served {
    /// The model (or any [`Target`]) the engine thread decodes with.
    pub target: Arc<dyn Target>,
    /// Its configuration, tokenizer and chat template.
    pub meta: ModelMeta,
    /// The draft model of `config.draft_model`, loaded.
    pub draft_model: Option<DraftModel>,
}

impl Server {
    /// Loads the model (and the draft model) and starts the engine thread.
    pub fn load(config: &ServerConfig) -> Result<Server, ServerError> {
        // The settings are refused before a 1 GB file is read.
        check_config(config)?;
        let loaded = Loaded::open(&config.model, config.threads)?;
        // One draft model for text (`speculation.method: "model"`, a part of `auto`) and
        // for /v1/recommend's speculative beam search.
        let draft_model = match &config.draft_model {
            Some(path) => Some(DraftModel::load(
                path,
                &loaded.meta,
                &config.model,
                config.threads,
            )?),
            None => None,
        };
        if !loaded.meta.has_template {
            tracing::warn!(
                model = %config.model.display(),
                "the model has no chat template: /v1/chat/completions wraps messages in ChatML, \
                 which it was not trained on; /v1/completions completes text as it is"
            );
        }
        let served = Served {
            target: Arc::new(loaded.model),
            meta: loaded.meta,
            draft_model,
        };
        Self::spawn(config, served)
    }

    /// Starts the engine thread over `served`: everything of `config` but the files of
    /// the model, the draft model and the thread count, which made `served`.
    pub fn start(config: &ServerConfig, served: Served) -> Result<Server, ServerError> {
        check_config(config)?;
        Self::spawn(config, served)
    }

    /// [`start`](Self::start) once `config` is checked.
    fn spawn(config: &ServerConfig, served: Served) -> Result<Server, ServerError> {
        let Served {
            target,
            meta,
            draft_model,
        } = served;
        let id = config
            .model_id
            .clone()
            .unwrap_or_else(|| model_id(&config.model));
        let frontend = Frontend::new(&meta, id, config.default_method, config.default_max_draft);
        let pools = Pools::open(
            config.trie.as_deref(),
            config.pools.clone(),
            meta.config.vocab,
            specdec_engine::HistoryConfig {
                max_tokens: config.history_tokens,
                ..specdec_engine::HistoryConfig::default()
            },
        )?
        .with_limits(config.pool_limits)
        .with_shared(config.shared_pools.iter().cloned());
        let recommender = Recommender::load(
            config.catalogue.as_ref(),
            draft_model.as_ref(),
            &meta,
            config.recommend,
        )?;
        let metrics = Arc::new(metrics::Metrics::new(&frontend.model_id));
        // Up to `max_concurrent` run and `max_queue` more wait, however fast the engine thread
        // takes them in.
        let (queue, rx) =
            worker::Queue::new(config.max_concurrent + config.max_queue, metrics.clone());
        let shared = match &config.shared_state {
            Some(url) => Some(worker::Shared::start(url, &frontend.tokenizer, &metrics)?),
            None => None,
        };
        let engine = worker::spawn(
            target,
            frontend.tokenizer.clone(),
            worker::Drafting { pools, shared },
            worker::WorkerConfig {
                max_concurrent: config.max_concurrent,
                timeout: config.timeout,
                prefix_cache_bytes: config.prefix_cache_bytes,
                recommender: recommender.clone(),
                draft_model,
            },
            metrics.clone(),
            rx,
            queue.shutdown(),
        )
        .map_err(ServerError::Thread)?;
        let state = Arc::new(AppState {
            frontend,
            backend: Arc::new(queue),
            metrics,
            api_key: config.api_key.clone(),
            recommender,
            started: routes::unix_now(),
        });
        Ok(Server { state, engine })
    }
}

/// The settings a server refuses to start with, whatever it serves.
fn check_config(config: &ServerConfig) -> Result<(), ServerError> {
    let recommend = config.recommend;
    if recommend.max_k == 0 || recommend.max_work == 0 {
        return Err(ServerError::Config(
            "the recommendation limits on k and work must be at least 1".into(),
        ));
    }
    if config.max_concurrent == 0 || config.max_queue == 0 {
        return Err(ServerError::Config(
            "--max-concurrent and --max-queue must be at least 1".into(),
        ));
    }
    if config
        .api_key
        .as_deref()
        .is_some_and(|k| k.trim().is_empty())
    {
        return Err(ServerError::Config(
            "the API key is empty: pass a key, or no --api-key (and no SPECDEC_API_KEY) to serve without one".into(),
        ));
    }
    if let Some(id) = &config.model_id {
        check_model_id(id)?;
    }
    if config.default_method == specdec_engine::DraftMethod::Model && config.draft_model.is_none() {
        return Err(ServerError::Config(
            "--draft model needs --draft-model NAME|FILE (a model of the target's vocabulary)"
                .into(),
        ));
    }
    Ok(())
}

/// After a shutdown's grace cancels the requests left, how long their connections get to
/// take the last events before they are dropped.
const LINGER: Duration = Duration::from_secs(5);

/// Limits on the connections [`serve_with`] keeps open.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// A request's head must arrive within this; a connection idle between requests
    /// (keep-alive) is closed after it too.
    pub header_read: Duration,
    /// A request's body must arrive within this once its head has (else 408, and the
    /// connection is closed).
    pub body_read: Duration,
    /// Most connections open at once; more wait in the listener's backlog.
    pub max_connections: usize,
    /// Most connections one client (one peer IP address) may hold open at once; more are
    /// answered 429 and closed as soon as they are accepted. Without it one client's idle
    /// sockets took every place (600 half-open sockets made every request wait 9-14 s).
    /// Clients behind one proxy share its address: raise it for such a set-up.
    pub max_connections_per_client: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read: Duration::from_secs(15),
            body_read: Duration::from_secs(30),
            max_connections: 512,
            // A server with `specdec serve`'s defaults holds 72 requests at once (8 running,
            // 64 queued), so one client has little use for more connections than this; and
            // 512 places leave room for seven clients this busy.
            max_connections_per_client: 64,
        }
    }
}

/// Counts a request in flight on its connection until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::AcqRel);
        InFlight(count)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted in flight until it is all sent (a
/// stream's response future ends long before its body does).
struct Tracked {
    body: axum::body::Body,
    _guard: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// [`serve_with`] with the default [`ConnectionLimits`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: Server,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    serve_with(
        listener,
        server,
        shutdown,
        grace,
        ConnectionLimits::default(),
    )
    .await
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops taking connections,
/// closes idle ones, lets the requests in flight finish for up to `grace`, cancels those
/// still running, and waits for the engine to stop (saving the drafting state). Slow or
/// half-sent requests are cut off by `limits`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    server: Server,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
    limits: ConnectionLimits,
) -> std::io::Result<()> {
    let Server { state, engine } = server;
    let app = router(state.clone()).layer(axum::Extension(BodyReadTimeout(limits.body_read)));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut http = tokio::spawn(accept(listener, app, stopped, limits));
    let served = tokio::select! {
        r = &mut http => Some(r),
        () = shutdown => None,
    };
    if let Some(r) = served {
        // The listener failed: the engine still stops and saves.
        tracing::error!("the server stopped on its own: {r:?}");
        state.backend.cancel_all();
    } else {
        let (waiting, running) = state.metrics.in_flight();
        tracing::info!(
            "shutdown: taking no new connections; {running} requests running and {waiting} \
             queued get {}s to finish",
            grace.as_secs_f64()
        );
        let _ = stop.send(true);
        if tokio::time::timeout(grace, &mut http).await.is_ok() {
            tracing::info!("shutdown: every request finished");
        } else {
            let (waiting, running) = state.metrics.in_flight();
            tracing::warn!(
                "shutdown: the grace is over; cancelling {running} running and {waiting} \
                 queued requests"
            );
            state.backend.cancel_all();
            if tokio::time::timeout(LINGER, &mut http).await.is_err() {
                tracing::warn!("shutdown: dropping connections still open");
                http.abort();
            }
        }
    }
    state.backend.close();
    drop(state);
    tracing::info!("shutdown: waiting for the engine to stop and save the drafting state");
    if tokio::task::spawn_blocking(move || engine.join())
        .await
        .map_or(true, |r| r.is_err())
    {
        tracing::error!("shutdown: the engine thread panicked");
    }
    tracing::info!("shutdown: done");
    Ok(())
}

/// Takes connections until `stopped` turns true, each served by hyper with `limits`; then
/// idle connections close, requests in flight finish, and this ends when every connection
/// has.
async fn accept(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stopped: tokio::sync::watch::Receiver<bool>,
    limits: ConnectionLimits,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;

    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(connections::PerClient::new(
        limits.max_connections_per_client.max(1),
    ));
    let mut connections = tokio::task::JoinSet::new();
    let stop = stopped.clone();
    let mut shutdown = std::pin::pin!(async move {
        let mut stop = stop;
        let _ = stop.wait_for(|s| *s).await;
    });
    loop {
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, client) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match clients.open(peer.ip()) {
                    Some(client) => (stream, client),
                    None => {
                        // Refused at once: its global place is free again for others.
                        connections::refuse(stream, clients.limit());
                        continue;
                    }
                },
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a little rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let app = app.clone();
        let mut stop = stopped.clone();
        let header_read = limits.header_read;
        connections.spawn(async move {
            let _slot = slot;
            let _client = client;
            let _ = stream.set_nodelay(true);
            // Requests of this connection whose head arrived and whose response is not
            // yet all sent.
            let in_flight = Arc::new(AtomicUsize::new(0));
            let counter = in_flight.clone();
            let service = hyper::service::service_fn(move |req: axum::http::Request<_>| {
                let guard = InFlight::new(counter.clone());
                let app = app.clone();
                async move {
                    let res = app.oneshot(req).await;
                    res.map(|r| {
                        r.map(|body| {
                            axum::body::Body::new(Tracked {
                                body,
                                _guard: guard,
                            })
                        })
                    })
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                _ = async { let _ = stop.wait_for(|stop| *stop).await; } => {}
            }
            // Idle connections close now; a request in flight finishes first. One whose
            // head has not all arrived is dropped: it would hold shutdown up to the
            // header timeout.
            conn.as_mut().graceful_shutdown();
            loop {
                tokio::select! {
                    _ = conn.as_mut() => return,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {
                        if in_flight.load(Ordering::Acquire) == 0 {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}
