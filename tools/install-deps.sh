#!/bin/sh
# Installs the Debian 12 packages llmgate builds and tests with, if missing.
# Needs root (or sudo) only when something is missing.
#   tools/install-deps.sh          build + test dependencies (nginx: the routing
#                                  benchmark's smoke test runs it)
#   tools/install-deps.sh --bench  also the other benchmark peers (haproxy, wrk, gnuplot)
set -eu

pkgs="build-essential cmake pkg-config libevent-dev libssl-dev libjansson-dev node-llhttp
      libhiredis-dev python3 curl ca-certificates openssl dnsmasq-base chromium nginx-light
      redis-server"
# Node.js may come from elsewhere than Debian (NodeSource's nodejs ships its own
# npm and conflicts with Debian's npm package): ask for Debian's only when the
# commands are missing.
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
if [ "${1:-}" = "--bench" ]; then
    pkgs="$pkgs haproxy wrk nghttp2-client gnuplot-nox"
fi

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "installing:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
