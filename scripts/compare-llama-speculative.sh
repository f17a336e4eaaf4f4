#!/usr/bin/env bash
# Draft-model speculation side by side: specdec (`--draft none` and `--draft model`) and a
# llama.cpp build you provide (`llama-completion`, and `llama-speculative` with the same
# draft), on the same two GGUF files, the first N chat records of a workload, 2 threads,
# greedy, at most 8 drafted tokens per step on llama.cpp's side (`--spec-draft-n-max 8`, the
# name in llama.cpp 0c1e570). Per record the four runs alternate, so all see the same
# machine conditions.
# Decode speed only on every side (prompt processing excluded). Prints per-record speeds,
# each engine's speedup over its own plain decoding, and the medians.
#
# Usage: scripts/compare-llama-speculative.sh LLAMA_BIN_DIR WORKLOAD.jsonl [N] [TARGET] [DRAFT]
#   LLAMA_BIN_DIR holds llama-completion and llama-speculative; TARGET and DRAFT default
#   to qwen2.5-coder-1.5b and qwen2.5-coder-0.5b (fetched on first use). Chat records are
#   rendered with Qwen's ChatML and its default system turn, as specdec's template does,
#   plus one extra newline: `-f` drops the file's last newline, and without it the
#   assistant turn starts without its "\n" (a different prompt from specdec's; runs before
#   this fix, such as 2026-12-03's, had it). `--no-escape` keeps backslashes literal.
set -euo pipefail
bin_dir=${1:?usage: $0 LLAMA_BIN_DIR WORKLOAD.jsonl [N] [TARGET] [DRAFT]}
workload=${2:?usage: $0 LLAMA_BIN_DIR WORKLOAD.jsonl [N] [TARGET] [DRAFT]}
n_records=${3:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
specdec="$here/target/release/specdec"
[ -x "$specdec" ] || cargo build --release -p specdec --manifest-path "$here/Cargo.toml"
target=$("$specdec" model fetch "${4:-qwen2.5-coder-1.5b}" 2>/dev/null | tail -1)
draft=$("$specdec" model fetch "${5:-qwen2.5-coder-0.5b}" 2>/dev/null | tail -1)
n=128
out=$(mktemp)
trap 'rm -f "$out" "$out.prompt"' EXIT

llama_speed() { # the decode speed llama.cpp's log reports
  grep -E 'eval time' | grep -v prompt | tail -1 \
    | sed -E 's/.*ms per token, *([0-9.]+) tokens per second.*/\1/'
}

head -n "$n_records" "$workload" | while IFS= read -r line; do
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$line")
  prompt=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["prompt"])' "$line")
  python3 - "$prompt" > "$out.prompt" <<'PY'
import sys
print("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      f"<|im_start|>user\n{sys.argv[1]}<|im_end|>\n<|im_start|>assistant\n\n", end="")
PY
  s_plain=$("$specdec" generate --model "$target" --threads 2 --draft none --chat \
      --prompt "$prompt" --max-tokens $n --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_second"])')
  s_model=$("$specdec" generate --model "$target" --threads 2 --draft model --draft-model "$draft" \
      --chat --prompt "$prompt" --max-tokens $n --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_second"])')
  l_plain=$("$bin_dir/llama-completion" -m "$target" -f "$out.prompt" -n $n -t 2 -tb 2 -c 4096 \
      --temp 0 --top-k 1 --no-escape -no-cnv --simple-io --no-display-prompt </dev/null 2>&1 >/dev/null | llama_speed)
  l_spec_log=$("$bin_dir/llama-speculative" -m "$target" -md "$draft" -f "$out.prompt" -n $n \
      -t 2 -tb 2 -td 2 -c 4096 --temp 0 --top-k 1 --no-escape --spec-draft-n-max 8 </dev/null 2>&1 || true)
  l_spec=$(echo "$l_spec_log" | grep -E 'decoded .* speed:' | tail -1 | sed -E 's/.*speed: *([0-9.]+) t\/s.*/\1/')
  l_accept=$(echo "$l_spec_log" | grep -E ' accept +=' | tail -1 | sed -E 's/.*= *([0-9.]+)%.*/\1/')
  echo "$id $s_plain $s_model $l_plain $l_spec ${l_accept:-?}"
done | tee /dev/stderr | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
ok = [r for r in rows if all(x.replace(".", "", 1).isdigit() for x in r[1:5])]
print(f"{len(ok)} of {len(rows)} records with every figure")
print("record                     specdec none  model  (ratio)   llama.cpp plain  speculative (ratio)  accepted")
for r in ok:
    a, b, c, d = map(float, r[1:5])
    print(f"{r[0]:<26} {a:10.1f} {b:6.1f}  ({b/a:.2f}x)   {c:13.1f} {d:12.1f}  ({d/c:.2f}x)  {r[5]}%")
sp = [float(r[2]) / float(r[1]) for r in ok]
lp = [float(r[4]) / float(r[3]) for r in ok]
print(f"median speedup: specdec model {statistics.median(sp):.2f}x (range {min(sp):.2f}-{max(sp):.2f}); "
      f"llama-speculative {statistics.median(lp):.2f}x (range {min(lp):.2f}-{max(lp):.2f})")
print(f"median decode tok/s: specdec model {statistics.median(float(r[2]) for r in ok):.1f}, "
      f"llama-speculative {statistics.median(float(r[4]) for r in ok):.1f}")
'
