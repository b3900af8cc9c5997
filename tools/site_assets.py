"""The scripts and fonts the course site bundles, so that it needs no network when opened:
KaTeX (formulas) and lunr.js (search), fetched from the npm registry at pinned versions.

    python tools/site_assets.py     # fetch them into build/site-assets/ (the build does it too)

``npm pack NAME@VERSION`` fetches each package's tarball (npm is the registry's own client);
its SHA-512 must equal the integrity pinned below, the one the registry publishes, so a
rebuild bundles the same bytes. The tarballs are kept in build/site-assets/: once fetched, the
site builds offline. Only the files the pages use are copied into the site, with each
package's license.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from course import ROOT

CACHE = ROOT / "build" / "site-assets"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # the registry's dist.integrity: "sha512-" + base64 of the tarball's digest
    files: dict[str, str]  # path in the tarball (under package/) -> path under _static/
    folders: dict[str, str]  # a folder in the tarball -> folder under _static/ (every file)

    @property
    def tarball(self) -> str:
        return f"{self.name}-{self.version}.tgz"


KATEX = Package(
    name="katex",
    version="0.19.1",
    integrity="sha512-jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRhKvr5614uRrEfA==",
    files={
        "dist/katex.min.js": "katex/katex.min.js",
        "dist/katex.min.css": "katex/katex.min.css",
        "dist/contrib/auto-render.min.js": "katex/auto-render.min.js",
        "LICENSE": "katex/LICENSE",
    },
    folders={"dist/fonts": "katex/fonts"},  # katex.min.css loads them from fonts/ beside it
)
LUNR = Package(
    name="lunr",
    version="2.3.9",
    integrity="sha512-zTU3DaZaF3Rt9rhN3uBMGQD3dD2/vFQqnvZCDv4dl5iOzq2IZQqTxu90r4E5J+nP70J3ilqVCrbho2eWaeW8Ow==",
    files={"lunr.min.js": "lunr/lunr.min.js", "LICENSE": "lunr/LICENSE"},
    folders={},
)
PACKAGES = (KATEX, LUNR)


def integrity_of(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(package: Package, cache: Path = CACHE) -> Path:
    """The package's tarball in ``cache``, fetched with npm if it is not there yet; raises
    if its digest is not the pinned one."""
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / package.tarball
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(
                f"building the site needs {package.name} {package.version} from the npm "
                f"registry, and npm is not installed: install Node.js and npm (Debian: apt-get "
                f"install npm), or put {package.tarball} into {cache}"
            )
        done = subprocess.run(
            [npm, "pack", "--silent", f"{package.name}@{package.version}",
             "--pack-destination", str(cache)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0 or not tarball.exists():
            raise RuntimeError(
                f"npm pack {package.name}@{package.version} failed (is the npm registry "
                f"reachable?): {done.stderr.strip()[-500:]}"
            )
    found = integrity_of(tarball)
    if found != package.integrity:
        raise RuntimeError(
            f"{tarball} has integrity {found}, not the pinned {package.integrity}: delete it "
            f"and build again, or update the pin in tools/site_assets.py after checking why"
        )
    return tarball


def install(static: Path, cache: Path = CACHE) -> list[Path]:
    """Copy what the pages use from each package into ``static``; return the files written."""
    written = []
    for package in PACKAGES:
        with tarfile.open(fetch(package, cache)) as archive:
            members = {m.name.removeprefix("package/"): m for m in archive.getmembers()}
            wanted = dict(package.files)
            for folder, target in package.folders.items():
                for name, member in members.items():
                    if member.isfile() and name.startswith(folder + "/"):
                        wanted[name] = target + name[len(folder) :]
            for name, target in sorted(wanted.items()):
                if name not in members:
                    raise RuntimeError(f"{package.tarball} has no {name}")
                path = static / target
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.extractfile(members[name]).read())
                written.append(path)
    return written


def main() -> int:
    for package in PACKAGES:
        print(f"{package.name} {package.version}: {fetch(package)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
