"""Print an nbgitpuller link: opening it on a JupyterHub pulls the course into the learner's
home (cloned the first time, merged after that) and opens a notebook in JupyterLab.

    python tools/hub_link.py https://hub.example.edu
    python tools/hub_link.py https://hub.example.edu --notebook 01_autograd_accumulates.ipynb

The hub needs nbgitpuller installed, and the packages of requirements.txt in its image.
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlencode, urlparse

from course import BRANCH, NOTEBOOKS, repository_url


def hub_link(hub: str, notebook: str = "00_setup_check.ipynb", repo: str | None = None) -> str:
    """The nbgitpuller link for ``hub`` that opens ``notebook`` of the course."""
    parsed = urlparse(hub)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"hub must be the hub's address, like https://hub.example.edu; got {hub!r}"
        )
    if not (NOTEBOOKS / notebook).exists():
        raise ValueError(f"no notebook named {notebook!r} in notebooks/")
    repo = repo or repository_url()
    folder = repo.rstrip("/").rsplit("/", 1)[-1]
    query = urlencode(
        {"repo": repo, "branch": BRANCH, "urlpath": f"lab/tree/{folder}/notebooks/{notebook}"}
    )
    return f"{hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("hub", help="the JupyterHub's address, e.g. https://hub.example.edu")
    parser.add_argument("--notebook", default="00_setup_check.ipynb", help="the one to open")
    parser.add_argument("--repo", help="another copy of the course (default: pyproject's URL)")
    args = parser.parse_args(argv)
    try:
        print(hub_link(args.hub, args.notebook, args.repo))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
