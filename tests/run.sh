#!/bin/sh
# Builds llmgate and runs the whole test suite (unit, fuzz-corpus replays,
# integration against real processes on loopback).
#   tests/run.sh                 the suite, as CI runs it
#   tests/run.sh -R proxy        only tests whose name matches
#   LG_BUILD_DIR=build-asan LG_CMAKE_ARGS=-DLG_SANITIZE=address,undefined tests/run.sh
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh

build=${LG_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -DLG_WERROR=ON ${LG_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"

if [ ! -d tests/node/node_modules/openai ] || [ ! -d tests/node/node_modules/playwright-core ] ||
    [ ! -d tests/node/node_modules/@anthropic-ai/sdk ]; then
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi
# The real engine (tools/realengine/README.md): node-llama-cpp and its CPU
# binary only (no CUDA/Vulkan builds, no install scripts). Where it cannot
# install (node < 20, not x86-64 Linux), test_real_engine skips and says why.
if [ ! -d tools/realengine/node_modules/node-llama-cpp ]; then
    (cd tools/realengine &&
        npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error) ||
        echo "tests/run.sh: node-llama-cpp did not install: test_real_engine will be skipped" >&2
fi

cd "$build"
exec ctest --output-on-failure --timeout 600 "$@"
