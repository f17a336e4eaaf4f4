//! specdec-engine's real-model tests, one binary, built only with `--features
//! real-models`: the default model (fetched if missing), and Gemma 3 and Qwen2.5-Coder
//! 1.5B when cached; `workloads_exact` fetches its datasets on first use. The any-model
//! exactness tests run here on the real models too.

#[path = "../any_model/mod.rs"]
mod any_model;
mod beam_real;
#[path = "../common/mod.rs"]
mod common;
mod draft_model;
mod drafters_exact;
mod generate;
mod relaxed_real;
mod workloads_exact;

/// The models this tier runs the tests on.
mod models {
    /// The default model (SmolLM2-135M-Instruct), fetched if missing.
    pub fn path() -> std::path::PathBuf {
        specdec_model_store::resolve(None, true).expect("default model")
    }

    /// Gemma 3 270M when cached.
    pub fn others() -> Option<&'static crate::common::Fixture> {
        crate::common::gemma_fixture()
    }
}
