//! Loading GGUF tensors into kernel-ready form.

use specdec_gguf::{dequantize, names, GgmlType, GgufFile, TensorInfo};
use specdec_kernels::{KernelError, PackedMatrix, WeightFormat};

use crate::arch::{ArchSpec, OutputHead};
use crate::config::ModelConfig;
use crate::RuntimeError;

pub(crate) struct Layer {
    pub attn_norm: Vec<f32>,
    /// q, k and v stacked along the output dimension.
    pub qkv: PackedMatrix,
    pub qkv_bias: Option<Vec<f32>>,
    /// Per-head RMS norm weights of queries and keys (`head_dim` each).
    pub qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    pub o: PackedMatrix,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub post_ffn_norm: Option<Vec<f32>>,
    /// gate and up stacked along the output dimension.
    pub gate_up: PackedMatrix,
    pub down: PackedMatrix,
}

/// The token embedding, kept in its file format and dequantized one row at a time.
pub(crate) struct Embedding {
    ty: GgmlType,
    data: Vec<u8>,
    row_bytes: usize,
    hidden: usize,
}

impl Embedding {
    pub fn row(&self, token: u32, out: &mut [f32]) -> Result<(), RuntimeError> {
        let t = token as usize;
        let bytes = self
            .data
            .get(t * self.row_bytes..(t + 1) * self.row_bytes)
            .ok_or(RuntimeError::BadToken(token))?;
        dequantize(self.ty, bytes, &mut out[..self.hidden])?;
        Ok(())
    }
}

pub(crate) struct Weights {
    pub embedding: Embedding,
    pub layers: Vec<Layer>,
    pub out_norm: Vec<f32>,
    pub head: PackedMatrix,
    pub rope_factors: Option<Vec<f32>>,
}

/// The kernel format a GGUF matrix type runs in as it is stored, if any; matrices of
/// other types are converted to Q8_0 at load.
pub fn native(ty: GgmlType) -> Option<WeightFormat> {
    match ty {
        GgmlType::Q4_0 => Some(WeightFormat::Q4_0),
        GgmlType::Q4_1 => Some(WeightFormat::Q4_1),
        GgmlType::Q8_0 => Some(WeightFormat::Q8_0),
        GgmlType::Q5_0 => Some(WeightFormat::Q5_0),
        GgmlType::Q4_K => Some(WeightFormat::Q4_K),
        GgmlType::Q5_K => Some(WeightFormat::Q5_K),
        GgmlType::Q6_K => Some(WeightFormat::Q6_K),
        _ => None,
    }
}

struct Loader<'a> {
    file: &'a GgufFile,
}

impl Loader<'_> {
    fn info(&self, name: &str) -> Result<&TensorInfo, RuntimeError> {
        self.file
            .tensor(name)
            .ok_or_else(|| RuntimeError::MissingTensor(name.to_string()))
    }

    /// Checks that `name` is a matrix of `k` inputs and `n` outputs.
    fn matrix(&self, name: &str, k: usize, n: usize) -> Result<&TensorInfo, RuntimeError> {
        let t = self.info(name)?;
        if t.dims != [k as u64, n as u64] {
            return Err(RuntimeError::Shape(format!(
                "tensor `{name}` has shape {:?}, expected [{k}, {n}]",
                t.dims
            )));
        }
        Ok(t)
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, RuntimeError> {
        let t = self.info(name)?;
        if t.elements() != n as u64 {
            return Err(RuntimeError::Shape(format!(
                "tensor `{name}` has shape {:?}, expected [{n}]",
                t.dims
            )));
        }
        self.to_f32(t)
    }

    fn to_f32(&self, t: &TensorInfo) -> Result<Vec<f32>, RuntimeError> {
        let mut out = vec![0f32; t.elements() as usize];
        dequantize(t.ty, self.file.tensor_data(t), &mut out)
            .map_err(|e| RuntimeError::Unsupported(format!("tensor `{}`: {e}", t.name)))?;
        Ok(out)
    }

    /// Packs matrices sharing `k` inputs as one, outputs stacked in order. Native formats
    /// are repacked as they are, each part in its own (a Q4_K_M file's Q4_K q and k beside
    /// a Q6_K v); where a part is of another type, or formats change inside a tile, the
    /// whole stack is converted to Q8_0 (`model info` lists what is).
    fn stacked(&self, parts: &[&TensorInfo], k: usize) -> Result<PackedMatrix, RuntimeError> {
        let native_parts: Option<Vec<_>> = parts
            .iter()
            .map(|t| native(t.ty).map(|f| (f, self.file.tensor_data(t), t.dims[1] as usize)))
            .collect();
        if let Some(native_parts) = native_parts {
            match PackedMatrix::stack(&native_parts, k) {
                Ok(m) => {
                    self.release(parts);
                    return Ok(m);
                }
                Err(KernelError::RaggedStack { .. } | KernelError::BadK { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let n: usize = parts.iter().map(|t| t.dims[1] as usize).sum();
        let mut w = Vec::with_capacity(n * k);
        for t in parts {
            w.extend(self.to_f32(t)?);
        }
        self.release(parts);
        Ok(PackedMatrix::from_f32(&w, n, k)?)
    }

    /// The file's pages of repacked tensors need not stay resident (peak memory would
    /// otherwise hold the weights twice). A tied head's tensor is the embedding, which is
    /// copied before it is packed.
    fn release(&self, parts: &[&TensorInfo]) {
        for t in parts {
            self.file.release(t);
        }
    }
}

/// Loads the tensors `spec` describes.
pub(crate) fn load(
    file: &GgufFile,
    cfg: &ModelConfig,
    spec: &ArchSpec,
) -> Result<Weights, RuntimeError> {
    let l = Loader { file };
    let (h, q, kv, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    let emb_info = l.matrix(names::TOKEN_EMBD, h, cfg.vocab)?;
    let Some(row_bytes) = emb_info.ty.bytes_for(h as u64) else {
        let (bs, _) = emb_info.ty.block_geometry();
        return Err(RuntimeError::Shape(format!(
            "embedding width {h} is not a multiple of {bs}"
        )));
    };
    let embedding = Embedding {
        ty: emb_info.ty,
        data: file.tensor_data(emb_info).to_vec(),
        row_bytes: row_bytes as usize,
        hidden: h,
    };
    file.release(emb_info);
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for (i, ls) in spec.layers.iter().enumerate() {
        let name = |s: &str| names::block(i, s);
        let wq = l.matrix(&name(names::ATTN_Q), h, q)?;
        let wk = l.matrix(&name(names::ATTN_K), h, kv)?;
        let wv = l.matrix(&name(names::ATTN_V), h, kv)?;
        let qkv_bias = if ls.qkv_bias {
            let mut b = l.vector(&name(names::ATTN_Q_BIAS), q)?;
            b.extend(l.vector(&name(names::ATTN_K_BIAS), kv)?);
            b.extend(l.vector(&name(names::ATTN_V_BIAS), kv)?);
            Some(b)
        } else {
            None
        };
        let hd = cfg.head_dim;
        let qk_norm = if ls.qk_norm {
            Some((
                l.vector(&name(names::ATTN_Q_NORM), hd)?,
                l.vector(&name(names::ATTN_K_NORM), hd)?,
            ))
        } else {
            None
        };
        let optional_norm = |on: bool, n: &str| on.then(|| l.vector(&name(n), h)).transpose();
        let gate = l.matrix(&name(names::FFN_GATE), h, f)?;
        let up = l.matrix(&name(names::FFN_UP), h, f)?;
        layers.push(Layer {
            attn_norm: l.vector(&name(names::ATTN_NORM), h)?,
            qkv: l.stacked(&[wq, wk, wv], h)?,
            qkv_bias,
            qk_norm,
            o: l.stacked(&[l.matrix(&name(names::ATTN_OUTPUT), q, h)?], q)?,
            post_attn_norm: optional_norm(ls.post_attn_norm, names::POST_ATTN_NORM)?,
            ffn_norm: l.vector(&name(names::FFN_NORM), h)?,
            post_ffn_norm: optional_norm(ls.post_ffn_norm, names::POST_FFN_NORM)?,
            gate_up: l.stacked(&[gate, up], h)?,
            down: l.stacked(&[l.matrix(&name(names::FFN_DOWN), f, h)?], f)?,
        });
    }
    let head_info = match (spec.output, file.tensor(names::OUTPUT)) {
        (OutputHead::OwnOrTied, Some(_)) => l.matrix(names::OUTPUT, h, cfg.vocab)?,
        (OutputHead::OwnOrTied, None) | (OutputHead::Tied, _) => emb_info,
    };
    let rope_factors = match file.tensor(names::ROPE_FREQS) {
        Some(t) => Some(l.to_f32(t)?),
        None => None,
    };
    Ok(Weights {
        embedding,
        layers,
        out_norm: l.vector(names::OUTPUT_NORM, h)?,
        head: l.stacked(&[head_info], h)?,
        rope_factors,
    })
}
