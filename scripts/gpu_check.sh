#!/usr/bin/env bash
# One command that checks rolecall on a machine with one NVIDIA GPU and no network.
#
#   scripts/gpu_check.sh [--cpu] [--wheels DIR] [--out FILE] [--smollm2 DIR_OR_GGUF] [--minutes N]
#
# The machine is expected to have PyTorch (CUDA build), transformers, peft, safetensors,
# tokenizers, pyyaml, rich, typer and pytest installed; every other dependency of rolecall
# travels as wheels in DIR (default: .whl/ in the repository; scripts/gpu_wheels.sh fills it on
# a machine with network). Nothing is fetched.
#
# It installs rolecall into a fresh virtual environment that sees the machine's own packages,
# runs `pytest -m gpu`, trains a few bf16 steps of the voting workflow on a model of
# Qwen3-0.6B's shape with random weights (and on SmolLM2-135M-Instruct when its files are
# given or cached), checks a resume, and writes one JSON (default gpu_check.json) of what ran,
# what failed, step times, tokens/s, memory and training MFU. --cpu runs the same stages on
# the CPU with a small model of the same layout (CI runs this). Exit status: 0 when every
# stage ran, 1 when one failed (the JSON says which), 2 on bad arguments.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cpu=0 wheels="$here/.whl" out="$PWD/gpu_check.json" smollm2="" minutes=8
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu=1 ;;
        --wheels) wheels="${2:?--wheels needs a folder}"; shift ;;
        --out) out="${2:?--out needs a file}"; shift ;;
        --smollm2) smollm2="${2:?--smollm2 needs a directory or .gguf file}"; shift ;;
        --minutes) minutes="${2:?--minutes needs a number}"; shift ;;
        -h|--help) sed -n 2,17p "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONUNBUFFERED=1
work="$(mktemp -d "${TMPDIR:-/tmp}/rolecall-gpu-check.XXXXXX")"
log="$work/install.log"
py="${PYTHON:-python3}"

# A venv of its own that sees the interpreter's packages: --system-site-packages alone would
# miss them when python3 is itself a venv (as on the GPU image and in CI), so a .pth adds them.
# --without-pip: pip and setuptools come from the machine's environment too (a venv's own older
# setuptools would shadow the one rolecall's build needs).
"$py" -m venv --without-pip "$work/venv" >>"$log" 2>&1 || { echo "gpu_check.sh: could not make a venv with $py" >&2; exit 1; }
parent_site="$("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))')"
venv_site="$("$work/venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
printf '%s\n' "$parent_site" >"$venv_site/zz_parent_env.pth"
vpy="$work/venv/bin/python"

install="none"
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
    "$vpy" -m pip install -q --no-index --no-deps --no-compile "$wheels"/*.whl >>"$log" 2>&1 \
        || echo "gpu_check.sh: some wheels in $wheels did not install (see the JSON's install log)" >&2
fi
# rolecall itself, offline: a real install when setuptools is there, else its source on the path.
if "$vpy" -m pip install -q --no-index --no-deps --no-build-isolation "$here" >>"$log" 2>&1; then
    install="pip"
else
    echo "$here/src" >"$venv_site/rolecall_src.pth"
    install="path"
fi
"$vpy" -m pip check >"$work/pip_check.txt" 2>&1

args=(--out "$out" --work "$work" --install "$install" --minutes "$minutes")
[ "$cpu" = 1 ] && args+=(--cpu)
[ -n "$smollm2" ] && args+=(--smollm2 "$smollm2")
cd "$here" && "$vpy" "$here/scripts/gpu_check.py" "${args[@]}"
status=$?
echo "gpu_check.sh: wrote $out (work folder $work)"
exit $status
