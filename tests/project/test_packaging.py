"""The release files `make dist` builds: the sdist and the wheel built from it hold the library, its license and
every file it reads at run time, and nothing of the course around it; the wheel installed into a fresh venv works
on its own (imported from that venv, never from this checkout)."""
from __future__ import annotations

import email
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = re.search(r'^__version__ = "([^"]+)"', (ROOT / "gpulab" / "__init__.py").read_text(), re.M).group(1)
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}


def _setuptools_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        return tuple(int(x) for x in re.findall(r"\d+", version("setuptools"))[:2])
    except Exception:
        return (0,)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """What `make dist` makes (python -m build: the sdist, then the wheel from the unpacked sdist), in a temporary
    folder. Built without isolation, so offline, with this environment's setuptools."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package (requirements/course.txt) is not installed")
    if _setuptools_version() < (77,):
        pytest.skip("building gpulab needs setuptools>=77 (its SPDX license field)")
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=300, env=ENV)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("gpulab-*.whl")
    return wheel


def _library_files() -> set[str]:
    """Every file of gpulab/ in this checkout that git keeps (or would keep: new and not ignored)."""
    p = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "gpulab"], cwd=ROOT,
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("not a git checkout: cannot list the library's files")
    return {f for f in p.stdout.splitlines() if (ROOT / f).is_file()}


def test_build_requirements_read_the_spdx_license():
    assert PYPROJECT["project"]["license"] == "MIT" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]
    assert not [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("License ::")]
    assert "Copyright (c) 2026 gpulab contributors" in (ROOT / "LICENSE").read_text()
    assert set(PYPROJECT["project"]["urls"]) >= {"Homepage", "Documentation", "Issues", "Source"}


def test_make_dist_builds_sdist_and_wheel_and_clean_removes_them():
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^dist:.*\n((?:\t.*\n)+)", make, re.M).group(1)
    assert "-m build --outdir dist" in recipe
    assert re.search(r"^clean:.*\n\trm -rf .*\bdist\b", make, re.M)
    assert "dist/" in (ROOT / ".gitignore").read_text().split()
    assert re.search(r"^build==\d", (ROOT / "requirements" / "course.txt").read_text(), re.M)


def test_wheel_holds_the_library_its_license_and_nothing_else(dist):
    with zipfile.ZipFile(_wheel(dist)) as z:
        names = set(z.namelist())
        info = f"gpulab-{VERSION}.dist-info"
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        license_text = z.read(f"{info}/licenses/LICENSE").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"gpulab", info}, "only the library: no tests, notebooks or tools"
    missing = sorted(_library_files() - names)
    assert not missing, f"files of gpulab/ left out of the wheel (add them to package-data): {missing}"
    assert "gpulab/py.typed" in names and "gpulab/course/scripts/ddp_train.py" in names
    assert not [n for n in names if "__pycache__" in n or ".ruff_cache" in n or n.endswith(".pyc")]
    assert meta["Version"] == VERSION and meta["Name"] == "gpulab"
    assert meta["License-Expression"] == "MIT" and meta.get_all("License-File") == ["LICENSE"]
    assert license_text == (ROOT / "LICENSE").read_text()
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]
    assert "Programming Language :: Python :: 3.12" in meta.get_all("Classifier")
    assert meta["Requires-Python"] == ">=3.10"
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Documentation", "Issues", "Source"}
    assert "gpulab = gpulab.__main__:main" in entry_points


def test_sdist_holds_what_builds_the_wheel_and_no_course(dist):
    (sdist,) = dist.glob("gpulab-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "gpulab/py.typed", "gpulab/__init__.py"} <= names
    assert not [n for n in names if n.split("/")[0] in ("tests", "notebooks", "tools", ".ci")]


SMOKE = textwrap.dedent("""
    import json, os, subprocess, sys
    from importlib import metadata
    from pathlib import Path
    import gpulab as gl
    from gpulab import course
    venv = Path(sys.prefix).resolve()
    here = Path(gl.__file__).resolve()
    assert venv in here.parents, f"gpulab imported from {here}, not from the venv {venv}"
    scripts = {name: course.scripts.path(name) for name in ("ddp_train", "profile_train")}
    assert all(venv in Path(p).resolve().parents and Path(p).is_file() for p in scripts.values()), scripts
    assert (here.parent / "py.typed").is_file()
    fig = gl.published("amp-pytorch")
    print(json.dumps({"version": gl.__version__, "dist": metadata.version("gpulab"),
                      "license": metadata.metadata("gpulab")["License-Expression"], "figure": repr(fig)[:80]}))
""")


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_works_on_its_own(dist, tmp_path):
    """A venv without the checkout: the wheel installed offline (--no-index --no-deps); its dependencies come from
    this environment's site-packages, appended after the venv's own by a .pth file, so gpulab itself must come from
    the wheel, with every file it reads."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=ENV)
    py = venv / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(_wheel(dist))],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert inst.returncode == 0, inst.stderr[-3000:]
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, env=ENV).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "zz_dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    work = tmp_path / "elsewhere"   # not the checkout: `import gpulab` must not find ./gpulab
    work.mkdir()
    out = subprocess.run([str(py), "-c", SMOKE], capture_output=True, text=True, timeout=120, cwd=work, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["version"] == found["dist"] == VERSION and found["license"] == "MIT"
    helped = subprocess.run([str(py), "-m", "gpulab", "--help"], capture_output=True, text=True, timeout=60,
                            cwd=work, env=ENV)
    assert helped.returncode == 0 and "doctor" in helped.stdout, helped.stderr
    script = venv / "bin" / "gpulab"
    assert script.is_file(), "the wheel installs the `gpulab` console script"
    v = subprocess.run([str(script), "version"], capture_output=True, text=True, timeout=60, cwd=work, env=ENV)
    assert v.returncode == 0 and v.stdout.strip() == VERSION, v.stderr


# ---- the release command (python tools/course.py release X.Y.Z), always on a temporary clone ------------------
GIT_ENV = {**ENV, "GIT_AUTHOR_NAME": "gpulab tests", "GIT_AUTHOR_EMAIL": "tests@gpulab.invalid",
           "GIT_COMMITTER_NAME": "gpulab tests", "GIT_COMMITTER_EMAIL": "tests@gpulab.invalid",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
# what a release reads and rewrites, copied from this working tree so the clone releases what is here now
RELEASE_FILES = ["tools/course.py", "pyproject.toml", "README.md", "gpulab/__init__.py"]


def _git(repo: Path, *args: str) -> str:
    p = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=GIT_ENV, timeout=60)
    assert p.returncode == 0, f"git {' '.join(args)}: {p.stderr}"
    return p.stdout


@pytest.fixture
def clone(tmp_path) -> Path:
    """A clone of this repository whose release files and notebooks are this working tree's, committed."""
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True, env=GIT_ENV, timeout=120)
    for name in RELEASE_FILES + [str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb")]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes((ROOT / name).read_bytes())
    _git(repo, "add", "-A")
    if _git(repo, "status", "--porcelain").strip():
        _git(repo, "commit", "-q", "-m", "working tree")
    return repo


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "tools/course.py", "release", *args], cwd=repo, capture_output=True,
                          text=True, env=GIT_ENV, timeout=120)


def _next_version() -> str:
    major, minor = VERSION.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def test_release_sets_the_version_points_everything_at_the_tag_commits_and_tags(clone):
    new = _next_version()
    tag = f"v{new}"
    head = _git(clone, "rev-parse", "HEAD")
    dry = _release(clone, new, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "gpulab/__init__.py" in dry.stdout and "00_why_gpus.ipynb" in dry.stdout and "README.md" in dry.stdout
    assert _git(clone, "status", "--porcelain") == "" and _git(clone, "rev-parse", "HEAD") == head
    assert _git(clone, "tag", "--list", tag) == "", "--dry-run changes nothing"

    done = _release(clone, new)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"git push origin {tag}" in done.stdout and "git push origin " in done.stdout
    assert _git(clone, "status", "--porcelain") == "", "everything the release changed is committed"
    assert _git(clone, "cat-file", "-t", tag).strip() == "tag", "an annotated tag"
    assert _git(clone, "rev-parse", f"{tag}^{{commit}}") == _git(clone, "rev-parse", "HEAD")
    assert _git(clone, "log", "-1", "--format=%s").strip() == f"Release {tag}"
    assert _git(clone, "rev-parse", "HEAD~1") == head
    init = (clone / "gpulab" / "__init__.py").read_text()
    assert f'__version__ = "{new}"' in init and f"'{VERSION}'" not in init   # the docstring example too
    assert tomllib.loads((clone / "pyproject.toml").read_text())["tool"]["gpulab"]["colab-ref"] == tag
    url = PYPROJECT["project"]["urls"]["Source"]
    books = sorted((clone / "notebooks").glob("*.ipynb"))
    assert len(books) >= 14
    for path in books + [clone / "README.md"]:
        text = path.read_text()
        installs = re.findall(r'%pip install -q \\?"gpulab @ git\+([^"\\]*)', text)
        assert installs and set(installs) == {f"{url}@{tag}"}, (path.name, installs)
        blobs = re.findall(r"colab\.research\.google\.com/github/[^)\s]*/blob/([^/]+)/notebooks/", text)
        assert blobs and set(blobs) == {tag}, (path.name, blobs)
    check = subprocess.run([sys.executable, "tools/course.py", "check"], cwd=clone, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    again = _release(clone, new)
    assert again.returncode == 2 and "not newer" in again.stderr


@pytest.mark.parametrize("bad", ["v0.2.0", "0.2", "0.2.0.1", "latest", "0.2.0-beta", "00.2.0", VERSION, "0.0.1"])
def test_release_refuses_a_bad_version(clone, bad):
    head, tags = _git(clone, "rev-parse", "HEAD"), _git(clone, "tag", "--list")
    p = _release(clone, bad)
    assert p.returncode == 2 and f"version={bad!r}" in p.stderr, p.stderr
    assert _git(clone, "status", "--porcelain") == "" and _git(clone, "rev-parse", "HEAD") == head
    assert _git(clone, "tag", "--list") == tags


def test_release_refuses_uncommitted_changes_and_an_existing_tag(clone):
    new = _next_version()
    readme, tags = clone / "README.md", _git(clone, "tag", "--list")
    readme.write_text(readme.read_text() + "\nan edit not yet committed\n")
    p = _release(clone, new)
    assert p.returncode == 2 and "uncommitted" in p.stderr and "README.md" in p.stderr
    assert _git(clone, "tag", "--list") == tags
    _git(clone, "checkout", "-q", "--", "README.md")
    _git(clone, "tag", f"v{new}")
    p = _release(clone, new)
    assert p.returncode == 2 and f"v{new} exists already" in p.stderr
