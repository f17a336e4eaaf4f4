"""Benchmarks of a running `specdec serve`, standard library only.

  python scripts/bench_server.py URL prediction --workload W.jsonl
                                                  # edit requests with vs without `prediction`
  python scripts/bench_server.py URL concurrency  # 8 requests at once vs one after another
  python scripts/bench_server.py URL load         # 32 concurrent streaming clients

URL is the server root (http://127.0.0.1:8080). Every figure is measured side by side in
this one run; nothing here asserts a timing.

The prediction benchmark sends real edit requests: the HumanEval "rewrite this function
with type hints and a docstring" records (`specdec data build --kind humaneval-rewrite`),
each with its original code as the `prediction`. Every variant names its draft method, so
the server's default (and its trie, which remembers earlier answers) does not enter.
"""

import argparse
import json
import statistics
import threading
import time
import urllib.error
import urllib.request

TOPICS = ["the water cycle", "how a compiler works", "why the sky is blue",
          "the history of the printing press", "how vaccines work", "photosynthesis",
          "the rules of chess", "how a bicycle stays upright"]


class Server:
    def __init__(self, root, api_key):
        self.root = root.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        with urllib.request.urlopen(self.req("/v1/models")) as r:
            self.model = json.load(r)["data"][0]["id"]

    def req(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        return urllib.request.Request(self.root + path, data=data, headers=self.headers)

    def chat(self, messages, **params):
        body = {"model": self.model, "messages": messages, **params}
        t0 = time.perf_counter()
        with urllib.request.urlopen(self.req("/v1/chat/completions", body), timeout=600) as r:
            out = json.load(r)
        return out, time.perf_counter() - t0

    def stream(self, messages, **params):
        """Streams a chat; returns (text, completion tokens, seconds, seconds to first text)."""
        body = {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, **params}
        t0 = time.perf_counter()
        first, text, tokens = None, [], 0
        with urllib.request.urlopen(self.req("/v1/chat/completions", body), timeout=600) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(chunk["error"]["message"])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                for c in chunk["choices"]:
                    piece = c["delta"].get("content")
                    if piece:
                        first = first or time.perf_counter() - t0
                        text.append(piece)
        return "".join(text), tokens, time.perf_counter() - t0, first


PLAIN = "no prediction, plain decoding"
LOOKUP = "no prediction, prompt lookup"
PREDICTED = "prediction (reference drafter)"


def prediction(s, args):
    if not args.workload:
        raise SystemExit("prediction needs --workload (specdec data build --kind humaneval-rewrite)")
    with open(args.workload) as f:
        records = [json.loads(line) for line in f if line.strip()][: args.requests]
    variants = {
        PLAIN: {"speculation": {"method": "none"}},
        LOOKUP: {"speculation": {"method": "prompt"}},
        PREDICTED: {"speculation": {"method": "reference"}},
    }
    times = {k: 0.0 for k in variants}
    tokens, same = 0, {k: 0 for k in variants}
    accepted = rejected = 0
    for r in records:
        messages = [{"role": "user", "content": r["prompt"]}]
        params = {"max_tokens": args.max_tokens, "temperature": 0}
        best = {k: float("inf") for k in variants}
        outs = {}
        for _ in range(args.repeats):
            for name, extra in variants.items():
                extra = dict(extra)
                if name == PREDICTED:
                    extra["prediction"] = {"type": "content", "content": r["references"][0]}
                out, dt = s.chat(messages, **params, **extra)
                best[name] = min(best[name], dt)
                outs[name] = out
        plain = outs[PLAIN]
        text = plain["choices"][0]["message"]["content"]
        tokens += plain["usage"]["completion_tokens"]
        for name in variants:
            times[name] += best[name]
            same[name] += outs[name]["choices"][0]["message"]["content"] == text
        d = outs[PREDICTED]["usage"]["completion_tokens_details"]
        accepted += d["accepted_prediction_tokens"]
        rejected += d["rejected_prediction_tokens"]
        n = plain["usage"]["completion_tokens"]
        print(f"  {r['id']:18s} {n:4d} tokens  prediction {best[PLAIN] / best[PREDICTED]:5.2f}x"
              f"  prompt lookup {best[PLAIN] / best[LOOKUP]:5.2f}x"
              f"  accepted_prediction_tokens {d['accepted_prediction_tokens']}")
    base = times[PLAIN]
    print(f"{len(records)} edit requests, {tokens} completion tokens, temperature 0, "
          f"best of {args.repeats} interleaved runs per request (prefill included)")
    for name in variants:
        t = times[name]
        print(f"  {name:32s} {t:7.2f} s  {tokens / t:7.1f} tok/s  speedup {base / t:5.2f}x"
              f"  identical {same[name]}/{len(records)}")
    print(f"  prediction tokens: {accepted} accepted, {rejected} rejected")


def prompts(n):
    return [[{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} in a paragraph."}]
            for i in range(n)]


def run_all(s, msgs, params, concurrent):
    results = [None] * len(msgs)
    errors = []

    def one(i):
        try:
            results[i] = s.stream(msgs[i], **params)
        except Exception as e:  # noqa: BLE001 - report every failure
            errors.append(f"request {i}: {e}")

    t0 = time.perf_counter()
    if concurrent:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(msgs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(len(msgs)):
            one(i)
    return results, errors, time.perf_counter() - t0


def concurrency(s, args):
    msgs = prompts(args.requests)
    params = {"max_tokens": args.max_tokens, "temperature": 0}
    seq, e1, t_seq = run_all(s, msgs, params, False)
    par, e2, t_par = run_all(s, msgs, params, True)
    if e1 or e2:
        raise SystemExit("errors: " + "; ".join(e1 + e2))
    tokens = sum(r[1] for r in par)
    same = sum(a[0] == b[0] for a, b in zip(seq, par))
    print(f"{args.requests} requests x {args.max_tokens} max tokens, temperature 0")
    print(f"  one after another: {t_seq:6.2f} s  {sum(r[1] for r in seq) / t_seq:7.1f} tok/s")
    print(f"  all at once:       {t_par:6.2f} s  {tokens / t_par:7.1f} tok/s")
    print(f"  aggregate speedup: {t_seq / t_par:.2f}x   outputs identical: {same}/{len(msgs)}")


def load(s, args):
    msgs = prompts(args.clients)
    params = {"max_tokens": args.max_tokens, "temperature": 0.7, "seed": 1}
    res, errors, wall = run_all(s, msgs, params, True)
    done = [r for r in res if r is not None]
    lat = sorted(r[2] for r in done)
    ttft = sorted(r[3] for r in done if r[3] is not None)
    tokens = sum(r[1] for r in done)

    def pct(v, p):
        return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")

    print(f"{args.clients} concurrent streaming clients, {args.max_tokens} max tokens each")
    print(f"  completed {len(done)}/{args.clients}, errors {len(errors)}")
    for e in errors:
        print("   ", e)
    print(f"  latency p50 {pct(lat, 50):.2f} s  p99 {pct(lat, 99):.2f} s;"
          f"  time to first token p50 {pct(ttft, 50):.2f} s  p99 {pct(ttft, 99):.2f} s")
    print(f"  aggregate {tokens / wall:.1f} tok/s over {wall:.2f} s")
    if errors or len(done) != args.clients:
        raise SystemExit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("what", choices=["prediction", "concurrency", "load"])
    p.add_argument("--api-key")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--workload", help="JSONL edit requests (prediction)")
    args = p.parse_args()
    s = Server(args.url, args.api_key)
    defaults = {"prediction": 256, "concurrency": 128, "load": 64}
    args.max_tokens = args.max_tokens or defaults[args.what]
    {"prediction": prediction, "concurrency": concurrency, "load": load}[args.what](s, args)


if __name__ == "__main__":
    main()
