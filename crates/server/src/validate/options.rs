//! A request's options beside its prompt: sampling parameters, reference sizes and the
//! verification rule of `speculation`.

use specdec_engine::{RawSpec, SamplingParams, SpeculationSpec};

use super::{bad, MAX_REFERENCES, MAX_REFERENCE_BYTES, MIN_TEMPERATURE};
use crate::api::{Content, RequestBody};
use crate::error::ApiError;

pub(super) fn sampling(body: &RequestBody) -> Result<SamplingParams, ApiError> {
    let mut s = SamplingParams {
        // OpenAI's default temperature is 1.
        temperature: 1.0,
        ..SamplingParams::default()
    };
    if let Some(t) = body.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(bad(
                "temperature",
                format!("temperature must be in [0, 2], got {t}"),
            ));
        }
        // Below this a temperature means greedy, as 0 does. The sampler divides logits by
        // the temperature in f32: under about 3e-39 the reciprocal overflows to infinity
        // and the distribution turns to NaN (1e-39 gave garbage). Long before that the
        // sample is already the argmax: at 1e-5 a gap of 0.001 between two logits is a
        // probability ratio of e^100, past what f32 holds, so only logits that tie to f32
        // precision could come out otherwise.
        s.temperature = if t < MIN_TEMPERATURE { 0.0 } else { t as f32 };
    }
    if let Some(p) = body.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(bad("top_p", format!("top_p must be in (0, 1], got {p}")));
        }
        s.top_p = p as f32;
    }
    if let Some(k) = body.top_k {
        // -1 disables, as in vLLM.
        s.top_k = match k {
            -1 | 0 => 0,
            k if k > 0 => k as usize,
            _ => {
                return Err(bad(
                    "top_k",
                    format!("top_k must be -1, 0 or positive, got {k}"),
                ))
            }
        };
    }
    if let Some(m) = body.min_p {
        if !(0.0..=1.0).contains(&m) {
            return Err(bad("min_p", format!("min_p must be in [0, 1], got {m}")));
        }
        s.min_p = m as f32;
    }
    if let Some(r) = body.repetition_penalty {
        if !(r > 0.0 && r <= 10.0) {
            return Err(bad(
                "repetition_penalty",
                format!("repetition_penalty must be in (0, 10], got {r}"),
            ));
        }
        s.repetition_penalty = r as f32;
    }
    s.seed = match body.seed {
        Some(seed) => seed as u64,
        // Unseeded requests still sample reproducibly within the request.
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    Ok(s)
}

/// The parameter to name when references are too large: the one the client used.
pub(super) fn reference_param(body: &RequestBody) -> &'static str {
    match body.prediction {
        Some(_) => "prediction",
        None => "speculation",
    }
}

pub(super) fn content_bytes(c: &Content) -> usize {
    match c {
        Content::Text(t) => t.len(),
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|p| p.text.as_ref())
            .map(String::len)
            .sum(),
    }
}

/// Refuses references larger than [`MAX_REFERENCES`] texts or [`MAX_REFERENCE_BYTES`]
/// bytes before any of them is tokenized.
pub(super) fn reference_sizes(
    prediction: Option<&crate::api::Prediction>,
    spec: &crate::api::Speculation,
) -> Result<(), ApiError> {
    let refs = spec.references.as_deref().unwrap_or_default();
    if refs.len() > MAX_REFERENCES {
        return Err(bad(
            "speculation",
            format!(
                "`speculation.references` may hold at most {MAX_REFERENCES} texts, got {}",
                refs.len()
            ),
        ));
    }
    let predicted = prediction.map_or(0, |p| content_bytes(&p.content));
    let bytes = predicted + refs.iter().map(String::len).sum::<usize>();
    if bytes > MAX_REFERENCE_BYTES {
        let param = if predicted > 0 {
            "prediction"
        } else {
            "speculation"
        };
        return Err(bad(
            param,
            format!(
                "`speculation.references` and `prediction` may hold at most {MAX_REFERENCE_BYTES} bytes together, got {bytes}"
            ),
        ));
    }
    Ok(())
}

/// `speculation`'s method, `verify`, `top_k` and `tau`, parsed by the engine's one parser
/// with `default` filling in what the request leaves out. Relaxed verification is greedy
/// only, so it needs `temperature: 0` (OpenAI's default is 1).
pub(super) fn speculation(
    spec: &crate::api::Speculation,
    default: &SpeculationSpec,
    sampling: &SamplingParams,
) -> Result<SpeculationSpec, ApiError> {
    let raw = RawSpec {
        method: spec.method.clone(),
        verify: spec.verify.clone(),
        top_k: spec.top_k,
        tau: spec.tau,
    };
    let parsed = SpeculationSpec::parse(&raw, default)
        .map_err(|e| bad("speculation", format!("speculation: {e}")))?;
    parsed.check_sampling(sampling).map_err(|e| {
        bad(
            "temperature",
            format!("speculation: {e} (the default temperature is 1)"),
        )
    })?;
    Ok(parsed)
}
