"""End-to-end check of `specdec serve` with the official `openai` Python client, unmodified.

Usage: python scripts/openai_e2e.py BASE_URL API_KEY MODEL_ID
Exits non-zero with a message on the first failed check.
"""

import sys

import openai
from openai import OpenAI

CODE = '''def mean(values):
    total = 0
    for v in values:
        total = total + v
    return total / len(values)
'''


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def expect_error(kind, call, ok, what):
    """`call` must raise `kind`, and `ok(error)` must hold."""
    try:
        call()
    except kind as e:
        check(ok(e), what)
        return
    check(False, what)


def main():
    base_url, api_key, model = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    ids = [m.id for m in client.models.list().data]
    check(model in ids, f"models.list serves {model}")

    messages = [{"role": "user", "content": "Name three primary colors."}]
    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0
    )
    text = chat.choices[0].message.content
    check(bool(text) and chat.choices[0].message.role == "assistant", "chat completion has text")
    u = chat.usage
    check(u.completion_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens,
          "chat usage adds up")

    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0,
        stream=True, stream_options={"include_usage": True},
    )
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            finish = c.finish_reason or finish
    check("".join(pieces) == text, "streamed chat equals the non-streamed answer (temperature 0)")
    check(usage is not None and usage.completion_tokens == u.completion_tokens,
          "stream_options.include_usage sends usage last")
    check(finish in ("stop", "length"), f"stream ends with a finish reason ({finish})")

    comp = client.completions.create(
        model=model, prompt="The three primary colors are", max_tokens=12, temperature=0
    )
    check(bool(comp.choices[0].text), "completion has text")
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model, prompt="The three primary colors are", max_tokens=12,
            temperature=0, stream=True,
        )
        if c.choices
    )
    check(streamed == comp.choices[0].text, "streamed completion equals the non-streamed one")

    edit = [{"role": "user", "content":
             "Add type hints to this function. Return only the code.\n\n" + CODE}]
    plain = client.chat.completions.create(
        model=model, messages=edit, max_tokens=80, temperature=0,
        extra_body={"speculation": {"method": "none"}},
    )
    predicted = client.chat.completions.create(
        model=model, messages=edit, max_tokens=80, temperature=0,
        prediction={"type": "content", "content": CODE},
    )
    check(predicted.choices[0].message.content == plain.choices[0].message.content,
          "a prediction does not change the output")
    d = predicted.usage.completion_tokens_details
    check(d.accepted_prediction_tokens > 0,
          f"accepted_prediction_tokens is filled ({d.accepted_prediction_tokens} accepted, "
          f"{d.rejected_prediction_tokens} rejected)")
    spec = predicted.model_extra.get("speculation") or {}
    check(spec.get("accepted_tokens", 0) > 0, "the response reports its speculation stats")
    check(plain.model_extra["speculation"]["method"] == "none",
          "extra_body speculation.method is honoured")

    expect_error(openai.NotFoundError,
                 lambda: client.chat.completions.create(model="no-such-model", messages=messages),
                 lambda e: e.status_code == 404, "an unknown model is a 404 NotFoundError")
    expect_error(openai.BadRequestError,
                 lambda: client.chat.completions.create(model=model, messages=messages, n=2),
                 lambda e: "n = 1" in str(e), "n = 2 is a 400 BadRequestError that says what to do")
    too_long = [{"role": "user", "content": "word " * 9000}]
    expect_error(openai.BadRequestError,
                 lambda: client.chat.completions.create(model=model, messages=too_long),
                 lambda e: e.code == "context_length_exceeded",
                 "a too-long prompt is context_length_exceeded")
    bad = OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0)
    expect_error(openai.AuthenticationError, bad.models.list, lambda e: True,
                 "a wrong API key is a 401 AuthenticationError")
    print("all checks passed")


if __name__ == "__main__":
    main()
