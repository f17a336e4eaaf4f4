//! Fields of the OpenAI API that specdec does not implement: accepted by the parser (so
//! clients that send their defaults work) and refused here, naming the field, whenever
//! they ask for anything but the neutral value.

use serde_json::Value;

use super::unsupported;
use crate::api::RequestBody;
use crate::error::ApiError;

/// A value that must be absent, null, or one of the neutral values.
fn neutral(v: &Option<Value>, ok: impl Fn(&Value) -> bool) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(v) => ok(v),
    }
}

pub(super) fn reject_unsupported(body: &RequestBody) -> Result<(), ApiError> {
    let checks: [(&'static str, bool, &str); 22] = [
        (
            "n",
            body.n.is_none_or(|n| n == 1),
            "only n = 1 is served; send several requests",
        ),
        (
            "best_of",
            body.best_of.is_none_or(|n| n == 1),
            "only best_of = 1 is served",
        ),
        (
            "logprobs",
            neutral(&body.logprobs, |v| v == &Value::Bool(false)),
            "log probabilities are not returned",
        ),
        (
            "top_logprobs",
            neutral(&body.top_logprobs, |v| v.as_u64() == Some(0)),
            "log probabilities are not returned",
        ),
        (
            "logit_bias",
            neutral(&body.logit_bias, |v| {
                v.as_object().is_some_and(|o| o.is_empty())
            }),
            "logit bias would change what verification accepts",
        ),
        ("echo", body.echo != Some(true), "the prompt is not echoed"),
        (
            "suffix",
            body.suffix.as_deref().is_none_or(str::is_empty),
            "insertion (suffix) is not supported",
        ),
        (
            "tools",
            neutral(&body.tools, |v| v.as_array().is_some_and(|a| a.is_empty())),
            "tool calling is not supported",
        ),
        (
            "functions",
            neutral(&body.functions, |_| false),
            "function calling is not supported",
        ),
        (
            "response_format",
            neutral(&body.response_format, |v| {
                v.get("type").and_then(Value::as_str) == Some("text")
            }),
            "only the `text` response format is supported",
        ),
        (
            "tool_choice",
            neutral(&body.tool_choice, |v| v == "none"),
            "tool calling is not supported",
        ),
        (
            "parallel_tool_calls",
            neutral(&body.parallel_tool_calls, |_| false),
            "tool calling is not supported",
        ),
        (
            "function_call",
            neutral(&body.function_call, |v| v == "none"),
            "function calling is not supported",
        ),
        (
            "reasoning_effort",
            neutral(&body.reasoning_effort, |_| false),
            "this model has no reasoning setting",
        ),
        (
            "verbosity",
            neutral(&body.verbosity, |_| false),
            "this model has no verbosity setting",
        ),
        (
            "web_search_options",
            neutral(&body.web_search_options, |_| false),
            "web search is not supported",
        ),
        (
            "service_tier",
            neutral(&body.service_tier, |v| v == "auto" || v == "default"),
            "there is one service tier (`auto` or `default`)",
        ),
        (
            "store",
            neutral(&body.store, |v| v == &Value::Bool(false)),
            "completions are not stored",
        ),
        (
            "metadata",
            neutral(&body.metadata, |v| {
                v.as_object().is_some_and(|o| o.is_empty())
            }),
            "completions are not stored, so they carry no metadata",
        ),
        (
            "stream_options",
            body.stream_options
                .as_ref()
                .is_none_or(|o| o.include_obfuscation != Some(true)),
            "stream_options.include_obfuscation is not supported",
        ),
        (
            "presence_penalty",
            body.presence_penalty.is_none_or(|p| p == 0.0),
            "use `repetition_penalty` instead",
        ),
        (
            "frequency_penalty",
            body.frequency_penalty.is_none_or(|p| p == 0.0),
            "use `repetition_penalty` instead",
        ),
    ];
    for (param, ok, why) in checks {
        if !ok {
            return Err(unsupported(param, why));
        }
    }
    let modalities_ok = neutral(&body.modalities, |v| {
        v.as_array()
            .is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text")))
    });
    if !modalities_ok || body.audio.is_some() {
        return Err(unsupported("modalities", "this model writes text only"));
    }
    Ok(())
}
