#!/usr/bin/env bash
# Idempotent setup of the CoMLRL baseline venv for the speed benchmarks (multi-agent GRPO vs CoMLRL).
#
#   bash benchmarks/comlrl_setup.sh            # creates benchmarks/.venv-comlrl if missing
#   COMLRL_VENV=/some/path bash benchmarks/comlrl_setup.sh
#
# CoMLRL is a bench-only dependency: it lives in its own venv, never in rolecall's.
# comlrl 1.4.3 declares no torch, so the CPU torch 2.13.0 wheel is installed first
# (pip finds it through find-links /opt/wheels on this machine, or PyPI elsewhere).
# Prints the venv's python path on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${COMLRL_VENV:-$HERE/.venv-comlrl}"
TORCH_VERSION="2.13.0"
COMLRL_VERSION="1.4.3"
# comlrl asks only transformers>=4.30; pin the version the embedded checkpoint was saved
# with (its tokenizer_config names the transformers-5 TokenizersBackend class).
TRANSFORMERS_VERSION="5.23.0"
PY="$VENV/bin/python"
START=$(date +%s)

log() { echo "[comlrl_setup] $*" >&2; }
# pip's output goes to stderr (stdout carries only the python path), minus the noise that
# this machine's unused local index entries produce.
quiet() { { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2; }

have() {  # have MODULE VERSION-PREFIX: is MODULE importable at that version?
    [ -x "$PY" ] && "$PY" - "$1" "$2" <<'EOF' >/dev/null 2>&1
import importlib.metadata as m, sys
sys.exit(0 if m.version(sys.argv[1]).split("+")[0] == sys.argv[2] else 1)
EOF
}

if [ ! -x "$PY" ]; then
    log "creating venv $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip 2>&1 | quiet || true
else
    log "venv exists: $VENV"
fi

if have torch "$TORCH_VERSION"; then
    log "torch $TORCH_VERSION already installed"
else
    log "installing torch==$TORCH_VERSION (CPU)"
    "$PY" -m pip install --quiet "torch==$TORCH_VERSION" 2>&1 | quiet
fi

if have comlrl "$COMLRL_VERSION" && have transformers "$TRANSFORMERS_VERSION"; then
    log "comlrl $COMLRL_VERSION, transformers $TRANSFORMERS_VERSION already installed"
else
    log "installing comlrl==$COMLRL_VERSION transformers==$TRANSFORMERS_VERSION"
    "$PY" -m pip install --quiet "comlrl==$COMLRL_VERSION" "transformers==$TRANSFORMERS_VERSION" \
        "torch==$TORCH_VERSION" 2>&1 | quiet
fi

"$PY" - <<'EOF' >&2
import importlib.metadata as m
for name in ("torch", "comlrl", "transformers", "datasets"):
    try:
        print(f"[comlrl_setup]   {name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"[comlrl_setup]   {name} (not installed)")
EOF
log "done in $(( $(date +%s) - START )) s"
echo "$PY"
