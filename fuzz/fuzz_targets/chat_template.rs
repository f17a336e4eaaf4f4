//! Arbitrary bytes as a conversation (roles and contents) through the chat template and the
//! tokenizer: rendering, splitting into markup and contents, and encoding must return ids or
//! an error, never panic; and the ids must hold no control token beyond the template's own.
//! Runs on the default model's template (`$SPECDEC_MODEL` or the cached default) and, to reach
//! the trim and error paths, on a template that trims contents and one that slices them.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use specdec_engine::{ChatMessage, ChatTemplate, ModelMeta, Tokenizer};

struct Setup {
    tokenizer: Arc<Tokenizer>,
    /// The model's, a trimming one, and a slicing one (the last only renders parts).
    templates: [Arc<ChatTemplate>; 3],
}

fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let path = specdec_model_store::resolve(None, true).expect("the default model");
        let meta = ModelMeta::open(&path).expect("model file");
        let trims = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let slices = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content[:7] }}<|im_end|>{% endfor %}";
        Setup {
            tokenizer: meta.tokenizer.clone(),
            templates: [
                meta.template.clone(),
                Arc::new(ChatTemplate::new(trims, "", "<|im_end|>").expect("template")),
                Arc::new(ChatTemplate::new(slices, "", "<|im_end|>").expect("template")),
            ],
        }
    })
}

/// Fields are separated by 0xFF (never in UTF-8): role, content, role, content, ...; the
/// first byte picks the template and `add_generation_prompt`.
fn messages(data: &[u8]) -> Vec<ChatMessage> {
    let fields: Vec<String> = data
        .split(|&b| b == 0xFF)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    fields
        .chunks(2)
        .take(16)
        .map(|c| ChatMessage::new(c[0].clone(), c.get(1).cloned().unwrap_or_default()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let s = setup();
    let tok = &s.tokenizer;
    let which = usize::from(pick >> 1) % s.templates.len();
    let template = &*s.templates[which];
    let add = pick & 1 == 1;
    let msgs = messages(rest);
    let _ = template.render(&msgs, add);
    let _ = template.render_parts(&msgs, add);
    let Ok(ids) = tok.encode_chat(template, &msgs, add) else {
        return;
    };
    // Control tokens come only from markup: the same conversation with harmless contents
    // (and the same roles) has the same ones.
    let benign: Vec<ChatMessage> = msgs
        .iter()
        .map(|m| ChatMessage::new(m.role.clone(), "x"))
        .collect();
    if let Ok(want) = tok.encode_chat(template, &benign, add) {
        let specials = |ids: &[u32]| -> Vec<u32> {
            ids.iter()
                .copied()
                .filter(|&id| tok.is_special(id))
                .collect()
        };
        // Not for the slicing template: it shows a different part of "x" than of a content.
        if which < 2 {
            assert_eq!(specials(&ids), specials(&want), "{msgs:?}");
        }
    }
});
