"""Published figures, as data with provenance (figure, hardware, source, date).

Datasheet peaks are what vendors print; "achievable" figures are what careful measurements reach.
Tables and plots show them beside your own measurement.

Example:
    >>> import gpulab as gl
    >>> gl.published("amp-pytorch").hardware
    'NVIDIA Volta, Turing, Ampere GPUs'
    >>> round(gl.gpu_spec("Tesla T4").bandwidth_bytes_per_s / 1e9)
    320
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from ._format import TableView
from .figures import ALL, Published

__all__ = ["Published", "GPUSpec", "GPUSpecTable", "published", "references", "gpu_spec", "gpu_specs", "PUBLISHED",
           "GPU_SPECS"]


PUBLISHED: dict[str, Published] = {p.key: p for p in ALL}


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks of one GPU (dense, no sparsity). Rates are per second.

    ``aliases``: the exact names the card reports (``torch.cuda.get_device_name()`` and ``nvidia-smi``
    print the same string) and accepted short names; :func:`gpu_spec` matches them exactly.
    ``mig_slices``: compute slices of a card that supports Multi-Instance GPU (7 on A100 and H100).
    For a MIG slice (see :func:`gpu_spec`), ``parent`` is the whole card's name and ``mig_profile`` the
    profile (``"1g.5gb"``); its compute and memory figures are the slice's share, ``tdp_w`` the whole card's
    (power is not partitioned). ``memory_bytes`` is the memory as ``nvidia-smi`` shows it; ``datasheet_memory_bytes``
    the datasheet's larger figure where they differ (a T4: 16 GB of GDDR6, of which ECC, on by default, keeps 6.25%,
    so ``nvidia-smi`` shows 15360 MiB; CUDA C++ Best Practices Guide, "ECC"); ``cuda_memory_bytes``, where recorded,
    the smaller figure a program sees, what ``torch.cuda.get_device_properties(i).total_memory`` and
    ``torch.cuda.mem_get_info`` report (a T4: 15,835,660,288 bytes, 14.75 GiB: the driver keeps the rest).
    :attr:`program_memory_bytes` is the one fitting estimates use.
    """

    name: str
    architecture: str
    compute_capability: tuple[int, int]
    memory_bytes: int
    bandwidth_bytes_per_s: float
    fp32_flops: float
    fp16_tensor_flops: float       # dense fp16 tensor-core peak
    bf16_tensor_flops: float | None
    tf32_tensor_flops: float | None
    tdp_w: float
    source: str
    url: str
    aliases: tuple[str, ...] = ()
    mig_slices: int | None = None
    parent: str | None = None
    mig_profile: str | None = None
    datasheet_memory_bytes: int | None = None
    cuda_memory_bytes: int | None = None

    @property
    def program_memory_bytes(self) -> int:
        """The memory a program can allocate from, before its CUDA context: :attr:`cuda_memory_bytes` where recorded,
        else :attr:`memory_bytes` (``nvidia-smi``'s figure, a little more than a program sees).

        Example:
            >>> t4 = gpu_spec("T4")
            >>> t4.memory_bytes // 2**20, round(t4.program_memory_bytes / 2**30, 2)
            (15360, 14.75)
        """
        return self.cuda_memory_bytes if self.cuda_memory_bytes is not None else self.memory_bytes

    def ridge_point(self, dtype: str = "fp16") -> float:
        """FLOPs per byte above which a kernel is compute-bound on this GPU."""
        peak = self.fp32_flops if dtype == "fp32" else self.fp16_tensor_flops
        return peak / self.bandwidth_bytes_per_s


_GB = 10**9
_GIB, _MIB = 2**30, 2**20
_V100 = ("NVIDIA V100 datasheet", "https://www.nvidia.com/en-us/data-center/v100/")
_A100 = ("NVIDIA A100 datasheet", "https://www.nvidia.com/en-us/data-center/a100/")
_H100 = ("NVIDIA H100 datasheet", "https://www.nvidia.com/en-us/data-center/h100/")
_H200 = ("NVIDIA H200 datasheet", "https://www.nvidia.com/en-us/data-center/h200/")
# Aliases: the exact device names (torch.cuda.get_device_name() / nvidia-smi; drivers before R460 print the
# A100's without "NVIDIA ", which gpu_spec accepts for every card) and accepted short names.
# A T4's program figure: torch.cuda.get_device_properties(0).total_memory on a T4 (Colab), which mem_get_info's total
# repeats; nvidia-smi shows 15360 MiB of the same card (the figure gpulab.rehearsal's T4 profile starts from too).
GPU_SPECS: dict[str, GPUSpec] = {s.name: s for s in (
    GPUSpec("T4", "Turing", (7, 5), 15360 * _MIB, 320 * _GB, 8.1e12, 65e12, None, None, 70,
            "NVIDIA T4 datasheet", "https://www.nvidia.com/en-us/data-center/tesla-t4/", ("Tesla T4",),
            datasheet_memory_bytes=16 * _GIB, cuda_memory_bytes=15_835_660_288),
    GPUSpec("V100 SXM2", "Volta", (7, 0), 16 * _GIB, 900 * _GB, 15.7e12, 125e12, None, None, 300, *_V100,
            ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB")),
    GPUSpec("V100 SXM2 32GB", "Volta", (7, 0), 32 * _GIB, 900 * _GB, 15.7e12, 125e12, None, None, 300, *_V100,
            ("Tesla V100-SXM2-32GB",)),
    GPUSpec("V100 PCIe 16GB", "Volta", (7, 0), 16 * _GIB, 900 * _GB, 14e12, 112e12, None, None, 250, *_V100,
            ("Tesla V100-PCIE-16GB",)),
    GPUSpec("V100 PCIe 32GB", "Volta", (7, 0), 32 * _GIB, 900 * _GB, 14e12, 112e12, None, None, 250, *_V100,
            ("Tesla V100-PCIE-32GB",)),
    GPUSpec("L4", "Ada Lovelace", (8, 9), 24 * _GIB, 300 * _GB, 30.3e12, 121e12, 121e12, 60e12, 72,
            "NVIDIA L4 datasheet", "https://www.nvidia.com/en-us/data-center/l4/", ("NVIDIA L4",)),
    GPUSpec("A100 40GB SXM", "Ampere", (8, 0), 40 * _GIB, 1555 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400, *_A100,
            ("NVIDIA A100-SXM4-40GB",), mig_slices=7),
    GPUSpec("A100 40GB PCIe", "Ampere", (8, 0), 40 * _GIB, 1555 * _GB, 19.5e12, 312e12, 312e12, 156e12, 250, *_A100,
            ("NVIDIA A100-PCIE-40GB",), mig_slices=7),
    GPUSpec("A100 80GB SXM", "Ampere", (8, 0), 80 * _GIB, 2039 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400, *_A100,
            ("NVIDIA A100-SXM4-80GB",), mig_slices=7),
    GPUSpec("A100 80GB PCIe", "Ampere", (8, 0), 80 * _GIB, 1935 * _GB, 19.5e12, 312e12, 312e12, 156e12, 300, *_A100,
            ("NVIDIA A100 80GB PCIe",), mig_slices=7),
    GPUSpec("H100 SXM", "Hopper", (9, 0), 80 * _GIB, 3350 * _GB, 67e12, 989e12, 989e12, 494.5e12, 700, *_H100,
            ("NVIDIA H100 80GB HBM3",), mig_slices=7),
    GPUSpec("H100 PCIe", "Hopper", (9, 0), 80 * _GIB, 2000 * _GB, 51e12, 756.5e12, 756.5e12, 378e12, 350, *_H100,
            ("NVIDIA H100 PCIe",), mig_slices=7),
    # the H100's GH100 with 141 GB of HBM3e: nvidia-smi shows 143771 MiB (the course's GPU check, 2026-11-26)
    GPUSpec("H200 SXM", "Hopper", (9, 0), 143771 * _MIB, 4800 * _GB, 67e12, 989e12, 989e12, 494.5e12, 700, *_H200,
            ("NVIDIA H200",), mig_slices=7, datasheet_memory_bytes=141 * _GB),
)}
MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"


def published(key: str) -> Published:
    """The :class:`Published` figure called ``key`` (see :func:`references` for all keys)."""
    try:
        return PUBLISHED[key]
    except KeyError:
        raise KeyError(f"no published figure key={key!r}; known: {', '.join(sorted(PUBLISHED))}") from None


def _norm(name: str) -> str:
    """Case, spacing and a leading "NVIDIA " do not matter; everything else must match exactly."""
    n = " ".join(name.split()).casefold()
    return n[len("nvidia "):] if n.startswith("nvidia ") else n


def _lookup() -> dict[str, GPUSpec]:
    table: dict[str, GPUSpec] = {}
    for spec in GPU_SPECS.values():
        for key in (spec.name, *spec.aliases):
            if table.setdefault(_norm(key), spec) is not spec:   # pragma: no cover - a data error
                raise RuntimeError(f"GPU name {key!r} is given to both {table[_norm(key)].name} and {spec.name}")
    return table


_MIG = re.compile(r"^(?P<parent>.+?)\s+MIG\s+(?P<g>\d+)g\.(?P<mem>\d+)gb(?P<ext>(?:[+-][a-z.]+)*)$", re.IGNORECASE)


def _unknown(name: str) -> KeyError:
    words = {w for w in re.split(r"[\s-]+", _norm(name)) if len(w) >= 2} - {"tesla", "pcie", "sxm", "gb"}
    near = [s.name for s in GPU_SPECS.values()
            if words & {w for k in (s.name, *s.aliases) for w in re.split(r"[\s-]+", _norm(k))}]
    hint = f" (similar: {', '.join(near)})" if near else ""
    return KeyError(f"no datasheet figures for {name!r}{hint}; known GPUs: "
                    + "; ".join(f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name
                                for s in GPU_SPECS.values()))


def _mig_slice(parent: GPUSpec, g: int, mem_gb: int, profile: str, name: str) -> GPUSpec:
    total_gb = round(parent.memory_bytes / _GIB)
    if parent.mig_slices is None:
        raise KeyError(f"{name!r}: the {parent.name} does not support MIG")
    if not 1 <= g <= parent.mig_slices or not 1 <= mem_gb <= total_gb:
        raise KeyError(f"{name!r}: {profile} is not a MIG profile of the {parent.name} "
                       f"({parent.mig_slices} compute slices, {total_gb} GB); see {MIG_GUIDE}")
    compute, memory = g / parent.mig_slices, mem_gb / total_gb
    scale = lambda v: None if v is None else v * compute   # noqa: E731
    return replace(parent, name=f"{parent.name} MIG {profile}", memory_bytes=int(parent.memory_bytes * memory),
                   bandwidth_bytes_per_s=parent.bandwidth_bytes_per_s * memory, fp32_flops=parent.fp32_flops * compute,
                   fp16_tensor_flops=parent.fp16_tensor_flops * compute, bf16_tensor_flops=scale(parent.bf16_tensor_flops),
                   tf32_tensor_flops=scale(parent.tf32_tensor_flops),
                   source=f"{parent.source}, scaled to the MIG slice: compute {g}/{parent.mig_slices}, memory and "
                          f"bandwidth {mem_gb}/{total_gb} (NVIDIA MIG User Guide, {MIG_GUIDE})",
                   aliases=(), mig_slices=None, parent=parent.name, mig_profile=profile, cuda_memory_bytes=None)


def gpu_spec(name: str) -> GPUSpec:
    """Datasheet figures for the GPU called ``name``: the exact string ``torch.cuda.get_device_name()`` or
    ``nvidia-smi`` prints (``"Tesla T4"``, ``"NVIDIA A100-SXM4-40GB"``, ``"NVIDIA A100 80GB PCIe"``,
    ``"NVIDIA H100 80GB HBM3"``) or a short name from :func:`gpu_specs` (``"T4"``, ``"A100 80GB SXM"``).
    Case, spacing and a leading "NVIDIA " do not matter; nothing else is guessed: an unknown or partial name
    (``"A100"``, ``"NVIDIA A10G"``) raises ``KeyError`` listing the known cards, rather than returning figures
    of a different card.

    A MIG instance (``"NVIDIA A100-SXM4-40GB MIG 1g.5gb"``) gets its slice of the card, labelled as such:
    compute peaks times g/7 (its share of the compute slices), memory and bandwidth times its share of the
    card's memory (5/40 GB), as in NVIDIA's MIG profile tables; ``parent`` names the whole card. A learner on a
    slice then compares their measurements with what the slice can do, not with the whole card.

    Example:
        >>> gpu_spec("NVIDIA A100 80GB PCIe").name
        'A100 80GB PCIe'
        >>> s = gpu_spec("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
        >>> s.parent, s.memory_bytes // 2**30, round(s.fp16_tensor_flops / 1e12, 1)
        ('A100 40GB SXM', 5, 44.6)
    """
    if not isinstance(name, str) or not name.strip():
        raise (TypeError if not isinstance(name, str) else ValueError)(
            f"name must be a GPU name such as 'T4' or torch.cuda.get_device_name(), got {name!r}")
    table = _lookup()
    spec = table.get(_norm(name))
    if spec is not None:
        return spec
    m = _MIG.match(" ".join(name.split()))
    if m:
        parent = table.get(_norm(m["parent"]))
        if parent is None:
            raise _unknown(m["parent"])
        profile = f"{int(m['g'])}g.{int(m['mem'])}gb{m['ext'].lower()}"
        return _mig_slice(parent, int(m["g"]), int(m["mem"]), profile, name)
    raise _unknown(name)


def references() -> Any:
    """All published figures as a pandas DataFrame (key, figure, hardware, source, date, url)."""
    import pandas as pd

    return pd.DataFrame([{"key": p.key, "figure": p.figure, "hardware": p.hardware, "source": p.source,
                          "date": p.date, "claim": p.claim, "url": p.url} for p in PUBLISHED.values()])


@dataclass(frozen=True, repr=False)
class GPUSpecTable(TableView):
    """Datasheet peaks of several GPUs side by side (immutable), one unit per column; ``to_dataframe()``
    gives the same numbers for pandas and ``spec(name)`` one row's :class:`GPUSpec`.

    Example:
        >>> t = gpu_specs()
        >>> print(repr(t).splitlines()[1])
        gpu  architecture  fp32 (TFLOP/s)  fp16 tensor (TFLOP/s)  bandwidth (GB/s)  memory (GiB)  TDP (W)  source
        >>> t.spec("T4").tdp_w, float(t.to_dataframe().set_index("gpu").loc["T4", "bandwidth GB/s"])
        (70, 320.0)
    """

    specs: tuple[GPUSpec, ...]
    title: str = "Datasheet peaks (dense, no sparsity)"

    def __len__(self) -> int:
        return len(self.specs)

    def spec(self, name: str) -> GPUSpec:
        """The row called ``name`` (a short name as in the ``gpu`` column, or any name :func:`gpu_spec` accepts)."""
        for s in self.specs:
            if s.name == name:
                return s
        return gpu_spec(name)

    def to_dataframe(self) -> Any:
        """One row per GPU: gpu, architecture, fp32 and fp16 tensor TFLOP/s, bandwidth GB/s, memory GiB, TDP W,
        source."""
        import pandas as pd

        rows = []
        for s in self.specs:
            d = asdict(s)
            rows.append({"gpu": s.name, "architecture": s.architecture,
                         "fp32 TFLOP/s": s.fp32_flops / 1e12, "fp16 tensor TFLOP/s": s.fp16_tensor_flops / 1e12,
                         "bandwidth GB/s": s.bandwidth_bytes_per_s / 1e9, "memory GiB": s.memory_bytes / _GIB,
                         "TDP W": s.tdp_w, "source": d["source"]})
        return pd.DataFrame(rows)

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["gpu", "architecture", "fp32 (TFLOP/s)", "fp16 tensor (TFLOP/s)", "bandwidth (GB/s)",
                  "memory (GiB)", "TDP (W)", "source"]
        rows = [[s.name, s.architecture, f"{s.fp32_flops / 1e12:.4g}", f"{s.fp16_tensor_flops / 1e12:.4g}",
                 f"{s.bandwidth_bytes_per_s / 1e9:.0f}", f"{s.memory_bytes / _GIB:.4g}", f"{s.tdp_w:.0f}", s.source]
                for s in self.specs]
        return header, rows, "vendor datasheets; tensor peaks dense (no sparsity); GB/s = 10^9 bytes/s, GiB = 2^30 bytes"


def gpu_specs() -> GPUSpecTable:
    """Datasheet peaks of the GPUs the course compares with, as a :class:`GPUSpecTable` (TFLOP/s, GB/s, GiB;
    ``.to_dataframe()`` for pandas).

    Example:
        >>> len(gpu_specs()) >= 12, "H100 SXM" in repr(gpu_specs()), "<table" in gpu_specs()._repr_html_()
        (True, True, True)
    """
    return GPUSpecTable(tuple(GPU_SPECS.values()))
