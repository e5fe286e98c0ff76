#!/usr/bin/env bash
# Builds, once, a Python environment with the pinned vLLM (versions) and prints its folder:
# ${XDG_CACHE_HOME:-$HOME/.cache}/specan-e2e/vllm-<version>/, with bin/python. vLLM's wheel
# and its dependencies (a CUDA build of torch among them: about 9.5 GB, 10 minutes) come from
# the package index; its classes import on a CPU-only machine, its engine needs a GPU, which
# the tests do not start. A finished environment is marked by .built, so an interrupted one
# is built again instead of being taken as done. specan itself is installed into it by the
# tests, from the checkout they run (install.sh), not here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions
. "$here/versions"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/specan-e2e/vllm-$VLLM_VERSION"
if [[ -f "$cache/.built" && -x "$cache/bin/python" ]]; then
    echo "$cache"
    exit 0
fi
rm -rf "$cache"
mkdir -p "$(dirname "$cache")"
python="${PYTHON:-python3}"
"$python" -m venv "$cache"
# specan's own dependencies first (duckdb, polars, pyarrow, click, ...): the plugin imports
# analyzer, and the install of the checkout later is --no-deps
"$cache/bin/pip" install --quiet "vllm==$VLLM_VERSION" "duckdb>=1.3" "polars>=1.0" "pyarrow>=14" "click>=8.1" \
    "numpy>=1.26" "matplotlib>=3.7" "sqlglot>=25" "prometheus-client>=0.17" "hatchling>=1.21" >&2
"$cache/bin/python" -c "import vllm, vllm.v1.metrics.loggers" >&2
touch "$cache/.built"
echo "$cache"
