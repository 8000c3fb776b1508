"""The map of each feature that README.md shows: every part of a patch, from ``patchset.toml`` and ``hooks/``.

``render_map`` writes it; ``tools/tests/test_docs.py`` checks that README.md holds exactly that text between the
two ``MAP_BEGIN``/``MAP_END`` comment lines, so the README cannot drift from ``patchset.toml``.
"""

from __future__ import annotations

from tools.common import Patchset, PatchMeta
from tools.sources import SHARED_HOOK, UPSTREAM_TESTS, Sources

MAP_BEGIN = "<!-- feature map: generated from patchset.toml by tools.featuremap.render_map -->"
MAP_END = "<!-- end of feature map -->"


def _paths(paths) -> str:
    return ", ".join(f"`{p}`" for p in paths) or "none"


def _patch_map(p: PatchMeta, sources: Sources) -> list[str]:
    only = dict(p.only)

    def files(paths, prefix=""):
        return ", ".join(f"`{prefix}{x}`" + (f" ({', '.join(only[x])} only)" if x in only else "") for x in paths) or "none"

    hook_dir = sources.hooks_dir / p.name
    hooks = sorted(f.name for f in hook_dir.iterdir()) if hook_dir.is_dir() else []
    hook_files = [h for h in hooks if h != UPSTREAM_TESTS]
    lines = [f"**`{p.name}`**", ""]
    lines.append(f"- code: {files(p.overlay, 'torch_overlay/')}")
    lines.append(f"- tests: {files(p.tests)}")
    if hook_files:
        what = ", ".join(f"`{h}`" + (" (shared)" if h == SHARED_HOOK else "") for h in hook_files)
        lines.append(f"- hooks in upstream files: `hooks/{p.name}/`: {what}")
    else:
        lines.append("- hooks in upstream files: none (it only adds files)")
    if UPSTREAM_TESTS in hooks:
        lines.append(f"- upstream test changes: `hooks/{p.name}/{UPSTREAM_TESTS}`")
    lines.append(f"- examples: {_paths(p.examples)}")
    lines.append(f"- benchmarks: {_paths(p.benchmarks)}")
    if p.results or (p.upstream and p.upstream.headline):
        heads = [f'"{h}"' for h in (p.upstream.headline if p.upstream else "", p.results) if h]
        lines.append(f"- results: `benchmarks/README.md`, {' and '.join(heads)}")
    if p.docs:
        lines.append(f"- docs: {_paths(p.docs)}")
    if p.upstream and (dps := p.upstream.diff_prs):
        diffs = ", then ".join(f"`{dp.diff}`" for dp in dps)
        release = f"{dps[0].package} {dps[0].version}"
        if len(dps) == 1:
            against = f"against {release}"
        elif dps[0].standalone:
            against = f"the first against {release} alone, each later one with the ones before it applied"
        else:
            against = f"each against {release} with the ones before it applied"
        then = ("then this patch, which depends on them" if p.upstream.own_pr else
                "the rest of this patch stays in the fork")
        lines.append(f"- upstream PRs: {p.upstream.repo}, `python -m tools export-pr --patch {p.name}`: {diffs} "
                     f"({against}); {then}")
    elif p.upstream:
        lines.append(f"- upstream PR: {p.upstream.repo}, `python -m tools export-pr --patch {p.name}`")
    for fp in p.upstream.file_prs if p.upstream else ():
        adds = "".join(f", `{source}` adds `{path}`" for path, source in fp.add)
        diff = (f", `{fp.diff}` changes {fp.package} {fp.version}'s files beside it" if fp.diff else "")
        into = f"{fp.package} {fp.branch}'s" if fp.branch else f"{fp.package} {fp.version}'s"
        lines.append(f"- and a PR of its own, `{fp.name}`: `{fp.source}` replaces {into} `{fp.path}` whole{adds}{diff}")
    return lines


def render_map(ps: Patchset, sources: Sources) -> str:
    out = [MAP_BEGIN, ""]
    for p in ps.patches:
        out += _patch_map(p, sources) + [""]
    out.append(MAP_END)
    return "\n".join(out) + "\n"
