"""The text of an exported PR (``PR.md``): what a person pastes into a PyTorch pull request.

Title, summary (what the patch adds), why (the problem), the files it changes, the test plan and the measured
table, in at most about 150 lines. It is built from the patch's ``patchset.toml`` body and the patch's section
of ``benchmarks/README.md``; sentences that point into the fork (raw result files, ``shared/``, the fork's own
tools) and subsections about earlier versions of the patch are left out, since a reviewer cannot follow them.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.common import PatchMeta

# what only exists in this fork: its benchmarks/ and raw results, the shared scratch area, paths outside the
# repo, the fork's CLI, earlier versions of the patch
FORK_ONLY_RE = re.compile(r"\bbenchmarks/|\bresults/|\bshared/|\.\./|\$OUT\b|-m tools\b|\bprevious (?:series|session)\b")
# fork references a reviewer can still read, said without the path
_REWORDS = ((re.compile(r"\bbenchmarks/README\.md\b"), "the Measured section"),
            (re.compile(r"`benchmarks/([\w.-]+\.py)`"), r"the `\1` harness"),
            (re.compile(r"`(python3? )benchmarks/([^`]*)`"), r"`\1\2`"),
            (re.compile(r" installed with `python3? -m tools [^`]*`"), " installed"),
            (re.compile(r"(^|\.\*{0,2} )the `"), r"\1The `"))
HISTORY_HEADING_RE = re.compile(r"previous series|\bhistory\b|\bbefore the\b", re.I)
MAX_TABLE_ROWS = 16


def heading_key(text: str) -> str:
    """Words only, lower case, joined by '-': 'micro_pipeline_tp slice/cat' and 'Micro-pipeline TP: slice-cat'
    both give 'micro-pipeline-tp-slice-cat'; markdown code ticks and punctuation do not matter."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def benchmark_section(readme: Path, patch: PatchMeta) -> str | None:
    """The first section of benchmarks/README.md whose heading names the patch or one of its overlay modules.
    Names match whole words in any spelling (``_``, ``-``, spaces, ``/``): see ``heading_key``."""
    if not readme.is_file():
        return None
    keys = {patch.name, patch.name.removeprefix("inductor-")} | {Path(o).stem for o in patch.overlay}
    keys = {heading_key(k) for k in keys} - {""}
    lines = readme.read_text().splitlines()
    start = level = None
    in_code = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^(#{1,6})\s+(.*)$", line)
        if not m:
            continue
        if start is None:
            if any(f"-{k}-" in f"-{heading_key(m.group(2))}-" for k in keys):
                start, level = i, len(m.group(1))
        elif len(m.group(1)) <= level:
            return "\n".join(lines[start + 1 : i]).strip() or None
    if start is None:
        return None
    return "\n".join(lines[start + 1 :]).strip() or None


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """Markdown split into ("heading" | "table" | "code" | "para", lines) blocks; a list item is its own para."""
    out: list[tuple[str, list[str]]] = []
    fenced = False
    for line in text.splitlines():
        kind = ("code" if fenced or line.startswith(("```", "    ")) else "heading" if line.startswith("#")
                else "table" if line.startswith("|") else "blank" if not line.strip() else "para")
        if line.startswith("```"):
            fenced = not fenced
        new = kind in ("heading", "blank") or (kind == "para" and line.lstrip().startswith(("- ", "* ")))
        if kind != "blank" and (new or not out or out[-1][0] != kind):
            out.append((kind, [line]))
        elif kind != "blank":
            out[-1][1].append(line)
        elif out and out[-1][0] != "blank":
            out.append(("blank", []))
    return [b for b in out if b[0] != "blank"]


def sanitize(para: str) -> str:
    """One paragraph as one line, without the parentheses and sentences that point into the fork."""
    text = " ".join(line.strip() for line in para.splitlines())
    for pattern, words in _REWORDS:
        text = pattern.sub(words, text)
    text = re.sub(r"\s*\([^()]*\)", lambda m: "" if FORK_ONLY_RE.search(m.group(0)) else m.group(0), text)
    sentences = re.split(r"(?<=[.;])\s+(?=[A-Z`*(])", text)
    return " ".join(s for s in sentences if not FORK_ONLY_RE.search(s)).strip()


def measured(section: str | None) -> list[str]:
    """The setup paragraph, the caption and the first table of the section (history subsections skipped)."""
    if not section:
        return []
    kept, skip_level = [], None
    for kind, lines in blocks(section):
        if kind == "heading":
            level = len(lines[0]) - len(lines[0].lstrip("#"))
            if skip_level is not None and level <= skip_level:
                skip_level = None
            if HISTORY_HEADING_RE.search(lines[0]):
                skip_level = level
        elif skip_level is None:
            kept.append((kind, lines))
    table = next((i for i, (k, _) in enumerate(kept) if k == "table"), None)
    paras = [i for i, (k, _) in enumerate(kept) if k == "para" and (table is None or i < table)]
    # the setup (first paragraph), the machine, and the caption (the paragraph right above the table)
    chosen = paras[:1] + [i for i in paras[1:] if kept[i][1][0].startswith("Machine")] + paras[-1:]
    out = []
    for i in dict.fromkeys(chosen):
        if text := sanitize("\n".join(kept[i][1])):
            out += [text, ""]
    if table is not None:
        rows = [r for r in kept[table][1] if not FORK_ONLY_RE.search(r)]
        out += rows[: MAX_TABLE_ROWS + 2]
        if len(rows) > MAX_TABLE_ROWS + 2:
            out.append(f"\n({len(rows) - MAX_TABLE_ROWS - 2} more rows not shown)")
    return out


def _summary_and_why(body: str) -> tuple[list[str], list[str]]:
    """The body's paragraphs from the first 'This ...' one on are the summary, the ones before it the why."""
    paras = [sanitize(p) for p in body.strip().split("\n\n")]
    paras = [p for p in paras if p]
    first = next((i for i, p in enumerate(paras) if re.match(r"^This (adds|patch|change)\b", p)), 0)
    return paras[first:] or paras, paras[:first]


def test_commands(patch: PatchMeta) -> list[str]:
    return [f"python {t}" for t in patch.tests if t.endswith(".py")]


def pr_markdown(patch: PatchMeta, base: str, git_version: str, numstat: list[tuple[str, str, str, bool]], section: str | None) -> str:
    summary, why = _summary_and_why(patch.body)
    out = [f"# {patch.subject}", "", "## Summary", ""]
    out += [x for p in summary for x in (p, "")]
    if why:
        out += ["## Why", ""] + [x for p in why for x in (p, "")]
    out += ["## Changes", ""]
    out += [f"- `{path}` ({'new, ' if new else ''}+{added} -{deleted})" for added, deleted, path, new in numstat]
    out += ["", "## Test plan", "", "```", *test_commands(patch), "```", "", "## Measured", ""]
    out += measured(section) or ["None yet: no measurements for this change."]
    out += ["", "## Notes", "",
            f"- Made against torch {base} (upstream commit `{git_version}`); rebase onto `main` before opening the PR.", ""]
    return "\n".join(out)
