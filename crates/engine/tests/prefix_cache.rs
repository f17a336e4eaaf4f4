//! Reusing an earlier request's cache for a shared prefix changes no token.

mod common;

use common::fixture;
use specdec_engine::{DraftMethod, Engine, GenerateRequest};
use specdec_tokenizer::ChatMessage;

#[test]
fn a_chats_next_turn_reuses_the_first_turns_cache_and_decodes_the_same() {
    let f = fixture();
    let mut cached = Engine::new(&f.model, &f.tokenizer).with_prefix_cache(256 << 20);
    let mut fresh = Engine::new(&f.model, &f.tokenizer);
    let render = |msgs: &[ChatMessage]| {
        let text = f.template.render(msgs, true).unwrap();
        f.tokenizer.encode_prompt(&text).unwrap()
    };
    let mut msgs = vec![ChatMessage::new("user", "Name a fruit that is yellow.")];
    let first = GenerateRequest::new(render(&msgs), 24);
    let a = cached.generate(&first, &mut |_| true).unwrap();
    assert_eq!(a.cached_prompt_tokens, 0);
    msgs.push(ChatMessage::new("assistant", a.text.clone()));
    msgs.push(ChatMessage::new("user", "And a red one?"));
    let second = GenerateRequest::new(render(&msgs), 24);
    for method in [DraftMethod::None, DraftMethod::Auto] {
        let mut d = method.drafter(&specdec_engine::new_trie());
        let b = cached
            .generate_with(&second, d.as_deref_mut(), &mut |_| true)
            .unwrap();
        let c = fresh.generate(&second, &mut |_| true).unwrap();
        assert!(
            b.cached_prompt_tokens > first.prompt.len() / 2,
            "{} of {} prompt tokens reused",
            b.cached_prompt_tokens,
            second.prompt.len()
        );
        assert_eq!(b.token_ids, c.token_ids, "{}", method.name());
        assert_eq!(c.cached_prompt_tokens, 0);
    }
    let (hits, tokens) = cached.prefix_cache_stats().unwrap();
    assert!(hits >= 2 && tokens > 0);
}
