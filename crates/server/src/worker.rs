//! The engine thread: the model runs here and nowhere else. Requests arrive through a
//! bounded queue; up to `max_concurrent` are generated together, their prefill chunks and
//! verify steps batched into one forward per step. Handlers only wait on channels.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use specdec_drafters::Trie;
use specdec_engine::{DraftMethod, Engine, GenerateOutput, GenerateRequest, Generation, Sink};
use specdec_runtime::Model;
use specdec_tokenizer::Tokenizer;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// What a request's handler hears from the engine.
#[derive(Debug)]
pub enum Event {
    /// Final text, in order.
    Text(String),
    Done(Result<Box<GenerateOutput>, ApiError>),
}

pub struct Job {
    pub gen: GenerateRequest,
    pub method: DraftMethod,
    /// Whether the client reads the text as it comes (SSE).
    pub stream: bool,
    pub events: mpsc::UnboundedSender<Event>,
    pub arrived: Instant,
}

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub max_concurrent: usize,
    pub timeout: Duration,
    /// Where the trie is saved when the engine stops.
    pub trie_file: Option<PathBuf>,
    pub prefix_cache_bytes: usize,
}

/// The handlers' side of the queue.
#[derive(Clone)]
pub struct Queue {
    tx: mpsc::Sender<Job>,
    capacity: usize,
    metrics: Arc<Metrics>,
}

impl Queue {
    /// A queue and its receiving end, for [`spawn`] (or a test that holds jobs back).
    pub fn new(capacity: usize, metrics: Arc<Metrics>) -> (Queue, mpsc::Receiver<Job>) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        (
            Queue {
                tx,
                capacity,
                metrics,
            },
            rx,
        )
    }

    /// Enqueues without waiting: a full queue is the client's signal to back off.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        match self.tx.try_send(job) {
            Ok(()) => {
                self.metrics.queued(1);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::QueueFull(self.capacity)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ApiError::Unavailable),
        }
    }
}

struct Active {
    gen: Generation<'static>,
    events: mpsc::UnboundedSender<Event>,
    arrived: Instant,
    timed_out: bool,
    emitted: usize,
}

/// Starts the engine thread; it ends when every [`Queue`] is dropped and the work in
/// flight is done.
pub fn spawn(
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    trie: Arc<Mutex<Trie>>,
    config: WorkerConfig,
    metrics: Arc<Metrics>,
    rx: mpsc::Receiver<Job>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("specdec-engine".into())
        .spawn(move || run(&model, &tokenizer, &trie, &config, &metrics, rx))
}

fn run(
    model: &Model,
    tokenizer: &Tokenizer,
    trie: &Arc<Mutex<Trie>>,
    config: &WorkerConfig,
    metrics: &Metrics,
    mut rx: mpsc::Receiver<Job>,
) {
    let mut engine = Engine::new(model, tokenizer);
    if config.prefix_cache_bytes > 0 {
        engine = engine.with_prefix_cache(config.prefix_cache_bytes);
    }
    let mut active: Vec<Active> = Vec::new();
    let (mut last_save, mut unsaved) = (Instant::now(), 0usize);
    loop {
        if active.is_empty() {
            match rx.blocking_recv() {
                Some(job) => admit(&engine, trie, metrics, job, &mut active),
                None => break,
            }
        }
        while active.len() < config.max_concurrent {
            match rx.try_recv() {
                Ok(job) => admit(&engine, trie, metrics, job, &mut active),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        for a in &mut active {
            // A closed channel means the client went away: free its cache now.
            if a.events.is_closed() {
                a.gen.cancel();
            } else if now >= a.arrived + config.timeout && !a.gen.is_finished() {
                a.gen.cancel();
                a.timed_out = true;
            }
        }
        let stepped = {
            let mut batch: Vec<&mut Generation<'static>> = active
                .iter_mut()
                .filter(|a| !a.gen.is_finished())
                .map(|a| &mut a.gen)
                .collect();
            catch_unwind(AssertUnwindSafe(|| engine.step(&mut batch)))
        };
        let failure = match stepped {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("the engine panicked on this batch".to_string()),
        };
        if let Some(e) = failure {
            tracing::error!("step failed for {} requests: {e}", active.len());
            for a in active.drain(..) {
                metrics.running(-1);
                let _ = a
                    .events
                    .send(Event::Done(Err(ApiError::Internal(e.clone()))));
            }
            continue;
        }
        for a in &mut active {
            let n = a.gen.tokens().len();
            if n > a.emitted {
                if a.emitted == 0 {
                    metrics.first_token(a.arrived.elapsed());
                }
                metrics.step(n - a.emitted);
                a.emitted = n;
            }
        }
        let mut i = 0;
        while i < active.len() {
            if active[i].gen.is_finished() {
                let a = active.swap_remove(i);
                finish(a, &engine, config, metrics);
                unsaved += 1;
            } else {
                i += 1;
            }
        }
        // A crash loses at most this much of what the trie learned.
        if unsaved > 0 && last_save.elapsed() >= TRIE_SAVE_EVERY {
            save_trie(trie, config);
            (last_save, unsaved) = (Instant::now(), 0);
        }
    }
    save_trie(trie, config);
}

/// How often a trie that learned from finished requests is saved while serving.
const TRIE_SAVE_EVERY: Duration = Duration::from_secs(60);

fn save_trie(trie: &Mutex<Trie>, config: &WorkerConfig) {
    if let Some(path) = &config.trie_file {
        match specdec_engine::save_trie(trie, path) {
            Ok(()) => tracing::info!("saved the trie to {}", path.display()),
            Err(e) => tracing::error!("could not save the trie to {}: {e}", path.display()),
        }
    }
}

fn admit(
    engine: &Engine<'_>,
    trie: &Arc<Mutex<Trie>>,
    metrics: &Metrics,
    job: Job,
    active: &mut Vec<Active>,
) {
    metrics.queued(-1);
    if job.events.is_closed() {
        // The client left while queued.
        let spec = specdec_engine::SpecStats::default();
        metrics.finished("cancelled", 0, &spec, job.arrived.elapsed());
        return;
    }
    let drafter = job.method.drafter(trie);
    let tx = job.events.clone();
    // Only a stream needs the text as it comes; a whole response takes it from the output.
    let sink: Sink<'static> = if job.stream {
        Box::new(move |t: &str| tx.send(Event::Text(t.to_string())).is_ok())
    } else {
        Box::new(move |_: &str| !tx.is_closed())
    };
    match engine.start(job.gen, drafter, sink) {
        Ok(gen) => {
            metrics.running(1);
            active.push(Active {
                gen,
                events: job.events,
                arrived: job.arrived,
                timed_out: false,
                emitted: 0,
            });
        }
        Err(e) => {
            let _ = job.events.send(Event::Done(Err(e.into())));
        }
    }
}

fn finish(a: Active, engine: &Engine<'_>, config: &WorkerConfig, metrics: &Metrics) {
    metrics.running(-1);
    let out = engine.finish(a.gen);
    let reason = if a.timed_out {
        "timeout"
    } else {
        out.finish_reason.as_str()
    };
    metrics.finished(reason, out.prompt_tokens, &out.spec, a.arrived.elapsed());
    let result = if a.timed_out {
        Err(ApiError::Timeout(config.timeout.as_secs()))
    } else {
        Ok(Box::new(out))
    };
    let _ = a.events.send(Event::Done(result));
}
