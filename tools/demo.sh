#!/bin/sh
# Builds llmgate (installing missing Debian packages) and runs the demo:
# a local simulated fleet behind the gateway, real traffic, a summary.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec python3 tools/demo.py "$@"
