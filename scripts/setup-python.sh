#!/usr/bin/env bash
# Install torch (PyPI), numpy, pytest and transformers (the Hugging Face
# example, examples/hf/) into .venv inside the checkout (git-ignored), and
# the nspcomm package (python/, editable, so it finds this checkout's build/
# without LD_LIBRARY_PATH). Measured on the 2-core build machine: about 3
# minutes and 5.4 GB for torch 2.x with its CUDA wheels (PyPI's default);
# a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON3:-python3}
start=$(date +%s)
if [ ! -x .venv/bin/python ]; then
    # Debian's python3 needs python3-venv for this (scripts/setup.sh installs it).
    "$py" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, numpy, pytest" >/dev/null 2>&1; then
    echo "== installing torch, numpy, pytest into .venv (PyPI; a few minutes, ~5 GB)"
    .venv/bin/pip install --quiet --disable-pip-version-check torch numpy pytest
fi
# transformers for examples/hf: Qwen3-MoE and AttentionInterface are in every
# release of this range; the example ran with 4.57.6 and 5.24.0
TRANSFORMERS_SPEC=${TRANSFORMERS_SPEC:-"transformers>=4.57,<6"}
if ! .venv/bin/python -c "from transformers import AttentionInterface, Qwen3MoeConfig" \
        >/dev/null 2>&1; then
    echo "== installing $TRANSFORMERS_SPEC into .venv (PyPI)"
    .venv/bin/pip install --quiet --disable-pip-version-check "$TRANSFORMERS_SPEC"
fi
.venv/bin/pip install --quiet --disable-pip-version-check --no-build-isolation -e ./python \
    2>/dev/null || .venv/bin/pip install --quiet --disable-pip-version-check -e ./python
echo "== .venv ready in $(( $(date +%s) - start )) s ($(du -sh .venv | cut -f1)); torch" \
    "$(.venv/bin/python -c 'import torch; print(torch.__version__)')," \
    "transformers $(.venv/bin/python -c 'import transformers; print(transformers.__version__)')"
