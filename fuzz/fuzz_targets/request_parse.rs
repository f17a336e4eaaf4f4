//! Arbitrary bytes as an OpenAI request body, for both endpoints: the parser and the
//! validation behind it must return a request or an error, never panic. Uses the default
//! model's tokenizer and chat template (`$SPECDEC_MODEL` or the cached default).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use specdec_engine::{DraftMethod, ModelMeta};
use specdec_server::validate::{parse, Endpoint, Frontend};

fn frontend() -> &'static Frontend {
    static F: OnceLock<Frontend> = OnceLock::new();
    F.get_or_init(|| {
        let path = specdec_model_store::resolve(None, true).expect("the default model");
        let meta = ModelMeta::open(&path).expect("model file");
        Frontend::new(&meta, "smol".into(), DraftMethod::Auto, 32)
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = parse(frontend(), Endpoint::Chat, data);
    let _ = parse(frontend(), Endpoint::Completion, data);
});
