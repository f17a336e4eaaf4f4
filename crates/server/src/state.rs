//! What every handler shares: the server's state behind the router.

use std::sync::Arc;

use crate::backend::Backend;
use crate::metrics::Metrics;
use crate::recommend::Recommender;
use crate::validate::Frontend;

/// What every handler shares.
pub struct AppState {
    /// Turns request bodies into engine requests.
    pub frontend: Frontend,
    /// Runs the requests: the local engine thread's bounded queue, or another backend.
    pub backend: Arc<dyn Backend>,
    /// What `/metrics` and `/health` report.
    pub metrics: Arc<Metrics>,
    /// The key clients must send (none: no key needed).
    pub api_key: Option<String>,
    /// `/v1/recommend`'s catalogue and draft (none: the endpoint says how to enable it).
    pub recommender: Option<Recommender>,
    /// Unix seconds at start-up.
    pub started: u64,
}
