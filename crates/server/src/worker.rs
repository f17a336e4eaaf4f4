//! The engine thread: the model runs here and nowhere else. Requests arrive through a
//! bounded queue and are handed to the engine's scheduler, which batches up to
//! `max_concurrent` of them into one forward per step. Recommendations (`/v1/recommend`)
//! come through the same queue and are scheduled like generations: admitted under the same
//! bound, their beam rows in the same forwards as the chats', cancelled when their client
//! goes away, on a beam runner kept for the thread's life (so it learns the draft's cost
//! and each plan's value across requests). This module only moves jobs in, events out,
//! and keeps the metrics; handlers only wait on channels.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use specdec_engine::beam::BeamRunner;
use specdec_engine::scheduler::Progress;
use specdec_engine::{
    Engine, GenerateOutput, GenerateRequest, Learned, Outcome, Pools, Scheduler, Sink, SpecStats,
    Target, Tokenizer,
};
use specdec_rec::recommend::service::{history_tokens, named};
use specdec_rec::recommend::Recommendation;
use specdec_shared_state::{Folding, SharedConfig, SharedState, SharedStateError};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::recommend::{Recommender, ValidRecommend};

/// Most events waiting for a streaming client to read them. A client that falls this far
/// behind (the socket's buffers are full, so the stream is no longer polled) is taken as
/// gone: its generation is cancelled and its slot freed, rather than held until its
/// `max_tokens` or the timeout while the text piles up in memory. One place stays free for
/// the final event.
pub const STREAM_BUFFER_EVENTS: usize = 256;

/// A job's event channel.
pub fn events() -> (mpsc::Sender<Event>, mpsc::Receiver<Event>) {
    mpsc::channel(STREAM_BUFFER_EVENTS)
}

/// What a request's handler hears from the engine.
#[derive(Debug)]
pub enum Event {
    /// Final text, in order.
    Text(String),
    /// The request ended: its output, or why it failed.
    Done(Result<Box<GenerateOutput>, ApiError>),
}

/// A generation to run (`/v1/chat/completions`, `/v1/completions`).
pub struct Job {
    /// The validated request.
    pub gen: GenerateRequest,
    /// Whether the client reads the text as it comes (SSE).
    pub stream: bool,
    /// Bounded by [`STREAM_BUFFER_EVENTS`] (see there).
    pub events: mpsc::Sender<Event>,
    /// When the request arrived: its timeout and latency count from here.
    pub arrived: Instant,
    /// The job's place in the server (set by [`Queue::submit`]).
    pub slot: Option<Slot>,
    /// The request's span: the engine thread's lines about it carry its id.
    pub span: tracing::Span,
}

/// A recommendation to search (`/v1/recommend`).
pub struct RecommendJob {
    /// The validated request.
    pub request: ValidRecommend,
    /// Closed when the client went away (the search is then skipped).
    pub reply: oneshot::Sender<Result<Recommendation, ApiError>>,
    /// When the request arrived: its timeout and latency count from here.
    pub arrived: Instant,
    /// The job's place in the server (set by [`Queue::submit_recommend`]).
    pub slot: Option<Slot>,
    /// The request's span: the engine thread's lines about it carry its id.
    pub span: tracing::Span,
}

/// What the queue carries to the engine thread.
pub enum Work {
    /// A generation.
    Generate(Job),
    /// A recommendation search.
    Recommend(RecommendJob),
}

impl Work {
    fn hold(&mut self, slot: Slot) {
        match self {
            Work::Generate(j) => j.slot = Some(slot),
            Work::Recommend(j) => j.slot = Some(slot),
        }
    }
}

/// One request's place among those the server holds (waiting or running); freed when
/// dropped, whichever way the request ends.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the scheduler keeps of a job while it runs.
struct Running {
    reply: Reply,
    arrived: Instant,
    shutdown: Arc<Shutdown>,
    _slot: Option<Slot>,
    span: tracing::Span,
    /// The metrics label of the pool it drafts from, if it drafts from one.
    pool: Option<String>,
}

/// Where a running request's answer goes.
enum Reply {
    /// A generation's events.
    Text(mpsc::Sender<Event>),
    /// A recommendation's list.
    Recommend(oneshot::Sender<Result<Recommendation, ApiError>>),
}

impl specdec_engine::Job for Running {
    /// A closed channel means the client went away: free its cache now. At the end of a
    /// shutdown's grace every request is cancelled.
    fn is_cancelled(&self) -> bool {
        let gone = match &self.reply {
            Reply::Text(events) => events.is_closed(),
            Reply::Recommend(reply) => reply.is_closed(),
        };
        gone || self.shutdown.cancelling()
    }
}

/// What a shutdown tells the engine thread.
#[derive(Debug, Default)]
pub struct Shutdown {
    cancel: AtomicBool,
}

impl Shutdown {
    fn cancelling(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// How the engine thread runs.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Requests generated together.
    pub max_concurrent: usize,
    /// A request running longer (from its arrival) is ended with a timeout error.
    pub timeout: Duration,
    /// Memory for reused prompt prefixes' KV caches (0: off).
    pub prefix_cache_bytes: usize,
    /// What `/v1/recommend` searches (none: the endpoint is off).
    pub recommender: Option<Recommender>,
    /// The draft model text requests may draft with.
    pub draft_model: Option<specdec_engine::DraftModel>,
}

/// The handlers' side of the queue.
#[derive(Clone)]
pub struct Queue {
    /// `None` once closed: the engine thread ends when it has nothing left.
    tx: Arc<Mutex<Option<mpsc::Sender<Work>>>>,
    /// Requests the server holds: queued, in the channel, or running.
    held: Arc<AtomicUsize>,
    capacity: usize,
    metrics: Arc<Metrics>,
    shutdown: Arc<Shutdown>,
}

impl Queue {
    /// A queue for `capacity` requests in all, waiting or running (the server's
    /// `--max-concurrent` plus `--max-queue`), and its receiving end, for [`spawn`] (or a
    /// test that holds jobs back). A request holds its place until it ends, so exactly
    /// `capacity` are admitted however fast the engine thread takes them in.
    pub fn new(capacity: usize, metrics: Arc<Metrics>) -> (Queue, mpsc::Receiver<Work>) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        (
            Queue {
                tx: Arc::new(Mutex::new(Some(tx))),
                held: Arc::new(AtomicUsize::new(0)),
                capacity,
                metrics,
                shutdown: Arc::default(),
            },
            rx,
        )
    }

    /// Requests held now (waiting or running).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Enqueues without waiting: a full server is the client's signal to back off.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.send(Work::Generate(job))
    }

    /// Enqueues a recommendation; it holds a place like a generation does.
    pub fn submit_recommend(&self, job: RecommendJob) -> Result<(), ApiError> {
        self.send(Work::Recommend(job))
    }

    fn send(&self, mut work: Work) -> Result<(), ApiError> {
        let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = tx.as_ref() else {
            return Err(ApiError::Unavailable);
        };
        let taken = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(ApiError::QueueFull(self.capacity));
        }
        work.hold(Slot(self.held.clone()));
        match tx.try_send(work) {
            Ok(()) => {
                self.metrics.queued(1);
                Ok(())
            }
            // Not reached while every place is counted; the job's slot is freed with it.
            Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::QueueFull(self.capacity)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ApiError::Unavailable),
        }
    }

    /// Takes no more requests; the engine thread ends (saving the drafting state) once the
    /// requests it has are done, whoever still holds a queue.
    pub fn close(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Cancels every request in flight or queued (each ends at the next step, with what it
    /// produced) and refuses new ones: the end of a shutdown's grace.
    pub fn cancel_all(&self) {
        self.shutdown.cancel.store(true, Ordering::Relaxed);
        self.close();
    }

    /// What [`spawn`] needs to hear of a shutdown.
    pub fn shutdown(&self) -> Arc<Shutdown> {
        self.shutdown.clone()
    }
}

/// How often drafting state that learned from finished requests is saved while serving.
const SAVE_EVERY: Duration = Duration::from_secs(60);

/// The drafting state the engine thread starts with, and whom it shares it with.
pub struct Drafting {
    /// The pools requests draft from and feed.
    pub pools: Pools,
    /// Other replicas' link (`--shared-state`), if any.
    pub shared: Option<Shared>,
}

/// `--shared-state`: this replica's link to the other replicas of its model, and the
/// lessons they publish (read on the link's own thread, folded on the engine thread).
pub struct Shared {
    state: SharedState,
    incoming: mpsc::Receiver<Vec<Learned>>,
}

/// Batches of other replicas' lessons read ahead of the engine thread; past it the reader
/// waits (Redis keeps the rest).
const INCOMING_BATCHES: usize = 64;
/// Lessons folded between two steps at most, so that a replica catching up on the stream
/// does not hold its requests' next tokens back.
const FOLDS_PER_STEP: usize = 256;

impl Shared {
    /// Connects to the Redis at `url` (in the background: a Redis that is down is retried,
    /// and drafting goes on locally meanwhile). Replicas share only when their models'
    /// vocabularies are the same (a draft is token ids).
    pub fn start(
        url: &str,
        tokenizer: &Tokenizer,
        metrics: &Arc<Metrics>,
    ) -> Result<Shared, SharedStateError> {
        let (tx, incoming) = mpsc::channel(INCOMING_BATCHES);
        let cfg = SharedConfig::for_vocabulary(url, tokenizer);
        let state = SharedState::start(cfg, move |batch| tx.blocking_send(batch).is_ok())?;
        metrics.shared_state(state.stats().clone());
        Ok(Shared { state, incoming })
    }
}

/// The engine thread's side of shared state.
struct Sharing {
    shared: Shared,
    /// Other replicas' lessons not folded yet.
    folding: Folding,
    /// Waits on the queue and the lessons at once while the engine is idle.
    waiter: tokio::runtime::Runtime,
}

/// What woke an idle engine thread. Returned once per wake and matched at once, so the
/// request it may carry is not worth a box.
#[allow(clippy::large_enum_variant)]
enum Wake {
    /// A request, or `None`: every queue is gone.
    Work(Option<Work>),
    /// Other replicas' lessons (or time to look at those waiting for a pool again).
    Lessons,
}

impl Sharing {
    fn new(shared: Shared) -> std::io::Result<Sharing> {
        let waiter = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        Ok(Sharing {
            shared,
            folding: Folding::default(),
            waiter,
        })
    }

    /// Publishes what finished requests taught and folds in what other replicas did.
    fn exchange(&mut self, engine: &mut Engine<'_>, metrics: &Metrics) {
        self.shared.state.publish_learned(engine);
        while let Ok(batch) = self.shared.incoming.try_recv() {
            self.folding.receive(batch);
        }
        let folds = self.folding.fold(engine, FOLDS_PER_STEP);
        metrics.folded(&folds);
        if folds.applied > 0 {
            metrics.pool_sizes(engine.pools().sizes());
        }
    }

    /// Waits for a request or for lessons; with lessons pending (a pool being read, or
    /// more than one step's worth), only briefly.
    fn wait(&mut self, rx: &mut mpsc::Receiver<Work>) -> Wake {
        let (incoming, folding) = (&mut self.shared.incoming, &mut self.folding);
        let pause = if folding.is_empty() {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(5)
        };
        self.waiter.block_on(async {
            tokio::select! {
                work = rx.recv() => Wake::Work(work),
                batch = incoming.recv(), if !incoming.is_closed() => {
                    if let Some(b) = batch {
                        folding.receive(b);
                    }
                    Wake::Lessons
                }
                _ = tokio::time::sleep(pause) => Wake::Lessons,
            }
        })
    }
}

/// Starts the engine thread; it ends when every [`Queue`] is dropped and the work in
/// flight is done, after saving the drafting state.
pub fn spawn(
    model: Arc<dyn Target>,
    tokenizer: Arc<Tokenizer>,
    drafting: Drafting,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    rx: mpsc::Receiver<Work>,
    shutdown: Arc<Shutdown>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let Drafting { pools, shared } = drafting;
    let mut sharing = shared.map(Sharing::new).transpose()?;
    std::thread::Builder::new()
        .name("specdec-engine".into())
        .spawn(move || {
            // However the thread ends (a panic included), /health hears of it.
            struct Stopped(Arc<Metrics>);
            impl Drop for Stopped {
                fn drop(&mut self) {
                    self.0.health.engine_stopped();
                    if std::thread::panicking() {
                        tracing::error!("the engine thread panicked; no request can be served");
                    }
                }
            }
            let _stopped = Stopped(metrics.clone());
            let mut engine = Engine::new(model.as_ref(), &tokenizer).with_pools(pools);
            if let Some(d) = config.draft_model.clone() {
                engine = engine.with_draft_model(d);
            }
            if config.prefix_cache_bytes > 0 {
                engine = engine.with_prefix_cache(config.prefix_cache_bytes);
            }
            if sharing.is_some() {
                engine = engine.sharing_learning();
            }
            let mut scheduler =
                Scheduler::new(engine, config.max_concurrent).saving_every(SAVE_EVERY);
            if let Some(r) = &config.recommender {
                let draft = r.draft.as_ref().map(|d| d.model().as_ref());
                let scoring = r.draft.as_ref().map(|d| d.scoring()).unwrap_or_default();
                // Checked at load (the draft's vocabulary), so this does not fail.
                match BeamRunner::new(model.as_ref(), draft) {
                    Ok(runner) => {
                        scheduler = scheduler.with_beams(runner.with_draft_scoring(scoring))
                    }
                    Err(e) => tracing::error!("/v1/recommend cannot run: {e}"),
                }
            }
            run(
                &mut scheduler,
                &tokenizer,
                &config,
                &metrics,
                rx,
                &shutdown,
                &mut sharing,
            );
            if let Some(s) = sharing.take() {
                // The last requests' lessons go out before the process ends.
                s.shared
                    .state
                    .finish(scheduler.engine_mut(), Duration::from_secs(3));
            }
            tracing::info!("engine stopped; saving the drafting state");
            // The global trie is written at exit even if unchanged, so the file `--trie`
            // names exists after the first run.
            let engine = scheduler.engine_mut();
            engine.pools_mut().mark_dirty(None);
            engine.save_drafting_state();
        })
}

fn run(
    scheduler: &mut Scheduler<'_, Running>,
    tokenizer: &Tokenizer,
    config: &WorkerConfig,
    metrics: &Metrics,
    mut rx: mpsc::Receiver<Work>,
    shutdown: &Arc<Shutdown>,
    sharing: &mut Option<Sharing>,
) {
    // Requests whose drafting pool is being read from disk off this thread: they start
    // once it is in memory, and nobody else waits for it.
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let take = |scheduler: &mut Scheduler<'_, Running>, waiting: &mut VecDeque<Job>, work: Work| {
        match work {
            Work::Generate(job) if scheduler.engine_mut().prepare(&job.gen) => {
                admit(scheduler, config, metrics, shutdown, job)
            }
            Work::Generate(job) => waiting.push_back(job),
            Work::Recommend(job) => {
                admit_search(scheduler, tokenizer, config, metrics, shutdown, job)
            }
        }
    };
    let mut progress = |r: &Running, p: Progress| {
        if p.first {
            metrics.first_token(r.arrived.elapsed());
        }
        metrics.step(p.new_tokens);
    };
    loop {
        // Before waiting: the requests that just finished publish at once, and what other
        // replicas taught (woken for it) goes in before the next request starts.
        if let Some(s) = sharing.as_mut() {
            s.exchange(scheduler.engine_mut(), metrics);
        }
        if scheduler.is_idle() {
            if waiting.is_empty() {
                let wake = match sharing.as_mut() {
                    Some(s) => s.wait(&mut rx),
                    None => Wake::Work(rx.blocking_recv()),
                };
                match wake {
                    Wake::Work(Some(work)) => take(scheduler, &mut waiting, work),
                    Wake::Work(None) => break,
                    Wake::Lessons => {}
                }
            } else {
                // Only pool reads are under way: look again shortly.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        scheduler.engine_mut().pools_mut().poll_loads();
        settle_waiting(scheduler, config, metrics, shutdown, &mut waiting);
        while scheduler.has_room() {
            let Some(i) = waiting
                .iter()
                .position(|j| scheduler.engine_mut().prepare(&j.gen))
            else {
                break;
            };
            let job = waiting.remove(i).expect("found above");
            admit(scheduler, config, metrics, shutdown, job);
        }
        while scheduler.has_room() {
            match rx.try_recv() {
                Ok(work) => take(scheduler, &mut waiting, work),
                Err(_) => break,
            }
        }
        if scheduler.is_idle() {
            continue;
        }
        let finished = scheduler.step(&mut progress);
        metrics.health.failing_steps(scheduler.failing_steps());
        if !finished.is_empty() {
            // What they taught their pools (a few locks: cheap next to a step).
            metrics.pool_sizes(scheduler.engine_mut().pools().sizes());
        }
        for f in finished {
            metrics.running(-1);
            let span = f.job.span.clone();
            let _in = span.enter();
            let elapsed = f.job.arrived.elapsed();
            match f.job.reply {
                Reply::Text(events) => {
                    if let (Some(pool), Outcome::Done(out)) = (&f.job.pool, &f.outcome) {
                        metrics.pool_finished(pool, &out.spec);
                    }
                    let result = text_result(f.outcome, config, metrics, elapsed);
                    let _ = events.try_send(Event::Done(result));
                }
                Reply::Recommend(reply) => {
                    let result = match f.outcome {
                        Outcome::Ranked(mut outs) => match (&config.recommender, outs.pop()) {
                            (Some(r), Some(out)) => Ok(named(&r.catalogue, out)),
                            _ => Err(ApiError::Internal("the search returned no list".into())),
                        },
                        Outcome::Unranked { expired: true } => {
                            tracing::warn!(
                                "a recommendation ran past the timeout of {}s",
                                config.timeout.as_secs()
                            );
                            Err(ApiError::Timeout(config.timeout.as_secs()))
                        }
                        Outcome::Unranked { expired: false } => {
                            if reply.is_closed() {
                                metrics.recommended("cancelled");
                                continue;
                            }
                            Err(ApiError::Unavailable)
                        }
                        Outcome::Failed(e) => {
                            tracing::warn!("a recommendation failed: {e}");
                            Err(e.into())
                        }
                        Outcome::Done(_) | Outcome::Expired(_) => Err(ApiError::Internal(
                            "a generation's outcome for a search".into(),
                        )),
                    };
                    metrics.recommended(recommend_outcome(&result));
                    let _ = reply.send(result);
                }
            }
        }
    }
}

/// A finished generation's answer, counted in the metrics.
fn text_result(
    outcome: Outcome,
    config: &WorkerConfig,
    metrics: &Metrics,
    elapsed: Duration,
) -> Result<Box<GenerateOutput>, ApiError> {
    match outcome {
        Outcome::Done(out) => {
            metrics.prefix(out.prompt_tokens, out.cached_prompt_tokens);
            let reason = out.finish_reason.as_str();
            metrics.finished(reason, out.prompt_tokens, &out.spec, elapsed);
            Ok(out)
        }
        Outcome::Expired(out) => {
            tracing::warn!(
                "a request ran past the timeout of {}s after {} tokens",
                config.timeout.as_secs(),
                out.completion_tokens
            );
            metrics.finished("timeout", out.prompt_tokens, &out.spec, elapsed);
            Err(ApiError::Timeout(config.timeout.as_secs()))
        }
        Outcome::Failed(e) => {
            metrics.finished("error", 0, &SpecStats::default(), elapsed);
            Err(e.into())
        }
        Outcome::Ranked(_) | Outcome::Unranked { .. } => {
            metrics.finished("error", 0, &SpecStats::default(), elapsed);
            Err(ApiError::Internal(
                "a search's outcome for a generation".into(),
            ))
        }
    }
}

/// How a recommendation's answer is counted.
fn recommend_outcome(result: &Result<Recommendation, ApiError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) if e.status().is_client_error() => "invalid",
        Err(_) => "error",
    }
}

/// Requests waiting for their pool still hear of their client leaving, of shutdown and of
/// the timeout.
fn settle_waiting(
    scheduler: &mut Scheduler<'_, Running>,
    config: &WorkerConfig,
    metrics: &Metrics,
    shutdown: &Arc<Shutdown>,
    waiting: &mut VecDeque<Job>,
) {
    let mut i = 0;
    while i < waiting.len() {
        let j = &waiting[i];
        if j.events.is_closed() || shutdown.cancelling() {
            // Answered (or dropped) by `admit`, which admits neither.
            let job = waiting.remove(i).expect("in range");
            admit(scheduler, config, metrics, shutdown, job);
        } else if j.arrived.elapsed() >= config.timeout {
            let job = waiting.remove(i).expect("in range");
            metrics.queued(-1);
            let _in = job.span.enter();
            tracing::warn!("a request timed out waiting for its drafting pool to load");
            metrics.finished("timeout", 0, &SpecStats::default(), job.arrived.elapsed());
            let _ = job.events.try_send(Event::Done(Err(ApiError::Timeout(
                config.timeout.as_secs(),
            ))));
        } else {
            i += 1;
        }
    }
}

fn admit(
    scheduler: &mut Scheduler<'_, Running>,
    config: &WorkerConfig,
    metrics: &Metrics,
    shutdown: &Arc<Shutdown>,
    job: Job,
) {
    let span = job.span.clone();
    let _in = span.enter();
    metrics.queued(-1);
    if job.events.is_closed() {
        // The client left while queued.
        metrics.finished("cancelled", 0, &SpecStats::default(), job.arrived.elapsed());
        return;
    }
    if shutdown.cancelling() {
        metrics.finished("cancelled", 0, &SpecStats::default(), job.arrived.elapsed());
        let _ = job.events.try_send(Event::Done(Err(ApiError::Unavailable)));
        return;
    }
    let tx = job.events.clone();
    // Only a stream needs the text as it comes; a whole response takes it from the output.
    let sink: Sink<'static> = if job.stream {
        Box::new(move |t: &str| {
            // The last place is the final event's.
            tx.capacity() > 1 && tx.try_send(Event::Text(t.to_string())).is_ok()
        })
    } else {
        Box::new(move |_: &str| !tx.is_closed())
    };
    let spec = &job.gen.speculation;
    let pool = spec.method.uses_pool().then(|| {
        let pools = scheduler.engine_mut().pools();
        pools.label(&job.gen.cache_scope, spec.pool.as_ref())
    });
    let running = Running {
        reply: Reply::Text(job.events),
        arrived: job.arrived,
        shutdown: shutdown.clone(),
        _slot: job.slot,
        span: job.span,
        pool: pool.flatten(),
    };
    let deadline = Some(job.arrived + config.timeout);
    match scheduler.admit(job.gen, sink, running, deadline) {
        Ok(()) => metrics.running(1),
        Err((r, e)) => {
            tracing::info!("refused a request: {e}");
            if let Reply::Text(events) = r.reply {
                let _ = events.try_send(Event::Done(Err(e.into())));
            }
        }
    }
}

/// Starts a recommendation's search in the scheduler, or answers it at once (its client
/// left, shutdown, its timeout, a history that does not tokenize, a refused search).
fn admit_search(
    scheduler: &mut Scheduler<'_, Running>,
    tokenizer: &Tokenizer,
    config: &WorkerConfig,
    metrics: &Metrics,
    shutdown: &Arc<Shutdown>,
    job: RecommendJob,
) {
    let span = job.span.clone();
    let _in = span.enter();
    metrics.queued(-1);
    if job.reply.is_closed() {
        metrics.recommended("cancelled");
        return;
    }
    let refused = if shutdown.cancelling() {
        Some(ApiError::Unavailable)
    } else if job.arrived.elapsed() >= config.timeout {
        Some(ApiError::Timeout(config.timeout.as_secs()))
    } else if scheduler.beam_runner().is_none() {
        // The handler checks first; a test's hand-built state may not.
        Some(ApiError::RecommendDisabled)
    } else {
        None
    };
    let (Some(r), None) = (&config.recommender, &refused) else {
        let e = refused.unwrap_or(ApiError::RecommendDisabled);
        let result = Err(e);
        metrics.recommended(recommend_outcome(&result));
        let _ = job.reply.send(result);
        return;
    };
    let prompt = match history_tokens(tokenizer, &job.request.history) {
        Ok(p) => p,
        Err(e) => {
            let result = Err(ApiError::from(specdec_engine::EngineError::InvalidRequest(
                e.to_string(),
            )));
            metrics.recommended(recommend_outcome(&result));
            let _ = job.reply.send(result);
            return;
        }
    };
    let running = Running {
        reply: Reply::Recommend(job.reply),
        arrived: job.arrived,
        shutdown: shutdown.clone(),
        _slot: job.slot,
        span: job.span,
        pool: None,
    };
    let deadline = Some(job.arrived + config.timeout);
    let cat = r.catalogue.shared_trie();
    match scheduler.admit_search(cat, vec![prompt], job.request.opts, running, deadline) {
        Ok(()) => metrics.running(1),
        Err((r, e)) => {
            tracing::info!("refused a recommendation: {e}");
            if let Reply::Recommend(reply) = r.reply {
                let result = Err(e.into());
                metrics.recommended(recommend_outcome(&result));
                let _ = reply.send(result);
            }
        }
    }
}
