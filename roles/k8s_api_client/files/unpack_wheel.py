"""Unpack a pure-Python wheel into a site-packages directory (what pip does for such a wheel,
without pip): the packages first, the .dist-info last, so an interrupted run leaves no marker
of a version that is not fully in place. Older versions of the same distribution are removed.

    python3 unpack_wheel.py SITE_DIR WHEEL
"""

import os
import pathlib
import shutil
import sys
import tempfile
import zipfile


def main(site: pathlib.Path, wheel: pathlib.Path) -> None:
    os.umask(0o022)
    dist = wheel.name.split("-")[0]
    site.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dist}-", dir=site))
    try:
        with zipfile.ZipFile(wheel) as zf:
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
                (item / "INSTALLER").write_text("ai_platform k8s_api_client\n")
            item.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{wheel.name} -> {site}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
