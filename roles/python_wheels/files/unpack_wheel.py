"""Unpack a pure-Python wheel into a site-packages directory (what pip does for such a wheel,
without pip): the packages first, the .dist-info last, so an interrupted run leaves no marker
of a version that is not fully in place. Older versions of the same distribution are removed.
A wheel that is not pure Python (Root-Is-Purelib false, or a <name>.data directory whose
scripts, headers or platlib files pip would place elsewhere) is refused before anything changes.

    python3 unpack_wheel.py SITE_DIR WHEEL
"""

import os
import pathlib
import shutil
import sys
import tempfile
import zipfile


class NotPurePython(Exception):
    pass


def check_pure(zf: zipfile.ZipFile, wheel: pathlib.Path) -> None:
    names = zf.namelist()
    data = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".data")})
    meta = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/WHEEL")]
    if len(meta) != 1:
        raise NotPurePython(f"{wheel.name}: no single .dist-info/WHEEL file")
    fields = dict(line.split(":", 1) for line in zf.read(meta[0]).decode().splitlines() if ":" in line)
    purelib = fields.get("Root-Is-Purelib", "").strip().lower() == "true"
    if not purelib or data:
        raise NotPurePython(f"{wheel.name}: not a pure-Python wheel (Root-Is-Purelib "
                            f"{fields.get('Root-Is-Purelib', '').strip() or 'missing'}"
                            f"{', ' + ', '.join(data) if data else ''}); install it with pip instead")


def main(site: pathlib.Path, wheel: pathlib.Path) -> None:
    os.umask(0o022)
    dist = wheel.name.split("-")[0]
    with zipfile.ZipFile(wheel) as zf:
        check_pure(zf, wheel)
        site.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dist}-", dir=site))
        try:
            zf.extractall(tmp)
            for old in site.glob(f"{dist}-*.dist-info"):
                shutil.rmtree(old)
            for item in sorted(tmp.iterdir(), key=lambda p: (p.name.endswith(".dist-info"), p.name)):
                dest = site / item.name
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                elif dest.exists() or dest.is_symlink():
                    dest.unlink()
                if item.name.endswith(".dist-info"):
                    (item / "INSTALLER").write_text("ai_platform python_wheels\n")
                item.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{wheel.name} -> {site}")


if __name__ == "__main__":
    try:
        main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
    except NotPurePython as exc:
        sys.exit(f"unpack_wheel: {exc}")
