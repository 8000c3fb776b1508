"""PyTorch's lint on the lines our hooks add to upstream files (``scripts/lint.sh``).

For every base whose pristine tree is built (``python -m tools bases``; the primary base's must be), each upstream
file the series modifies is linted twice with ``lint/ruff.toml``: as the pristine tree has it and with the whole
series applied (``git apply``, in series order). What the patched file has and the pristine one does not is ours:
a ``ruff check`` finding (import order included: the ``I`` rules with PyTorch's sorting settings) or a file that
``ruff format`` would change. Upstream's own findings in those files (if any) are not ours and are not reported.

Usage: python lint/hooked_lines.py   (from the repository root; exit status 1 when something is ours)
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import bases as bases_mod  # noqa: E402
from tools.common import PatchsetError, load_patchset  # noqa: E402
from tools.patchfile import parse_patch  # noqa: E402
from tools.seriesfile import read_series  # noqa: E402

CONFIG = ROOT / "lint" / "ruff.toml"


def _ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args, "--no-cache", "--config", str(CONFIG)],
                          cwd=cwd, capture_output=True, text=True, check=False)


def _findings(tree: Path, files: list[str]) -> collections.Counter[tuple[str, str, str]]:
    """(file, rule, message) of ``ruff check`` (the configured rules and the import order), one per finding."""
    found: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for extra in ((), ("--select", "I")):
        r = _ruff("check", "--output-format", "json", "--exit-zero", *extra, *files, cwd=tree)
        if r.returncode:
            raise PatchsetError(tree, f"ruff check failed: {r.stderr.strip()}")
        for f in json.loads(r.stdout or "[]"):
            found[(Path(f["filename"]).relative_to(tree).as_posix(), f["code"] or "", f["message"])] += 1
    return found


def _unformatted(tree: Path, files: list[str]) -> set[str]:
    return {f for f in files if _ruff("format", "--check", "--quiet", f, cwd=tree).returncode}


def check_base(base: str, pdir: Path, tree: Path, work: Path) -> list[str]:
    patches = read_series(pdir)
    files = sorted({fd.path for p in patches for fd in parse_patch(p).files
                    if fd.kind == "modify" and fd.path.startswith("torch/")})
    if not files:
        return []
    pristine, patched = work / f"{base}-pristine", work / f"{base}-patched"
    for d in (pristine, patched):
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_bytes((tree / f).read_bytes())
    for p in patches:
        include = [f"--include={f}" for f in files]
        r = subprocess.run(["git", "apply", *include, str(p)], cwd=patched, capture_output=True, text=True, check=False)
        if r.returncode:
            raise PatchsetError(p, f"does not apply to the pristine {base} files: {r.stderr.strip()}")
    ours = _findings(patched, files) - _findings(pristine, files)
    out = [f"{base}: {f}: {code} {msg} (a hook adds it; {n}x)" for (f, code, msg), n in sorted(ours.items())]
    for f in sorted(_unformatted(patched, files) - _unformatted(pristine, files)):
        diff = _ruff("format", "--diff", f, cwd=patched).stdout
        out.append(f"{base}: {f}: ruff format would change the hooked file:\n{diff}")
    return out


def main() -> int:
    ps = load_patchset()
    problems: list[str] = []
    checked = []
    with tempfile.TemporaryDirectory(prefix="hooked-lines-") as tmp:
        for base in ps.bases:
            pdir = ROOT / "patches" / f"v{base}"
            tree = bases_mod.base_tree(base)
            if not (tree / ".git").exists():
                if base == ps.primary_base:
                    bases_mod.require_base_tree(base)  # the error says how to build it
                print(f"[lint] hooked lines: no pristine tree for {base} ({tree}); not checked", file=sys.stderr)
                continue
            problems += check_base(base, pdir, tree, Path(tmp))
            checked.append(base)
    print(f"[lint] hooked lines (ruff check incl. import order, ruff format) on {', '.join(checked)}: "
          f"{len(problems) or 'no'} problem(s)", file=sys.stderr)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PatchsetError as e:
        print(f"[lint] error: {e}", file=sys.stderr)
        sys.exit(1)
