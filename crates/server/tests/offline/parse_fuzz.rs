//! 10,000 malformed and adversarial bodies through the request parser: each is a clean
//! error or a valid request, never a panic.

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{json, Value};
use specdec_engine::{Acceptance, DraftMethod, ModelMeta};
use specdec_server::validate::{parse, Endpoint, Frontend};

fn frontend() -> &'static Frontend {
    static F: OnceLock<Frontend> = OnceLock::new();
    F.get_or_init(|| {
        let meta = ModelMeta::open(specdec_testkit::tiny_model_path()).unwrap();
        Frontend::new(&meta, "smol".into(), DraftMethod::Auto, 32)
    })
}

/// A valid body for the endpoint.
fn valid(chat: bool) -> Value {
    let mut b = json!({"model": "smol",
        "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "stop": ["x"], "seed": 3,
        "stream": true, "stream_options": {"include_usage": true},
        "prediction": {"type": "content", "content": "hello"},
        "speculation": {"method": "auto", "max_draft_tokens": 8, "references": ["ref"]}});
    if chat {
        b["messages"] = json!([{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}]);
    } else {
        b["prompt"] = json!("hi");
    }
    b
}

/// JSON values of any shape, small enough to be cheap.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const KEYS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "seed",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "prediction",
    "speculation",
    "tools",
    "echo",
    "suffix",
    "logit_bias",
    "response_format",
];

/// A valid body with one field replaced by an arbitrary value.
fn mutated_field(chat: bool) -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(KEYS), any_json()).prop_map(move |(k, v)| {
        let mut b = valid(chat);
        b[k] = v;
        serde_json::to_vec(&b).unwrap()
    })
}

/// A valid body with bytes flipped, inserted or cut.
fn mutated_bytes(chat: bool) -> impl Strategy<Value = Vec<u8>> {
    let body = serde_json::to_vec(&valid(chat)).unwrap();
    let n = body.len();
    (prop::collection::vec((0..n, any::<u8>()), 1..6), 0..=n).prop_map(move |(edits, cut)| {
        let mut b = body.clone();
        for (i, byte) in edits {
            b[i] = byte;
        }
        b.truncate(cut.max(1));
        b
    })
}

fn bodies(chat: bool) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => any_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        4 => mutated_field(chat),
        2 => mutated_bytes(chat),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn no_body_panics_the_parser((chat, body) in any::<bool>().prop_flat_map(|c| (Just(c), bodies(c)))) {
        let endpoint = if chat { Endpoint::Chat } else { Endpoint::Completion };
        let _ = parse(frontend(), endpoint, &body);
    }
}

#[test]
fn the_valid_bodies_parse() {
    for (chat, endpoint) in [(true, Endpoint::Chat), (false, Endpoint::Completion)] {
        let b = serde_json::to_vec(&valid(chat)).unwrap();
        let r = parse(frontend(), endpoint, &b).unwrap();
        assert_eq!(r.gen.max_tokens, 5);
        assert_eq!(r.gen.speculation.references.len(), 2);
        // Forced output is a benchmark's tool: no client can ask for it.
        assert_eq!(r.gen.speculation.acceptance, Acceptance::Strict);
        for field in ["forced", "acceptance"] {
            let mut b = valid(chat);
            b["speculation"][field] = json!("answer");
            let body = serde_json::to_vec(&b).unwrap();
            assert!(parse(frontend(), endpoint, &body).is_err(), "{field}");
        }
    }
}

#[test]
fn a_pool_name_is_parsed_at_the_edge() {
    let mut b = valid(true);
    b["speculation"]["pool"] = json!("users.cluster-7");
    let r = parse(frontend(), Endpoint::Chat, &serde_json::to_vec(&b).unwrap()).unwrap();
    assert_eq!(r.gen.speculation.pool.unwrap().as_str(), "users.cluster-7");
    for bad in ["../etc/passwd", "", ".hidden", "a b"] {
        b["speculation"]["pool"] = json!(bad);
        let e = parse(frontend(), Endpoint::Chat, &serde_json::to_vec(&b).unwrap()).unwrap_err();
        assert!(e.to_string().contains("speculation.pool"), "{bad}: {e}");
    }
}

/// Before: a 30 MB message was tokenized (seconds of every core, gigabytes of memory)
/// only to be refused as longer than the context.
#[test]
fn a_prompt_too_long_for_the_context_is_refused_before_tokenizing() {
    let fe = frontend();
    let text = "x".repeat(fe.max_prompt_bytes() + 1);
    for (endpoint, body) in [
        (
            Endpoint::Chat,
            json!({"model": "smol", "messages": [{"role": "user", "content": text}]}),
        ),
        (
            Endpoint::Completion,
            json!({"model": "smol", "prompt": text}),
        ),
    ] {
        let e = parse(fe, endpoint, &serde_json::to_vec(&body).unwrap()).unwrap_err();
        assert!(e.to_string().contains("exceed the model's context"), "{e}");
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
    }
}
