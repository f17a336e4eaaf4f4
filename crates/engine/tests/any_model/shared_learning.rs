//! Drafting state shared between engines (replicas): what one engine's finished requests
//! taught its pools, folded into another engine, leaves that engine's pools exactly as if
//! it had run the requests itself, keeps each owner's lessons in that owner's pool, and a
//! repeat on the other engine drafts from it and still equals plain decoding.

use crate::common;

use common::{chat, fixture};
use specdec_engine::budget::CostModel;
use specdec_engine::{CacheScope, DraftMethod, Engine, Folded, GenerateRequest, PoolName, Tenant};

fn request(prompt: &str, method: DraftMethod, scope: CacheScope) -> GenerateRequest {
    GenerateRequest {
        cache_scope: scope,
        ..GenerateRequest::new(chat(fixture(), prompt), 40)
    }
    .speculate(method)
}

#[test]
fn a_folded_lesson_teaches_what_running_the_request_would_have() {
    let f = fixture();
    let mut a = Engine::new(&f.model, &f.tokenizer).sharing_learning();
    let mut b = Engine::new(&f.model, &f.tokenizer).with_cost_model(CostModel::frozen());
    let prompt = "List five prime numbers and say why each is prime.";
    let first = a
        .generate(
            &request(prompt, DraftMethod::Auto, CacheScope::Shared),
            &mut |_| true,
        )
        .unwrap();
    let lessons = a.take_learned();
    assert_eq!(lessons.len(), 1, "one finished request, one lesson");
    // The output as the drafters learned it: its stop token last where it stopped on one.
    assert_eq!(lessons[0].output, first.written());
    for l in &lessons {
        assert_eq!(b.fold_learned(l), Folded::Applied);
    }
    let (pa, pb) = (a.pools().global(), b.pools().global());
    assert_eq!(
        *pb.trie.lock().unwrap(),
        *pa.trie.lock().unwrap(),
        "the same trie"
    );
    assert_eq!(
        *pb.history.lock().unwrap(),
        *pa.history.lock().unwrap(),
        "the same history"
    );

    // The repeat lands on the other engine: it drafts from the lesson, and stays exact.
    let plain = b
        .generate(
            &request(prompt, DraftMethod::None, CacheScope::Shared),
            &mut |_| true,
        )
        .unwrap();
    let repeat = b
        .generate(
            &request(prompt, DraftMethod::History, CacheScope::Shared),
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(repeat.token_ids, plain.token_ids);
    assert_eq!(plain.token_ids, first.token_ids);
    assert!(
        repeat.forward_passes * 2 <= plain.forward_passes,
        "a repeat of another engine's request takes at most half the forwards: {} vs {}",
        repeat.forward_passes,
        plain.forward_passes
    );
}

#[test]
fn lessons_stay_with_their_owner_and_private_requests_teach_none() {
    let f = fixture();
    let mut a = Engine::new(&f.model, &f.tokenizer).sharing_learning();
    let mut b = Engine::new(&f.model, &f.tokenizer);
    let acme = CacheScope::Tenant(Tenant::new("acme"));
    let prompt = "Name three rivers in Europe.";
    let mut req = request(prompt, DraftMethod::Auto, acme.clone());
    req.speculation.pool = Some(PoolName::parse("geo").unwrap());
    a.generate(&req, &mut |_| true).unwrap();
    a.generate(
        &request(prompt, DraftMethod::Auto, CacheScope::Private),
        &mut |_| true,
    )
    .unwrap();
    a.generate(
        &request(prompt, DraftMethod::None, CacheScope::Shared),
        &mut |_| true,
    )
    .unwrap();
    let lessons = a.take_learned();
    assert_eq!(
        lessons.len(),
        1,
        "neither a private request nor plain decoding teaches"
    );
    assert_eq!(lessons[0].scope, acme);
    assert_eq!(b.fold_learned(&lessons[0]), Folded::Applied);
    assert!(
        b.pools().global().history.lock().unwrap().is_empty(),
        "not the operator's"
    );
    let acme_pool = b
        .pools_mut()
        .pool_in(&acme, req.speculation.pool.as_ref())
        .unwrap();
    assert_eq!(
        acme_pool.history.lock().unwrap().documents(),
        1,
        "acme's `geo` pool"
    );
    let other = CacheScope::Tenant(Tenant::new("globex"));
    let globex = b
        .pools_mut()
        .pool_in(&other, req.speculation.pool.as_ref())
        .unwrap();
    assert!(
        globex.history.lock().unwrap().is_empty(),
        "another tenant's pool"
    );

    // A lesson from a model of a larger vocabulary, or for nobody, is skipped.
    let mut stray = lessons[0].clone();
    stray.output.push(f.tokenizer.vocab_size() as u32);
    assert_eq!(b.fold_learned(&stray), Folded::Skipped);
    let private = specdec_engine::Learned {
        scope: CacheScope::Private,
        ..lessons[0].clone()
    };
    assert_eq!(b.fold_learned(&private), Folded::Skipped);
}
