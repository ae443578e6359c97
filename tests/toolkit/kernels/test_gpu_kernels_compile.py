"""Every GPU kernel the course ships, compiled for real GPUs on a machine without one.

On a CPU the lessons run their kernels in Triton's interpreter and Numba's CUDA simulator, which compile
nothing, so code that only a GPU compiler rejects would pass every other test. Here each kernel is compiled
ahead of time for compute capability 7.5 (T4), 8.0 (A100) and 9.0 (H100): Triton's kernels to PTX and a cubin
(``triton.compile``, with Triton's own ptxas), Numba's ``@cuda.jit`` kernels to PTX (NVVM) and then to a cubin
(a CUDA toolkit's ptxas), and the C++/CUDA extension's ``__global__`` kernels with ``nvcc -cubin``.

The kernels are read from the cells (and modules) that ship them, so the test compiles exactly what the learner
reads. Triton and Numba run in child processes without ``TRITON_INTERPRET`` and ``NUMBA_ENABLE_CUDASIM``, which
this test session sets for the interpreter and the simulator. A missing compiler (Triton, its ptxas, NVVM, nvcc)
skips with its name; a kernel that does not compile fails with the compiler's message.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CCS = (75, 80, 90)                     # T4, A100, H100

# What each kernel is compiled with: the constexpr values (and warps) the lesson launches it with. Pointer arguments
# (named *_ptr) are float32 tensors, the other runtime arguments 32-bit integers, as the lesson passes them, unless
# "pointers" (the tensors' type) or "types" (an argument's type) say otherwise.
TRITON_KERNELS = {
    "add_kernel": {"constexprs": {"BLOCK": 1024}},
    "bias_gelu_kernel": {"constexprs": {"BLOCK": 1024}},
    "softmax_kernel": {"constexprs": {"BLOCK": 1024}},            # next_power_of_2 of the lesson's row lengths
    "add_tuned": {"constexprs": {"BLOCK": 4096}, "num_warps": 8},  # its largest autotuning config
    "warp_kernel": {"constexprs": {"BLOCK": 256}},
    "my_kernel": {"constexprs": {"BLOCK": 1024}},                 # the fused-kernel challenge's reference solution
    "matmul_kernel": {"constexprs": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}},   # tl.dot, its GPU tile sizes
    # lesson 13's FlashAttention-2 forward: the course's kernel (causal) and the exercise's reference solution (not),
    # in fp16 on a T4's tiles (64 x 64, head_dim 64): sm_75 has no bf16 tensor cores
    "flash_attention_kernel": {"constexprs": {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "CAUSAL": True},
                               "pointers": "*fp16", "types": {"sm_scale": "fp32"}},
    "my_flash_kernel": {"constexprs": {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "CAUSAL": False},
                        "pointers": "*fp16", "types": {"sm_scale": "fp32"}},
}
NUMBA_KERNELS = {
    "matmul_naive": "void(float32[:, :], float32[:, :], float32[:, :])",
    "matmul_coalesced": "void(float32[:, :], float32[:, :], float32[:, :])",
    "matmul_tiled": "void(float32[:, :], float32[:, :], float32[:, :])",
    "scale_rows": "void(float32[:, :], float32[:], float32[:, :])",  # exercise 1's reference solution
}
CUDA_SOURCES = {"cuda_source": ("bias_gelu_kernel",)}             # lesson 11's load_inline extension

CHILD_ENV_DROP = ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")


# ----------------------------------------------------------------------------------------------- reading the course
def _code_cells(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [path.read_text()]
    nb = json.loads(path.read_text())
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        # IPython magics and shell lines are not Python: a `pass` of the same indentation keeps the cell parseable
        cells.append("\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", ln) for ln in lines))
    return cells


def _jit_library(fn: ast.FunctionDef) -> str | None:
    for deco in fn.decorator_list:
        text = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco)
        if text == "triton.jit":
            return "triton"
        if text in ("cuda.jit", "numba.cuda.jit"):
            return "numba"
    return None


def _course_files() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "gpulab").rglob("*.py"))


def _shipped() -> dict:
    """Every kernel the course ships: {"triton"|"numba": {name: source}, "cuda": {variable: source},
    "constants": {name: value}} read from the notebooks' code cells and gpulab's modules."""
    found: dict = {"triton": {}, "numba": {}, "cuda": {}, "constants": {}}
    for path in _course_files():
        for cell in _code_cells(path):
            if not any(k in cell for k in ("triton.jit", "cuda.jit", "__global__")):
                continue
            try:
                tree = ast.parse(cell)
            except SyntaxError:
                continue
            for node in tree.body:          # the constants a kernel reads as a global (TILE)
                if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float))):
                    found["constants"][node.targets[0].id] = node.value.value
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and (library := _jit_library(node)):
                    body = ast.get_source_segment(cell, node, padded=True)
                    found[library][node.name] = (f"{path.name}: {node.name}", textwrap.dedent(body))
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                        and isinstance(node.value.value, str) and "__global__" in node.value.value):
                    found["cuda"][ast.unparse(node.targets[0])] = (path.name, node.value.value)
    return found


SHIPPED = _shipped()


def _triton_signature(source: str, spec: dict) -> dict[str, str]:
    fn = ast.parse(source).body[0]
    constexprs, types = spec["constexprs"], spec.get("types", {})
    sig = {}
    for arg in fn.args.args:
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if annotation.endswith("constexpr"):
            assert arg.arg in constexprs, f"{fn.name}: no value for its constexpr {arg.arg} in TRITON_KERNELS"
            sig[arg.arg] = "constexpr"
        else:
            sig[arg.arg] = types.get(arg.arg) or (spec.get("pointers", "*fp32") if arg.arg.endswith("_ptr") else "i32")
    return sig


def test_every_shipped_kernel_is_compiled_here():
    """A kernel added to the course must be added to the tables above (and a removed one taken out)."""
    assert set(SHIPPED["triton"]) == set(TRITON_KERNELS)
    assert set(SHIPPED["numba"]) == set(NUMBA_KERNELS)
    assert set(SHIPPED["cuda"]) == set(CUDA_SOURCES)


# ----------------------------------------------------------------------------------------------- child processes
TRITON_CHILD = r'''
import inspect, json, sys
job = json.load(open(sys.argv[1]))
out = {"missing": None, "results": {}}
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError as e:
    out["missing"] = f"Triton is not installed ({e})"
else:
    if "constexprs" not in inspect.signature(ASTSource).parameters:
        out["missing"] = f"Triton {triton.__version__}'s ASTSource predates constexprs= (the course pins 3.8)"
    else:
        try:
            triton.knobs.nvidia.ptxas.path
        except RuntimeError as e:
            out["missing"] = f"Triton's ptxas is missing ({e})"
if out["missing"] is None:
    sys.path.insert(0, job["dir"])
    import kernels_triton as mod
    for k in job["kernels"]:
        for cc in job["ccs"]:
            key = f"{k['name']}@{cc}"
            try:
                src = ASTSource(fn=getattr(mod, k["name"]), signature=k["signature"], constexprs=k["constexprs"])
                options = {"num_warps": k["num_warps"]} if k.get("num_warps") else None
                compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
                ptx = compiled.asm["ptx"]
                out["results"][key] = {"targets": [ln for ln in ptx.splitlines() if ln.startswith(".target")],
                                       "entries": ptx.count(".entry "), "cubin": len(compiled.asm["cubin"]),
                                       "elf": compiled.asm["cubin"][:4] == b"\x7fELF",
                                       "mma": ptx.count("mma.sync") + ptx.count("wgmma.mma_async"), "error": None}
            except Exception as e:
                out["results"][key] = {"error": f"{type(e).__name__}: {e}"[-3000:]}
print(json.dumps(out))
'''

NUMBA_CHILD = r'''
import json, os, sys
job = json.load(open(sys.argv[1]))
out = {"missing": None, "results": {}}
try:
    from numba import cuda
    from numba.cuda.cudadrv import nvvm
except ImportError as e:
    out["missing"] = f"numba-cuda is not installed ({e})"
else:
    try:
        nvvm.NVVM()
    except Exception as e:
        out["missing"] = f"NVVM, Numba's CUDA compiler library, is missing ({type(e).__name__}: {e})"
if out["missing"] is None:
    sys.path.insert(0, job["dir"])
    import kernels_numba as mod
    for name, sig in job["kernels"].items():
        for cc in job["ccs"]:
            key = f"{name}@{cc}"
            try:
                ptx, _ = cuda.compile_ptx(getattr(mod, name), sig, cc=(cc // 10, cc % 10))
                path = os.path.join(job["dir"], f"{key}.ptx")
                with open(path, "w") as f:
                    f.write(ptx)
                out["results"][key] = {"targets": [ln for ln in ptx.splitlines() if ln.startswith(".target")],
                                       "entries": ptx.count(".entry "), "ptx": path, "error": None}
            except Exception as e:
                out["results"][key] = {"error": f"{type(e).__name__}: {e}"[-3000:]}
print(json.dumps(out))
'''


def _child_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROP}
    env["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")     # a real compile, and nothing written to ~/.triton
    return env


def _start(tmp: Path, name: str, script: str, module: str, job: dict) -> subprocess.Popen:
    (tmp / f"kernels_{name}.py").write_text(module)
    (tmp / f"{name}_child.py").write_text(script)
    (tmp / f"{name}_job.json").write_text(json.dumps({**job, "dir": str(tmp), "ccs": list(CCS)}))
    return subprocess.Popen([sys.executable, str(tmp / f"{name}_child.py"), str(tmp / f"{name}_job.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(tmp),
                            cwd=tmp)


def _finish(proc: subprocess.Popen, what: str) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"compiling the {what} kernels took over 300 s")
    if proc.returncode != 0:
        pytest.fail(f"the {what} compile process failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _constants() -> str:
    return "".join(f"{k} = {v!r}\n" for k, v in sorted(SHIPPED["constants"].items()))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Triton's and Numba's compiles, run side by side in two child processes, once for the whole file."""
    tmp = tmp_path_factory.mktemp("gpu-kernels")
    triton_module = ("import math\nimport triton\nimport triton.language as tl\n" + _constants() + "\n\n" +
                     "\n\n".join(f"@triton.jit\n{src}" for _, src in SHIPPED["triton"].values()))
    numba_module = ("import math\nimport numpy as np\nfrom numba import cuda, float32\n" + _constants() + "\n\n" +
                    "\n\n".join(src for _, src in SHIPPED["numba"].values()))
    triton_job = {"kernels": [{"name": name, "signature": _triton_signature(SHIPPED["triton"][name][1], spec), **spec}
                              for name, spec in TRITON_KERNELS.items() if name in SHIPPED["triton"]]}
    numba_job = {"kernels": {n: s for n, s in NUMBA_KERNELS.items() if n in SHIPPED["numba"]}}
    procs = {"triton": _start(tmp, "triton", TRITON_CHILD, triton_module, triton_job),
             "numba": _start(tmp, "numba", NUMBA_CHILD, numba_module, numba_job)}
    return {name: _finish(proc, name) for name, proc in procs.items()}


def _result(compiled: dict, library: str, name: str, cc: int) -> dict:
    got = compiled[library]
    if got["missing"]:
        pytest.skip(f"cannot compile {library} kernels here: {got['missing']}")
    res = got["results"][f"{name}@{cc}"]
    if res["error"]:
        where = (SHIPPED["triton"] if library == "triton" else SHIPPED["numba"])[name][0]
        pytest.fail(f"{where} does not compile for sm_{cc}:\n{res['error']}")
    return res


def _targets_cc(targets: list[str], cc: int) -> bool:
    # Triton targets Hopper's arch-specific features (sm_90a) on 9.0; NVVM writes plain sm_90
    return len(targets) == 1 and re.fullmatch(rf"\.target sm_{cc}a?\b.*", targets[0]) is not None


# ----------------------------------------------------------------------------------------------- Triton
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm{cc}")
@pytest.mark.parametrize("name", sorted(TRITON_KERNELS))
def test_triton_kernel_compiles_to_ptx_and_cubin(compiled, name, cc):
    res = _result(compiled, "triton", name, cc)
    assert _targets_cc(res["targets"], cc), res["targets"]
    assert res["entries"] == 1 and res["cubin"] > 0 and res["elf"]


@pytest.mark.parametrize("cc", (80, 90), ids=lambda cc: f"sm{cc}")
@pytest.mark.parametrize("name", ["flash_attention_kernel", "my_flash_kernel"])
def test_flash_attention_multiplies_its_tiles_on_tensor_cores(compiled, name, cc):
    """Lesson 13's kernel: both tl.dot of 16-bit tiles become tensor-core instructions (mma.sync, wgmma on sm_90).
    Triton 3.8 compiles tl.dot for sm_75 with FMA instructions instead, so a T4 runs it without its tensor cores."""
    assert _result(compiled, "triton", name, cc)["mma"] > 0


# ----------------------------------------------------------------------------------------------- Numba
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm{cc}")
@pytest.mark.parametrize("name", sorted(NUMBA_KERNELS))
def test_numba_kernel_compiles_to_ptx(compiled, name, cc):
    res = _result(compiled, "numba", name, cc)
    assert _targets_cc(res["targets"], cc), res["targets"]
    assert res["entries"] == 1


def _toolkit(tool: str) -> Path | None:
    """A CUDA toolkit's ``tool`` (nvcc, ptxas): on PATH, else under CUDA_HOME / CUDA_PATH or /usr/local/cuda."""
    found = shutil.which(tool)
    if found:
        return Path(found)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / tool).exists():
            return Path(home) / "bin" / tool
    return None


def _ptxas_candidates() -> list[Path]:
    found = [p for p in (_toolkit("ptxas"),) if p is not None]
    nvcc = _toolkit("nvcc")
    if nvcc is not None and (nvcc.parent / "ptxas").exists():
        found.append(nvcc.parent / "ptxas")
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
        if spec is not None and spec.origin:
            found.append(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas")
    except (ImportError, ValueError):
        pass
    return list(dict.fromkeys(p for p in found if p.exists()))


@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm{cc}")
@pytest.mark.parametrize("name", sorted(NUMBA_KERNELS))
def test_numba_kernel_ptx_assembles_to_a_cubin(compiled, name, cc, tmp_path):
    res = _result(compiled, "numba", name, cc)
    candidates = _ptxas_candidates()
    if not candidates:
        pytest.skip("no ptxas (a CUDA toolkit's, or Triton's) to assemble Numba's PTX")
    refusals = []
    for ptxas in candidates:
        cubin = tmp_path / f"{name}.cubin"
        done = subprocess.run([str(ptxas), f"-arch=sm_{cc}", res["ptx"], "-o", str(cubin)], capture_output=True,
                              text=True, timeout=120)
        if done.returncode == 0:
            assert cubin.read_bytes()[:4] == b"\x7fELF"
            return
        if "Unsupported .version" not in done.stderr and "not defined for target" not in done.stderr:
            pytest.fail(f"ptxas ({ptxas}) rejects {name}'s PTX for sm_{cc}:\n{done.stderr[-3000:]}")
        refusals.append(f"{ptxas}: {done.stderr.strip().splitlines()[0]}")
    pytest.skip("no ptxas here reads the PTX version NVVM wrote (a CUDA toolkit as new as numba-cuda's NVVM "
                "is missing): " + "; ".join(refusals))


# ----------------------------------------------------------------------------------------------- nvcc
def _global_kernels(source: str, names: tuple[str, ...]) -> str:
    """The ``__global__`` functions of a CUDA source, without its host code: the host wrapper includes torch's
    headers, whose compile takes minutes on two cores; the device code needs only <cstdint>."""
    parts = ["#include <cstdint>\n"]
    for name in names:
        start = re.search(rf"__global__\s+void\s+{name}\s*\(", source)
        assert start is not None, f"no __global__ void {name}(...) in the CUDA source"
        depth, i = 0, source.index("{", start.end())
        for j in range(i, len(source)):
            depth += {"{": 1, "}": -1}.get(source[j], 0)
            if depth == 0:
                parts.append(source[start.start():j + 1] + "\n")
                break
    return "".join(parts)


@pytest.fixture(scope="module")
def nvcc():
    found = _toolkit("nvcc")
    if found is None:
        pytest.skip("nvcc (the CUDA toolkit's compiler) is missing: no PATH entry, CUDA_HOME or /usr/local/cuda")
    codes = subprocess.run([str(found), "--list-gpu-code"], capture_output=True, text=True, timeout=60).stdout
    return found, set(codes.split())


@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm{cc}")
@pytest.mark.parametrize("variable", sorted(CUDA_SOURCES))
def test_extension_cuda_kernels_compile_with_nvcc(nvcc, variable, cc, tmp_path):
    path, codes = nvcc
    if f"sm_{cc}" not in codes:
        pytest.skip(f"{path} cannot compile for sm_{cc} (it lists {sorted(codes)})")
    where, source = SHIPPED["cuda"][variable]
    cu = tmp_path / f"{variable}.cu"
    cu.write_text(_global_kernels(source, CUDA_SOURCES[variable]))
    cubin = tmp_path / f"{variable}.cubin"
    done = subprocess.run([str(path), "-cubin", f"-arch=sm_{cc}", "-O3", str(cu), "-o", str(cubin)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{where}: {variable}'s kernels do not compile for sm_{cc}:\n{done.stderr[-3000:]}"
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF" and len(data) > 0
    for name in CUDA_SOURCES[variable]:
        assert name.encode() in data                     # the kernel's (mangled) symbol is in the cubin
