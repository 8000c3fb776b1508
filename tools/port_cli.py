"""``python -m tools port X.Y.Z``: carry every hook diff forward to a new torch release.

1. Fetch ``torch==X.Y.Z`` and build its pristine tree (``tools.bases``; cached like every base).
2. For each patch of ``patchset.toml`` (table order), pick the source base: ``--from B`` if given, else the
   **nearest** bases that have a hook (their override ``hooks/<patch>/v<B>.diff``, or the shared
   ``hooks/<patch>/hook.diff``): the closest lower version, then the closest higher one. Both neighbours are
   tried; the first (lower before higher) from which every hunk carries cleanly is used, and the report says
   when the other one carries to a different hook or conflicts.
3. Carry a hook by three-way merge, per file: ``git merge-file --diff3`` of the hooked old file (the hook
   applied to the old pristine file), the old pristine file (merge base) and the new pristine file. Each
   hunk is also merged alone, so a conflict is attributed to the hook hunk that causes it.
4. A patch with a shared ``hook.diff`` that applies to the new pristine tree as it is (offsets, no fuzz) and
   gives exactly what the carry gives needs **no file**: the new base uses the shared hook. Otherwise a patch
   whose every hunk merged cleanly gets the override ``hooks/<patch>/vX.Y.Z.diff``: ``git diff`` of the new
   pristine tree against the merged files (default 3 lines of context, same headers as a hand-made hook),
   checked to apply to the new pristine tree. An existing, different file is kept unless ``--force``.
5. A patch with any hunk that needs hand work gets **no file**. Each such hunk is printed with the file,
   its line in the new base, the hook hunk it comes from, the reason (conflict with upstream's edit of
   the lines it changes or of its context; context deleted; file missing) and the merge's conflict text.
   ``--workdir DIR`` also leaves ``DIR/<patch>/``: a clone of the new base with that patch's merge result
   (conflict markers included) in the work tree, to finish and ``git diff`` into the override file.
6. The ported hooks are applied in series order on the new pristine tree (as ``generate`` does), so
   hunks of two patches that ended up too close together are reported too.
7. ``--write`` adds the base to ``[patchset] bases`` and to each patch that now has a hook for it (shared
   or override); without it the exact ``patchset.toml`` edit and the next commands are printed.

Re-runnable: an override that is already there is compared, never overwritten without ``--force``.
Exit status: 0 when every patch carried (or was already there), 1 when some hunk needs hand work, 2 on error.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools import gitutil
from tools.common import add_subcommand
from tools.port import PortResult, port
from tools.sources import SHARED_HOOK, Sources, add_repo_root_arg, sources_from_args


def report(res: PortResult, sources: Sources, out=sys.stdout) -> None:
    def rel(p: Path) -> str:
        return str(sources.rel(p))

    head = gitutil.rev_parse(res.tree) or "?"
    print(f"port to torch {res.version}: pristine tree {res.tree} ({head[:12]})", file=out)
    print("source base of each hook: --from, else the closest lower base with a hook (override or shared), else the closest higher (both tried; the first that merges cleanly is used)", file=out)
    for p in res.patches:
        c = p.carry
        src = f" from v{c.source}" if c else ""
        kind = "the shared one" if p.hook_file.name == SHARED_HOOK else "a neighbouring base's override"
        verdict = {
            "inherited": f"carried{src}; {rel(p.hook_file)}, the hook torch {res.version} inherits ({kind}), applies as it "
                         "is (offsets only) and gives the same; no override written",
            "wrote": f"carried{src}; wrote {rel(p.hook_file)}",
            "unchanged": (f"carried{src}; {rel(p.hook_file)} already says the same" if c else
                          f"already ported: {rel(p.hook_file)} applies as it is"),
            "kept": f"carried{src}; existing {rel(p.hook_file)} kept",
            "conflict": f"NEEDS HAND WORK{src}: {len(c.issues) if c else 0} hunk(s); nothing written",
            "no-source": "NEEDS HAND WORK: no hook to carry",
            "no-hook": "nothing to carry (no hook diff on any base)",
            "empty": f"carried{src}: nothing left to hook; nothing written",
            "collides": f"carried{src}, but collides with another patch's hunks in series order",
            "imports": f"NEEDS HAND WORK: carried{src} to {rel(p.hook_file)}, but the hook imports a module torch "
                       f"{res.version} would not have (see the note)",
        }[p.status]
        print(f"\n{p.patch}: {verdict}", file=out)
        if c:
            for m in c.moved:
                print(f"  carried: {m}", file=out)
            for d in c.dropped:
                print(f"  dropped: {d}", file=out)
            for i in c.issues:
                print(f"  HAND WORK: {i}", file=out)
                if i.conflict:
                    for l in i.conflict.rstrip("\n").split("\n"):
                        print(f"    | {l}", file=out)
        for n in p.notes:
            print(f"  note: {n}", file=out)
    hand = res.needs_hand_work
    ported = res.ported()
    print(f"\nsummary: {len(ported)} of {len(res.patches)} patches ported to {res.version}; {len(hand)} need hand work" + (f" ({', '.join(p.patch for p in hand)})" if hand else ""), file=out)
    print("next steps:", file=out)
    step = 1
    if hand:
        for p in hand:
            if p.status == "imports":
                print(f"  {step}. {p.patch}: extend patchset.toml as the note says (or drop the import from "
                      f"{rel(p.hook_file)}), then run port again", file=out)
            else:
                print(f"  {step}. {p.patch}: finish {rel(p.hook_file)} by hand in a clone of {res.tree} (CONTRIBUTING.md), "
                      "using the conflict text above", file=out)
        step += 1
    if res.toml_written:
        print(f"  {step}. patchset.toml: {res.version} added to [patchset] bases and to {', '.join(ported) or 'no patch'}" + ("; add it to the patches finished by hand" if hand else ""), file=out)
    else:
        todo = [n for n in ["[patchset]", *ported, *(p.patch for p in hand)] if n not in res.listed]
        if todo:
            print(f"  {step}. patchset.toml: add \"{res.version}\" to bases of {', '.join(todo)} (or re-run with --write)", file=out)
        else:
            print(f"  {step}. patchset.toml: already lists {res.version} in [patchset] and every patch here", file=out)
    step += 1
    if res.requirements_written:
        print(f"  {step}. wrote {rel(res.requirements)} (torch=={res.version}; `python -m tools venv {res.version}` makes its venv)", file=out)
        step += 1
    elif not res.requirements.is_file():
        print(f"  {step}. {rel(res.requirements)}: add it (torch=={res.version} and -r ../requirements-dev.txt; --write does)", file=out)
        step += 1
    print(f"  {step}. python -m tools generate --base {res.version} && python -m tools check", file=out)
    if not res.readme_lists_base:
        print(f"  {step + 1}. README.md 'Supported bases': add {res.version}", file=out)


def _cmd_port(args) -> int:
    sources = sources_from_args(args)
    res = port(
        args.version,
        sources,
        from_base=args.from_base,
        only=args.patch,
        force=args.force,
        write=args.write,
        workdir=Path(args.workdir).resolve() if args.workdir else None,
    )
    report(res, sources)
    return 1 if res.needs_hand_work else 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "port", "carry every hook diff to a new torch release by three-way merge", __doc__, _cmd_port)
    p.add_argument("version", help="the torch release to port to, X.Y.Z (e.g. 2.14.1)")
    p.add_argument("--from", dest="from_base", metavar="X.Y.Z", help="carry every hook from this base (default: the nearest, see above)")
    p.add_argument("--patch", action="append", metavar="NAME", help="only this patch (repeatable)")
    p.add_argument("--force", action="store_true", help="overwrite an existing override hooks/<patch>/v<version>.diff that differs")
    p.add_argument("--write", action="store_true", help="add the version to patchset.toml's bases ([patchset] and each ported patch)")
    p.add_argument("--workdir", metavar="DIR", help="for each patch that needs hand work, leave DIR/<patch>/: the new base with its merge result")
    add_repo_root_arg(p)
