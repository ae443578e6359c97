"""What a Triton kernel asks of an SM, read on any machine: registers per thread, spilled bytes and shared memory
from compiling it for a GPU architecture (Triton's compiler and its ``ptxas -v``, which run without a GPU), and the
theoretical occupancy they allow: how many of the SM's warp slots its blocks can fill at once.

Occupancy follows the CUDA occupancy calculator's rules (NVIDIA's CUDA C++ Programming Guide, "Technical
Specifications per Compute Capability"): each limit (the SM's warp slots, its block slots, its 65,536 registers
allocated per warp in units of 256, its shared memory with 1 KiB reserved per block from 8.0 on) allows some
blocks per SM; the smallest count wins and names the limiter. Low occupancy is not slowness in itself (a kernel
with enough independent work per thread hides latency with few warps), but a register-hungry kernel that spills,
or one that fits a single block per SM, is worth a look.

Example:
    >>> from gpulab.kernels.resources import occupancy
    >>> occ = occupancy(80, registers=32, shared_bytes=0, num_warps=4)
    >>> occ.blocks_per_sm, occ.share, occ.limiter
    (16, 1.0, 'warp slots')
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .._check import positive, whole
from .._format import fmt_bytes, html_table, text_table

__all__ = ["SM_LIMITS", "Occupancy", "occupancy", "KernelResources", "kernel_resources"]

# per compute capability: resident warps, resident blocks, shared memory (bytes) per SM; 65,536 registers each
SM_LIMITS: dict[int, tuple[int, int, int]] = {
    75: (32, 16, 64 * 1024),        # Turing: T4
    80: (64, 32, 164 * 1024),       # A100
    86: (48, 16, 100 * 1024),       # GA10x: A10, RTX 30
    89: (48, 24, 100 * 1024),       # Ada: L4, RTX 40
    90: (64, 32, 228 * 1024),       # Hopper: H100, H200
}
REGISTERS_PER_SM = 65_536
REGISTER_UNIT = 256                 # registers are allocated per warp in units of this many


@dataclass(frozen=True)
class Occupancy:
    """Blocks of ``num_warps`` warps one SM of compute capability ``cc`` holds at once, the ``share`` of its warp
    slots they fill, and the ``limiter`` (``warp slots``, ``block slots``, ``registers``, ``shared memory``)."""

    cc: int
    num_warps: int
    registers: int
    shared_bytes: int
    blocks_per_sm: int
    share: float
    limiter: str


def occupancy(cc: int, *, registers: int, shared_bytes: int, num_warps: int = 4) -> Occupancy:
    """The theoretical occupancy of a kernel using ``registers`` per thread and ``shared_bytes`` per block, launched
    with ``num_warps`` warps per block, on an SM of compute capability ``cc`` (75, 80, 86, 89, 90)."""
    cc, num_warps = whole("cc", cc), whole("num_warps", num_warps)
    registers, shared_bytes = whole("registers", registers, low=0), whole("shared_bytes", shared_bytes, low=0)
    if cc not in SM_LIMITS:
        raise ValueError(f"cc={cc} is not one gpulab knows the SM limits of: {sorted(SM_LIMITS)}")
    warps, blocks, smem = SM_LIMITS[cc]
    per_warp = math.ceil(max(registers, 1) * 32 / REGISTER_UNIT) * REGISTER_UNIT
    reserved = 1024 if cc >= 80 else 0
    limits = {"warp slots": warps // num_warps, "block slots": blocks,
              "registers": REGISTERS_PER_SM // (per_warp * num_warps),
              "shared memory": smem // (shared_bytes + reserved) if shared_bytes + reserved else blocks}
    limiter = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    n = max(0, limits[limiter])
    return Occupancy(cc, num_warps, registers, shared_bytes, n, min(1.0, n * num_warps / warps), limiter)


@dataclass(frozen=True)
class KernelResources:
    """A Triton kernel compiled for each compute capability: registers per thread, bytes spilled to local memory,
    shared memory per block, and the occupancy they allow (:class:`Occupancy`), per ``cc``."""

    name: str
    num_warps: int
    rows: tuple[tuple[int, int, int, int, Occupancy], ...]     # cc, registers, spill bytes, shared bytes, occupancy
    matrix: tuple[tuple[int, str], ...] = ()    # cc, what its tl.dot compiled to (see matrix_instructions)

    def matrix_instructions(self, cc: int) -> str | None:
        """What the kernel's matrix products compiled to on ``cc``, read from the PTX: ``"wgmma"`` (Hopper's
        warpgroup tensor-core instructions), ``"mma"`` (tensor cores, Ampere-style ``mma.sync``), ``"fma"`` (no tensor
        cores: scalar fused multiply-adds) or ``"none"`` (no matrix product, or none recognised); None where not
        read."""
        return dict(self.matrix).get(cc)

    def tensor_cores(self, cc: int) -> bool | None:
        """Do the kernel's matrix products run on tensor cores on ``cc``? None where it has none or was not read."""
        kind = self.matrix_instructions(cc)
        return None if kind in (None, "none") else kind in ("mma", "wgmma")

    def at(self, cc: int) -> Occupancy:
        """The occupancy on compute capability ``cc`` (registers, shared memory, blocks per SM, share, limiter)."""
        return self._row(cc)[4]

    def spilled(self, cc: int) -> int:
        """Bytes per thread spilled to local memory on compute capability ``cc``."""
        return self._row(cc)[2]

    def _row(self, cc: int) -> tuple[int, int, int, int, Occupancy]:
        for row in self.rows:
            if row[0] == cc:
                return row
        raise KeyError(f"not compiled for cc={cc}: {[r[0] for r in self.rows]}")

    def _table(self) -> tuple[list[str], list[list[str]]]:
        header = ["target", "registers/thread", "spilled", "shared/block", "blocks/SM", "occupancy", "limited by"]
        rows = [[f"sm_{cc}", str(r), fmt_bytes(s), fmt_bytes(sh), str(o.blocks_per_sm), f"{o.share:.0%}", o.limiter]
                for cc, r, s, sh, o in self.rows]
        if any(kind not in (None, "none") for _, kind in self.matrix):
            names = {"wgmma": "tensor cores (wgmma)", "mma": "tensor cores (mma)", "fma": "FMA, no tensor cores"}
            header.append("matrix products on")
            for row, (cc, *_rest) in zip(rows, self.rows):
                row.append(names.get(self.matrix_instructions(cc) or "none", "-"))
        return header, rows

    def __repr__(self) -> str:
        header, rows = self._table()
        return (f"{self.name}: resources per SM ({self.num_warps} warps per block)\n" + text_table(header, rows)
                + "\nregisters and spills from ptxas -v; occupancy: the CUDA occupancy calculator's rules")

    def _repr_html_(self) -> str:
        header, rows = self._table()
        return html_table(header, rows, caption=f"{self.name}: resources per SM ({self.num_warps} warps per block)",
                          footer="registers and spills from ptxas -v; occupancy: the CUDA occupancy calculator's rules")


_CHILD = r'''
import inspect, json, re, subprocess, sys, tempfile
job = json.load(open(sys.argv[1]))
import triton
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    if "constexprs" not in inspect.signature(ASTSource).parameters:
        raise ImportError("its ASTSource predates constexprs=")
    ptxas = triton.knobs.nvidia.ptxas.path
except (ImportError, AttributeError, RuntimeError) as e:
    print(json.dumps({"missing": f"Triton {triton.__version__}: {type(e).__name__}: {e}"}))
    sys.exit(0)
sys.path.insert(0, job["dir"])
import kernel_source as mod
out = []
for cc in job["ccs"]:
    src = ASTSource(fn=getattr(mod, job["name"]), signature=job["signature"], constexprs=job["constexprs"])
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": job["num_warps"]})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(compiled.asm["ptx"])
    target = re.search(r"^\.target\s+(sm_\w+)", compiled.asm["ptx"], re.M)      # sm_90a for Hopper
    done = subprocess.run([ptxas, "-v", f"-arch={target.group(1) if target else f'sm_{cc}'}", f.name, "-o",
                           f.name + ".cubin"], capture_output=True, text=True)
    text = done.stdout + done.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores", text)
    ptx = compiled.asm["ptx"]
    matrix = ("wgmma" if re.search(r"\bwgmma\.", ptx) else "mma" if re.search(r"\bmma\.sync\.", ptx)
              else "fma" if job["has_dot"] else "none")
    out.append([cc, int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else 0,
                int(compiled.metadata.shared), text[-2000:], matrix])
print(json.dumps(out))
'''


def kernel_resources(kernel: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None, *,
                     num_warps: int = 4, ccs: tuple[int, ...] = (75, 80, 90), timeout_s: float = 120) -> KernelResources:
    """Compile the ``@triton.jit`` ``kernel`` for each compute capability in ``ccs`` and read what it asks of an SM.
    ``signature`` maps each runtime argument to its Triton type (``"*fp32"`` for a float32 tensor, ``"i32"``),
    ``constexprs`` gives the ``tl.constexpr`` values it is launched with. Runs in a child process without Triton's
    interpreter (a CPU session interprets kernels), so it works without a GPU. The kernel must be self-contained:
    its source, with ``triton`` and ``triton.language as tl`` imported, is what is compiled."""
    import inspect

    num_warps = whole("num_warps", num_warps)
    if not hasattr(kernel, "fn") or not callable(getattr(kernel, "fn", None)):
        raise TypeError(f"kernel must be a @triton.jit function, got {type(kernel).__name__} {kernel!r:.60}")
    if not isinstance(signature, Mapping) or not signature:
        raise TypeError(f"signature must map each runtime argument to a Triton type, e.g. {{'x_ptr': '*fp32', 'n': "
                        f"'i32'}}, got {signature!r:.60}")
    if constexprs is not None and not isinstance(constexprs, Mapping):
        raise TypeError(f"constexprs must map each tl.constexpr argument to its value, e.g. {{'BLOCK': 1024}}, got "
                        f"{constexprs!r:.60}")
    positive("timeout_s", timeout_s, unit="seconds")
    bad = [c for c in ccs if c not in SM_LIMITS] if isinstance(ccs, (tuple, list)) else [ccs]
    if bad or not ccs:
        raise ValueError(f"ccs must be compute capabilities gpulab knows the SM limits of ({sorted(SM_LIMITS)}), "
                         f"got {ccs!r}")
    source = textwrap.dedent(inspect.getsource(kernel.fn))
    name = kernel.fn.__name__
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "kernel_source.py").write_text("import triton\nimport triton.language as tl\n\n\n" + source)
        job = Path(tmp, "job.json")
        job.write_text(json.dumps({"dir": tmp, "name": name, "signature": dict(signature),
                                   "constexprs": dict(constexprs or {}), "num_warps": num_warps, "ccs": list(ccs),
                                   "has_dot": "tl.dot(" in source}))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        done = subprocess.run([sys.executable, "-c", _CHILD, str(job)], capture_output=True, text=True, env=env,
                              timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"compiling {name} for {list(ccs)} failed: {done.stderr.strip()[-1500:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if isinstance(result, dict):
        raise RuntimeError(f"kernel_resources needs a Triton that compiles ahead of time with its own ptxas (3.4 or "
                           f"newer, as the course pins): {result['missing']}")
    rows, matrix = [], []
    for cc, regs, spill, shared, text, kind in result:
        if regs is None:
            raise RuntimeError(f"ptxas -v did not report {name}'s registers for sm_{cc}: {text}")
        rows.append((cc, regs, spill, shared, occupancy(cc, registers=regs, shared_bytes=shared, num_warps=num_warps)))
        matrix.append((cc, kind))
    return KernelResources(name, num_warps, tuple(rows), tuple(matrix))
