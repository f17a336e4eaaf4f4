//! Other replicas' lessons on their way into an engine's pools, and this engine's on
//! their way out: the part of sharing that runs on the engine's own thread, the same for
//! a server and for a knowledge job.

use std::collections::VecDeque;

use specdec_engine::{Engine, Folded, Learned};

use crate::SharedState;

/// Lessons waiting for their pool to be read from its files; past it the oldest are dropped.
pub const MAX_PENDING_LESSONS: usize = 4096;

/// Other replicas' lessons not folded yet.
#[derive(Debug, Default)]
pub struct Folding {
    pending: VecDeque<Learned>,
}

/// What one [`Folding::fold`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folds {
    /// Lessons a pool learned.
    pub applied: usize,
    /// Lessons for no pool here (see [`Folded::Skipped`]).
    pub skipped: usize,
    /// Lessons dropped unfolded: more were waiting than [`MAX_PENDING_LESSONS`].
    pub dropped: usize,
}

impl Folding {
    /// Takes a batch the reader delivered.
    pub fn receive(&mut self, batch: Vec<Learned>) {
        self.pending.extend(batch);
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Folds up to `max` waiting lessons into `engine`'s pools, in order; one whose pool is
    /// still being read from its files waits for a later call.
    pub fn fold(&mut self, engine: &mut Engine<'_>, max: usize) -> Folds {
        let mut folds = Folds::default();
        while self.pending.len() > MAX_PENDING_LESSONS {
            self.pending.pop_front();
            folds.dropped += 1;
        }
        let mut waiting = VecDeque::new();
        for _ in 0..max {
            let Some(l) = self.pending.pop_front() else {
                break;
            };
            match engine.fold_learned(&l) {
                Folded::Applied => folds.applied += 1,
                Folded::Skipped => folds.skipped += 1,
                Folded::Waiting => waiting.push_back(l),
            }
        }
        waiting.append(&mut self.pending);
        self.pending = waiting;
        folds
    }
}

impl SharedState {
    /// Publishes what `engine`'s finished requests taught since the last call.
    pub fn publish_learned(&self, engine: &mut Engine<'_>) {
        for l in engine.take_learned() {
            self.publish(l);
        }
    }

    /// Publishes the engine's last lessons and stops, giving them up to `wait` to go out
    /// (a warning says when they may not have).
    pub fn finish(self, engine: &mut Engine<'_>, wait: std::time::Duration) {
        self.publish_learned(engine);
        if !self.close(wait) {
            tracing::warn!("shared state: the last lessons may not have been published");
        }
    }
}
