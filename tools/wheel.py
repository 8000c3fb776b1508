"""``wheel``: a patched torch wheel from a stock one.

``python -m tools wheel --from torch-2.13.0+cpu-....whl --out dist/`` writes
``torch-2.13.0+cpu.inductorpatchset.0.1.0-....whl``: the series' ``torch/`` parts applied (strictly, to members
whose sha256 matches the wheel's own RECORD), ``torch/version.py`` and METADATA carrying the new version, the
dist-info (and ``.data``) dir renamed, ``torch/_inductor/_patchset_info.py`` added (cache-key identity, see
``tools/install.py``) and a new RECORD. Unchanged members (all but a handful of the ~12k) are copied as raw
compressed bytes, never recompressed, so a 200-700 MB wheel takes seconds; their RECORD rows are reused, and
their CRC-32 is checked while they are copied (a corrupt member is an error, never copied on).

The result is written to an unnamed temporary file in ``--out`` (Linux ``O_TMPFILE``; elsewhere
``<name>.whl.part``, removed on any error and by the next run after a kill) and appears under its name only when
complete (and, with ``--verify``, verified): ``--out`` never holds a partial or unverified wheel.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import os
import re
import struct
import time
import zipfile
import zlib
from pathlib import Path

from tools.common import CACHE_DIR, PATCHES_DIR, PATCHSET_TOML, PatchsetError, base_of_version, load_patchset, progress
from tools.install import (INFO_MODULE, _maybe_crash, info_module_source, metadata_version, parse_record, read_info_module,
                           record_hash, series_state)
from tools.patchapply import apply_series, load_series

_LOCAL_RE = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*$")
_CHUNK = 1 << 20


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


def _wheel_filename(src_name: str, new_version: str) -> str:
    parts = src_name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise PatchsetError(src_name, "not a wheel file name (name-version[-build]-py-abi-plat.whl)")
    parts[1] = new_version
    return "-".join(parts) + ".whl"


def _corrupt(src: Path, info: zipfile.ZipInfo, why: str) -> PatchsetError:
    return PatchsetError(f"{src}:{info.filename}", f"corrupt member in the source wheel ({why}); "
                         "download the wheel again")


def _raw_copy(zin: zipfile.ZipFile, zout: zipfile.ZipFile, info: zipfile.ZipInfo, new_name: str | None = None,
              src: Path | None = None) -> None:
    """Copy one member's compressed bytes as they are (Python's zipfile has no API for this), checking the
    CRC-32 of the uncompressed bytes on the way (stored and deflated members; others are read through zipfile)."""
    src = src or Path(str(zin.filename))
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        try:
            with zin.open(info) as f:
                while f.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
            raise _corrupt(src, info, str(e)) from e
    inflate = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    crc = size = 0
    fp = zin.fp
    fp.seek(info.header_offset)
    h = fp.read(zipfile.sizeFileHeader)
    if len(h) != zipfile.sizeFileHeader or h[:4] != zipfile.stringFileHeader:
        raise PatchsetError(info.filename, "bad local file header in the source wheel")
    fh = struct.unpack(zipfile.structFileHeader, h)
    fp.seek(info.header_offset + zipfile.sizeFileHeader + fh[zipfile._FH_FILENAME_LENGTH] + fh[zipfile._FH_EXTRA_FIELD_LENGTH])
    new = copy.copy(info)
    if new_name is not None:
        new.filename = new.orig_filename = new_name
    new.flag_bits &= ~0x08  # sizes and CRC go in the local header; no data descriptor
    new.extra = b""
    new.header_offset = zout.fp.tell()
    zout.fp.write(new.FileHeader(zip64=None))
    left = info.compress_size
    while left:
        buf = fp.read(min(_CHUNK, left))
        if not buf:
            raise PatchsetError(f"{src}:{info.filename}", "source wheel is truncated")
        zout.fp.write(buf)
        left -= len(buf)
        if inflate is not None:
            try:
                buf = inflate.decompress(buf)
            except zlib.error as e:
                raise _corrupt(src, info, f"bad deflate data: {e}") from e
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            crc = zlib.crc32(buf, crc)
            size += len(buf)
    if inflate is not None:
        tail = inflate.flush()
        crc, size = zlib.crc32(tail, crc), size + len(tail)
    if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) and (crc != info.CRC or size != info.file_size):
        raise _corrupt(src, info, f"Bad CRC-32 or size: {crc:08x}/{size} bytes, the zip directory says "
                       f"{info.CRC:08x}/{info.file_size}")
    zout.filelist.append(new)
    zout.NameToInfo[new.filename] = new
    zout.start_dir = zout.fp.tell()
    zout._didModify = True


def _write(zout: zipfile.ZipFile, name: str, data: bytes, like: zipfile.ZipInfo | None) -> None:
    info = zipfile.ZipInfo(name, date_time=like.date_time if like else (2000, 1, 1, 0, 0, 0))
    info.external_attr = like.external_attr if like else (0o100644 << 16)
    info.create_system = like.create_system if like else 3
    info.compress_type = zipfile.ZIP_DEFLATED
    zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)


@contextlib.contextmanager
def _staged_output(out: Path):
    """A writable file object for ``out`` that appears under that name only through ``publish()``."""
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    if part.exists():  # left by a killed run (or by the fallback below): remove it unless a build is writing it
        try:
            with open(part, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                part.unlink()
            progress(f"removed {part}, left by an interrupted run")
        except BlockingIOError:
            raise PatchsetError(part, "another `wheel` run is writing this wheel") from None
    named = None
    try:  # unnamed until published: a kill -9 leaves nothing behind
        f = os.fdopen(os.open(out.parent, os.O_TMPFILE | os.O_RDWR, 0o644), "w+b")
    except (AttributeError, OSError):
        named = part
        f = open(part, "w+b")
        fcntl.flock(f, fcntl.LOCK_EX)

    def publish():
        f.flush()
        os.fsync(f.fileno())
        if named is not None:
            os.replace(named, out)
            return
        link = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        # linkat(AT_SYMLINK_FOLLOW) on /proc/self/fd/N names the unnamed file (os.link uses plain link()
        # unless a dir fd is given)
        proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.link(str(f.fileno()), link, src_dir_fd=proc, follow_symlinks=True)
        finally:
            os.close(proc)
        os.replace(link, out)

    try:
        yield f, publish
    finally:
        f.close()
        if named is not None:
            with contextlib.suppress(FileNotFoundError):
                named.unlink()


def build_wheel(src: Path, out_dir: Path, patches_dir: Path = PATCHES_DIR, metadata: Path = PATCHSET_TOML,
                verify: bool = False) -> Path:
    t0 = time.monotonic()
    try:
        zin = zipfile.ZipFile(src)
    except (OSError, zipfile.BadZipFile) as e:
        raise PatchsetError(src, f"cannot open as a wheel: {e}") from e
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
        sdir = patches_dir / f"v{base}"
        if not (sdir / "series").is_file():
            raise PatchsetError(sdir / "series", f"no generated series for base {base} (run `python -m tools generate`)")
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
                raise _corrupt(src, names[rel], str(e)) from e

        found, problems = {}, []
        for rel in sorted({fd.path for p in patches for fd in p.files if fd.path.startswith("torch/")}):
            found[rel] = member(rel) if rel in names else None
            want = record.get(rel, (None, ""))[0]
            if found[rel] is not None and (want is None or hashlib.sha256(found[rel]).hexdigest() != want):
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
        with _staged_output(out) as (tmp, publish):
            with zipfile.ZipFile(tmp, "w", allowZip64=True) as zout:
                infos = [i for i in zin.infolist() if not i.filename.startswith(di + "/")]
                for k, info in enumerate(infos, 1):
                    n = info.filename
                    new_n = new_data + n[len(old_data) :] if n.startswith(old_data + "/") else n
                    if n in changes:
                        data = changes.pop(n)
                        _write(zout, new_n, data, info)
                        rows.append(f"{new_n},{record_hash(hashlib.sha256(data).hexdigest())},{len(data)}")
                        progress(f"  patched  {n}")
                        continue
                    if info.is_dir():
                        _raw_copy(zin, zout, info, new_n, src)
                        continue
                    _raw_copy(zin, zout, info, new_n, src)
                    copied += 1
                    h, size = record.get(n, (None, ""))
                    if h is None:  # unlisted in the source RECORD: hash it ourselves
                        data = member(n)
                        h, size = hashlib.sha256(data).hexdigest(), str(len(data))
                    rows.append(f"{new_n},{record_hash(h)},{size}")
                    if k % 3000 == 0:
                        progress(f"  copied {k}/{len(infos)} members raw")
                    _maybe_crash(k)
                for n, data in sorted(changes.items()):  # added files
                    _write(zout, n, data, None)
                    rows.append(f"{n},{record_hash(hashlib.sha256(data).hexdigest())},{len(data)}")
                    progress(f"  added    {n}")
                # dist-info last: renamed, METADATA rewritten, RECORD regenerated
                for info in zin.infolist():
                    n = info.filename
                    if not n.startswith(di + "/") or n == f"{di}/RECORD":
                        continue
                    new_n = new_di + n[len(di) :]
                    if info.is_dir():  # some wheels have directory entries; RECORD lists files only
                        _raw_copy(zin, zout, info, new_n, src)
                        continue
                    if n == f"{di}/METADATA":
                        data = new_meta.encode()
                        _write(zout, new_n, data, info)
                    else:
                        data = member(n)
                        _raw_copy(zin, zout, info, new_n, src)
                    rows.append(f"{new_n},{record_hash(hashlib.sha256(data).hexdigest())},{len(data)}")
                rows.append(f"{new_di}/RECORD,,")
                rec_info = names[f"{di}/RECORD"]
                _write(zout, f"{new_di}/RECORD", ("\n".join(rows) + "\n").encode(), rec_info)
            if verify:
                t = time.monotonic()
                tmp.seek(0)
                verify_wheel(out, tmp)
                progress(f"verified every member against RECORD in {time.monotonic() - t:.1f}s")
            publish()
    progress(f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB, {copied} members copied raw) in {time.monotonic() - t0:.1f}s")
    return out


def verify_wheel(path: Path, fileobj=None) -> None:
    """Every member hashes to its RECORD row and every member is listed (RECORD itself unhashed).
    ``fileobj``: read the wheel from there (named ``path`` in errors)."""
    with zipfile.ZipFile(fileobj or path) as z:
        rec_name = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
        if len(rec_name) != 1:
            raise PatchsetError(path, "expected exactly one .dist-info/RECORD")
        rec = parse_record(z.read(rec_name[0]).decode())
        members = [i for i in z.infolist() if not i.is_dir()]
        for i in members:
            if i.filename == rec_name[0]:
                if rec.get(i.filename, (None, ""))[0] is not None:
                    raise PatchsetError(f"{path}:{i.filename}", "RECORD must not hash itself")
                continue
            if i.filename not in rec:
                raise PatchsetError(f"{path}:{i.filename}", "member missing from RECORD")
            h = hashlib.sha256()
            with z.open(i) as f:
                while buf := f.read(_CHUNK):
                    h.update(buf)
            want, size = rec[i.filename]
            if h.hexdigest() != want or str(i.file_size) != size:
                raise PatchsetError(f"{path}:{i.filename}", "sha256 or size differs from RECORD")
        extra = set(rec) - {i.filename for i in members}
        if extra:
            raise PatchsetError(path, f"RECORD lists members not in the wheel: {sorted(extra)[:5]}")


WHEEL_DESCRIPTION = """\
Build a patched torch wheel from a stock one: this checkout's series (chosen by the wheel's version) applied to
the wheel's torch/ files, a PEP 440 local version label (2.13.0+cpu -> 2.13.0+cpu.inductorpatchset.<ver>) in
METADATA, torch/version.py and the dist-info name, torch/_inductor/_patchset_info.py added, RECORD regenerated.
Unchanged members are copied as they are (their CRC checked). The wheel appears in --out only when complete (and
verified, with --verify). `pip install` it; `python -m tools status` then reports it as a patched wheel."""


def register(subparsers) -> None:
    p = subparsers.add_parser("wheel", help="build a patched torch wheel (+<local>.inductorpatchset.<ver>)",
                              description=WHEEL_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", type=Path, required=True, help="stock torch wheel")
    p.add_argument("--out", type=Path, default=Path("dist"), help="output directory (default: %(default)s)")
    p.add_argument("--patches", type=Path, default=PATCHES_DIR, help="generated patches dir (default: %(default)s)")
    p.add_argument("--metadata", type=Path, default=PATCHSET_TOML, help=argparse.SUPPRESS)
    p.add_argument("--verify", action="store_true",
                   help="re-read the result and check every RECORD row before it appears in --out")

    def run(a) -> int:
        print(build_wheel(a.src, a.out, a.patches, a.metadata, verify=a.verify))
        return 0

    p.set_defaults(func=run)
