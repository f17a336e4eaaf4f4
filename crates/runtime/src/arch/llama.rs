//! `llama` (SmolLM2, Llama 2 and 3) and `mistral`: the skeleton as it is, RoPE on adjacent
//! pairs (GGUF llama checkpoints are permuted for it).

use super::{ArchSpec, Family};
use crate::config::{Arch, ModelConfig, RopeStyle};
use crate::RuntimeError;

pub(super) const FAMILY: Family = Family {
    arch: Arch::Llama,
    names: &["llama", "mistral"],
    rope_style: RopeStyle::Interleaved,
    spec,
};

fn spec(cfg: &ModelConfig, _: &specdec_gguf::GgufFile) -> Result<ArchSpec, RuntimeError> {
    Ok(ArchSpec::uniform(cfg, false))
}
