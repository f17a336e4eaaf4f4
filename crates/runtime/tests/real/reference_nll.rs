//! Our forward against an independent implementation (candle's quantized llama) on the
//! default model: teacher-forced NLL over an English passage and top-1 agreement.

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use specdec_runtime::{Executor, Model, Node, SeqInput, Want};

fn log_softmax_at(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let z: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[target] as f64 - max - z.ln()
}

fn argmax(v: &[f32]) -> usize {
    let mut b = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[b] {
            b = i;
        }
    }
    b
}

#[test]
fn nll_and_top1_agree_with_candle() {
    let path = specdec_model_store::resolve(None, true).unwrap();
    let file = specdec_gguf::GgufFile::open(&path).unwrap();
    let tok = specdec_tokenizer::Tokenizer::from_gguf(&file).unwrap();
    let text = include_str!("../../../../data/passage.txt");
    let tokens = tok.encode(text, false).unwrap();
    assert!(tokens.len() >= 300, "{} tokens", tokens.len());

    let ours = Model::from_gguf(&file, Executor::new(2)).unwrap();
    let mut seq = ours.new_sequence();
    let nodes = Node::chain(&tokens);
    let out = ours
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &nodes,
            want: Want::All,
        }])
        .unwrap();

    let mut reader = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut reader).unwrap();
    let mut reference = ModelWeights::from_gguf(content, &mut reader, &Device::Cpu).unwrap();

    let (mut nll_ours, mut nll_ref, mut agree) = (0f64, 0f64, 0usize);
    let n = tokens.len() - 1;
    for i in 0..n {
        let input = Tensor::new(&[tokens[i]], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let r = reference
            .forward(&input, i)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let o = out[0].row(i);
        let next = tokens[i + 1] as usize;
        nll_ours -= log_softmax_at(o, next);
        nll_ref -= log_softmax_at(&r, next);
        agree += usize::from(argmax(o) == argmax(&r));
    }
    let (nll_ours, nll_ref) = (nll_ours / n as f64, nll_ref / n as f64);
    let agreement = agree as f64 / n as f64;
    println!(
        "tokens {n}: mean NLL ours {nll_ours:.4}, candle {nll_ref:.4}, top-1 agreement {:.1}%",
        agreement * 100.0
    );
    assert!(
        ((nll_ours - nll_ref) / nll_ref).abs() < 0.01,
        "NLL ours {nll_ours} vs candle {nll_ref}"
    );
    assert!(agreement >= 0.95, "top-1 agreement {agreement}");
}
