//! Reusing an earlier request's cache for a shared prefix changes no token.

use crate::common;

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
        let mut d = method.drafter(&specdec_engine::Pool::default(), None);
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

#[test]
fn another_tenants_prefix_is_never_reused() {
    use specdec_engine::{CacheScope, Tenant};
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer).with_prefix_cache(256 << 20);
    let text = f
        .template
        .render(
            &[ChatMessage::new(
                "user",
                "The code is 8312. Repeat after me: the code is 8312.",
            )],
            true,
        )
        .unwrap();
    let prompt = f.tokenizer.encode_prompt(&text).unwrap();
    let as_tenant = |scope: CacheScope| GenerateRequest {
        cache_scope: scope,
        ..GenerateRequest::new(prompt.clone(), 4)
    };
    let a = CacheScope::Tenant(Tenant::new("a"));
    let b = CacheScope::Tenant(Tenant::new("b"));
    let run = |e: &mut Engine, r: &GenerateRequest| e.generate(r, &mut |_| true).unwrap();
    assert_eq!(
        run(&mut engine, &as_tenant(a.clone())).cached_prompt_tokens,
        0
    );
    for other in [b, CacheScope::Shared, CacheScope::Private] {
        let out = run(&mut engine, &as_tenant(other.clone()));
        assert_eq!(out.cached_prompt_tokens, 0, "{other:?}");
    }
    // A private request left nothing behind either.
    let out = run(&mut engine, &as_tenant(CacheScope::Private));
    assert_eq!(out.cached_prompt_tokens, 0);
    let out = run(&mut engine, &as_tenant(a));
    assert_eq!(out.cached_prompt_tokens, prompt.len() - 1);
}
