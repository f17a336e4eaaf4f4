#!/usr/bin/env bash
# Side-by-side greedy decoding speed: specdec (plain, no drafting) vs a llama.cpp build you
# provide, on the same GGUF file, prompt and thread count, alternating runs in one process
# tree so both see the same machine conditions. Prints medians and the ratio.
#
# Usage: scripts/compare-llama-cpp.sh LLAMA_BIN_DIR [MODEL.gguf] [RUNS]
#   LLAMA_BIN_DIR must hold llama-completion (llama.cpp's text-generation tool).
# Decode speed only (prompt processing excluded) on both sides; 128 tokens, 2 threads.
set -euo pipefail
bin_dir=${1:?usage: $0 LLAMA_BIN_DIR [MODEL.gguf] [RUNS]}
here=$(cd "$(dirname "$0")/.." && pwd)
specdec="$here/target/release/specdec"
[ -x "$specdec" ] || cargo build --release -p specdec --manifest-path "$here/Cargo.toml"
model=${2:-$("$specdec" model fetch 2>/dev/null)}
runs=${3:-7}
prompt="The history of the Roman Empire began when"
n=128
ours=(); theirs=()
for i in $(seq "$runs"); do
  o=$("$specdec" generate --model "$model" --threads 2 --draft none --prompt "$prompt" \
        --max-tokens $n --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_second"], d["completion_tokens"])')
  ours+=("${o% *}")
  t=$("$bin_dir/llama-completion" -m "$model" -p "$prompt" -n $n -t 2 -tb 2 -c 4096 \
        --temp 0 --top-k 1 --ignore-eos -no-cnv --simple-io --no-display-prompt \
        </dev/null 2>&1 >/dev/null | grep -E 'eval time' | grep -v prompt | tail -1 \
        | sed -E 's/.*ms per token, *([0-9.]+) tokens per second.*/\1/')
  theirs+=("$t")
  echo "run $i: specdec ${o% *} tok/s (${o#* } tokens), llama.cpp $t tok/s" >&2
done
python3 - "${ours[*]}" "${theirs[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"specdec   median {ma:.1f} tok/s")
print(f"llama.cpp median {mb:.1f} tok/s")
print(f"ratio specdec / llama.cpp: {ma / mb:.2f}x")
PY
