#!/usr/bin/env bash
# Fill the folder of wheels that scripts/gpu_check.sh carries to a GPU machine without network.
#
#   scripts/gpu_wheels.sh [DIR] [PYTHON_VERSION]      # default: .whl and 3.12
#
# Run it on a machine with network. It fetches rolecall's dependencies that a PyTorch GPU image
# usually lacks (pydantic and its core, math-verify and its LaTeX parser, bm25s), as binary
# wheels for CPython PYTHON_VERSION on x86-64 Linux, without their own dependencies (the image
# has numpy, scipy and sympy). The versions are the ones rolecall's tests ran with.
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/.." && pwd)/.whl}"
pyver="${2:-3.12}"
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$dir" \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 \
    math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 bm25s==0.3.16
ls -1 "$dir"
