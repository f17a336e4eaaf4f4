//! `specdec serve`: the OpenAI-compatible HTTP server.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use specdec_engine::{DraftMethod, PoolLimits, PoolName};
use specdec_rec::recommend::CatalogueSource;
use specdec_server::{ConnectionLimits, RecommendLimits, Server, ServerConfig, SERVER_POOL_LIMITS};

use crate::common::{model_path, ModelArgs};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (printed on start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 (default: $SPECDEC_API_KEY, else none;
    /// an empty key is an error).
    #[arg(long, env = "SPECDEC_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model id clients send (default: the file's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Requests generated together (their steps share forwards).
    #[arg(long, default_value_t = 8)]
    pub max_concurrent: usize,
    /// Requests waiting beyond those; more get 429.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Seconds a request may take, queueing included.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Trie file: loaded at start if present, saved every minute while it learns and at
    /// shutdown.
    #[arg(long)]
    pub trie: Option<std::path::PathBuf>,
    /// Folder of named drafting pools (`NAME.trie` and `NAME.history` each, chosen per
    /// request by `speculation.pool`), loaded when first used and saved like the trie.
    #[arg(long)]
    pub pools: Option<std::path::PathBuf>,
    /// The most tokens each pool's history index of past requests holds (the global one
    /// is saved beside `--trie` as `.history`); the oldest requests are evicted first.
    #[arg(long, default_value_t = 1 << 20)]
    pub history_tokens: usize,
    /// Draft method of requests that do not choose one.
    #[arg(long, default_value = "auto", value_parser = DraftMethod::parse)]
    pub draft: DraftMethod,
    /// Most draft nodes per step for requests that do not choose.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
    /// MiB of finished requests' KV caches kept for requests sharing a prefix (a chat's
    /// next turn, a common system prompt); 0 turns prefix reuse off.
    #[arg(long, default_value_t = 512)]
    pub prefix_cache_mib: usize,
    /// Seconds the requests in flight get to finish after SIGTERM or Ctrl-C; those still
    /// running are then cancelled, and the trie is saved. A second signal exits at once
    /// (code 130) without saving.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Serve `POST /v1/recommend` from this catalogue: `movielens` (MovieLens-100k's
    /// items, fetched and cached) or a file of titles, one per line.
    #[arg(long, value_name = "movielens|FILE")]
    pub catalogue: Option<String>,
    /// A draft model (a GGUF file or a known model's short name, with the target's
    /// vocabulary): text requests draft with it (`speculation.method: "model"`, and as a
    /// part of `auto`), and so does `/v1/recommend`'s speculative beam search.
    #[arg(long)]
    pub draft_model: Option<std::path::PathBuf>,
    /// A named pool every tenant reads and feeds (repeat for more). Other pools, and the
    /// default one, are each tenant's own: what one client's requests teach a pool,
    /// another's drafts could show.
    #[arg(long = "shared-pool", value_name = "NAME", value_parser = parse_pool_name)]
    pub shared_pools: Vec<PoolName>,
    /// Share drafting state with the other replicas of this model through Redis
    /// (`redis://HOST[:PORT][/DB]`): each publishes what its requests teach its pools and
    /// folds in what the others' taught, so a repeat that lands on another replica drafts
    /// from the first answer. A Redis that is down is retried; drafting goes on locally.
    #[arg(long, value_name = "URL")]
    pub shared_state: Option<String>,
    /// Drafting pools held in memory besides the global one (the least recently used
    /// idle one is saved and unloaded to make room).
    #[arg(long, default_value_t = SERVER_POOL_LIMITS.max_loaded)]
    pub max_loaded_pools: usize,
    /// Named pools one tenant (or, without tenants, the server) may create.
    #[arg(long, default_value_t = SERVER_POOL_LIMITS.max_named)]
    pub max_pools_per_tenant: usize,
    /// Most connections one client (peer IP) may hold open; more get 429 and are closed.
    /// Raise it when clients reach the server through one proxy.
    #[arg(long, default_value_t = ConnectionLimits::default().max_connections_per_client)]
    pub max_connections_per_client: usize,
    /// Most items one `/v1/recommend` may ask for.
    #[arg(long, default_value_t = RecommendLimits::default().max_k)]
    pub recommend_max_k: usize,
    /// Most work one recommendation's search may take (k x item tokens x (history tokens
    /// + 1024)); larger requests are refused before they start.
    #[arg(long, default_value_t = RecommendLimits::default().max_work)]
    pub recommend_max_work: usize,
}

fn parse_pool_name(s: &str) -> Result<PoolName, String> {
    PoolName::parse(s).map_err(|e| e.to_string())
}

/// The first SIGTERM or SIGINT resolves the returned future; a second one exits at once.
fn signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let (first, heard) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!("{name}: shutting down (a second signal exits at once)");
        let _ = first.send(());
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::error!(
            "{name} again: exiting now (code 130), cancelling requests in flight without \
             saving the drafting state"
        );
        std::process::exit(130);
    });
    Ok(async move {
        let _ = heard.await;
    })
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Every reason the server does not start (or stops) is in the log, not only on stderr.
    serve(args).inspect_err(|e| tracing::error!("serve: {e:#}"))
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    if args.model.threads == 0 {
        tracing::warn!("--threads 0 is not allowed; using 1");
    }
    let config = ServerConfig {
        model: model_path(args.model.model.as_deref())?,
        model_id: args.served_model_name,
        // An empty key is refused at load, never taken for "no key".
        api_key: args.api_key,
        threads: args.model.threads.max(1),
        max_concurrent: args.max_concurrent,
        max_queue: args.max_queue,
        timeout: Duration::from_secs(args.timeout.max(1)),
        trie: args.trie,
        pools: args.pools,
        history_tokens: args.history_tokens,
        default_method: args.draft,
        default_max_draft: args.budget.min(specdec_server::validate::MAX_DRAFT_LIMIT),
        prefix_cache_bytes: args.prefix_cache_mib.saturating_mul(1 << 20),
        catalogue: args.catalogue.as_deref().map(CatalogueSource::parse),
        draft_model: args
            .draft_model
            .as_deref()
            .map(|p| crate::common::model_path(Some(p)))
            .transpose()?,
        recommend: RecommendLimits {
            max_k: args.recommend_max_k,
            max_work: args.recommend_max_work,
            ..RecommendLimits::default()
        },
        pool_limits: PoolLimits {
            max_loaded: args.max_loaded_pools.max(1),
            max_named: args.max_pools_per_tenant,
            ..SERVER_POOL_LIMITS
        },
        shared_pools: args.shared_pools,
        shared_state: args.shared_state,
    };
    let per_client = args.max_connections_per_client.max(1);
    tracing::info!(
        "starting: model {}, {} threads, {} concurrent requests, queue {}, timeout {}s, \
         api key {}, trie {}, pools {}, draft {} (budget {}), prefix cache {} MiB, \
         shutdown grace {}s",
        config.model.display(),
        config.threads,
        config.max_concurrent,
        config.max_queue,
        config.timeout.as_secs(),
        if config.api_key.is_some() {
            "required"
        } else {
            "none"
        },
        config
            .trie
            .as_ref()
            .map_or("none (in memory)".into(), |p| p.display().to_string()),
        config
            .pools
            .as_ref()
            .map_or("none (in memory)".into(), |p| p.display().to_string()),
        config.default_method.name(),
        config.default_max_draft,
        args.prefix_cache_mib,
        args.shutdown_grace,
    );
    if args.budget > config.default_max_draft {
        tracing::warn!(
            "--budget {} is above the limit; using {}",
            args.budget,
            config.default_max_draft
        );
    }
    if args.timeout == 0 {
        tracing::warn!("--timeout 0 is not allowed; using 1 second");
    }
    let server = Server::load(&config)?;
    let grace = Duration::from_secs(args.shutdown_grace);
    let model_id = server.state.frontend.model_id.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = signals()?;
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("binding {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        // Scripts and tests read this line to find the port.
        println!("specdec serving {model_id} on http://{addr}/v1");
        tracing::info!("serving {model_id} on http://{addr}/v1");
        let limits = ConnectionLimits {
            max_connections_per_client: per_client,
            ..ConnectionLimits::default()
        };
        specdec_server::serve_with(listener, server, shutdown, grace, limits).await?;
        Ok(())
    })
}
