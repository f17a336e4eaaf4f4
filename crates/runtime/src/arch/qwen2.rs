//! `qwen2`: the Llama skeleton plus q, k and v biases, RoPE on halves (NeoX style).

use super::{ArchSpec, Family};
use crate::config::{Arch, ModelConfig, RopeStyle};
use crate::RuntimeError;

pub(super) const FAMILY: Family = Family {
    arch: Arch::Qwen2,
    names: &["qwen2"],
    rope_style: RopeStyle::NeoX,
    spec,
};

fn spec(cfg: &ModelConfig, _: &specdec_gguf::GgufFile) -> Result<ArchSpec, RuntimeError> {
    Ok(ArchSpec::uniform(cfg, true))
}
