"""Hooks that import a module the base does not have.

A hook (``hooks/<patch>/*.diff``) adds imports of our overlay modules to upstream files. On a base, each module a
hook imports under ``torch.`` must exist there: in the pristine tree (upstream's own) or among the overlay files
that the base's series ships (``overlay``, minus the ``{path = ..., bases = [...]}`` entries that leave the base
out). Otherwise the series applies cleanly, and every check of patches passes, but the patched torch fails to
import. ``check`` and ``port`` refuse such a hook, naming the entry in patchset.toml to extend.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.common import Patchset, PatchMeta

_FROM = re.compile(r"^\+\s*from\s+(\.*)([\w.]*)\s+import\b")
_IMPORT = re.compile(r"^\+\s*import\s+(torch(?:\.\w+)*)")


def imported_modules(diff: str) -> list[tuple[str, str]]:
    """(file the line is added to, absolute dotted module) for every ``torch.`` module an added line imports."""
    out, cur = [], None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            p = line[4:].strip()
            cur = p[2:] if p.startswith("b/") else p
            continue
        if cur is None or line.startswith("+++"):
            continue
        m = _FROM.match(line)
        if m:
            dots, name = m.groups()
            if dots:
                pkg = cur.split("/")[:-1]  # the package of the file (of an __init__.py too)
                up = len(dots) - 1
                if up > len(pkg):
                    continue
                parts = pkg[: len(pkg) - up] + ([name] if name else [])
                mod = ".".join(p for p in ".".join(parts).split(".") if p)
            else:
                mod = name
            if mod.startswith("torch.") or mod == "torch":
                out.append((cur, mod))
            continue
        m = _IMPORT.match(line)
        if m:
            out.append((cur, m.group(1)))
    return out


def _module_files(mod: str) -> tuple[str, str]:
    p = mod.replace(".", "/")
    return f"{p}.py", f"{p}/__init__.py"


def dangling_imports(base: str, ps: Patchset, hooks: dict[str, Path], base_tree: Path) -> list[tuple[Path, str]]:
    """(hook file, reason) for each module a hook of ``base``'s series imports that the base has neither upstream
    (``base_tree``) nor in the overlay its series ships. ``hooks``: patch name -> the hook that base uses."""
    series = [p for p in ps.patches if base in p.bases]
    shipped = {o for p in series for o in p.overlay_on(base)}
    probs = []
    for patch in series:
        hook = hooks.get(patch.name)
        if hook is None:
            continue
        seen = set()
        for file, mod in imported_modules(hook.read_text()):
            if mod in seen:
                continue
            seen.add(mod)
            cands = _module_files(mod)
            if any((base_tree / c).is_file() for c in cands) or any(c in shipped for c in cands):
                continue
            probs.append((hook, _reason(base, patch, file, mod, cands, ps)))
    return probs


def _reason(base: str, patch: PatchMeta, file: str, mod: str, cands: tuple[str, str], ps: Patchset) -> str:
    head = (f"on torch {base}, its line in {file} imports {mod}, which torch {base} does not have and the v{base} "
            f"series does not ship, so the patched torch would fail to import")
    owners = [(p, c) for p in ps.patches for c in cands if c in p.overlay]
    if not owners:
        return f"{head}; no patch's overlay has {cands[0]}: add it to {patch.name}'s overlay, or drop the import"
    p, c = owners[0]
    only = dict(p.only).get(c)
    if only is not None:
        listed = ", ".join(f'"{b}"' for b in only)
        return (f'{head}; extend its entry {{path = "{c}", bases = [{listed}]}} in [[patch]] {p.name} of '
                f'patchset.toml with "{base}" (or give {base} a hook without that import)')
    return (f'{head}; {c} belongs to [[patch]] {p.name}, whose bases lack "{base}": add "{base}" to that '
            f"patch's bases in patchset.toml (or give {base} a hook without that import)")
