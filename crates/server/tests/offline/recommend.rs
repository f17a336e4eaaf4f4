//! `POST /v1/recommend` on the tiny synthetic model, over a small catalogue of titles (no
//! download): the list is the one `specdec_rec::recommend::recommend` gives, exact searches
//! agree, and bad requests get OpenAI error objects.

use crate::common;

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use common::{post, send_json};
use serde_json::{json, Value};
use specdec_engine::beam::{BeamOptions, BeamRunner};
use specdec_rec::recommend::{recommend, CatalogueSource, ItemCatalogue};
use specdec_server::{router, AppState, Server, ServerConfig};

fn titles() -> Vec<String> {
    [
        "Toy Story (1995)",
        "GoldenEye (1995)",
        "Four Rooms (1995)",
        "Get Shorty (1995)",
        "Copycat (1995)",
        "Twelve Monkeys (1995)",
        "Babe (1995)",
        "Dead Man Walking (1995)",
        "Richard III (1995)",
        "Seven (Se7en) (1995)",
        "The Usual Suspects (1995)",
        "Mighty Aphrodite (1995)",
        "The Postman (1994)",
        "Mr. Holland's Opus (1995)",
        "French Twist (1995)",
        "From Dusk Till Dawn (1996)",
        "Braveheart (1995)",
        "Taxi Driver (1976)",
        "Apollo 13 (1995)",
        "Batman Forever (1995)",
        "Star Wars (1977)",
        "Pulp Fiction (1994)",
        "Fargo (1996)",
        "The Lion King (1994)",
    ]
    .map(String::from)
    .to_vec()
}

/// One server with the catalogue (and no draft model) per test binary.
fn state() -> Arc<AppState> {
    static S: OnceLock<Arc<AppState>> = OnceLock::new();
    S.get_or_init(|| {
        let server = common::start(&ServerConfig {
            catalogue: Some(CatalogueSource::Titles(titles())),
            max_concurrent: 2,
            ..common::config()
        })
        .expect("server loads");
        std::mem::forget(server.engine);
        server.state
    })
    .clone()
}

async fn ask(state: Arc<AppState>, body: Value) -> (StatusCode, Value) {
    send_json(router(state), post("/v1/recommend", &body.to_string())).await
}

const HISTORY: [&str; 3] = ["Toy Story (1995)", "Babe (1995)", "Apollo 13 (1995)"];

fn listed(v: &Value) -> Vec<(String, f64)> {
    v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {v}"))
        .iter()
        .map(|i| {
            (
                i["title"].as_str().unwrap().to_string(),
                i["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_answer_lists_k_catalogue_titles_best_first() {
    let s = state();
    let (status, v) = ask(s.clone(), json!({"history": HISTORY, "k": 5})).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "recommendation");
    assert_eq!(v["model"], "smol");
    let items = listed(&v);
    assert_eq!(items.len(), 5, "{v}");
    let catalogue = &s.recommender.as_ref().unwrap().catalogue;
    for (title, score) in &items {
        assert!(
            catalogue.entry_of_title(title).is_some(),
            "{title} is not in the catalogue"
        );
        assert!(score.is_finite() && *score <= 0.0, "{v}");
    }
    assert!(
        items.windows(2).all(|w| w[0].1 >= w[1].1),
        "not best first: {v}"
    );
    let spec = &v["speculation"];
    assert_eq!(spec["mode"], "jump-forward");
    assert_eq!(spec["relaxed"], false);
    assert_eq!(spec["draft_forwards"], 0);
    assert!(spec["target_forwards"].as_u64().unwrap() > 0, "{v}");
    let metrics = s.metrics.render();
    assert!(
        metrics.contains("specdec:recommend_requests_total{model_name=\"smol\",outcome=\"ok\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_server_gives_the_list_the_library_gives_and_exact_searches_agree() {
    let (status, served) = ask(state(), json!({"history": HISTORY, "k": 4})).await;
    assert_eq!(status, StatusCode::OK, "{served}");
    let (status, plain) = ask(
        state(),
        json!({"history": HISTORY, "k": 4, "mode": "plain"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(plain["speculation"]["mode"], "plain");
    let titles_of = |v: &Value| listed(v).into_iter().map(|(t, _)| t).collect::<Vec<_>>();
    assert_eq!(titles_of(&served), titles_of(&plain));
    for ((_, a), (_, b)) in listed(&served).iter().zip(listed(&plain)) {
        assert!((a - b).abs() < 1e-6, "{served} vs {plain}");
    }

    // The CLI's path: the library on its own copy of the target.
    let target = common::fake_target();
    let tok = common::meta().tokenizer;
    let catalogue = ItemCatalogue::from_titles(titles(), &tok).unwrap();
    let mut runner = BeamRunner::new(&target, None).unwrap();
    let history: Vec<String> = HISTORY.map(String::from).to_vec();
    let direct = recommend(
        &mut runner,
        &catalogue,
        &tok,
        &[history],
        &BeamOptions::jump_forward(4),
    )
    .unwrap()
    .pop()
    .unwrap();
    let direct: Vec<String> = direct.items.into_iter().map(|i| i.title).collect();
    assert_eq!(titles_of(&served), direct);
}

fn error_param(v: &Value) -> Option<&str> {
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    v["error"]["param"].as_str()
}

#[tokio::test]
async fn bad_requests_get_400_with_an_error_object() {
    let long = "x".repeat(600);
    let cases = [
        (json!({"history": HISTORY, "k": 0}), Some("k")),
        (json!({"history": HISTORY, "k": 1000}), Some("k")),
        (json!({"history": "Toy Story (1995)"}), None),
        (json!({"history": [long]}), Some("history")),
        (json!({"history": HISTORY, "beams": 3}), None),
        (
            json!({"history": HISTORY, "verify": "relaxed"}),
            Some("verify"),
        ),
        (json!({"history": HISTORY, "draft": true}), Some("draft")),
    ];
    for (body, param) in cases {
        let (status, v) = ask(state(), body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(error_param(&v), param, "{body}: {v}");
    }
}

#[tokio::test]
async fn fifty_long_titles_at_k_100_are_refused_before_they_hold_the_engine() {
    // Before: 50 titles of 512 bytes with `k: 100` kept the engine thread 35-38 s while
    // every chat waited; the history's prompt is now measured and bounded at the edge.
    let limits = specdec_server::RecommendLimits::default();
    let title = |i: usize| {
        let mut t = format!("{i}");
        while t.len() < limits.max_title_bytes {
            t.push_str(" word");
        }
        t.truncate(limits.max_title_bytes);
        t
    };
    let history: Vec<String> = (0..limits.max_history).map(title).collect();
    // Within the context: before, this was searched, not refused.
    let s = state();
    let prompt = specdec_rec::recommend::service::history_tokens(&s.frontend.tokenizer, &history)
        .unwrap()
        .len();
    assert!(prompt < s.frontend.context_length, "{prompt}");
    let (status, v) = ask(state(), json!({"history": history, "k": 100})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_param(&v), Some("history"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&limits.max_history_tokens.to_string()),
        "{message}"
    );
    // Nothing was queued: a small search is still answered.
    let (status, v) = ask(state(), json!({"history": HISTORY, "k": 3})).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_server_without_a_catalogue_says_how_to_enable_recommendation() {
    let (status, v) = send_json(
        common::app(),
        post("/v1/recommend", &json!({"history": HISTORY}).to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["error"]["code"], "recommend_not_enabled", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--catalogue"),
        "{v}"
    );
}

/// A draft model without a catalogue serves text: `speculation.method: "model"` drafts
/// with it (here the target itself) and answers plain decoding's text.
#[tokio::test]
async fn a_draft_model_without_a_catalogue_drafts_text() {
    let server = Server::load(&ServerConfig {
        draft_model: Some(common::config().model),
        ..common::config()
    })
    .expect("a draft model alone loads");
    std::mem::forget(server.engine);
    let chat = |method: &str| {
        common::chat_body(json!({"max_tokens": 16, "speculation": {"method": method}}))
    };
    let (status, plain) = send_json(
        router(server.state.clone()),
        post("/v1/chat/completions", &chat("none")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    let (status, drafted) = send_json(
        router(server.state),
        post("/v1/chat/completions", &chat("model")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{drafted}");
    assert_eq!(
        drafted["choices"][0]["message"]["content"],
        plain["choices"][0]["message"]["content"]
    );
}

/// A server whose draft model is the target itself (the only other GGUF at hand with its
/// vocabulary): every drafted step is the target's own, so strict speculation must still
/// give the plain list.
fn drafted_state() -> Arc<AppState> {
    static S: OnceLock<Arc<AppState>> = OnceLock::new();
    S.get_or_init(|| {
        let server = Server::load(&ServerConfig {
            catalogue: Some(CatalogueSource::Titles(titles())),
            draft_model: Some(common::config().model),
            max_concurrent: 2,
            ..common::config()
        })
        .expect("server loads");
        std::mem::forget(server.engine);
        server.state
    })
    .clone()
}

#[tokio::test]
async fn with_a_draft_model_strict_speculation_gives_the_plain_list_and_relaxed_says_so() {
    let s = drafted_state();
    let body = json!({"history": HISTORY, "k": 4});
    let (status, spec) = ask(s.clone(), body).await;
    assert_eq!(status, StatusCode::OK, "{spec}");
    assert_eq!(spec["speculation"]["mode"], "strict speculative", "{spec}");
    assert_eq!(spec["speculation"]["relaxed"], false);
    assert!(
        spec["speculation"]["draft_forwards"].as_u64().unwrap() > 0,
        "{spec}"
    );
    let (_, plain) = ask(
        s.clone(),
        json!({"history": HISTORY, "k": 4, "draft": false}),
    )
    .await;
    assert_eq!(plain["speculation"]["mode"], "jump-forward", "{plain}");
    let titles_of = |v: &Value| listed(v).into_iter().map(|(t, _)| t).collect::<Vec<_>>();
    assert_eq!(titles_of(&spec), titles_of(&plain));

    let body = json!({"history": HISTORY, "k": 4, "verify": "relaxed", "seed": 3});
    let (status, relaxed) = ask(s.clone(), body).await;
    assert_eq!(status, StatusCode::OK, "{relaxed}");
    assert_eq!(relaxed["speculation"]["relaxed"], true, "{relaxed}");
    assert_eq!(listed(&relaxed).len(), 4, "{relaxed}");
    // `mode` asks for a search without the draft; with `draft: true` it is a 400.
    let body = json!({"history": HISTORY, "mode": "plain", "draft": true});
    let (status, v) = ask(s, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_param(&v), Some("mode"));
}

/// Recommendations and chats sent together are scheduled together (the searches' rows in
/// the chats' forwards): each is answered with what it gets alone.
#[tokio::test]
async fn recommendations_and_chats_sent_together_get_their_answers_alone() {
    let s = drafted_state();
    let chat = common::chat_body(json!({"max_tokens": 24}));
    let strict = json!({"history": HISTORY, "k": 5});
    let plain = json!({"history": HISTORY, "k": 5, "draft": false, "mode": "plain"});
    let (_, chat_alone) = send_json(router(s.clone()), post("/v1/chat/completions", &chat)).await;
    let (_, strict_alone) = ask(s.clone(), strict.clone()).await;
    let (a, b, c) = tokio::join!(
        send_json(router(s.clone()), post("/v1/chat/completions", &chat)),
        ask(s.clone(), strict),
        ask(s.clone(), plain),
    );
    assert_eq!(a.0, StatusCode::OK, "{}", a.1);
    assert_eq!(
        a.1["choices"][0]["message"]["content"],
        chat_alone["choices"][0]["message"]["content"]
    );
    for (status, v) in [&b, &c] {
        assert_eq!(*status, StatusCode::OK, "{v}");
        assert_eq!(listed(v), listed(&strict_alone), "{v}");
    }
}
