//! Request validation through the router: every class of bad request gets an OpenAI-style
//! error that names what to fix, within the documented limits, never echoing unbounded
//! input and never silently ignoring a field.

use crate::common;

use axum::http::StatusCode;
use common::{app, chat_body, get, post, send, send_json};
use serde_json::json;

/// (body, status, error code or param expected in the error).
fn bad_requests() -> Vec<(String, StatusCode, &'static str)> {
    let too_long = "word ".repeat(9000);
    vec![
        (
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "not a valid request",
        ),
        (
            chat_body(json!({"foo": 1})),
            StatusCode::BAD_REQUEST,
            "unknown field `foo`",
        ),
        (
            json!({"messages": []}).to_string(),
            StatusCode::BAD_REQUEST,
            "`model` is required",
        ),
        (
            chat_body(json!({"model": "gpt-4"})),
            StatusCode::NOT_FOUND,
            "model_not_found",
        ),
        (chat_body(json!({"n": 2})), StatusCode::BAD_REQUEST, "n = 1"),
        (
            chat_body(json!({"temperature": 3})),
            StatusCode::BAD_REQUEST,
            "temperature must be in [0, 2]",
        ),
        (
            chat_body(json!({"top_p": 0})),
            StatusCode::BAD_REQUEST,
            "top_p",
        ),
        (
            chat_body(json!({"max_tokens": 0})),
            StatusCode::BAD_REQUEST,
            "at least 1",
        ),
        (
            chat_body(json!({"max_tokens": 100000})),
            StatusCode::BAD_REQUEST,
            "context_length_exceeded",
        ),
        (
            chat_body(json!({"messages": [{"role": "user", "content": too_long}]})),
            StatusCode::BAD_REQUEST,
            "context_length_exceeded",
        ),
        (
            chat_body(json!({"messages": []})),
            StatusCode::BAD_REQUEST,
            "at least one message",
        ),
        (
            chat_body(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            ),
            StatusCode::BAD_REQUEST,
            "text only",
        ),
        (
            chat_body(json!({"speculation": {"method": "magic"}})),
            StatusCode::BAD_REQUEST,
            "unknown draft method",
        ),
        (
            // This server was started without --draft-model.
            chat_body(json!({"speculation": {"method": "model"}})),
            StatusCode::BAD_REQUEST,
            "--draft-model",
        ),
        (
            chat_body(json!({"speculation": {"max_draft_tokens": 1000}})),
            StatusCode::BAD_REQUEST,
            "max_draft_tokens",
        ),
        (
            chat_body(json!({"speculation": {"verify": "relaxed"}, "temperature": 0.7})),
            StatusCode::BAD_REQUEST,
            "is greedy only: set `temperature` to 0",
        ),
        (
            chat_body(json!({"speculation": {"verify": "loose"}})),
            StatusCode::BAD_REQUEST,
            "must be `strict` or `relaxed`",
        ),
        (
            chat_body(json!({"speculation": {"verify": "relaxed", "top_k": 0}})),
            StatusCode::BAD_REQUEST,
            "top_k must be in 1..=64, got 0",
        ),
        (
            chat_body(json!({"speculation": {"verify": "relaxed", "tau": 1.5}})),
            StatusCode::BAD_REQUEST,
            "tau must be in [0, 1), got 1.5",
        ),
        (
            chat_body(json!({"speculation": {"top_k": 3}})),
            StatusCode::BAD_REQUEST,
            "apply only with",
        ),
        (
            chat_body(json!({"speculation": {"verify": "relaxed", "topk": 3}})),
            StatusCode::BAD_REQUEST,
            "unknown field `topk`",
        ),
        (
            chat_body(json!({"prediction": {"type": "file", "content": "x"}})),
            StatusCode::BAD_REQUEST,
            "prediction type",
        ),
        (
            chat_body(json!({"logprobs": true})),
            StatusCode::BAD_REQUEST,
            "logprobs",
        ),
        (
            chat_body(json!({"tools": [{"type": "function"}]})),
            StatusCode::BAD_REQUEST,
            "tool",
        ),
        (
            chat_body(json!({"stream_options": {"include_usage": true}})),
            StatusCode::BAD_REQUEST,
            "stream: true",
        ),
        (
            chat_body(json!({"prompt": "x"})),
            StatusCode::BAD_REQUEST,
            "not `prompt`",
        ),
        (
            chat_body(json!({"stop": vec!["a"; 17]})),
            StatusCode::BAD_REQUEST,
            "stop sequences",
        ),
        (
            chat_body(json!({"max_tokens": "ten"})),
            StatusCode::BAD_REQUEST,
            "invalid type",
        ),
    ]
}

#[tokio::test]
async fn every_bad_request_gets_an_openai_error_that_says_what_to_fix() {
    for (body, status, needle) in bad_requests() {
        let (s, v) = send_json(app(), post("/v1/chat/completions", &body)).await;
        assert_eq!(s, status, "{body} -> {v}");
        let e = &v["error"];
        assert!(e["type"].is_string() && e["message"].is_string(), "{v}");
        assert!(v.to_string().contains(needle), "{needle:?} not in {v}");
    }
    let completion_errors = [
        (json!({"model": "smol", "prompt": ["a", "b"]}), "one prompt"),
        (
            json!({"model": "smol", "prompt": [999999]}),
            "outside the vocabulary",
        ),
        (json!({"model": "smol", "prompt": ""}), "empty"),
        (
            json!({"model": "smol", "prompt": "x", "echo": true}),
            "echo",
        ),
        (
            json!({"model": "smol", "messages": []}),
            "use /v1/chat/completions",
        ),
    ];
    for (body, needle) in completion_errors {
        let (s, v) = send_json(app(), post("/v1/completions", &body.to_string())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body} -> {v}");
        assert!(v.to_string().contains(needle), "{needle:?} not in {v}");
    }
    let huge = format!(
        "{{\"model\": \"{}\"}}",
        "x".repeat(specdec_server::MAX_BODY_BYTES)
    );
    let (s, v) = send_json(app(), post("/v1/completions", &huge)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    let (s, v) = send_json(app(), get("/v1/nothing")).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (s, v) = send_json(app(), get("/v1/chat/completions")).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{v}");
}

#[tokio::test]
async fn references_over_the_limit_are_refused_naming_the_field_and_the_limit() {
    use specdec_server::validate::{MAX_REFERENCES, MAX_REFERENCE_BYTES, MAX_REFERENCE_TOKENS};
    // Before: a 28 MB reference grew the trie drafter past memory and aborted the server.
    let big = "lorem ipsum ".repeat(MAX_REFERENCE_BYTES / 12 + 1);
    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"speculation": {"references": [big]}})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "speculation");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("speculation.references"), "{message}");
    assert!(
        message.contains(&MAX_REFERENCE_BYTES.to_string()),
        "{message}"
    );

    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"prediction": {"type": "content", "content": big}})),
        ),
    )
    .await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("prediction"))
    );

    let many = vec!["x"; MAX_REFERENCES + 1];
    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"speculation": {"references": many}})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // Under the byte limit but over the token limit: one token a char or two.
    let dense = " 7".repeat(MAX_REFERENCE_TOKENS + 1);
    assert!(dense.len() <= MAX_REFERENCE_BYTES);
    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"speculation": {"references": [dense]}})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&MAX_REFERENCE_TOKENS.to_string()),
        "{message}"
    );

    // A large reference within the limits is served.
    let fine = "The quick brown fox jumps over the lazy dog. ".repeat(4000);
    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"speculation": {"references": [fine]}})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_million_empty_messages_are_refused_by_count_before_they_are_rendered() {
    // Before: only content was counted before tokenizing, so 1.1 million empty messages
    // (32 MiB) cost 21 s and 3 GB to render and tokenize before they were refused.
    let empty = r#"{"role": "user", "content": ""}"#;
    let n = 1_000_000;
    let mut body = String::with_capacity(n * (empty.len() + 1) + 64);
    body.push_str(r#"{"model": "smol", "max_tokens": 4, "messages": ["#);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push_str(empty);
    }
    body.push_str("]}");
    assert!(body.len() <= specdec_server::MAX_BODY_BYTES);
    let start = std::time::Instant::now();
    let (s, v) = send_json(app(), post("/v1/chat/completions", &body)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "messages", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    let max = specdec_server::validate::MAX_MESSAGES;
    assert!(
        message.contains(&format!("at most {max} messages")),
        "{message}"
    );
    // Generous: counting is a fraction of a second; rendering them took 21 s.
    let took = start.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");

    // Fewer, but still over the cap: refused by count once parsed, before rendering.
    let over: Vec<_> = (0..max + 1)
        .map(|_| json!({"role": "user", "content": ""}))
        .collect();
    let (s, v) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"messages": over})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "messages", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("got {}", max + 1)), "{message}");

    // Token ids cost a value each too (a 30 MB body of them took 530 MB to parse).
    let mut ids = String::from(r#"{"model": "smol", "max_tokens": 4, "prompt": ["#);
    for i in 0..10_000_000 {
        ids.push_str(if i == 0 { "1" } else { ",1" });
    }
    ids.push_str("]}");
    let (s, v) = send_json(app(), post("/v1/completions", &ids)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "prompt", "{v}");

    // As many as the cap, each a template mark at least, still fit the byte estimate and
    // are served.
    let few: Vec<_> = (0..64)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "ok"}))
        .collect();
    let (s, v) = send_json(
        app(),
        post("/v1/chat/completions", &chat_body(json!({"messages": few}))),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_temperature_of_1e_39_decodes_greedily_instead_of_garbage() {
    // Before: 1e-39 reached the sampler as a subnormal f32 whose reciprocal is infinite,
    // and the distribution became NaN: garbage text.
    let text = |v: &serde_json::Value| v["choices"][0]["message"]["content"].clone();
    let (s, greedy) = send_json(
        app(),
        post(
            "/v1/chat/completions",
            &chat_body(json!({"temperature": 0})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{greedy}");
    for t in [1e-39, 1e-45, 1e-300, 5e-6] {
        let (s, v) = send_json(
            app(),
            post(
                "/v1/chat/completions",
                &chat_body(json!({"temperature": t, "seed": 7})),
            ),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}: {v}");
        assert_eq!(text(&v), text(&greedy), "temperature {t}");
    }
}

#[tokio::test]
async fn a_stop_string_over_the_limit_is_refused() {
    use specdec_server::validate::MAX_STOP_BYTES;
    // Before: 16 stop strings of 2 MB made decoding 18 times slower.
    let long = "s".repeat(MAX_STOP_BYTES + 1);
    let (s, v) = send_json(
        app(),
        post("/v1/chat/completions", &chat_body(json!({"stop": [long]}))),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["param"], "stop");
    let ok = "s".repeat(MAX_STOP_BYTES);
    let (s, v) = send_json(
        app(),
        post("/v1/chat/completions", &chat_body(json!({"stop": [ok]}))),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn error_messages_do_not_echo_unbounded_input() {
    // Before: an 8 MiB model name came back in an 8 MiB error.
    let name = "m".repeat(1 << 20);
    let cases = [
        json!({"model": name, "messages": [{"role": "user", "content": "x"}]}),
        json!({"model": "smol", "messages": [{"role": name, "content": "x"}]}),
        json!({"model": "smol", "messages": [{"role": "user", "content": "x"}], name.clone(): 1}),
        json!({"model": "smol", "messages": [{"role": "user", "content": "x"}],
            "prediction": {"type": name, "content": "x"}}),
    ];
    for body in cases {
        let (s, text) = send(app(), post("/v1/chat/completions", &body.to_string())).await;
        assert!(s.is_client_error(), "{s}");
        assert!(
            text.len() < 4096,
            "{} bytes: {}...",
            text.len(),
            &text[..200]
        );
    }
    let (s, text) = send(app(), get(&format!("/{}", "p".repeat(30_000)))).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(text.len() < 4096, "{} bytes", text.len());
}

#[tokio::test]
async fn fields_the_readme_refuses_are_refused_not_ignored() {
    let refused = [
        json!({"tool_choice": "auto"}),
        json!({"parallel_tool_calls": true}),
        json!({"function_call": "auto"}),
        json!({"reasoning_effort": "high"}),
        json!({"verbosity": "low"}),
        json!({"web_search_options": {}}),
        json!({"service_tier": "flex"}),
        json!({"store": true}),
        json!({"metadata": {"k": "v"}}),
        json!({"stream": true, "stream_options": {"include_obfuscation": true}}),
        json!({"messages": [{"role": "assistant", "content": "x", "refusal": "no"},
            {"role": "user", "content": "y"}]}),
    ];
    for extra in refused {
        let field = extra.as_object().unwrap().keys().next().unwrap().clone();
        let (s, v) = send_json(
            app(),
            post("/v1/chat/completions", &chat_body(extra.clone())),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{extra} -> {v}");
        let param = v["error"]["param"].as_str().unwrap();
        assert!(
            param == field || (field == "stream" && param == "stream_options"),
            "{extra} -> {v}"
        );
    }
    let neutral = [
        json!({"tool_choice": "none"}),
        json!({"service_tier": "auto"}),
        json!({"store": false}),
        json!({"metadata": {}}),
        json!({"user": "u-1", "safety_identifier": "s", "prompt_cache_key": "k"}),
    ];
    for extra in neutral {
        let (s, v) = send_json(
            app(),
            post("/v1/chat/completions", &chat_body(extra.clone())),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{extra} -> {v}");
    }
}
