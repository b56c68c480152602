#!/usr/bin/env bash
# Installs what building and testing tandem needs on a fresh Debian 12.
#   cmake, gcc, clang: the build and the libFuzzer targets
#   pkg-config: the install test builds examples/ against the installed library
#   python3 + numpy + gguf (PyPI): the independent test oracles (the gguf
#     package's dequantizers and a numpy reference forward pass)
#   tokenizers, sentencepiece, protobuf (PyPI): independent tokenizer oracles
#   libmicrohttpd-dev, libjansson-dev: tandem serve's HTTP and JSON (without
#     them the build has no server, and says so)
#   openai (PyPI): the official client, the oracle of the server's API tests
#   chromium: the server's chat page test (headless)
set -euo pipefail
need=()
for c in cmake gcc clang pkg-config chromium; do command -v $c >/dev/null || need+=($c); done
for h in microhttpd.h jansson.h; do [ -f /usr/include/$h ] || need+=($h); done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq cmake gcc clang libclang-rt-14-dev pkg-config libmicrohttpd-dev libjansson-dev \
    chromium >/dev/null
fi
python3 -c 'import numpy, gguf, tokenizers, sentencepiece, google.protobuf, openai' 2>/dev/null ||
  python3 -m pip install --quiet numpy gguf==0.19.0 tokenizers sentencepiece protobuf openai
