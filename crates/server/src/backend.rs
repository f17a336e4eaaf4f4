//! The seam between the HTTP edge and whatever runs the model. Handlers validate a request
//! into a [`Job`] (or a [`RecommendJob`]), hand it to the backend and wait on the job's own
//! channel; they never see a model, a cache or a scheduler. The local engine thread
//! ([`Queue`]) is today's backend; an engine in another process, or on a GPU, implements
//! the same five calls and plugs in at [`AppState`](crate::AppState)'s `backend`, and tests
//! of the edge alone run on a scripted one.

use crate::error::ApiError;
use crate::worker::{Job, Queue, RecommendJob};

/// What runs requests for the HTTP edge.
pub trait Backend: Send + Sync {
    /// Takes a generation without waiting for it: a backend with no room refuses at once
    /// ([`ApiError::QueueFull`], 429), a closed one too ([`ApiError::Unavailable`], 503).
    /// Its text and its end come back on `job.events`; a closed channel means the client
    /// left, and the backend should stop work on it.
    fn submit(&self, job: Job) -> Result<(), ApiError>;
    /// The same for a recommendation: its list comes back on `job.reply`.
    fn submit_recommend(&self, job: RecommendJob) -> Result<(), ApiError>;
    /// Requests it holds now, waiting or running.
    fn held(&self) -> usize;
    /// Takes no more work; what it holds finishes.
    fn close(&self);
    /// Ends everything it holds now (a generation with what it produced) and takes no more.
    fn cancel_all(&self);
}

impl Backend for Queue {
    fn submit(&self, job: Job) -> Result<(), ApiError> {
        Queue::submit(self, job)
    }

    fn submit_recommend(&self, job: RecommendJob) -> Result<(), ApiError> {
        Queue::submit_recommend(self, job)
    }

    fn held(&self) -> usize {
        Queue::held(self)
    }

    fn close(&self) {
        Queue::close(self)
    }

    fn cancel_all(&self) {
        Queue::cancel_all(self)
    }
}
