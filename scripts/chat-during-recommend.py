#!/usr/bin/env python3
"""How a streaming chat flows while /v1/recommend searches run on the same server.

Streams one chat alone, then the same chat while RECS recommendations run beside it
(started just after the chat's first chunk), and prints each run's median and longest gap
between chunks and their ratio; then the same recommendations without the chat, for
their own wall time. Standard library only.

    specdec serve --model smollm2-135m --catalogue movielens --max-concurrent 4 --port 8080 &
    python3 scripts/chat-during-recommend.py --port 8080 [--recs 3] [--k 20] [--repeats 3]
"""

import argparse
import http.client
import json
import statistics
import threading
import time

HISTORIES = [
    ["Toy Story (1995)", "Babe (1995)", "Apollo 13 (1995)", "Braveheart (1995)"],
    ["Seven (Se7en) (1995)", "Usual Suspects, The (1995)", "Taxi Driver (1976)"],
    ["Star Wars (1977)", "Stargate (1994)", "Batman Forever (1995)", "Crimson Tide (1995)"],
    ["Fargo (1996)", "Pulp Fiction (1994)", "Get Shorty (1995)"],
]


def post(port, path, body, stream=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{path}: HTTP {resp.status}: {resp.read()[:300]!r}")
    return conn, resp


def served_model(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v1/models")
    models = json.loads(conn.getresponse().read())
    conn.close()
    return models["data"][0]["id"]


def stream_chat(port, max_tokens, on_first=None):
    """Arrival times of the chat's content chunks."""
    body = {
        "model": served_model(port),
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "speculation": {"method": "none"},
    }
    conn, resp = post(port, "/v1/chat/completions", body)
    times = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        choices = chunk.get("choices") or []
        if choices and choices[0].get("delta", {}).get("content"):
            times.append(time.perf_counter())
            if len(times) == 1 and on_first:
                on_first()
    conn.close()
    return times


def recommend(port, history, k, out):
    started = time.perf_counter()
    conn, resp = post(port, "/v1/recommend", {"history": history, "k": k})
    answer = json.loads(resp.read())
    conn.close()
    out.append((time.perf_counter() - started, answer["speculation"]))


def gaps(times):
    g = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(g), max(g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--recs", type=int, default=3)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"{'run':<24} {'chunks':>6} {'median ms':>10} {'longest ms':>11} {'ratio':>6}")
    for r in range(args.repeats):
        times = stream_chat(args.port, args.max_tokens)
        med, top = gaps(times)
        print(f"{f'alone #{r + 1}':<24} {len(times):>6} {med * 1e3:>10.1f} {top * 1e3:>11.1f} {top / med:>6.1f}")
        done, threads = [], []

        def start_recs():
            for i in range(args.recs):
                h = HISTORIES[i % len(HISTORIES)]
                t = threading.Thread(target=recommend, args=(args.port, h, args.k, done))
                t.start()
                threads.append(t)

        times = stream_chat(args.port, args.max_tokens, on_first=start_recs)
        for t in threads:
            t.join()
        med, top = gaps(times)
        label = f"with {args.recs} recs #{r + 1}"
        print(f"{label:<24} {len(times):>6} {med * 1e3:>10.1f} {top * 1e3:>11.1f} {top / med:>6.1f}")
        for secs, spec in done:
            print(f"    recommend: {secs:.2f} s, {spec['target_forwards']} target forwards ({spec['mode']})")
        alone, threads = [], []
        started = time.perf_counter()
        for i in range(args.recs):
            h = HISTORIES[i % len(HISTORIES)]
            t = threading.Thread(target=recommend, args=(args.port, h, args.k, alone))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        print(f"    {args.recs} recommendations without the chat: all answered in {wall:.2f} s")


if __name__ == "__main__":
    main()
