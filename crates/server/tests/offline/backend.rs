//! The HTTP edge on a scripted [`Backend`]: no engine runs, so what is checked is the edge
//! alone (the job it hands over, the response and stream it builds from the backend's
//! events, a refusal's status), as a remote or GPU backend would see it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use specdec_engine::{FinishReason, GenerateOutput, SpecStats};
use specdec_server::worker::{Event, Job, RecommendJob};
use specdec_server::{router, ApiError, AppState, Backend};

use crate::common::{chat_body, post, send, send_json, state};

/// Answers every generation with `pieces` (as streamed text, then their whole), and keeps
/// what it was handed; refuses everything once `full`.
#[derive(Default)]
struct Scripted {
    pieces: Vec<&'static str>,
    full: bool,
    seen: Mutex<Vec<(usize, &'static str, bool)>>,
}

impl Backend for Scripted {
    fn submit(&self, job: Job) -> Result<(), ApiError> {
        if self.full {
            return Err(ApiError::QueueFull(0));
        }
        let spec = &job.gen.speculation;
        self.seen
            .lock()
            .unwrap()
            .push((job.gen.max_tokens, spec.method.name(), job.stream));
        let pieces = self.pieces.clone();
        let events = job.events;
        tokio::spawn(async move {
            for p in &pieces {
                let _ = events.send(Event::Text(p.to_string())).await;
            }
            let text: String = pieces.concat();
            let out = GenerateOutput {
                token_ids: (0..pieces.len() as u32).collect(),
                text,
                prompt_tokens: 7,
                cached_prompt_tokens: 0,
                completion_tokens: pieces.len(),
                forward_passes: 2,
                prefill_time: Duration::ZERO,
                elapsed: Duration::from_millis(1),
                finish_reason: FinishReason::Stop,
                stop_token: None,
                spec: SpecStats::default(),
                relaxed: false,
                forced: false,
            };
            let _ = events.send(Event::Done(Ok(Box::new(out)))).await;
        });
        Ok(())
    }

    fn submit_recommend(&self, _job: RecommendJob) -> Result<(), ApiError> {
        Err(ApiError::RecommendDisabled)
    }

    fn held(&self) -> usize {
        0
    }

    fn close(&self) {}

    fn cancel_all(&self) {}
}

fn on(backend: Arc<Scripted>) -> axum::Router {
    let base = state();
    router(Arc::new(AppState {
        frontend: base.frontend.clone(),
        backend,
        metrics: base.metrics.clone(),
        api_key: None,
        recommender: None,
        started: base.started,
    }))
}

#[tokio::test]
async fn the_edge_hands_over_the_validated_job_and_answers_from_its_events() {
    let b = Arc::new(Scripted {
        pieces: vec!["Red, ", "green ", "and blue."],
        ..Scripted::default()
    });
    let body = chat_body(json!({"max_tokens": 9, "speculation": {"method": "history"}}));
    let (s, v) = send_json(on(b.clone()), post("/v1/chat/completions", &body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Red, green and blue."
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["speculation"]["method"], "history");
    assert_eq!(b.seen.lock().unwrap()[0], (9, "history", false));

    let body = chat_body(json!({"stream": true}));
    let (s, text) = send(on(b.clone()), post("/v1/chat/completions", &body)).await;
    assert_eq!(s, StatusCode::OK);
    let pieces: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(pieces, ["Red, ", "green ", "and blue."]);
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}

#[tokio::test]
async fn a_backend_without_room_is_a_429_the_client_can_back_off_on() {
    let b = Arc::new(Scripted {
        full: true,
        ..Scripted::default()
    });
    let (s, v) = send_json(on(b), post("/v1/chat/completions", &chat_body(json!({})))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
}
