"""``wheel``: a patched torch wheel from a stock one.

``python -m tools wheel --from torch-2.13.0+cpu-....whl --out dist/`` writes
``torch-2.13.0+cpu.inductorpatchset.0.1.0-....whl``: the series' ``torch/`` parts applied (strictly, to members
whose sha256 matches the wheel's own RECORD), ``torch/version.py`` and METADATA carrying the new version, the
dist-info (and ``.data``) dir renamed, ``torch/_inductor/_patchset_info.py`` added (cache-key identity, see
``tools/distinfo.py``) and a new RECORD. Unchanged members (all but a handful of the ~12k) are copied as raw
compressed bytes, never recompressed, so a 200-700 MB wheel takes seconds; their RECORD rows are reused, and
their CRC-32 is checked while they are copied (a corrupt member is an error, never copied on).

The result appears in ``--out`` only when complete (and, with ``--verify``, verified): ``--out`` never holds a
partial or unverified wheel (``tools.wheelzip``).
"""

from __future__ import annotations

import argparse
import re
import time
import zipfile
import zlib
from pathlib import Path

from tools.common import (CACHE_DIR, PATCHES_DIR, PATCHSET_TOML, PatchsetError, add_subcommand, base_of_version,
                          load_patchset, progress)
from tools.distinfo import (INFO_MODULE, info_module_source, metadata_version, parse_record, read_info_module,
                            record_hash)
from tools.fsutil import sha256_bytes
from tools import interrupt
from tools.journal import maybe_crash
from tools.patchapply import apply_series
from tools.seriesfile import load_series, series_state
from tools.sources import fresh_series_dir
from tools.wheelzip import corrupt, raw_copy, staged_output, verify_wheel, write_member

_LOCAL_RE = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*$")


def patched_version(version: str, name: str, ps_version: str) -> str:
    """'2.13.0+cpu', 'inductor-patchset', '0.1.0' -> '2.13.0+cpu.inductorpatchset.0.1.0' (PEP 440 local label)."""
    tag = re.sub(r"[^a-z0-9]", "", name.lower())
    parts = [tag, *(p for p in re.split(r"[-_.+]", ps_version.lower()) if p)]
    label = ".".join(parts)
    pub, _, local = version.partition("+")
    full = f"{local}.{label}" if local else label
    if not _LOCAL_RE.match(full) or not re.match(r"^\d+(\.\d+)*", pub):
        raise PatchsetError(f"version {version}", f"cannot form a valid PEP 440 local version from {full!r}")
    return f"{pub}+{full}"


def _row(name: str, data: bytes) -> str:
    return f"{name},{record_hash(sha256_bytes(data))},{len(data)}"


def _wheel_filename(src_name: str, new_version: str) -> str:
    parts = src_name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise PatchsetError(src_name, "not a wheel file name (name-version[-build]-py-abi-plat.whl)")
    parts[1] = new_version
    return "-".join(parts) + ".whl"


def build_wheel(src: Path, out_dir: Path, patches_dir: Path = PATCHES_DIR, metadata: Path = PATCHSET_TOML,
                verify: bool = False) -> Path:
    t0 = time.monotonic()
    try:
        zin = zipfile.ZipFile(src)
    except FileNotFoundError as e:
        raise PatchsetError(src, "no such file") from e
    except (OSError, zipfile.BadZipFile) as e:
        parts = src.name.split("-")
        if not (src.name.startswith("torch-") and src.name.endswith(".whl") and len(parts) in (5, 6)):
            raise PatchsetError(src, f"not a torch wheel ({e}): --from takes a stock torch wheel, "
                                "torch-<version>-<python>-<abi>-<platform>.whl") from e
        # the exact version, local label included (+cpu), from PyTorch's index for that build: a bare torch==X.Y.Z
        # may fetch another build (CUDA)
        version = parts[1]
        label = version.partition("+")[2]
        index = f" --index-url https://download.pytorch.org/whl/{label}" if label else ""
        raise PatchsetError(src, f"cannot open as a wheel ({e}): a truncated or interrupted download? Download it again: "
                            f"delete it, then `python -m pip download --no-deps torch=={version}{index} -d {src.parent}` "
                            "(or, for a base's cached wheel, `python -m tools bases`)") from e
    with zin:
        names = {i.filename: i for i in zin.infolist()}
        dis = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")})
        dis = [d for d in dis if d.startswith("torch-")]
        if len(dis) != 1:
            raise PatchsetError(src, f"expected exactly one torch-*.dist-info in the wheel, found {dis}")
        di = dis[0]
        meta = zin.read(f"{di}/METADATA").decode()
        version = metadata_version(meta, f"{src}:{di}/METADATA")
        if INFO_MODULE in names:
            info = read_info_module(zin.read(INFO_MODULE))
            raise PatchsetError(f"{src}:{INFO_MODULE}", f"this wheel is already patched ({info.get('name', '?')} "
                                f"{info.get('version', '?')}, torch {version}); build from the stock torch wheel "
                                f"(torch {version.partition('+')[0]}, e.g. the one in {CACHE_DIR / 'wheels'})")
        ps = load_patchset(metadata)
        base = base_of_version(version, ps, where=f"{src}:{di}/METADATA")
        sdir = fresh_series_dir(patches_dir, base, metadata)
        patches = load_series(sdir)
        state, detail = series_state(sdir)
        if state == "modified":
            progress(f"warning: {sdir}: the series {detail}; `python -m tools check` has not vouched for it")
        record = parse_record(zin.read(f"{di}/RECORD").decode())
        new_version = patched_version(version, ps.name, ps.version)
        new_di = f"torch-{new_version}.dist-info"
        old_data, new_data = di[: -len(".dist-info")] + ".data", f"torch-{new_version}.data"
        progress(f"{src.name}: torch {version} -> {new_version}; series {sdir} ({len(patches)} patches)")

        def member(rel: str) -> bytes:
            try:
                return zin.read(rel)
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                raise corrupt(src, names[rel], str(e)) from e

        found, problems = {}, []
        for rel in sorted({fd.path for p in patches for fd in p.files if fd.path.startswith("torch/")}):
            found[rel] = member(rel) if rel in names else None
            want = record.get(rel, (None, ""))[0]
            if found[rel] is not None and (want is None or sha256_bytes(found[rel]) != want):
                problems.append(f"{src}:{rel}")
        if problems:
            why = "not pristine: sha256 differs from the wheel's RECORD (or unlisted)"
            raise PatchsetError(problems[0], why if len(problems) == 1 else
                                f"{why}; and {len(problems) - 1} more:\n" + "\n".join(f"  {p}" for p in problems[1:]))

        def read(rel: str) -> bytes | None:
            return found[rel] if rel in found else (member(rel) if rel in names else None)

        changes = {rel: after for rel, (_, after) in apply_series(patches, found.__getitem__, prefix="torch/").items()}
        if any(v is None for v in changes.values()):
            raise PatchsetError(sdir, "the series deletes a torch/ file; wheel does not support deletions")
        # torch.__version__ may carry a local label METADATA lacks (PyPI's CUDA wheels: METADATA 2.11.0,
        # version.py 2.11.0+cu130): keep that relation and append our label to each.
        vp = "torch/version.py"
        vtext = (changes.get(vp) or read(vp) or b"").decode()
        pat = re.compile(r"^__version__ = (['\"])([^'\"]+)\1$", re.M)
        vfound = pat.findall(vtext)
        if len(vfound) != 1 or vfound[0][1].partition("+")[0] != version.partition("+")[0]:
            raise PatchsetError(f"{src}:{vp}", f"expected exactly one line __version__ = '{version.partition('+')[0]}[+...]'")
        py_version = patched_version(vfound[0][1], ps.name, ps.version)
        changes[vp] = pat.sub(lambda _: f"__version__ = '{py_version}'", vtext).encode()
        if INFO_MODULE in changes:
            raise PatchsetError(sdir, f"the series must not touch the generated {INFO_MODULE}")
        changes[INFO_MODULE] = info_module_source(ps.name, ps.version, base, patches, "wheel", state)
        new_meta = re.sub(r"(?m)^Version: .*$", f"Version: {new_version}", meta, count=1)

        out = out_dir / _wheel_filename(src.name, new_version)
        rows: list[str] = []
        copied = 0
        with staged_output(out) as (tmp, publish):
            with zipfile.ZipFile(tmp, "w", allowZip64=True) as zout:
                infos = [i for i in zin.infolist() if not i.filename.startswith(di + "/")]
                for k, info in enumerate(infos, 1):
                    n = info.filename
                    new_n = new_data + n[len(old_data) :] if n.startswith(old_data + "/") else n
                    if n in changes:
                        data = changes.pop(n)
                        write_member(zout, new_n, data, info)
                        rows.append(_row(new_n, data))
                        progress(f"  patched  {n}")
                        continue
                    if info.is_dir():
                        raw_copy(zin, zout, info, new_n, src)
                        continue
                    raw_copy(zin, zout, info, new_n, src)
                    copied += 1
                    h, size = record.get(n, (None, ""))
                    if h is None:  # unlisted in the source RECORD: hash it ourselves
                        data = member(n)
                        h, size = sha256_bytes(data), str(len(data))
                    rows.append(f"{new_n},{record_hash(h)},{size}")
                    if k % 3000 == 0:
                        progress(f"  copied {k}/{len(infos)} members raw")
                    if k % 4 == 0:
                        interrupt.step()
                    maybe_crash(k)
                for n, data in sorted(changes.items()):  # added files
                    write_member(zout, n, data, None)
                    rows.append(_row(n, data))
                    progress(f"  added    {n}")
                # dist-info last: renamed, METADATA rewritten, RECORD regenerated
                for info in zin.infolist():
                    n = info.filename
                    if not n.startswith(di + "/") or n == f"{di}/RECORD":
                        continue
                    new_n = new_di + n[len(di) :]
                    if info.is_dir():  # some wheels have directory entries; RECORD lists files only
                        raw_copy(zin, zout, info, new_n, src)
                        continue
                    if n == f"{di}/METADATA":
                        data = new_meta.encode()
                        write_member(zout, new_n, data, info)
                    else:
                        data = member(n)
                        raw_copy(zin, zout, info, new_n, src)
                    rows.append(_row(new_n, data))
                rows.append(f"{new_di}/RECORD,,")
                rec_info = names[f"{di}/RECORD"]
                write_member(zout, f"{new_di}/RECORD", ("\n".join(rows) + "\n").encode(), rec_info)
            if verify:
                t = time.monotonic()
                tmp.seek(0)
                verify_wheel(out, tmp)
                progress(f"verified every member against RECORD in {time.monotonic() - t:.1f}s")
            publish()
    progress(f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB, {copied} members copied raw) in {time.monotonic() - t0:.1f}s")
    return out


WHEEL_DESCRIPTION = """\
Build a patched torch wheel from a stock one: this checkout's series (chosen by the wheel's version) applied to
the wheel's torch/ files, a PEP 440 local version label (2.13.0+cpu -> 2.13.0+cpu.inductorpatchset.<ver>) in
METADATA, torch/version.py and the dist-info name, torch/_inductor/_patchset_info.py added, RECORD regenerated.
Unchanged members are copied as they are (their CRC checked). The wheel appears in --out only when complete (and
verified, with --verify). `pip install` it; `python -m tools status` then reports it as a patched wheel."""


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "wheel", "build a patched torch wheel (+<local>.inductorpatchset.<ver>)", WHEEL_DESCRIPTION, None)
    p.add_argument("--from", dest="src", type=Path, required=True, help="stock torch wheel")
    p.add_argument("--out", type=Path, default=Path("dist"), help="output directory (default: %(default)s)")
    p.add_argument("--patches", type=Path, default=PATCHES_DIR, help="generated patches dir (default: %(default)s)")
    p.add_argument("--metadata", type=Path, default=PATCHSET_TOML, help=argparse.SUPPRESS)
    p.add_argument("--verify", action="store_true",
                   help="re-read the result and check every RECORD row before it appears in --out")

    def run(a) -> int:
        print(build_wheel(a.src, a.out, a.patches, a.metadata, verify=a.verify))
        return 0

    p.set_defaults(func=run, atomic=True)  # tools.interrupt: SIGINT/SIGTERM leave --out as it was
