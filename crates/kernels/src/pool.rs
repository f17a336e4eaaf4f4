//! A persistent thread pool for fork-join matmuls: the caller publishes a job and bumps a
//! generation counter; workers spinning on the counter start within a fraction of a
//! microsecond. A worker idle for longer than `SPIN` parks, so an idle process does not
//! burn a core; the next dispatch unparks it.
//!
//! A job is split into `CHUNKS` shares per thread, each thread owning a consecutive run
//! of them. Shares are claimed, not assigned: each participant runs its own in order,
//! then steals shares nobody has claimed yet, from the ends of the other runs. Normally
//! every thread runs exactly its own; when a worker is descheduled (a busy machine), the
//! others take over its unstarted shares instead of waiting out its time slice. Which
//! thread computes a share never changes its result.
//!
//! A thread waiting for work (a worker between jobs, the caller at a join) meanwhile
//! prefetches into L2 the address range of its latest warming order, a few lines between
//! checks for work: its part of the matrix the next job will stream (`Executor::warm_next`).

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long an idle worker waits before parking. A forward's matmuls come microseconds
/// apart; a few milliseconds of silence means the caller is doing something else.
const SPIN: Duration = Duration::from_millis(2);
/// Busy-wait this long before yielding the core between checks: with more runnable
/// threads than cores (tests running in parallel, other processes) pure spinning would
/// keep the thread we wait for off the CPU for a whole time slice.
const BUSY: Duration = Duration::from_micros(20);

/// Shares per thread: enough to rebalance when a thread stalls, few enough to keep each
/// thread's part of a matrix one sequential stream.
pub(crate) const CHUNKS: usize = 4;

/// The job as workers see it: `&&(dyn Fn(usize) + Sync)`, type- and lifetime-erased.
type JobRef<'a> = &'a (dyn Fn(usize) + Sync + 'a);

struct Shared {
    /// Number of the current job (0: none yet).
    generation: AtomicU64,
    /// Points to a `JobRef` on the dispatching caller's stack while a job runs.
    job: AtomicPtr<()>,
    /// Shares of the current job not finished yet.
    pending: AtomicUsize,
    /// Per thread, per owned share: the latest generation whose share has been claimed.
    claims: Vec<Claims>,
    /// Per worker: announced it is about to park (or parked).
    parked: Vec<AtomicBool>,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Per thread: bytes to pull into L2 while it waits (its part of the next matrix).
    warm: Vec<Warm>,
}

/// One thread's warming order: an address range and the order's number (a new number
/// restarts the thread's warming).
#[repr(align(64))]
#[derive(Default)]
struct Warm {
    order: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

/// A thread's progress through its latest warming order.
#[derive(Default)]
struct Warming {
    order: u64,
    next: usize,
    end: usize,
}

/// Bytes warmed between two checks for a new job: 16 lines.
const WARM_STEP: usize = 16 * 64;
/// The most one order warms: an order torn by two threads giving orders at once (start
/// from one, end from the other) costs a bounded number of useless prefetches.
const WARM_LIMIT: usize = 4 << 20;

impl Warming {
    /// Warms the next few lines of thread `me`'s order; false when there are none.
    fn step(&mut self, s: &Shared, me: usize) -> bool {
        let w = &s.warm[me];
        let order = w.order.load(Acquire);
        if order != self.order {
            self.order = order;
            self.next = w.start.load(Relaxed);
            self.end = w
                .end
                .load(Relaxed)
                .min(self.next.saturating_add(WARM_LIMIT));
        }
        if self.next >= self.end {
            return false;
        }
        let to = (self.next + WARM_STEP).min(self.end);
        crate::simd::warm_l2(self.next..to);
        self.next = to;
        true
    }
}

/// One thread's claim slots, on their own cache line (each thread mostly claims its own).
#[repr(align(64))]
struct Claims([AtomicU64; CHUNKS]);

pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One dispatch at a time (the job slot is single); it holds the dispatching
    /// thread's warming progress.
    dispatch: Mutex<Warming>,
    /// Dispatch counts and barrier waits, kept only while profiling (off: one load).
    sync: SyncCounters,
}

/// What a profile learns of the pool: how many jobs were dispatched and how long the
/// dispatching thread waited at their barriers after finishing its own shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Jobs dispatched (each one fork and one join).
    pub dispatches: u64,
    /// Nanoseconds the dispatcher spent waiting for the other threads' shares.
    pub wait_ns: u64,
}

#[derive(Default)]
struct SyncCounters {
    on: AtomicBool,
    dispatches: AtomicU64,
    wait_ns: AtomicU64,
}

impl Pool {
    /// A pool running jobs on `threads` threads: the caller plus `threads − 1` workers.
    pub(crate) fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            pending: AtomicUsize::new(0),
            claims: (0..threads)
                .map(|_| Claims(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            parked: (1..threads).map(|_| AtomicBool::new(false)).collect(),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            warm: (0..threads).map(|_| Warm::default()).collect(),
        });
        let workers = (1..threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("specdec-kernel-{i}"))
                    .spawn(move || worker(&shared, i))
                    .expect("failed to spawn kernel worker thread")
            })
            .collect();
        Pool {
            shared,
            workers,
            dispatch: Mutex::new(Warming::default()),
            sync: SyncCounters::default(),
        }
    }

    /// Starts (or stops) counting dispatches and barrier waits.
    pub(crate) fn set_profiling(&self, on: bool) {
        self.sync.on.store(on, Relaxed);
    }

    /// The counts since the last call, which zeroes them.
    pub(crate) fn take_sync_stats(&self) -> SyncStats {
        SyncStats {
            dispatches: self.sync.dispatches.swap(0, Relaxed),
            wait_ns: self.sync.wait_ns.swap(0, Relaxed),
        }
    }

    pub(crate) fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Number of shares a job is split into: `threads · CHUNKS`.
    pub(crate) fn shares(&self) -> usize {
        self.threads() * CHUNKS
    }

    /// Asks each thread to pull `range(thread)` (addresses) into L2 while it waits for
    /// work; a later order replaces an unfinished one. Alone, the caller never waits.
    pub(crate) fn warm(&self, range: &dyn Fn(usize) -> Range<usize>) {
        if self.workers.is_empty() {
            return;
        }
        for (t, w) in self.shared.warm.iter().enumerate() {
            let r = range(t);
            w.start.store(r.start, Relaxed);
            w.end.store(r.end, Relaxed);
            w.order.fetch_add(1, Release);
        }
    }

    /// Runs `f(i)` once for every share i in 0..shares(), on the calling thread and the
    /// workers, returning when all are done. Returns false if any share panicked.
    pub(crate) fn run(&self, f: &(dyn Fn(usize) + Sync)) -> bool {
        let profiling = self.sync.on.load(Relaxed);
        if profiling {
            self.sync.dispatches.fetch_add(1, Relaxed);
        }
        if self.workers.is_empty() {
            return catch_unwind(AssertUnwindSafe(|| (0..CHUNKS).for_each(f))).is_ok();
        }
        let mut warming = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let job: JobRef = f;
        s.panicked.store(false, Relaxed);
        s.job.store(&job as *const JobRef as *mut (), Relaxed);
        s.pending.store(self.shares(), Relaxed);
        // Publishes the above (Release); SeqCst pairs with the workers' park announcement.
        let generation = s.generation.fetch_add(1, SeqCst) + 1;
        for (flag, w) in s.parked.iter().zip(&self.workers) {
            if flag.load(SeqCst) {
                w.thread().unpark();
            }
        }
        claim_and_run(s, generation, 0);
        let waiting = profiling.then(Instant::now);
        // Shares claimed by workers may still run, borrowing `job` from this frame.
        // Waiting, the caller warms its part of the next matrix, as idle workers do.
        let mut backoff = Backoff::new();
        while s.pending.load(Acquire) != 0 {
            if !warming.step(s, 0) {
                backoff.snooze();
            }
        }
        if let Some(t) = waiting {
            let ns = t.elapsed().as_nanos() as u64;
            self.sync.wait_ns.fetch_add(ns, Relaxed);
        }
        !s.panicked.load(Relaxed)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.generation.fetch_add(1, SeqCst);
        for w in &self.workers {
            w.thread().unpark();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Claims and runs the shares of job `generation` nobody has claimed: first those of
/// thread `me`, in order, then the others', from the end of each thread's run.
fn claim_and_run(s: &Shared, generation: u64, me: usize) {
    let n = s.claims.len();
    let mine = (0..CHUNKS).map(|c| (me, c));
    let others = (1..n).flat_map(|d| (0..CHUNKS).rev().map(move |c| ((me + d) % n, c)));
    let mut done = 0;
    for (owner, c) in mine.chain(others) {
        let claim = &s.claims[owner].0[c];
        let seen = claim.load(Acquire);
        // A stale participant (generation < current) finds every share of its job
        // claimed (the job finished only after all were), so it never touches `job`.
        if seen >= generation
            || claim
                .compare_exchange(seen, generation, AcqRel, Relaxed)
                .is_err()
        {
            continue;
        }
        // SAFETY: we hold a share of job `generation`, so that job is unfinished: the
        // dispatcher is still waiting in `run`, and `job` points to its live `JobRef`
        // (published before the generation bump we acquired).
        let f: JobRef = unsafe { *(s.job.load(Relaxed) as *const JobRef) };
        if catch_unwind(AssertUnwindSafe(|| f(owner * CHUNKS + c))).is_err() {
            s.panicked.store(true, Relaxed);
        }
        done += 1;
    }
    // One decrement for all our shares: the dispatcher spins on this line, and every
    // write to it costs a cross-core transfer.
    if done > 0 {
        s.pending.fetch_sub(done, Release);
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0;
    let mut warming = Warming::default();
    loop {
        seen = wait_for_job(s, seen, index, &mut warming);
        if s.shutdown.load(SeqCst) {
            return;
        }
        claim_and_run(s, seen, index);
    }
}

/// Spins until the generation moves past `seen`, parking after `SPIN` of idleness.
fn wait_for_job(s: &Shared, seen: u64, index: usize, warming: &mut Warming) -> u64 {
    let slot = index - 1;
    let mut backoff = Backoff::new();
    loop {
        let g = s.generation.load(Acquire);
        if g != seen {
            return g;
        }
        if warming.step(s, index) {
            continue;
        }
        if backoff.snooze() > SPIN {
            // Announce, then re-check: either the dispatcher sees the flag and unparks
            // us, or we see its generation bump (SeqCst orders the two). An unpark that
            // comes before `park` makes `park` return at once.
            s.parked[slot].store(true, SeqCst);
            if s.generation.load(SeqCst) == seen {
                thread::park();
            }
            s.parked[slot].store(false, SeqCst);
            backoff = Backoff::new();
        }
    }
}

/// Spin-then-yield waiting.
struct Backoff {
    start: Instant,
    waited: Duration,
    spins: u32,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            start: Instant::now(),
            waited: Duration::ZERO,
            spins: 0,
        }
    }

    /// Waits a little; returns the time waited so far (refreshed every 64 calls).
    fn snooze(&mut self) -> Duration {
        self.spins = self.spins.wrapping_add(1);
        if self.spins.is_multiple_of(64) {
            self.waited = self.start.elapsed();
        }
        if self.waited < BUSY {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
        self.waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_share_once_per_job() {
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            assert_eq!(pool.threads(), threads);
            let hits: Vec<AtomicUsize> = (0..pool.shares()).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..1000 {
                assert!(pool.run(&|i| {
                    hits[i].fetch_add(1, Relaxed);
                }));
            }
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1000));
        }
    }

    /// Manual measurement: `cargo test --release -p specdec-kernels --lib dispatch_latency
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn dispatch_latency() {
        // Each share spins for `work`; the excess over work / threads is the overhead.
        let spin = |work: Duration| {
            let t = Instant::now();
            while t.elapsed() < work {
                std::hint::spin_loop();
            }
        };
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            for work_us in [0, 1] {
                let work = Duration::from_micros(work_us);
                let t = Instant::now();
                for _ in 0..10000 {
                    pool.run(&|_| spin(work));
                }
                let per = t.elapsed() / 10000;
                let ideal = work * pool.shares() as u32 / threads as u32;
                eprintln!("threads={threads} share={work:?}: {per:?} per job (ideal {ideal:?})");
            }
        }
    }

    #[test]
    fn wakes_parked_workers() {
        let pool = Pool::new(2);
        let count = AtomicUsize::new(0);
        for _ in 0..3 {
            thread::sleep(SPIN * 3);
            assert!(pool.run(&|_| {
                count.fetch_add(1, Relaxed);
            }));
        }
        assert_eq!(count.load(Relaxed), 3 * pool.shares());
    }

    #[test]
    fn warming_walks_each_order_once_in_bounded_steps() {
        let pool = Pool::new(2);
        let s = &*pool.shared;
        let mut w = Warming::default();
        assert!(!w.step(s, 1), "no order yet");
        let buf = vec![0u8; 3 * WARM_STEP + 5];
        let base = buf.as_ptr() as usize;
        pool.warm(&|t| base + t..base + buf.len());
        let steps = std::iter::from_fn(|| w.step(s, 1).then_some(())).count();
        assert_eq!(steps, 4);
        // A new order restarts; an order torn into a huge range stops at the limit.
        pool.warm(&|_| 8..usize::MAX);
        let steps = std::iter::from_fn(|| w.step(s, 1).then_some(())).count();
        assert_eq!(steps, WARM_LIMIT / WARM_STEP);
    }

    #[test]
    fn warming_orders_leave_jobs_alone() {
        // Any addresses at all, even unmapped ones: prefetches never fault.
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            let hits: Vec<AtomicUsize> = (0..pool.shares()).map(|_| AtomicUsize::new(0)).collect();
            for i in 0..300usize {
                let start = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                pool.warm(&|t| start + t..start.saturating_add(i << 12));
                assert!(pool.run(&|j| {
                    hits[j].fetch_add(1, Relaxed);
                }));
            }
            assert!(hits.iter().all(|h| h.load(Relaxed) == 300));
        }
    }

    #[test]
    fn reports_panics_and_survives() {
        let pool = Pool::new(2);
        assert!(!pool.run(&|i| assert!(i != CHUNKS, "boom")));
        assert!(pool.run(&|_| {}));
    }
}
