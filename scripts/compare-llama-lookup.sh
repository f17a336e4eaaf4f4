#!/usr/bin/env bash
# Draft-free speculation side by side (issue 31): specdec (`--draft none`, and `--draft auto`
# with the record's references) against llama.cpp's own speculation on the same GGUF file:
# `llama-completion` (plain), `llama-lookup` (prompt n-gram lookup, llama.cpp's PLD-style
# speculation, n-gram cache), optionally `llama-speculative-simple --spec-type ngram-simple`
# (llama.cpp's newer PLD-style drafter) and, for chat workloads, `llama-speculative` with the
# 0.5B draft model (then specdec `--draft auto --draft-model` too, its counterpart).
#
# Per record all runs alternate, so every engine sees the same machine conditions. Decode
# speed only on every side (prompt processing excluded: the prompts are long and the point
# is drafting). 2 threads, greedy, at most 128 tokens. Prints per-record speeds, each
# engine's speedup over its own plain decoding, medians with ranges (per class where the
# workload has classes), and specdec auto's tok/s over llama-lookup's.
#
# Usage: scripts/compare-llama-lookup.sh LLAMA_BIN_DIR WORKLOAD.jsonl [N] [OUT_DIR]
#   LLAMA_BIN_DIR holds llama-completion, llama-lookup (and llama-speculative,
#   llama-speculative-simple when used). OUT_DIR keeps every raw log (default: a temp dir).
# Environment:
#   SPEC=1          also llama-speculative (--spec-draft-n-max 8) and specdec auto+draft model
#   NGRAM_SIMPLE=0  skip llama-speculative-simple --spec-type ngram-simple
#   CARRY=auto|0|1  carry drafting state across the records of one run: specdec's --trie file
#                   (trie + history index) and llama-lookup's dynamic n-gram cache (-lcd).
#                   auto = only for workloads whose records have a `class` (chat-repeats),
#                   where the earlier answers are not in the prompt, so only carried state
#                   can draft them; elsewhere every record starts cold on both sides.
#   LOOKUP_N=16     drafted tokens per step for the n-gram drafters (--spec-draft-n-max);
#                   llama-lookup's n-gram sizes are compile-time (1..4) at this commit.
#   TARGET, DRAFT   model short names or files (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b)
#   REPORT_ONLY=1   only summarise an existing OUT_DIR
#   WAIT_FOR_BUILDS=0  do not wait for cargo/rustc to finish before each record: only
#                   where the builds' session runs at the lowest CPU weight
#                   (`echo 19 > /proc/PID/autogroup` for a process of that session)
#
# The llama.cpp prompt is written as ChatML with Qwen's default system turn, as specdec's
# template renders it, plus one extra newline: `-f` drops the file's last newline, and
# without it the assistant turn would start without its "\n" (a different prompt).
# `--no-escape` keeps backslashes in code prompts literal, as specdec sees them.
set -euo pipefail
usage="usage: $0 LLAMA_BIN_DIR WORKLOAD.jsonl [N] [OUT_DIR]"
bin_dir=${1:?$usage}
workload=${2:?$usage}
n_records=${3:-20}
out_dir=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/.." && pwd)
specdec="$here/target/release/specdec"
n=128
lookup_n=${LOOKUP_N:-16}
mkdir -p "$out_dir"

if [ "${REPORT_ONLY:-0}" != 1 ]; then
  [ -x "$specdec" ] || cargo build --release -p specdec --manifest-path "$here/Cargo.toml"
  target=$("$specdec" model fetch "${TARGET:-qwen2.5-coder-1.5b}" 2>/dev/null | tail -1)
  draft=$("$specdec" model fetch "${DRAFT:-qwen2.5-coder-0.5b}" 2>/dev/null | tail -1)
  carry=${CARRY:-auto}
  if [ "$carry" = auto ]; then
    carry=$(head -n "$n_records" "$workload" | python3 -c \
      'import json,sys; print(int(any("class" in json.loads(l) for l in sys.stdin if l.strip())))')
  fi
  state="$out_dir/state"
  rm -rf "$state" && mkdir -p "$state"   # a run starts cold; only records within it share
  specdec_carry=(); lookup_carry=()
  if [ "$carry" = 1 ]; then
    specdec_carry=(--trie "$state/specdec.trie")
    lookup_carry=(-lcd "$state/lookup-dynamic.bin")
  fi
  llama_common=(-m "$target" -n $n -t 2 -tb 2 -c 4096 --temp 0 --top-k 1 --no-escape)
  echo "carry=$carry lookup_n=$lookup_n spec=${SPEC:-0} ngram_simple=${NGRAM_SIMPLE:-1}" \
    > "$out_dir/settings"

  i=0
  head -n "$n_records" "$workload" | while IFS= read -r line; do
    i=$((i + 1))
    # Timing needs the machine alone: a build starting mid-run (shared machine) would
    # slow llama.cpp's spinning threads far more than specdec's, so wait it out (unless
    # WAIT_FOR_BUILDS=0: the builds' session was given the lowest CPU weight, see above).
    while [ "${WAIT_FOR_BUILDS:-1}" != 0 ] && { pgrep -x cargo > /dev/null || pgrep rustc > /dev/null; }; do
      sleep 30
    done
    r="$out_dir/$(printf %03d $i)"
    mkdir -p "$r"
    python3 - "$line" "$r" <<'PY'
import json, pathlib, sys
d, r = json.loads(sys.argv[1]), pathlib.Path(sys.argv[2])
(r / "id").write_text(d["id"])
(r / "class").write_text(d.get("class", "all"))
(r / "prompt.txt").write_text(d["prompt"])
sys_turn = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
(r / "chatml.txt").write_text(f"<|im_start|>system\n{sys_turn}<|im_end|>\n"
                              f"<|im_start|>user\n{d['prompt']}<|im_end|>\n"
                              "<|im_start|>assistant\n\n")
for k, ref in enumerate(d.get("references") or []):
    (r / f"ref{k}.txt").write_text(ref)
PY
    refs=()
    for f in "$r"/ref*.txt; do [ -e "$f" ] && refs+=(--reference "$f"); done
    sd=("$specdec" generate --model "$target" --threads 2 --chat --prompt-file "$r/prompt.txt"
        --max-tokens $n --json)
    "${sd[@]}" --draft none > "$r/specdec-none.json"
    "${sd[@]}" --draft auto "${refs[@]}" "${specdec_carry[@]}" > "$r/specdec-auto.json"
    "$bin_dir/llama-completion" "${llama_common[@]}" -f "$r/chatml.txt" -no-cnv --simple-io \
      --no-display-prompt < /dev/null > "$r/llama-plain.out" 2> "$r/llama-plain.err"
    "$bin_dir/llama-lookup" "${llama_common[@]}" -f "$r/chatml.txt" \
      --spec-draft-n-max "$lookup_n" "${lookup_carry[@]}" \
      < /dev/null > "$r/llama-lookup.out" 2> "$r/llama-lookup.err" || true
    if [ "${NGRAM_SIMPLE:-1}" = 1 ]; then
      "$bin_dir/llama-speculative-simple" "${llama_common[@]}" -f "$r/chatml.txt" \
        --spec-type ngram-simple --spec-draft-n-max "$lookup_n" \
        < /dev/null > "$r/llama-ngram.out" 2> "$r/llama-ngram.err" || true
    fi
    if [ "${SPEC:-0}" = 1 ]; then
      "$bin_dir/llama-speculative" "${llama_common[@]}" -md "$draft" -td 2 -f "$r/chatml.txt" \
        --spec-draft-n-max 8 < /dev/null > "$r/llama-spec.out" 2> "$r/llama-spec.err" || true
      # Not carried: its counterpart llama-speculative starts cold on every record too.
      "${sd[@]}" --draft auto "${refs[@]}" --draft-model "$draft" > "$r/specdec-model.json"
    fi
    echo "record $i $(cat "$r/id") done" >&2
  done
fi

python3 - "$out_dir" <<'PY'
import json, pathlib, re, statistics, sys
root = pathlib.Path(sys.argv[1])

def specdec(f):
    if not f.exists() or not f.stat().st_size:
        return None
    d = json.loads(f.read_text())
    acc = 100.0 * d["accepted_tokens"] / d["drafted_tokens"] if d["drafted_tokens"] else 0.0
    return dict(tps=d["tokens_per_second"], text=d["text"], n=d["completion_tokens"],
                prompt=d["prompt_tokens"], acc=acc)

def llama(r, stem, timing):
    out, err = r / f"{stem}.out", r / f"{stem}.err"
    if not err.exists():
        return None
    log = err.read_text(errors="replace")
    if timing == "eval":  # llama-completion's perf line; its stdout is the completion alone
        m = [l for l in log.splitlines() if "eval time" in l and "prompt" not in l]
        if not m:
            return None
        tps = float(re.search(r"([0-9.]+) tokens per second", m[-1]).group(1))
        text = out.read_text(errors="replace").replace(" [end of text]", "")
        return dict(tps=tps, text=text, acc=None, prompt=None)
    m = re.findall(r"decoded +\d+ tokens in .* speed: +([0-9.]+) t/s", log)
    if not m:
        return None
    acc = re.findall(r"accept +=\s*([0-9.]+)%", log)
    enc = re.findall(r"encoded +(\d+) tokens", log)
    # stdout echoes the prompt before the completion
    text = out.read_text(errors="replace")
    k = text.rfind("<|im_start|>assistant\n")
    text = text[k + len("<|im_start|>assistant\n"):] if k >= 0 else text
    return dict(tps=float(m[-1]), text=text, acc=float(acc[-1]) if acc else None,
                prompt=int(enc[-1]) if enc else None)

def same(a, b):
    """Greedy outputs agree: one is a prefix of the other (lengths differ at the cap)."""
    a, b = a.strip(), b.strip()
    return a.startswith(b) or b.startswith(a)

rows = []
for r in sorted(p for p in root.iterdir() if p.is_dir() and (p / "id").exists()):
    rows.append(dict(
        id=(r / "id").read_text(), cls=(r / "class").read_text(),
        s_none=specdec(r / "specdec-none.json"), s_auto=specdec(r / "specdec-auto.json"),
        s_model=specdec(r / "specdec-model.json"), l_plain=llama(r, "llama-plain", "eval"),
        l_lookup=llama(r, "llama-lookup", "decoded"), l_ngram=llama(r, "llama-ngram", "decoded"),
        l_spec=llama(r, "llama-spec", "decoded")))

cols = [("s_none", "specdec none"), ("s_auto", "specdec auto"), ("s_model", "specdec auto+model"),
        ("l_plain", "llama plain"), ("l_lookup", "llama-lookup"), ("l_ngram", "llama ngram-simple"),
        ("l_spec", "llama-speculative")]
cols = [c for c in cols if any(row[c[0]] for row in rows)]
own_plain = {"s_none": "s_none", "s_auto": "s_none", "s_model": "s_none",
             "l_plain": "l_plain", "l_lookup": "l_plain", "l_ngram": "l_plain", "l_spec": "l_plain"}
ok = [row for row in rows if all(row[k] for k, _ in cols)]
print(f"{len(ok)} of {len(rows)} records with every figure (tok/s, decode only; "
      "x = speedup over the engine's own plain decoding)")
print("record".ljust(28) + "".join(f"{name:>22}" for _, name in cols) + "  auto/lookup")
for row in ok:
    cells = []
    for k, _ in cols:
        v, base = row[k]["tps"], row[own_plain[k]]["tps"]
        acc = f" {row[k]['acc']:.0f}%" if row[k].get("acc") is not None and k != "s_none" else ""
        cells.append(f"{v:7.1f} ({v / base:4.2f}x){acc}".rjust(22))
    print(f"{row['id'][:27]:<28}" + "".join(cells)
          + f"  {row['s_auto']['tps'] / row['l_lookup']['tps']:10.2f}")

def summary(group, label):
    print(f"\n== {label}: {len(group)} records")
    for k, name in cols:
        tps = [row[k]["tps"] for row in group]
        x = [row[k]["tps"] / row[own_plain[k]]["tps"] for row in group]
        print(f"{name:<20} median {statistics.median(tps):6.1f} tok/s "
              f"(range {min(tps):5.1f}-{max(tps):5.1f});  speedup median {statistics.median(x):4.2f}x "
              f"(range {min(x):.2f}-{max(x):.2f})")
    ratio = [row["s_auto"]["tps"] / row["l_lookup"]["tps"] for row in group]
    print(f"specdec auto / llama-lookup tok/s: median {statistics.median(ratio):.2f} "
          f"(range {min(ratio):.2f}-{max(ratio):.2f})")
    for k, name in cols[2:]:
        if k in ("l_ngram", "l_spec", "s_model"):
            ratio = [row["s_auto"]["tps"] / row[k]["tps"] for row in group]
            print(f"specdec auto / {name} tok/s: median {statistics.median(ratio):.2f} "
                  f"(range {min(ratio):.2f}-{max(ratio):.2f})")

if ok:
    summary(ok, "all")
    classes = sorted({row["cls"] for row in ok})
    if len(classes) > 1:
        for c in classes:
            summary([row for row in ok if row["cls"] == c], f"class {c}")

# Lossless checks: each engine's speculative output must be its own plain output; across
# engines greedy outputs may part where near-tied logits round differently.
print("\noutputs equal to own plain decoding:")
for k, name in cols:
    if k in ("s_none", "l_plain"):
        continue
    same_n = sum(same(row[k]["text"], row[own_plain[k]]["text"]) for row in ok)
    print(f"  {name:<20} {same_n}/{len(ok)}")
agree = sum(same(row["s_none"]["text"], row["l_plain"]["text"]) for row in ok)
print(f"  specdec none vs llama plain (across engines): {agree}/{len(ok)}")
mism = [row["id"] for row in ok if row["l_lookup"]["prompt"] not in (None, row["s_none"]["prompt"])]
print(f"prompt token counts equal (specdec vs llama-lookup): {len(ok) - len(mism)}/{len(ok)}"
      + (f"  differ: {' '.join(mism)}" if mism else ""))
PY
