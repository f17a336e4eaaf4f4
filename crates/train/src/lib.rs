//! Draft alignment training for speculative beam search (AtSpeed, docs/methods/atspeed.md):
//! teacher data from the target through specdec's runtime ([`teacher`]), a small Llama
//! draft in candle ([`model`]), the objectives ([`loss`]), the training loop's pieces
//! ([`train`]) and the GGUF export the runtime loads ([`export`]). Interrupted runs resume
//! from [`checkpoint`]s, which is why the optimiser is specdec's own ([`optim`]).

pub mod checkpoint;
pub mod export;
pub mod loss;
pub mod model;
pub mod optim;
pub mod teacher;
pub mod train;

pub use checkpoint::{checkpoint_exists, load_checkpoint, save_checkpoint, CheckpointMeta};
pub use export::{runtime_logits, to_gguf};
pub use loss::Objective;
pub use model::{Draft, DraftConfig, Layout};
pub use teacher::{TeacherCase, TeacherData, TeacherKey, TeacherUser};
pub use train::{StepLoss, TrainOptions, Trainer};

/// Everything that can go wrong generating teacher data, training, checkpointing or
/// exporting a draft.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A candle tensor operation failed (shapes, dtypes, safetensors files).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// The target's runtime failed (loading it, or a forward for teacher data).
    #[error(transparent)]
    Runtime(#[from] specdec_runtime::RuntimeError),
    /// The engine's beam search for teacher data failed.
    #[error(transparent)]
    Engine(#[from] specdec_engine::EngineError),
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A JSON file (teacher data, checkpoint metadata) is malformed.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The draft's hyper-parameters are inconsistent (heads, sizes).
    #[error("draft configuration: {0}")]
    Config(String),
    /// Teacher data does not fit the draft or the options (vocabulary, sizes, emptiness).
    #[error("teacher data: {0}")]
    Teacher(String),
}

/// The largest difference between two sets of logits relative to the largest magnitude
/// of `want`: how the runtime's forward of an export compares with candle's. The runtime
/// quantizes weights (F32 to Q8_0 at load) and activations (int8) in its matmuls, so the
/// two agree to about a percent, not to float rounding.
pub fn logits_relative_error(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    let scale = want
        .iter()
        .flatten()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = got
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

/// The bound the export tests hold [`logits_relative_error`] to.
pub const EXPORT_TOLERANCE: f32 = 0.02;
