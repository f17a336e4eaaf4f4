//! Qwen2.5-Coder's byte-level BPE (151,936 tokens; the 1.5B's and the 0.5B's files carry the
//! same vocabulary) against llama.cpp's `llama-tokenize -m FILE -f TEXT --ids` on the same
//! file (llama.cpp as vendored by llama-cpp-python 0.3.36): code, unicode, whitespace runs
//! and digits. Skipped, saying so, when the model is not cached.

use specdec_gguf::GgufFile;
use specdec_tokenizer::Tokenizer;

fn tokenizers() -> Vec<(&'static str, Tokenizer)> {
    let known = [
        &specdec_model_store::QWEN25_CODER_15B,
        &specdec_model_store::QWEN25_CODER_05B,
    ];
    known
        .into_iter()
        .filter_map(|k| {
            let Some(path) = specdec_model_store::cached(k) else {
                eprintln!(
                    "skipping {}: not cached (`specdec model fetch {}`)",
                    k.name, k.short_name
                );
                return None;
            };
            let file = GgufFile::open(path).expect("open");
            Some((k.name, Tokenizer::from_gguf(&file).expect("tokenizer")))
        })
        .collect()
}

const CODE: &str = "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n";
const UNICODE: &str = "Grüße, 世界! 🚀 naïve café — “quotes” and emoji 👩‍💻";
const SPACES: &str = "a    b\t\t\tc\n\n\n  d   \n     \r\n 12345678 3.14159 x=[1,2,3]";

#[test]
fn ids_equal_llama_cpp() {
    let cases: [(&str, &[u32]); 3] = [
        (
            CODE,
            &[
                750, 15801, 1445, 25, 526, 8, 1464, 526, 510, 262, 4210, 5598, 279, 308, 7563,
                79683, 1372, 14442, 262, 421, 308, 366, 220, 17, 510, 286, 470, 308, 198, 262, 470,
                15801, 1445, 481, 220, 16, 8, 488, 15801, 1445, 481, 220, 17, 340,
            ],
        ),
        (
            UNICODE,
            &[
                6464, 2391, 23455, 11, 220, 99489, 0, 11162, 248, 222, 94880, 586, 51950, 1959,
                1036, 53282, 854, 323, 42365, 61804, 102, 378, 235, 145851,
            ],
        ),
        (
            SPACES,
            &[
                64, 262, 293, 298, 1444, 1406, 220, 294, 5872, 38085, 220, 16, 17, 18, 19, 20, 21,
                22, 23, 220, 18, 13, 16, 19, 16, 20, 24, 856, 5818, 16, 11, 17, 11, 18, 60,
            ],
        ),
    ];
    for (name, tok) in tokenizers() {
        assert!(!tok.adds_bos(), "{name}: Qwen adds no BOS");
        for (text, want) in cases {
            let got = tok.encode_prompt(text).unwrap();
            assert_eq!(got, want, "{name}: {text:?}");
            assert_eq!(tok.decode(&got, false), text, "{name}: round trip");
        }
    }
}

/// The file's own Jinja template renders ChatML with Qwen2.5's default system turn, as
/// `transformers` renders it for this model.
#[test]
fn chat_template_renders_chatml_with_the_default_system_turn() {
    let known = &specdec_model_store::QWEN25_CODER_15B;
    let Some(path) = specdec_model_store::cached(known) else {
        eprintln!("skipping {}: not cached", known.name);
        return;
    };
    let file = GgufFile::open(path).unwrap();
    let t = specdec_tokenizer::ChatTemplate::from_gguf(&file)
        .unwrap()
        .expect("the file has a template");
    let user = specdec_tokenizer::ChatMessage::new("user", "Hi");
    assert_eq!(
        t.render(std::slice::from_ref(&user), true).unwrap(),
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
         assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let system = specdec_tokenizer::ChatMessage::new("system", "Be brief.");
    assert_eq!(
        t.render(&[system, user], true).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}
