#!/usr/bin/env python3
"""Build the sigwatch .deb from a wheel: a self-contained virtualenv under /opt/sigwatch.

    python3 deploy/debian/build_deb.py --wheel dist/sigwatch-0.1.0-py3-none-any.whl --out dist

(``./dev.sh package`` builds the wheel and runs this.) Standard library only; needs
``dpkg-deb`` (Debian package dpkg) and the Debian interpreter the package will run on
(``--python``, default ``/usr/bin/python3``: the package depends on that exact minor version,
because the virtualenv's binary wheels and ``lib/pythonX.Y`` are made for it).

The package holds:

- ``/opt/sigwatch``: a virtualenv with sigwatch and its dependencies, made in a staging folder
  and relocated (script shebangs, ``activate*``, ``pyvenv.cfg`` rewritten to ``/opt/sigwatch``;
  no byte-compiled files: the postinst compiles them on the machine);
- ``/usr/bin/sigwatch`` -> ``/opt/sigwatch/bin/sigwatch``;
- ``/lib/systemd/system/sigwatch.service`` (``systemd/sigwatch.service``; not started on
  install);
- ``/etc/sigwatch/sigwatch.toml`` (``deploy/sigwatch.toml``) and ``/etc/logrotate.d/sigwatch``,
  both conffiles: an upgrade keeps a local edit;
- ``/usr/share/doc/sigwatch/``: the README, ``docs/*.md`` (the unit's ``Documentation=``) and
  the copyright file.

Dependencies are installed by pip from the configured index, or only from ``--find-links DIR``
with ``--offline``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["build", "main"]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PREFIX = "/opt/sigwatch"
CONFFILES = ("/etc/sigwatch/sigwatch.toml", "/etc/logrotate.d/sigwatch")
DESCRIPTION = """\
GPU training failure signatures from logs, with the fix
 sigwatch tails training logs, the kernel log and the journal on a GPU node, recognises known
 failure signatures (NVIDIA Xid, CUDA, NCCL, ROCm, XLA/TPU, host faults), exports Prometheus
 metrics, serves a status page for on-call and can page through Alertmanager.
 .
 This package holds a self-contained virtualenv under /opt/sigwatch, the hardened systemd
 unit (not started on install), /etc/sigwatch/sigwatch.toml and the event log's logrotate
 file."""


def _run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _version(wheel: Path) -> str:
    m = re.match(r"^sigwatch-([^-]+)-", wheel.name)
    if m is None:
        msg = f"{wheel}: not a sigwatch wheel file name (sigwatch-VERSION-...whl)"
        raise SystemExit(msg)
    return m.group(1)


def _python_version(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _relocate(venv: Path) -> None:
    """Point every path the virtualenv wrote at its staging folder to /opt/sigwatch."""
    old = str(venv).encode()
    for path in [*sorted((venv / "bin").iterdir()), venv / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, PREFIX.encode()))
    for cache in sorted(venv.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    left = [str(p) for p in venv.rglob("*")
            if p.is_file() and not p.is_symlink() and old in p.read_bytes()]
    if left:
        msg = f"staging path still written in: {', '.join(left[:5])}"
        raise SystemExit(msg)


def _control(version: str, arch: str, python_minor: str, installed_kb: int) -> str:
    return (f"Package: sigwatch\nVersion: {version}\nArchitecture: {arch}\n"
            "Maintainer: sigwatch maintainers <sigwatch@localhost>\n"
            f"Installed-Size: {installed_kb}\n"
            f"Depends: python{python_minor}, libc6\nRecommends: logrotate\n"
            "Section: admin\nPriority: optional\n"
            f"Description: {DESCRIPTION}\n")


def _du_kb(root: Path) -> int:
    total = sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir())
    return max(1, total // 1024)


def build(wheel: Path, out: Path, *, python: str = "/usr/bin/python3",
          find_links: list[Path] | None = None, offline: bool = False) -> Path:
    """Build the .deb into ``out``; returns its path."""
    version = _version(wheel)
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()
    minor = _python_version(python)
    versioned = Path(f"/usr/bin/python{minor}")
    if versioned.exists():  # the venv's python symlink then names what Depends: installs
        python = str(versioned)
    with tempfile.TemporaryDirectory(prefix="sigwatch-deb-") as tmp:
        root = Path(tmp) / "root"
        venv = root / PREFIX.lstrip("/")
        venv.parent.mkdir(parents=True)
        _run([python, "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-compile",
               "--disable-pip-version-check", "--no-warn-script-location", "--quiet"]
        for folder in find_links or []:
            pip += ["--find-links", str(folder)]
        if offline:
            pip.append("--no-index")
        _run([*pip, str(wheel)])
        _relocate(venv)

        def put(src: Path, dest: str, mode: int = 0o644) -> None:
            target = root / dest.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            target.chmod(mode)

        put(REPO / "systemd" / "sigwatch.service", "/lib/systemd/system/sigwatch.service")
        put(REPO / "deploy" / "sigwatch.toml", "/etc/sigwatch/sigwatch.toml")
        put(REPO / "deploy" / "logrotate" / "sigwatch", "/etc/logrotate.d/sigwatch")
        doc = "/usr/share/doc/sigwatch"
        put(REPO / "README.md", f"{doc}/README.md")
        for page in sorted((REPO / "docs").glob("*.md")):
            put(page, f"{doc}/{page.name}")
        put(HERE / "copyright", f"{doc}/copyright")
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        (root / "usr" / "bin" / "sigwatch").symlink_to(f"{PREFIX}/bin/sigwatch")

        meta = root / "DEBIAN"
        meta.mkdir()
        installed = _du_kb(root)
        (meta / "control").write_text(_control(version, arch, minor, installed))
        (meta / "conffiles").write_text("".join(f"{c}\n" for c in CONFFILES))
        for script in ("postinst", "prerm", "postrm"):
            shutil.copyfile(HERE / script, meta / script)
            (meta / script).chmod(0o755)
        for path in root.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        out.mkdir(parents=True, exist_ok=True)
        deb = out / f"sigwatch_{version}_{arch}.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
             stdout=subprocess.DEVNULL)
    return deb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", type=Path, required=True, help="The sigwatch wheel to install.")
    ap.add_argument("--out", type=Path, default=REPO / "dist", help="Where the .deb goes.")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="The Debian interpreter the virtualenv is made with (and depends on).")
    ap.add_argument("--find-links", type=Path, action="append", metavar="DIR",
                    help="Also take dependency wheels from DIR (repeatable).")
    ap.add_argument("--offline", action="store_true",
                    help="Take dependencies only from --find-links (no index).")
    args = ap.parse_args(argv)
    if shutil.which("dpkg-deb") is None:
        print("build_deb: dpkg-deb is missing (apt-get install dpkg)", file=sys.stderr)
        return 2
    if not os.access(args.wheel, os.R_OK):
        print(f"build_deb: {args.wheel}: cannot read the wheel", file=sys.stderr)
        return 2
    deb = build(args.wheel, args.out, python=args.python, find_links=args.find_links,
                offline=args.offline)
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
