"""The PyTorch surface gpulab calls, read statically from its source, checked against the installed torch.

Every ``torch.…`` / ``torchvision.…`` attribute chain in ``gpulab/`` (through ``import torch``,
``import torch.nn.functional as F``, ``from torch import nn``, ``from torch.x import Y``) must exist in the
installed release. ``make unit`` checks it against the pinned torch; ``make compat`` runs the same test
against the floor in pyproject.toml's ``torch`` extra (requirements/compat.txt), so a call newer than the
floor fails there with the file:line that makes it. A newer API stays usable when the code guards it:
``getattr(mod, "name", fallback)`` / ``hasattr`` are optional uses, listed here but never required.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "gpulab").rglob("*.py"))
ROOTS = ("torch", "torchvision")

# Parameters through which a module is injected (tests pass a fake): the name stands for that module.
INJECTED = {"gpulab/memory/cuda.py": {"cuda": "torch.cuda"}, "gpulab/profiling/nsight.py": {"cuda": "torch.cuda"}}

# Modules that import a third-party package gpulab treats as optional: the chain is checked only when
# that package is installed.
NEEDS = {"torch.utils.tensorboard": "tensorboard"}

# Attributes gpulab reads off profiler results by name (getattr with a default, in gpulab/profiling/):
# with the default they never fail, so their presence is checked on a real profile below. A name that
# a release lacks makes gpulab silently report nothing, which is what this catches.
PROFILER_AVG_ATTRS = ("key", "count", "self_cpu_time_total", "cpu_time_total", "self_cpu_memory_usage",
                      "is_user_annotation", "device_type")
# Renamed in torch 2.4 (cuda -> device); gpulab reads the new names, so the floor must have them.
PROFILER_DEVICE_ATTRS = ("self_device_time_total", "device_time_total", "self_device_memory_usage")


@dataclass(frozen=True)
class Use:
    chain: str          # e.g. "torch.cuda.mem_get_info"
    where: str          # "gpulab/memory/peak.py:49"
    optional: bool      # read through getattr(..., default) / hasattr: guarded by the code itself


def _aliases(tree: ast.AST, rel: str) -> dict[str, str]:
    """Local name -> the dotted torch path it stands for, from every import in the file."""
    out: dict[str, str] = {}

    def bind(name: str, target: str, line: int) -> None:
        if out.get(name, target) != target:
            raise AssertionError(f"{rel}:{line}: {name!r} is bound to both {out[name]} and {target}; "
                                 "the surface scan needs one meaning per name in a file")
        out[name] = target

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in ROOTS:
                    bind(a.asname or top, a.name if a.asname else top, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in ROOTS:
                for a in node.names:
                    bind(a.asname or a.name, f"{node.module}.{a.name}", node.lineno)
    for name, target in INJECTED.get(rel, {}).items():
        bind(name, target, 0)
    # `dist = torch.distributed`: a local name for a module path (names assigned two meanings are dropped)
    assigned: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            parts = _chain(node.value) if isinstance(node.value, ast.Attribute) else None
            if parts and parts[0] in out and node.targets[0].id not in out:
                assigned.setdefault(node.targets[0].id, set()).add(".".join([out[parts[0]], *parts[1:]]))
    out.update({k: v.pop() for k, v in assigned.items() if len(v) == 1})
    return out


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the base is not a plain name (a call, a subscript…)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def scan(path: Path) -> list[Use]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    names = _aliases(tree, rel)
    uses: list[Use] = []
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

    def resolve(parts: list[str] | None) -> str | None:
        if not parts or parts[0] not in names:
            return None
        return ".".join([names[parts[0]], *parts[1:]])

    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in ROOTS:
            uses += [Use(f"{node.module}.{a.name}", where, False) for a in node.names]
        elif isinstance(node, ast.Import):
            uses += [Use(a.name, where, False) for a in node.names if a.name.split(".")[0] in ROOTS]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            chain = resolve(_chain(node))
            if chain:
                uses.append(Use(chain, where, False))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = resolve(_chain(node.args[0]))
            if base:
                guarded = node.func.id == "hasattr" or len(node.args) == 3
                uses.append(Use(f"{base}.{node.args[1].value}", where, guarded))
    return uses


def all_uses() -> list[Use]:
    uses = {u for p in SOURCES for u in scan(p)}
    return sorted(uses, key=lambda u: (u.chain, u.where))


class Missing(Exception):
    pass


def lookup(chain: str) -> object:
    """The object ``chain`` names in the installed packages, importing its longest module prefix."""
    parts = chain.split(".")
    for prefix, package in NEEDS.items():
        if (chain + ".").startswith(prefix + ".") and importlib.util.find_spec(package) is None:
            pytest.skip(f"{chain} needs {package}, not installed here")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] not in ROOTS:
                pytest.skip(f"{chain}: importing {name} needs {e.name}, not installed here")
            continue
        break
    else:
        raise Missing(f"no module {parts[0]}")
    for j, attr in enumerate(parts[i:], start=i):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            raise Missing(f"{'.'.join(parts[:j])} has no attribute {attr!r}") from None
    return obj


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


USES = all_uses()
REQUIRED = sorted({u.chain for u in USES if not u.optional})


def test_the_scan_finds_the_calls_it_should():
    chains = {u.chain for u in USES}
    # a plain attribute, an aliased module (F), a from-import, a from-imported submodule (nn), a getattr guard
    for expected in ("torch.cuda.is_available", "torch.nn.functional.cross_entropy",
                     "torch.utils.flop_counter.FlopCounterMode", "torch.nn.Linear",
                     "torch.amp.GradScaler", "torch.distributed.is_available",
                     "torch.cuda.memory._record_memory_history", "torch.backends.mps"):
        assert expected in chains, f"the scan missed {expected}"
    assert not any(u.chain.startswith("torch.org") for u in USES), "strings and comments are not code"
    assert len(REQUIRED) > 80


@pytest.mark.parametrize("chain", REQUIRED)
def test_gpulab_calls_exist_in_installed_torch(chain):
    pytest.importorskip(chain.split(".")[0])
    if chain.startswith("torch.distributed.") and not lookup("torch.distributed").is_available():
        pytest.skip("this torch build has no torch.distributed")
    try:
        lookup(chain)
    except Missing as e:
        import torch

        where = ", ".join(u.where for u in USES if u.chain == chain and not u.optional)
        pytest.fail(f"{where} uses {chain}, which torch {torch.__version__} lacks ({e}). Raise the floor in "
                    "pyproject.toml's torch extra, or guard the call (getattr with a fallback).")


def _floor(name: str) -> str:
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(rf'"{name}>=([0-9.]+)"', text)
    assert m, f"pyproject.toml's torch extra has no {name}>= floor"
    return m.group(1)


def test_compat_requirements_pin_the_floor():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (ROOT / "requirements/compat.txt").read_text(), re.M))
    for name in ("torch", "torchvision"):
        floor = _floor(name)
        assert pins.get(name, "").startswith(floor), \
            f"requirements/compat.txt pins {name}=={pins.get(name)}, pyproject.toml's floor is {name}>={floor}"
    heavy = {"tensorflow", "tensorflow-cpu", "jupyterlab", "nvidia-dali-cuda120", "mlflow", "onnxruntime", "playwright"}
    assert not heavy & set(pins), f"compat stays lean: {sorted(heavy & set(pins))}"
    assert {"nbval", "ipykernel"} <= set(pins), "make compat runs the notebooks on the floor: it needs their runner"


def test_compat_pins_match_the_course_stack_except_torch():
    def pins(name):
        return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (ROOT / "requirements" / name).read_text(), re.M))

    course, compat = pins("course.txt"), pins("compat.txt")
    differ = {k: (v, course.get(k)) for k, v in compat.items()
              if k not in ("torch", "torchvision") and course.get(k) != v}
    assert not differ, f"requirements/compat.txt pins differ from course.txt (compat, course): {differ}"


def test_torchrun_accepts_the_command_lines_gpulab_builds():
    """gpulab.distributed passes options to torchrun: the installed torch's own parser must know them all
    (an option it does not know is taken as the script to run, and every rank fails)."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    from torch.distributed.run import get_args_parser

    from gpulab.distributed import torchrun_command

    cases = [("train.py", dict(nproc=2)),
             ("gpulab.course.scripts.ddp_train", dict(nproc=2, log_dir="/tmp/logs", module=True)),
             ("train.py", dict(nproc=1, nnodes=2, rdzv_endpoint="127.0.0.1:29400", rdzv_id="x",
                               rdzv_conf="is_host=0", log_dir="/tmp/logs"))]
    for target, kw in cases:
        cmd = torchrun_command(target, ["--steps", "5"], python="python", check_script=False, **kw)
        assert cmd[1:3] == ["-m", "torch.distributed.run"]
        ns = get_args_parser().parse_args(cmd[3:])
        assert ns.training_script == target and ns.training_script_args == ["--steps", "5"], (
            f"torch {torch.__version__}'s torchrun does not know an option in "
            f"{cmd[3:]}: it took {ns.training_script!r} as the script (gpulab/distributed/torchrun.py torchrun_command)")


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:2])


def test_installed_torch_is_not_below_the_floor():
    torch = pytest.importorskip("torch")
    assert _version(torch.__version__) >= _version(_floor("torch")), \
        f"torch {torch.__version__} is older than pyproject.toml's floor {_floor('torch')}"


def test_profiler_results_have_the_attributes_gpulab_reads():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("gpulab-probe"):
            torch.ones(8, 8) @ torch.ones(8, 8)
    avgs = list(prof.key_averages())
    assert avgs
    for attr in PROFILER_AVG_ATTRS + PROFILER_DEVICE_ATTRS:
        missing = [a.key for a in avgs if not hasattr(a, attr)]
        assert not missing, (f"gpulab/profiling/ reads {attr!r} off profiler averages; torch "
                             f"{torch.__version__} lacks it")
    events = list(prof.events())
    for attr in ("name", "time_range", "device_type", "is_user_annotation"):
        assert all(hasattr(e, attr) for e in events), \
            f"gpulab/profiling/ reads {attr!r} off profiler events; torch {torch.__version__} lacks it"


if __name__ == "__main__":  # python tests/project/test_torch_surface.py: print the surface
    for u in USES:
        print(f"{u.chain:70s} {u.where}{'  (guarded)' if u.optional else ''}", file=sys.stdout)
