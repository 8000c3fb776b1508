#!/usr/bin/env bash
# PyTorch's own lint on what this patch set exports (CTest `lint`; lint/README.md says what and why):
#   ruff check and ruff format --check with lint/ruff.toml on torch_overlay/ and test/inductor/, no `fmt: skip`,
#   import order (ruff's isort rules with PyTorch's settings) on the same paths,
#   the same checks on the lines the hooks add to upstream files (lint/hooked_lines.py, on the built pristine trees),
#   mypy with lint/mypy.ini on the overlay modules of the primary base, as installed in $PYTHON's torch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-.venv/bin/python}
paths=(torch_overlay test/inductor)
echo "[lint] ruff $("$PY" -m ruff --version | cut -d' ' -f2): check" >&2
"$PY" -m ruff check --config lint/ruff.toml "${paths[@]}"
echo "[lint] ruff format --check" >&2
"$PY" -m ruff format --check --config lint/ruff.toml "${paths[@]}"
echo "[lint] import order (ruff check --select I, PyTorch's usort order)" >&2
"$PY" -m ruff check --config lint/ruff.toml --select I "${paths[@]}"
"$PY" lint/hooked_lines.py
if grep -rn --include='*.py' -e 'fmt: skip' -e 'fmt: off' "${paths[@]}"; then
  echo "[lint] error: the lines above opt out of ruff format; upstream has none" >&2
  exit 1
fi
mods=$("$PY" -c '
from tools.common import load_patchset
ps = load_patchset()
p = [o for x in ps.series(ps.primary_base) for o in x.overlay_on(ps.primary_base) if o.endswith(".py")]
print(" ".join("-m " + o.removesuffix(".py").replace("/", ".") for o in p))')
"$PY" -c 'import torch._inductor._patchset_info' 2>/dev/null || {
  echo "[lint] error: $PY's torch has no patch set installed; mypy checks the installed modules (python -m tools install)" >&2
  exit 1
}
echo "[lint] mypy $("$PY" -m mypy --version | cut -d' ' -f2) (lint/mypy.ini):$mods" >&2
# shellcheck disable=SC2086
"$PY" -m mypy --config-file lint/mypy.ini $mods
