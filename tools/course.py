"""Course metadata derived from pyproject.toml: the repository URL (its one home), the release, what every
notebook's (and the README's) Colab badge and install line must say, and the release procedure.

    python tools/course.py check                    # exit 1 if a badge or install line disagrees
    python tools/course.py sync                     # rewrite them from pyproject.toml
    python tools/course.py release 0.2.0 --dry-run  # what a release would change, without changing it
    python tools/course.py release 0.2.0            # set the version, point badges and installs at v0.2.0,
                                                    # commit and tag locally; prints the `git push` commands

Badges and install lines point at ``[tool.gpulab] colab-ref`` of pyproject.toml: the ``main`` branch until a
release is tagged, then the release's tag ``vX.Y.Z``, which ``release`` sets together with ``__version__``.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
INIT = ROOT / "gpulab" / "__init__.py"
PYPROJECT = ROOT / "pyproject.toml"
# "python3" is the name Colab recognises; `make install` registers the course kernel (its environment: quiet logs)
# under that name inside the course venv, where it takes the place of the plain one.
KERNEL = {"name": "python3", "display_name": "Python 3 (gpulab)", "language": "python"}
# Colab opens the notebook on a GPU runtime (a T4 is the one free tier offers).
COLAB = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}
# The branch the badges and install lines name until a release is tagged.
BRANCH = "main"
# A release version: MAJOR.MINOR.PATCH, optionally a pre-release (0.2.0rc1, 0.2.0b2, 0.2.0a1).
VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)((a|b|rc)(0|[1-9]\d*))?")


def _pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


def repo_url() -> str:
    """``project.urls.Source`` from pyproject.toml, e.g. https://github.com/OWNER/NAME."""
    return _pyproject()["project"]["urls"]["Source"].rstrip("/")


def version() -> str:
    return re.search(r'^__version__ = "([^"]+)"', INIT.read_text(), re.M).group(1)


def release_tag() -> str:
    """The git tag of this version's release, e.g. ``v0.2.0`` (it exists once ``release`` made it)."""
    return f"v{version()}"


def ref() -> str:
    """What badges and install lines point at: ``[tool.gpulab] colab-ref``, the branch or this release's tag."""
    return _pyproject()["tool"]["gpulab"]["colab-ref"]


def colab_url(notebook: str, at: str | None = None) -> str:
    """The notebook on Colab, from ``at`` (a branch or tag; default: ``ref()``)."""
    owner_repo = repo_url().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{at or ref()}/notebooks/{notebook}"


def badge(notebook: str, at: str | None = None) -> str:
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook, at)})"


def install_line(at: str | None = None) -> str:
    """The Colab install: gpulab only, from the branch or release the badges name; Colab's own torch/TF untouched."""
    return f'%pip install -q "gpulab @ git+{repo_url()}@{at or ref()}"'


_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
_README_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*/notebooks/([^)/]+\.ipynb)\)")
_INSTALL = re.compile(r'%pip install -q "gpulab @ git\+[^"]*"')


LEDGER = ROOT / "tests" / "gpu" / "runs"
_TABLE_HEAD = "| # | notebook | what you learn | CPU run time* |"
_LESSON_ROW = re.compile(r"^\| ([0-9A-Z][0-9]) \| ")
GPU_COLUMN = "last GPU run†"


def gpu_runs() -> dict[str, dict[str, dict]]:
    """Per lesson prefix, per profile: its last GPU run in the ledger (``tests/gpu/runs``)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gpulab.preflight.ledger import last_runs, read_ledger

    return last_runs(read_ledger(LEDGER))


def gpu_run_cell(runs: dict[str, dict] | None) -> str:
    """The README's "last GPU run" of one lesson, from the ledger: GPU, date, status and time per profile."""
    if not runs:
        return "not yet run on a GPU"
    parts = []
    for profile in sorted(runs, key=lambda p: (p != "native", p)):
        r = runs[profile]
        gpu = r["gpu"].removeprefix("NVIDIA ")
        what = f"{r['status']}" + (f", {r['seconds']:.0f} s" if r["seconds"] else "")
        where = gpu if profile == "native" else f"{profile.upper()} rehearsal on {gpu}"
        at = f" ({r['commit'][:7]}{', with changes' if r.get('dirty') else ''})" if r.get("commit") else ""
        parts.append(f"{where}, {r['date']}{at}: {what}")
    return "; ".join(parts)


def readme_with_gpu_runs(text: str, runs: dict[str, dict[str, dict]] | None = None) -> str:
    """The README with its lesson table's "last GPU run" column rendered from the ledger."""
    runs = gpu_runs() if runs is None else runs
    out = []
    for line in text.split("\n"):
        cells = [c.strip() for c in line.strip()[1:-1].split(" | ")] if line.startswith("| ") else []
        if line.startswith(_TABLE_HEAD):
            cells = ["#", "notebook", "what you learn", "CPU run time*", GPU_COLUMN, "Colab"]
        elif line.startswith("|---|---|---|---|---|") and out and out[-1].startswith(_TABLE_HEAD):
            cells = ["---"] * 6
        elif _LESSON_ROW.match(line) and len(cells) in (5, 6):
            cells = cells[:4] + [gpu_run_cell(runs.get(cells[0]))] + cells[-1:]
        else:
            out.append(line)
            continue
        out.append("| " + " | ".join(cells) + " |" if cells[0] != "---" else "|" + "---|" * 6)
    return "\n".join(out)


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
    ids = [c.get("id") for c in cells]
    if None in ids or len(set(ids)) != len(ids):
        out.append(f"{path.name}: every cell needs an id of its own (nbformat 4.5; the tests find cells by id): "
                   f"cells {[i for i, v in enumerate(ids) if v is None or ids.count(v) > 1]}")
    return out


def readme_problems(path: Path = README) -> list[str]:
    """The README's badges (one per lesson, each naming its notebook) and Colab install line."""
    text = path.read_text()
    out = [f"{path.name}: badge {m.group(0)} should be {badge(m.group(1))}"
           for m in _README_BADGE.finditer(text) if m.group(0) != badge(m.group(1))]
    if readme_with_gpu_runs(text) != text:
        out.append(f"{path.name}: the lesson table's {GPU_COLUMN!r} column differs from the ledger of GPU runs "
                   f"(tests/gpu/runs): python tools/course.py sync")
    lines = _INSTALL.findall(text)
    if not lines:
        out.append(f"{path.name}: no Colab install line {install_line()}")
    out += [f"{path.name}: install line {line} should be {install_line()}" for line in lines if line != install_line()]
    return out


def ref_problems() -> list[str]:
    """``colab-ref`` names the branch, or this version's release tag (never another version's)."""
    if ref() in (BRANCH, release_tag()):
        return []
    return [f"pyproject.toml: [tool.gpulab] colab-ref = {ref()!r} is neither {BRANCH!r} nor this version's tag "
            f"{release_tag()!r}"]


def sync_text(text: str, notebook: str | None, at: str | None = None) -> str:
    """``text`` with its badges and install lines pointing at ``at`` (default: ``ref()``); ``notebook`` names the
    badge's notebook, or None to read it from each badge's own link (the README)."""
    if notebook is None:
        text = _README_BADGE.sub(lambda m: badge(m.group(1), at), text)
    else:
        text = _BADGE.sub(badge(notebook, at), text)
    return _INSTALL.sub(install_line(at), text)


def synced_notebook(path: Path, at: str | None = None) -> str:
    """The notebook's JSON text with badge, install line, kernel and Colab metadata as pyproject.toml says."""
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        text = "".join(c.get("source", []))
        new = sync_text(text, path.name, at)
        if new != text:
            c["source"] = new.splitlines(keepends=True)
    meta = nb.setdefault("metadata", {})
    meta["kernelspec"] = KERNEL
    meta["accelerator"] = COLAB["accelerator"]
    meta["colab"] = {**meta.get("colab", {}), **COLAB["colab"]}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def sync(path: Path) -> bool:
    """Rewrite one notebook (or the README) in place; True when it changed."""
    old = path.read_text()
    new = synced_notebook(path) if path.suffix == ".ipynb" else readme_with_gpu_runs(sync_text(old, None))
    if new != old:
        path.write_text(new)
    return new != old


def _git(*args: str, check: bool = True) -> str:
    p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SystemExit(f"release: git {' '.join(args)} failed: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def _key(v: str) -> tuple:
    m = VERSION.fullmatch(v)
    if m is None:
        return (-1,)
    major, minor, patch, _, kind, n = m.groups()
    pre = ({"a": 0, "b": 1, "rc": 2}[kind], int(n)) if kind else (3, 0)   # 0.2.0rc1 < 0.2.0
    return (int(major), int(minor), int(patch), *pre)


def _excerpt(old: str, new: str, width: int = 36) -> str:
    """Where two lines differ: ``…before|old…`` -> ``…before|new…``."""
    i = next((k for k, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
    cut = lambda s: ("…" if i > width else "") + s[max(0, i - width):i + width].strip() + ("…" if len(s) > i + width else "")
    return f"{cut(old)} -> {cut(new)}"


def release_changes(new_version: str) -> dict[Path, str]:
    """Every file a release of ``new_version`` rewrites, with its new text (nothing written). Raises ValueError on a
    version that is malformed or not newer than the current one."""
    if not isinstance(new_version, str) or VERSION.fullmatch(new_version) is None:
        raise ValueError(f"version={new_version!r} is not a release version: give MAJOR.MINOR.PATCH such as 0.2.0 "
                         "(optionally with a pre-release suffix: 0.2.0rc1), without a leading 'v'")
    old = version()
    if _key(new_version) <= _key(old):
        raise ValueError(f"version={new_version!r} is not newer than the current version {old!r}")
    tag = f"v{new_version}"
    init = INIT.read_text()
    new_init = re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{new_version}"', init, count=1, flags=re.M)
    # the docstring's example prints the version
    new_init = new_init.replace(f">>> gl.__version__\n    '{old}'", f">>> gl.__version__\n    '{new_version}'")
    pyproject = PYPROJECT.read_text()
    new_pyproject, n = re.subn(r'^colab-ref = "[^"]*"', f'colab-ref = "{tag}"', pyproject, count=1, flags=re.M)
    if n != 1:
        raise ValueError("pyproject.toml has no `colab-ref = ...` line under [tool.gpulab]")
    changes = {INIT: new_init, PYPROJECT: new_pyproject}
    for path in [*sorted(NOTEBOOKS.glob("*.ipynb")), README]:
        changes[path] = synced_notebook(path, tag) if path.suffix == ".ipynb" else sync_text(path.read_text(), None, tag)
    return {p: text for p, text in changes.items() if text != p.read_text()}


def release(new_version: str, dry_run: bool = False) -> int:
    """Set the version, point every badge and install line at its tag, commit, and tag locally."""
    try:
        changes = release_changes(new_version)
    except ValueError as e:
        print(f"release: {e}", file=sys.stderr)
        return 2
    tag = f"v{new_version}"
    if _git("tag", "--list", tag).strip():
        print(f"release: the tag {tag} exists already", file=sys.stderr)
        return 2
    dirty = _git("status", "--porcelain", "--untracked-files=no").strip()
    if dirty and not dry_run:
        print(f"release: the working tree has uncommitted changes; commit or drop them first:\n{dirty}",
              file=sys.stderr)
        return 2
    names = [str(p.relative_to(ROOT)) for p in changes]
    print(f"release {tag}: {'would change' if dry_run else 'changing'} {len(names)} files")
    for p, text in changes.items():
        diff = [(a, b) for a, b in zip(p.read_text().splitlines(), text.splitlines()) if a != b]
        print(f"  {p.relative_to(ROOT)}: {len(diff)} line{'s' * (len(diff) != 1)}, e.g. {_excerpt(*diff[0]) if diff else 'lines added or removed'}")
    if dry_run:
        print(f"then: git commit -m 'Release {tag}' && git tag -a {tag}" + ("\n(the working tree has uncommitted "
              "changes: a real release refuses to start)" if dirty else ""))
        return 0
    originals = {p: p.read_text() for p in changes}
    for p, text in changes.items():
        p.write_text(text)
    found = [msg for p in sorted(NOTEBOOKS.glob("*.ipynb")) for msg in problems(p)] + readme_problems() + ref_problems()
    if found:
        for p, text in originals.items():
            p.write_text(text)
        print("release: after rewriting, the check still fails (nothing committed):\n" + "\n".join(found),
              file=sys.stderr)
        return 1
    _git("add", "--", *names)
    _git("commit", "-q", "-m", f"Release {tag}")
    _git("tag", "-a", tag, "-m", f"gpulab {new_version}")
    branch = _git("rev-parse", "--abbrev-ref", "HEAD").strip()
    print(f"committed and tagged {tag} ({_git('rev-parse', '--short', 'HEAD').strip()}). To publish:\n"
          f"  git push origin {branch}\n  git push origin {tag}")
    return 0


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "check"
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if cmd == "sync":
        changed = [p.name for p in [*paths, README] if sync(p)]
        print(f"rewrote {', '.join(changed)}" if changed else f"{len(paths)} notebooks and README.md already agree")
        return 0
    if cmd == "check":
        found = [msg for p in paths for msg in problems(p)] + readme_problems() + ref_problems()
        print("\n".join(found) or f"{len(paths)} notebooks and README.md agree with pyproject.toml")
        return 1 if found else 0
    if cmd == "release":
        rest = [a for a in argv[2:] if a != "--dry-run"]
        if len(rest) != 1:
            print("usage: python tools/course.py release X.Y.Z [--dry-run]", file=sys.stderr)
            return 2
        return release(rest[0], dry_run="--dry-run" in argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
