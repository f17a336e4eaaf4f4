//! Loading a model: configuration, its architecture's description, weights, RoPE tables.

use std::path::Path;

use specdec_gguf::GgufFile;
use specdec_kernels::Executor;

use super::Model;
use crate::arch::ArchSpec;
use crate::config::ModelConfig;
use crate::ops::Rope;
use crate::weights;
use crate::RuntimeError;

impl Model {
    /// Opens the GGUF at `path` and loads it (see [`Model::from_gguf`]), running its matmuls
    /// on `exec`.
    pub fn load_with(path: impl AsRef<Path>, exec: Executor) -> Result<Self, RuntimeError> {
        let file = GgufFile::open(path)?;
        Self::from_gguf(&file, exec)
    }

    /// Reads the configuration and architecture from `file`'s metadata, then repacks every
    /// weight for the kernels (releasing each mapped tensor once copied) and builds the RoPE
    /// tables; matmuls run on `exec`.
    pub fn from_gguf(file: &GgufFile, exec: Executor) -> Result<Self, RuntimeError> {
        let config = ModelConfig::from_gguf(file)?;
        let spec = ArchSpec::of(&config, file)?;
        spec.check_supported()?;
        let weights = weights::load(file, &config, &spec)?;
        let ropes = spec
            .ropes
            .iter()
            .map(|r| {
                let factors = weights.rope_factors.as_deref().filter(|_| r.scaled);
                Rope::new(r.style, config.head_dim, r.dims, r.base, factors)
            })
            .collect();
        Ok(Model {
            config,
            spec,
            weights: weights.into(),
            ropes,
            exec,
            profiler: Default::default(),
        })
    }
}
