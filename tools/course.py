"""Course metadata derived from pyproject.toml: the repository URL (its one home), the release,
and what every notebook's Colab badge and install line must say.

    python tools/course.py check   # exit 1 if a notebook's badge or install line disagrees
    python tools/course.py sync    # rewrite them from pyproject.toml (after a release bump)
"""
from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# "python3" is the name Colab recognises; `make install` registers the course kernel (its environment: quiet logs)
# under that name inside the course venv, where it takes the place of the plain one.
KERNEL = {"name": "python3", "display_name": "Python 3 (gpulab)", "language": "python"}
# Colab opens the notebook on a GPU runtime (a T4 is the one free tier offers).
COLAB = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


def repo_url() -> str:
    """``project.urls.Repository`` from pyproject.toml, e.g. https://github.com/OWNER/NAME."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["urls"]["Repository"].rstrip("/")


def version() -> str:
    text = (ROOT / "gpulab" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def release_tag() -> str:
    return f"v{version()}"


def colab_url(notebook: str) -> str:
    owner_repo = repo_url().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{release_tag()}/notebooks/{notebook}"


def badge(notebook: str) -> str:
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"


def install_line() -> str:
    """The pinned install: this release of gpulab only, Colab's own torch/TF untouched."""
    return f'%pip install -q "gpulab @ git+{repo_url()}@{release_tag()}"'


_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
_INSTALL = re.compile(r'%pip install -q "gpulab @ git\+[^"]*"')


def problems(path: Path) -> list[str]:
    """What is wrong with one notebook's badge, install line, kernel and stored outputs."""
    nb = json.loads(path.read_text())
    out = []
    cells = nb.get("cells", [])
    src = lambda c: "".join(c.get("source", []))
    if not cells or badge(path.name) not in src(cells[0]):
        out.append(f"{path.name}: first cell lacks the badge {badge(path.name)}")
    if not any(install_line() in src(c) for c in cells if c["cell_type"] == "code"):
        out.append(f"{path.name}: no setup cell with {install_line()}")
    meta = nb.get("metadata", {})
    if meta.get("kernelspec", {}).get("name") != KERNEL["name"]:
        out.append(f"{path.name}: kernelspec is not the course kernel {KERNEL['name']!r}")
    if meta.get("accelerator") != COLAB["accelerator"] or meta.get("colab", {}).get("gpuType") != COLAB["colab"]["gpuType"]:
        out.append(f"{path.name}: metadata does not open a GPU runtime on Colab ({COLAB})")
    if any(c.get("outputs") or c.get("execution_count") for c in cells if c["cell_type"] == "code"):
        out.append(f"{path.name}: has stored outputs (clear them before committing)")
    return out


def sync(path: Path) -> None:
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        text = "".join(c.get("source", []))
        new = _BADGE.sub(badge(path.name), text)
        new = _INSTALL.sub(install_line(), new)
        if new != text:
            c["source"] = new.splitlines(keepends=True)
    meta = nb.setdefault("metadata", {})
    meta["kernelspec"] = KERNEL
    meta["accelerator"] = COLAB["accelerator"]
    meta["colab"] = {**meta.get("colab", {}), **COLAB["colab"]}
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "check"
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if cmd == "sync":
        for p in paths:
            sync(p)
        return 0
    if cmd == "check":
        found = [msg for p in paths for msg in problems(p)]
        print("\n".join(found) or f"{len(paths)} notebooks agree with pyproject.toml")
        return 1 if found else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
