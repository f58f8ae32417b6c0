#!/usr/bin/env bash
# Downloads (here, where Debian's registry is reachable) the -dev packages the build needs, into .gpu-deps/, so the
# GPU machine, which reaches no registry, can unpack them into a private prefix. Carry .gpu-deps with the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-deps && cd .gpu-deps
apt-get download libhwy-dev libhwy1 libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libpcre2-dev libpcre2-8-0 \
  libutf8proc-dev libutf8proc2 libcpp-httplib-dev libcpp-httplib0.11 prometheus-cpp-dev libprometheus-cpp-core1.0 \
  libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 libcivetweb1 libcivetweb-dev civetweb libgtest-dev libcli11-dev nlohmann-json3-dev \
  libssl-dev libssl3 libbrotli1 libbrotli-dev zlib1g-dev libcurl4
ls -1 | wc -l
