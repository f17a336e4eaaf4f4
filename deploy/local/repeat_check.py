#!/usr/bin/env python3
"""Send six distinct chat requests through the router, then the same six again, and check
that every answer repeats exactly (temperature 0: the same prompt gives the same text on any
replica). Prints, per request, which replica served each pass, whether the outputs are
equal, the wall times and the prompt tokens served from a prefix cache; then each pass's
total and the repeat/first ratio, and per replica what its /metrics counted.

    deploy/local/repeat_check.py [--router URL] [--replica URL ...] [--between N]
                                 [--outage] [--min-drafted F]

ROUTER_URL and REPLICA_URLS (space-separated), as deploy/local/replicas.sh sets them, are
the defaults. Requests go one at a time, so each is timed alone and the replica that served
it is the one whose finished-request counter moved. `--between N` sends N other requests
between the passes, so that round_robin sends each repeat to another replica than its first
(with 6 requests on 3 or 2 replicas it otherwise lands on the same one). `--outage` stops
the replicas' Redis ($REDIS_URL, on this machine) before the first pass and starts it again
(empty) before the repeat pass, once every replica says it is connected and holds no lesson
back: no request may fail, and the repeats show whether sharing resumed. `--min-drafted F`
fails the check unless the repeat pass took at least F of its tokens from drafts (a check of
sharing that does not depend on timing). Exit status: 0 if every output repeated, 1 if any
differed, 2 if a request failed, 3 if the repeats drafted less than --min-drafted.
"""

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from openai import OpenAI

# A shared system prompt (as a deployed assistant has) and six different questions.
SYSTEM = (
    "You are the support assistant of Northwind Books, an online bookshop. Answer in a few "
    "short sentences, plainly and politely. Orders ship within two working days; returns "
    "are accepted within 30 days with the receipt; gift cards never expire."
)
QUESTIONS = [
    "My order #48213 has not arrived after a week. What should I do?",
    "Can I return a book I bought three weeks ago if I lost the receipt?",
    "Do you ship to Canada, and how long does it take?",
    "I was charged twice for the same order. How do I get a refund?",
    "Can I change the delivery address after placing an order?",
    "Please recommend three classic science fiction novels for a teenager.",
]

# Counters read from each replica's /metrics (vLLM's names). Prefix-cache families are
# matched by name so that a server that adds them is reported without a change here.
FINISHED = "vllm:request_success_total"
PREFIX_CACHE = re.compile(r"prefix_cache_(hits|queries)(_total)?$")
OTHER = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generated": "vllm:generation_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}


def scrape(url):
    """{metric name: summed value} of a replica's /metrics (labels summed away)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return out


def snapshot(replicas):
    return [scrape(u) for u in replicas]


def served_by(before, after):
    """Index of the replica whose finished-request count moved, or None."""
    moved = [i for i, (b, a) in enumerate(zip(before, after))
             if a.get(FINISHED, 0) > b.get(FINISHED, 0)]
    return moved[0] if len(moved) == 1 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", default=os.environ.get("ROUTER_URL"),
                    help="SMG's URL (default $ROUTER_URL)")
    ap.add_argument("--replica", action="append", default=None,
                    help="a replica's URL, for its /metrics (repeat; default $REPLICA_URLS)")
    ap.add_argument("--model", help="the model id (default: the router's first)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--api-key", default=os.environ.get("SPECDEC_API_KEY", "none"))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--between", type=int, default=0, metavar="N",
                    help="other requests sent between the two passes (default 0)")
    ap.add_argument("--outage", action="store_true",
                    help="stop Redis ($REDIS_URL) for the first pass, restart it before the repeats")
    ap.add_argument("--min-drafted", type=float, default=0.0, metavar="F",
                    help="fail unless the repeat pass took at least F of its tokens from drafts")
    args = ap.parse_args()
    try:
        return run(args, ap)
    finally:
        if OUTAGE["restarted"] is not None:
            OUTAGE["restarted"].terminate()
            OUTAGE["restarted"].wait()


# The Redis this check restarted (a child of this process: stopped when the check ends).
OUTAGE = {"restarted": None}


def redis_port(url):
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost") or not u.port:
        sys.exit(f"--outage needs a Redis on this machine, got REDIS_URL={url!r}")
    return u.port


def stop_redis(url):
    subprocess.run(["redis-cli", "-p", str(redis_port(url)), "shutdown", "nosave"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def start_redis(url):
    port = redis_port(url)
    OUTAGE["restarted"] = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL)


def wait_shared(replicas, timeout=30):
    """Waits until every replica reads from Redis and holds no lesson back."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        snaps = snapshot(replicas)
        if all(s.get("specdec:shared_state_connected") == 1 and
               s.get("specdec:shared_state_held", 0) == 0 for s in snaps):
            return True
        time.sleep(0.2)
    return False


def run(args, ap):
    if not args.router:
        ap.error("no router: give --router or set ROUTER_URL")
    replicas = args.replica or os.environ.get("REPLICA_URLS", "").split()
    redis_url = os.environ.get("REDIS_URL", "")
    if args.outage and not (redis_url and replicas):
        ap.error("--outage needs REDIS_URL and the replicas' URLs (run under replicas.sh)")

    client = OpenAI(base_url=args.router.rstrip("/") + "/v1", api_key=args.api_key,
                    timeout=args.timeout, max_retries=0)
    model = args.model or client.models.list().data[0].id
    print(f"router {args.router}, model {model}, {len(replicas)} replicas, "
          f"max_tokens {args.max_tokens}, temperature 0")

    start = snapshot(replicas) if replicas else []
    passes = []  # per pass: list of dicts per request
    if args.outage:
        stop_redis(redis_url)
        print(f"stopped Redis at {redis_url} for the first pass")
    for p in range(2):
        if p == 1 and args.outage:
            start_redis(redis_url)
            ok = wait_shared(replicas)
            print(f"restarted Redis (empty); replicas connected and caught up: {ok}")
        if p == 1:
            for k in range(args.between):
                client.chat.completions.create(
                    model=model, temperature=0, max_tokens=8,
                    messages=[{"role": "user", "content": f"Count to {k + 3}."}])
        rows = []
        for q in QUESTIONS:
            before = snapshot(replicas) if replicas else []
            t0 = time.perf_counter()
            try:
                r = client.chat.completions.create(
                    model=model,
                    messages=[{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": q}],
                    temperature=0,
                    max_tokens=args.max_tokens,
                )
            except Exception as e:  # noqa: BLE001 - report any failure and stop
                print(f"request failed ({q[:40]}...): {e}", file=sys.stderr)
                return 2
            dt = time.perf_counter() - t0
            after = snapshot(replicas) if replicas else []
            details = r.usage.prompt_tokens_details if r.usage else None
            spec = (r.model_extra or {}).get("speculation") or {}
            rows.append({
                "text": r.choices[0].message.content or "",
                "secs": dt,
                "replica": served_by(before, after) if replicas else None,
                "cached": getattr(details, "cached_tokens", None) if details else None,
                "prompt": r.usage.prompt_tokens if r.usage else None,
                "tokens": r.usage.completion_tokens if r.usage else None,
                "accepted": spec.get("accepted_tokens"),
            })
        passes.append(rows)
    end = snapshot(replicas) if replicas else []

    def who(i):
        return "?" if i is None else f"r{i + 1}"

    print()
    print(f"{'#':>2} {'same':>4} {'replica':>7} {'first s':>8} {'repeat s':>8} "
          f"{'cached':>11} {'accepted':>9} {'tokens':>6}  prompt")
    differ = 0
    for k, (a, b) in enumerate(zip(*passes)):
        same = a["text"] == b["text"]
        differ += not same
        print(f"{k + 1:>2} {'yes' if same else 'NO':>4} {who(a['replica']) + '>' + who(b['replica']):>7} "
              f"{a['secs']:8.3f} {b['secs']:8.3f} "
              f"{str(a['cached']) + '/' + str(b['cached']):>11} "
              f"{str(a['accepted']) + '/' + str(b['accepted']):>9} "
              f"{str(a['tokens']):>6}  {QUESTIONS[k][:44]}")
        if not same:
            print(f"     first : {a['text']!r}\n     repeat: {b['text']!r}")
    t1 = sum(r["secs"] for r in passes[0])
    t2 = sum(r["secs"] for r in passes[1])
    print()
    print(f"first pass {t1:.3f} s, repeat pass {t2:.3f} s, repeat/first {t2 / t1:.3f}")
    print("(cached: prompt tokens served from a prefix cache, first/repeat; accepted: draft "
          "tokens accepted, first/repeat)")

    if replicas:
        print()
        names = sorted({n for s in end for n in s if PREFIX_CACHE.search(n)})
        for i, url in enumerate(replicas):
            d = {n: end[i].get(n, 0) - start[i].get(n, 0) for n in [FINISHED, *OTHER.values(), *names]}
            served = [sum(1 for r in rows if r["replica"] == i) for rows in passes]
            line = (f"r{i + 1} {url}: served {served[0]} first + {served[1]} repeat; "
                    f"finished {d[FINISHED]:.0f}, prompt tokens {d[OTHER['prompt_tokens']]:.0f}, "
                    f"generated {d[OTHER['generated']]:.0f}, draft accepted {d[OTHER['accepted']]:.0f}")
            if names:
                line += ", " + ", ".join(f"{n} {d[n]:.0f}" for n in names)
            print(line)
        if not names:
            print("(no prefix-cache counter on the replicas' /metrics: the cached column, from "
                  "each response's usage.prompt_tokens_details, is the per-request view)")

    produced = sum(r["tokens"] or 0 for r in passes[1])
    drafted = sum(r["accepted"] or 0 for r in passes[1])
    share = drafted / produced if produced else 0.0
    print(f"repeat pass: {drafted} of {produced} tokens came from drafts ({share:.2f})")
    if differ:
        print(f"\n{differ} of {len(QUESTIONS)} outputs differed on repeat", file=sys.stderr)
        return 1
    print(f"\nall {len(QUESTIONS)} outputs repeated exactly")
    if share < args.min_drafted:
        print(f"the repeats drafted {share:.2f} of their tokens, below --min-drafted "
              f"{args.min_drafted}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
