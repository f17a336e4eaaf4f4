#!/usr/bin/env python3
"""Concurrent load through the router: C clients at once, each sending R distinct chat
requests in turn (temperature 0), with the official `openai` client. Prints the wall time,
the completion tokens, the aggregate tokens per second, each request's latency (median,
90th percentile, worst) and how many requests failed.

    deploy/local/load_check.py [--url URL] [--clients C] [--requests R] [--max-tokens N]

URL defaults to $ROUTER_URL, as deploy/local/replicas.sh sets it. Exit status 0 when every
request succeeded, 2 otherwise.
"""

import argparse
import os
import statistics
import sys
import threading
import time

from openai import OpenAI

TOPICS = [
    "how a hash map handles collisions",
    "what a Python generator is, with a short example",
    "the difference between a process and a thread",
    "how to reverse a linked list in place",
    "what big-O notation measures",
    "how HTTP keep-alive works",
    "why floating-point sums depend on their order",
    "what a database index is for",
    "how git rebase differs from git merge",
    "what a closure is in JavaScript",
    "how TCP's three-way handshake works",
    "what memoization is, with an example",
    "how a binary search works and when it fails",
    "what a race condition is",
    "how garbage collection finds unreachable objects",
    "what a REST API is",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("ROUTER_URL"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    if not args.url:
        sys.exit("no --url and no $ROUTER_URL")
    client = OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key="none", max_retries=0,
                    timeout=600)
    model = client.models.list().data[0].id
    latencies, tokens, failures = [], [], []
    lock = threading.Lock()

    def worker(c):
        for r in range(args.requests):
            topic = TOPICS[(c * args.requests + r) % len(TOPICS)]
            started = time.monotonic()
            try:
                out = client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": f"Explain {topic} in a short paragraph."}],
                    max_tokens=args.max_tokens,
                    temperature=0,
                )
                with lock:
                    latencies.append(time.monotonic() - started)
                    tokens.append(out.usage.completion_tokens)
            except Exception as e:  # every failure is counted and shown
                with lock:
                    failures.append(f"client {c} request {r}: {e}")

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    total = sum(tokens)
    lat = sorted(latencies)
    print(f"{args.clients} clients x {args.requests} requests, {model}: {len(lat)} answered, "
          f"{len(failures)} failed in {wall:.1f} s")
    if lat:
        p90 = lat[min(len(lat) - 1, int(0.9 * len(lat)))]
        print(f"completion tokens {total}, aggregate {total / wall:.1f} tok/s; latency "
              f"median {statistics.median(lat):.1f} s, p90 {p90:.1f} s, worst {lat[-1]:.1f} s")
    for f in failures:
        print(f)
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
