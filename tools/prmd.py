"""The text of an exported PR (``PR.md``) and the checks that make it pasteable as is.

``PR.md`` is built from the patch's ``[patch.upstream]`` table in ``patchset.toml``, never cut from other text:
the title (the patch's subject), ``summary`` (at most 300 words, written for a reviewer), the upstream test
expectations the patch changes, in a section of their own (``[[patch.upstream.test-change]]``: test, assertion,
reason; each one's hunk is in the PR), ``test-plan`` (the exact commands) and the headline table: the section of
``benchmarks/README.md`` whose heading is ``headline``, chosen by name.

``pasteability_findings`` is what ``export-pr`` refuses to write: a path that exists only in this repo (its
benchmarks, examples, hooks, tools, docs ...), a torch release older than the one the PR is made against, or
fork-internal words (``FORK_WORDS_RE``), in the PR text, the commit message, every line the PR adds (code, tests,
upstream test hunks) and every file exported to another repository.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path

from tools.common import PYTORCH_REPO, PatchMeta, version_key

# Files whose bare name says nothing about this repo (upstream has files of the same name everywhere).
_GENERIC_NAMES = {"README.md", "__init__.py", "conftest.py", "CMakeLists.txt", "setup.py", "run", "series", ".gitignore"}
# Directories that are never part of the patch set's sources.
_SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
# Words that only make sense inside this repo: its own vocabulary, the PR it started from (a fork's PR, "the seed
# PR"), and text that speaks of the patches from outside PyTorch ("next to these patches", "a plain PyTorch
# checkout").
FORK_WORDS_RE = re.compile(
    r"\b(?:fork|forks|patch ?set|backport(?:ed|s)?|our series|dev machine|seed PR|these patches"
    r"|plain pytorch|plain torch (?:checkout|install|build|tree|wheel))\b"
    r"|(?<![\w/.-])(?!pytorch/)[\w.-]+/pytorch#\d+", re.IGNORECASE)
_PATH_TOKEN_RE = re.compile(r"(?<![\w./-])(?:\./)?([\w.-]+(?:/[\w.-]+)+/?)")


@dataclasses.dataclass(frozen=True)
class ForkPaths:
    """What exists only in this repo: every path outside ``torch/`` and ``test/`` (and under ``torch_overlay/``),
    and the distinctive file names among them."""

    paths: frozenset[str]
    names: frozenset[str]

    @classmethod
    def of(cls, root: Path) -> ForkPaths:
        paths, names = set(), set()
        for d, dirs, files in os.walk(root):
            rel = Path(d).relative_to(root)
            # hidden folders are local (venvs, wheels, scratch checkouts of other projects), except CI's
            dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and (not x.startswith(".") or x == ".ci")
                       and (rel.parts or x not in {"torch", "test"})]
            paths.update((rel / x).as_posix() for x in dirs)
            for f in files:
                if rel.parts or f not in {"torch", "test"}:
                    paths.add((rel / f).as_posix())
                    if f not in _GENERIC_NAMES and "." in f.strip("."):
                        names.add(f)
        # a name the PR's own files have (a module and its example can share one) refers to the module
        shipped = {f.name for top in ("torch_overlay", "test") for f in (root / top).rglob("*") if f.is_file()}
        return cls(frozenset(paths), frozenset(names - shipped))

    def findings(self, line: str) -> list[str]:
        out = []
        for m in _PATH_TOKEN_RE.finditer(line):
            token = m.group(1).rstrip(".,:;)").rstrip("/")
            if token in self.paths or token.split("/", 1)[0] in {"torch_overlay", "shared"}:
                out.append(f"`{token}` exists only in this repo")
        for name in dict.fromkeys(m.group(1) for m in self._names_re.finditer(line)):
            out.append(f"`{name}` is a file of this repo only")
        return out

    @functools.cached_property
    def _names_re(self) -> re.Pattern[str]:
        """Any of ``names`` as a whole name (not inside a path or a longer name), longest first; one pattern, not
        one per name: a PR's thousands of lines against hundreds of names would overflow ``re``'s cache."""
        alternatives = "|".join(re.escape(n) for n in sorted(self.names, key=lambda n: (-len(n), n)))
        return re.compile(rf"(?<![\w/.-])(?=({alternatives or '(?!)'})(?![\w/-]|\.\w))")


def older_releases_re(bases: tuple[str, ...], base: str) -> re.Pattern[str] | None:
    """Mentions of the bases older than ``base`` ("2.11", "2.11.0", "2.13+"): text for a series, not for a PR
    made against ``base``."""
    older = sorted({".".join(b.split(".")[:2]) for b in bases if version_key(b) < version_key(base)})
    if not older:
        return None
    return re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(v) for v in older) + r")(?:\.\d+)?(?![\d])")


def pasteability_findings(where: str, lines: list[tuple[int, str]], fork: ForkPaths,
                          old: re.Pattern[str] | None) -> list[str]:
    """``<where>:<line>: <why>`` for each line that would not survive a reviewer."""
    out = []
    for n, line in lines:
        whys = fork.findings(line)
        if old is not None and (m := old.search(line)):
            whys.append(f"names torch {m.group(0)}, older than the release the PR is made against")
        whys += [f"fork-internal wording {m.group(0)!r}" for m in FORK_WORDS_RE.finditer(line)]
        out += [f"{where}:{n}: {why}: {line.strip()[:100]}" for why in whys]
    return out


def added_lines(diff: str) -> dict[str, list[tuple[int, str]]]:
    """The lines a unified diff adds, per file, with their line numbers in the new file."""
    out: dict[str, list[tuple[int, str]]] = {}
    path, n = None, 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/") if line[4:] != "/dev/null" else None
        elif m := re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", line):
            n = int(m.group(1))
        elif path is not None and line.startswith("+"):
            out.setdefault(path, []).append((n, line[1:]))
            n += 1
        elif path is not None and line.startswith(" "):
            n += 1
    return out


def numbered(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.splitlines(), 1))


def named_section(readme: Path, heading: str) -> list[str] | None:
    """The lines under the markdown heading whose text is ``heading`` (up to the next heading of the same or a
    higher level), outside code fences; None when there is no such heading."""
    if not readme.is_file():
        return None
    lines = readme.read_text().splitlines()
    start = level = None
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if not m:
            continue
        if start is None:
            if m.group(2) == heading:
                start, level = i + 1, len(m.group(1))
        elif len(m.group(1)) <= level:
            return _trim(lines[start:i])
    return None if start is None else _trim(lines[start:])


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def has_table(lines: list[str]) -> bool:
    return any(line.startswith("|") for line in lines)


def unwrap(text: str) -> str:
    """Paragraphs and list items on one line each (GitHub shows every newline of a PR description as a break);
    table rows and code blocks stay as they are."""
    out: list[str] = []
    for para in text.strip().split("\n\n"):
        items: list[str] = []
        fenced = False
        for line in para.splitlines():
            keep = fenced or line.startswith(("|", "```")) or (items and items[-1].startswith("|"))
            if line.startswith("```"):
                fenced = not fenced
            if keep or not items or line.lstrip().startswith(("- ", "* ")):
                items.append(line.rstrip())
            else:
                items[-1] += " " + line.strip()
        out.append("\n".join(items))
    return "\n\n".join(out)


def export_message(patch: PatchMeta) -> str:
    """The commit message of the exported PR: the subject, the summary and the test plan."""
    up = patch.upstream
    assert up is not None
    plan = "\n".join(up.test_plan)
    return f"{patch.subject}\n\n{up.summary}\n\nTest Plan:\n{plan}\n"


def pr_markdown(patch: PatchMeta, headline: list[str],
                depends_on: list[PatchMeta], files: list[tuple[str, str]]) -> str:
    """``files``: (path in the target repo, what it is), listed for a PR to another repository than PyTorch."""
    up = patch.upstream
    assert up is not None
    out = [f"# {patch.subject}", "", "## Summary", "", unwrap(up.summary), ""]
    for dep in depends_on:
        repo = dep.upstream.repo if dep.upstream else PYTORCH_REPO
        title = (dep.upstream.title if dep.upstream else "") or dep.subject
        out += [f"Depends on the {repo} PR \"{title}\".", ""]
    if up.repo != PYTORCH_REPO:
        out += [f"For {up.repo}:", ""] + [f"- `{path}`: {what}" for path, what in files] + [""]
    if up.test_changes:
        out += ["## Upstream test changes", "", "This PR changes these upstream test expectations on purpose:", ""]
        out += [f"- `{c.file}` `{c.test}`: {c.assertion} {c.reason}" for c in up.test_changes] + [""]
    out += ["## Test Plan", "", "```", *up.test_plan, "```", "", "## Measured", ""]
    out += [unwrap("\n".join(headline))] if headline else ["Pending."]
    return "\n".join(out).rstrip("\n") + "\n"
