#!/usr/bin/env bash
# End-to-end run of a real llama.cpp speculating on the CPU:
#   e2e/llamacpp/run.sh OUT [SPEC_DRAFT_N_MAX]
# builds llama-server once (build.sh, cached), writes two tiny random-weight models, and for
# OUT/same (draft = target) and OUT/other (draft = other random weights) starts llama-server on
# 127.0.0.1 with the draft, and for OUT/plain without one (the baseline: plain decoding of the same
# model), sends a fixed set of greedy requests, and leaves there:
#   server.log        the server's log at debug verbosity with LLAMA_TRACE=1: per-round "accepted A/D
#                     draft tokens" lines (the trace one of every round; the debug one, which skips the
#                     round that ends a request), per-request "draft acceptance" and "acc per pos" lines
#   responses.jsonl   one non-streamed /v1/completions response per line (it carries `created`)
#   stream.sse        the streamed responses as received (data: lines)
#   metrics-0.prom    /metrics before the requests, metrics-1.prom after them
#   metrics-N.time    the UTC time of each scrape (a text scrape has none of its own: import --time)
#   server.start      the UTC time the server was started (llama.cpp's log times count from it: --start)
# LLAMA_TRACE=0 in the environment leaves the trace lines out (the debug per-round lines alone).
# The server it started is stopped by its process id on every exit, failure included.
set -euo pipefail
out="${1:?usage: run.sh OUT [SPEC_DRAFT_N_MAX]}"
draft_n_max="${2:-4}"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
cache="$("$here/build.sh")"
server="$cache/bin/llama-server"
models="$cache/models"
if [[ ! -f "$models/target.gguf" || ! -f "$models/draft-other.gguf" ]]; then
    "$python" "$here/make_models.py" "$cache/src/llama.cpp/models/ggml-vocab-llama-spm.gguf" "$models"
fi
mkdir -p "$out"

server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid"
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
}
trap stop_server EXIT

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Greedy (top_k 1, temperature 0) so that a draft equal to the target agrees on every token.
# Twelve (ten are what a verdict needs of a deployment, [evidence] min_requests): prompts of
# different lengths and different max_tokens; the last four are streamed.
requests=(
    '{"prompt": "Hello", "max_tokens": 24}'
    '{"prompt": "The quick brown fox jumps over the lazy dog. Once upon a time", "max_tokens": 40}'
    '{"prompt": "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "max_tokens": 16}'
    '{"prompt": "A speculative decoder drafts tokens that the target model then verifies in one pass.", "max_tokens": 32}'
    '{"prompt": "Speculative decoding", "max_tokens": 12}'
    '{"prompt": "Tokens per second per user, tokens per second per GPU, and the cost of every round", "max_tokens": 36}'
    '{"prompt": "a b c d e f g h i j k l m n o p", "max_tokens": 20}'
    '{"prompt": "The report leads with the line an engineer acts on.", "max_tokens": 28}'
    'stream {"prompt": "Once", "max_tokens": 20}'
    'stream {"prompt": "In the beginning the draft and the target agreed on", "max_tokens": 28}'
    'stream {"prompt": "Draft, verify, accept, repeat", "max_tokens": 16}'
    'stream {"prompt": "A streamed response arrives one chunk at a time, and each chunk may carry several tokens", "max_tokens": 24}'
)

one_run() {
    local dir="$1" draft="$2"
    mkdir -p "$dir"
    rm -f "$dir/responses.jsonl" "$dir/stream.sse"
    local port
    port="$(free_port)"
    date -u +%Y-%m-%dT%H:%M:%S.%6N > "$dir/server.start"
    local speculation=()
    if [[ -n "$draft" ]]; then
        speculation=(-md "$draft" --spec-type draft-simple --spec-draft-n-max "$draft_n_max"
                     --spec-draft-n-min 0 --spec-draft-p-min 0)
    fi
    LLAMA_TRACE="${LLAMA_TRACE-1}" "$server" -m "$models/target.gguf" "${speculation[@]}" \
        --host 127.0.0.1 --port "$port" --metrics -lv 5 --log-timestamps --log-prefix \
        -c 512 -np 1 -t 1 --no-warmup > "$dir/server.log" 2>&1 &
    server_pid=$!
    local base="http://127.0.0.1:$port"
    local i
    for i in $(seq 1 300); do
        curl -sf "$base/health" >/dev/null 2>&1 && break
        kill -0 "$server_pid" 2>/dev/null || { echo "llama-server exited; see $dir/server.log" >&2; return 1; }
        sleep 0.2
    done
    curl -sf "$base/health" >/dev/null || { echo "llama-server did not become healthy" >&2; return 1; }
    curl -sf "$base/metrics" > "$dir/metrics-0.prom"
    date -u +%Y-%m-%dT%H:%M:%S.%6N > "$dir/metrics-0.time"
    local req body
    for req in "${requests[@]}"; do
        if [[ "$req" == stream\ * ]]; then
            body="${req#stream }"
            body="${body%\}}, \"stream\": true, \"top_k\": 1, \"temperature\": 0, \"seed\": 1}"
            curl -sfN "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >> "$dir/stream.sse"
        else
            body="${req%\}}, \"top_k\": 1, \"temperature\": 0, \"seed\": 1}"
            curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >> "$dir/responses.jsonl"
            echo >> "$dir/responses.jsonl"
        fi
    done
    curl -sf "$base/metrics" > "$dir/metrics-1.prom"
    date -u +%Y-%m-%dT%H:%M:%S.%6N > "$dir/metrics-1.time"
    stop_server
}

one_run "$out/same" "$models/target.gguf"
one_run "$out/other" "$models/draft-other.gguf"
one_run "$out/plain" ""
