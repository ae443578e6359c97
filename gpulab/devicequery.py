"""A deviceQuery for Python: the execution-model figures of this machine's CUDA GPU beside published ones.

CUDA's ``deviceQuery`` sample prints what the runtime knows about a GPU: how many streaming multiprocessors
(SMs) it has, how many threads each SM keeps resident, its registers and shared memory, the L2 cache, the
clocks and the memory bus. :func:`device_query` reads the same figures through
``torch.cuda.get_device_properties`` (NVML fills the clocks and bus width older torch releases do not expose)
and puts them beside the published figures of the GPUs the course compares with. Without a CUDA GPU (a
laptop, CI) it returns the published figures alone, and its ``note`` says so. In a notebook:
``gl.device_query()``; in a terminal: ``python -m gpulab devicequery``.

Every value says where it came from (``DeviceQuery.sources``): ``"torch"``, ``"NVML"``, ``"derived"`` or
``"published: <document>"``. The peak bandwidth is derived as deviceQuery-style tools do: memory clock x 2
(double data rate) x bus width / 8 bytes (CUDA C++ Best Practices Guide, "Theoretical Bandwidth Calculation";
torch's own ``torch/cuda/_device_limits.py`` computes it the same way).

Example:
    >>> from gpulab.devicequery import device_query
    >>> report = device_query("cpu")                  # "cpu": published figures only, on any machine
    >>> [d.name for d in report.devices], report.local is None
    (['T4', 'A100 40GB SXM', 'H100 SXM'], True)
    >>> t4 = report.devices[0]
    >>> t4.sms, t4.max_threads_per_sm, t4.max_resident_threads, round(t4.bandwidth_bytes_per_s / 1e9)
    (40, 1024, 40960, 320)
    >>> t4.sources["sms"].startswith("published"), t4.sources["bandwidth_bytes_per_s"]
    (True, 'derived')
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from ._check import checked, install_hint
from ._format import NA, fmt_bytes, html_table, text_table
from .reference import gpu_spec

__all__ = ["DeviceQuery", "DeviceReport", "device_query", "published_device", "CC_LIMITS", "TORCH_ATTRIBUTES",
           "TORCH_OPTIONAL"]

_KIB, _MIB = 2**10, 2**20

# ---- published figures ----------------------------------------------------------------------------------------
_GUIDE = "CUDA C++ Programming Guide, Table 27 'Technical Specifications per Compute Capability'"
_GUIDE_URL = ("https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
              "#features-and-technical-specifications-technical-specifications-per-compute-capability")


def _limits(threads_per_sm: int, optin_kib: int, per_sm_kib: int) -> dict[str, int]:
    return {"warp_size": 32, "max_threads_per_block": 1024, "max_threads_per_sm": threads_per_sm,
            "registers_per_sm": 64 * _KIB, "shared_memory_per_block_bytes": 48 * _KIB,
            "shared_memory_per_block_optin_bytes": optin_kib * _KIB, "shared_memory_per_sm_bytes": per_sm_kib * _KIB}


# Per compute capability, from _GUIDE (its "KB" and "K" are 1024): warp size 32, 1024 threads per block, 64 K
# 32-bit registers per SM for all; resident threads per SM, shared memory per SM and per block (opt-in) differ.
# 48 KB per block is the limit without opt-in (the guide's "Shared Memory" sections for 7.x, 8.x, 9.0: larger
# blocks need dynamic shared memory and cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)).
CC_LIMITS: dict[tuple[int, int], dict[str, int]] = {
    (7, 5): _limits(1024, 64, 64),      # Turing (T4)
    (8, 0): _limits(2048, 163, 164),    # A100
    (8, 6): _limits(1536, 99, 100),     # GA10x
    (8, 9): _limits(1536, 99, 100),     # Ada (L4)
    (9, 0): _limits(2048, 227, 228),    # H100
}


class _Board(NamedTuple):
    """Figures of one product (not of its compute capability): SMs, L2, max clocks, bus width, and where from."""

    sms: int
    l2_bytes: int
    sm_clock_mhz: int
    memory_clock_mhz: int      # as CUDA's memoryClockRate counts it: the bandwidth is this x 2 x bus / 8
    bus_bits: int
    source: str
    url: str


_A100_WP = "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf"
# Keys are gpulab.reference.GPU_SPECS names. Each figure was checked against the documents named (memory clocks
# and boost clocks as deviceQuery / nvidia-smi report them on that card); 2 x clock x bus / 8 reproduces each
# datasheet bandwidth within 0.1%.
_BOARDS: dict[str, _Board] = {
    "T4": _Board(40, 4 * _MIB, 1590, 5001, 256,
                 "deviceQuery (NVIDIA CUDA samples) on a Tesla T4: 40 SMs, 1590 MHz, 5001 MHz, 256-bit, L2 4194304 "
                 "bytes", "https://gist.github.com/Terminus-IMRC/5e4b7782c27106dec287050b323cd059"),
    "A100 40GB SXM": _Board(108, 40 * _MIB, 1410, 1215, 5120,
                            "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs, 40 MB L2, 5120-bit HBM2 at "
                            "1215 MHz DDR, 1410 MHz boost", _A100_WP),
    "A100 80GB SXM": _Board(108, 40 * _MIB, 1410, 1593, 5120,
                            "NVIDIA A100 whitepaper (108 SMs, 40 MB L2, 5120-bit) and nvidia-smi on an "
                            "A100-SXM4-80GB (max clocks 1410 / 1593 MHz)", _A100_WP),
    "H100 SXM": _Board(132, 50 * _MIB, 1980, 2619, 5120,
                       "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: 132 SMs, 50 MB L2, 5120-bit "
                       "HBM3) and nvidia-smi on an H100 80GB HBM3 (max clocks 1980 / 2619 MHz)",
                       "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"),
}

# ---- what torch exposes ----------------------------------------------------------------------------------------
# torch.cuda.get_device_properties(i) attribute -> (DeviceQuery field, factor). clock_rate and memory_clock_rate
# are cudaDeviceProp.clockRate / memoryClockRate, in kHz: the CUDA Runtime API reference ("memoryClockRate is the
# peak memory clock frequency in kilohertz"); the CUDA samples' deviceQuery prints both x 1e-3 as MHz; torch's
# torch/cuda/_device_limits.py marks clock_rate "KHz" and multiplies memory_clock_rate by 1000 for Hz.
_TORCH_FIELDS: dict[str, tuple[str, int]] = {
    "multi_processor_count": ("sms", 1), "warp_size": ("warp_size", 1),
    "max_threads_per_block": ("max_threads_per_block", 1),
    "max_threads_per_multi_processor": ("max_threads_per_sm", 1),
    "regs_per_multiprocessor": ("registers_per_sm", 1),
    "shared_memory_per_block": ("shared_memory_per_block_bytes", 1),
    "shared_memory_per_block_optin": ("shared_memory_per_block_optin_bytes", 1),
    "shared_memory_per_multiprocessor": ("shared_memory_per_sm_bytes", 1),
    "L2_cache_size": ("l2_bytes", 1), "total_memory": ("memory_bytes", 1),
    "clock_rate": ("sm_clock_hz", 1000), "memory_clock_rate": ("memory_clock_hz", 1000),
    "memory_bus_width": ("memory_bus_width_bits", 1),
}
TORCH_ATTRIBUTES: frozenset[str] = frozenset(_TORCH_FIELDS) | {"name", "major", "minor"}
# Not in torch 2.5.1 (the oldest torch gpulab supports): read when present; NVML fills the clocks and bus width,
# the compute-capability table (CC_LIMITS) the per-block and per-SM limits.
TORCH_OPTIONAL: frozenset[str] = frozenset({
    "max_threads_per_block", "shared_memory_per_block", "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor", "clock_rate", "memory_clock_rate", "memory_bus_width"})
_NVML = ("sm_clock_hz", "memory_clock_hz", "memory_bus_width_bits")

_FIELDS = ("compute_capability", "sms", "warp_size", "max_threads_per_block", "max_threads_per_sm",
           "registers_per_sm", "shared_memory_per_block_bytes", "shared_memory_per_block_optin_bytes",
           "shared_memory_per_sm_bytes", "l2_bytes", "memory_bytes", "sm_clock_hz", "memory_clock_hz",
           "memory_bus_width_bits")


@dataclass(frozen=True, repr=False)
class DeviceQuery:
    """The execution-model figures of one GPU, each None where unknown.

    ``measured`` is True for this machine's GPU (read from the device), False for published figures.
    ``sources`` names where each field came from: ``"torch"``, ``"NVML"``, ``"derived"`` or
    ``"published: <document>"``; ``source`` says it for the device as a whole. Derived:
    ``max_warps_per_sm`` = max threads per SM / warp size; ``bandwidth_bytes_per_s`` = memory clock x 2
    (double data rate) x bus width / 8. See :func:`device_query` for an example.
    """

    name: str
    compute_capability: tuple[int, int] | None
    sms: int | None
    warp_size: int | None
    max_threads_per_block: int | None
    max_threads_per_sm: int | None
    max_warps_per_sm: int | None
    registers_per_sm: int | None
    shared_memory_per_block_bytes: int | None
    shared_memory_per_block_optin_bytes: int | None
    shared_memory_per_sm_bytes: int | None
    l2_bytes: int | None
    memory_bytes: int | None
    sm_clock_hz: float | None
    memory_clock_hz: float | None
    memory_bus_width_bits: int | None
    bandwidth_bytes_per_s: float | None
    published_bandwidth_bytes_per_s: float | None
    source: str
    measured: bool
    sources: dict[str, str] = field(default_factory=dict, hash=False)
    url: str | None = None

    @property
    def max_resident_threads(self) -> int | None:
        """Threads the GPU keeps in flight at once: SMs x max resident threads per SM (None if either is unknown)."""
        if self.sms is None or self.max_threads_per_sm is None:
            return None
        return self.sms * self.max_threads_per_sm

    def __repr__(self) -> str:
        cells = {label: fmt(self) for label, fmt in _ROWS}
        return (f"DeviceQuery({self.name}, cc {cells['compute capability']}, {'measured' if self.measured else 'published'})"
                f"\n  {cells['SMs']} SMs x {cells['max threads / SM']} threads = {cells['resident threads']} resident;"
                f" {cells['shared memory / SM']} shared memory / SM; L2 {cells['L2 cache']}"
                f"\n  {cells['memory clock']} x 2 x {cells['memory bus']} / 8 = {cells['bandwidth (2 x clock x bus / 8)']}"
                f" (datasheet {cells['bandwidth, datasheet']})")

    def _repr_html_(self) -> str:
        return html_table(["property", self.name], [[label, fmt(self)] for label, fmt in _ROWS],
                          caption=f"{self.name}: {self.source}")


def _int(x: int | None) -> str:
    return NA if x is None else f"{x:,}"


def _gbs(x: float | None) -> str:
    return NA if x is None or math.isnan(x) else f"{x / 1e9:,.0f} GB/s"


_ROWS: tuple[tuple[str, Callable[[DeviceQuery], str]], ...] = (
    ("compute capability", lambda d: NA if d.compute_capability is None else "%d.%d" % d.compute_capability),
    ("SMs", lambda d: _int(d.sms)),
    ("warp size (threads)", lambda d: _int(d.warp_size)),
    ("max threads / block", lambda d: _int(d.max_threads_per_block)),
    ("max threads / SM", lambda d: _int(d.max_threads_per_sm)),
    ("max warps / SM", lambda d: _int(d.max_warps_per_sm)),
    ("resident threads", lambda d: _int(d.max_resident_threads)),
    ("32-bit registers / SM", lambda d: _int(d.registers_per_sm)),
    ("shared memory / block", lambda d: fmt_bytes(d.shared_memory_per_block_bytes)),
    ("shared memory / block, opt-in", lambda d: fmt_bytes(d.shared_memory_per_block_optin_bytes)),
    ("shared memory / SM", lambda d: fmt_bytes(d.shared_memory_per_sm_bytes)),
    ("L2 cache", lambda d: fmt_bytes(d.l2_bytes)),
    ("memory", lambda d: fmt_bytes(d.memory_bytes)),
    ("SM clock (max)", lambda d: NA if d.sm_clock_hz is None else f"{d.sm_clock_hz / 1e9:.2f} GHz"),
    ("memory clock", lambda d: NA if d.memory_clock_hz is None else f"{d.memory_clock_hz / 1e6:.0f} MHz"),
    ("memory bus", lambda d: NA if d.memory_bus_width_bits is None else f"{d.memory_bus_width_bits} bit"),
    ("bandwidth (2 x clock x bus / 8)", lambda d: _gbs(d.bandwidth_bytes_per_s)),
    ("bandwidth, datasheet", lambda d: _gbs(d.published_bandwidth_bytes_per_s)),
)


@dataclass(frozen=True, repr=False)
class DeviceReport:
    """Execution-model figures of several GPUs side by side (immutable): the learner's GPU first when there is
    one (``local``), then the published ones. Text in a terminal, HTML in Jupyter, ``to_dataframe()`` for pandas
    (one row per device). See :func:`device_query` for an example."""

    devices: tuple[DeviceQuery, ...]
    local: DeviceQuery | None
    note: str
    title: str = "deviceQuery: the execution model"

    def __len__(self) -> int:
        return len(self.devices)

    def _labels(self) -> list[str]:
        return [f"{d.name} (this GPU)" if d.measured else d.name for d in self.devices]

    def _table(self) -> tuple[list[str], list[list[str]]]:
        return ["property", *self._labels()], [[label, *(fmt(d) for d in self.devices)] for label, fmt in _ROWS]

    def __repr__(self) -> str:
        header, rows = self._table()
        return f"{self.title}\n{text_table(header, rows)}\n{self.note}"

    def _repr_html_(self) -> str:
        header, rows = self._table()
        sources = "; ".join(f"{label}: {d.source}" for label, d in zip(self._labels(), self.devices))
        urls = " ".join(sorted({d.url for d in self.devices if d.url} | ({_GUIDE_URL} if self.devices else set())))
        return html_table(header, rows, caption=f"{self.title}. Sources: {sources}", footer=f"{self.note}. {urls}")

    def to_dataframe(self) -> Any:
        """One row per device: every numeric field (NaN where unknown), ``max_resident_threads``, ``measured``,
        ``source``; ``compute_capability`` as text ("7.5")."""
        import pandas as pd

        rows = []
        for label, d in zip(self._labels(), self.devices):
            row: dict[str, Any] = {"device": label}
            for name in ("compute_capability", "sms", "warp_size", "max_threads_per_block", "max_threads_per_sm",
                         "max_warps_per_sm", "registers_per_sm", "shared_memory_per_block_bytes",
                         "shared_memory_per_block_optin_bytes", "shared_memory_per_sm_bytes", "l2_bytes",
                         "memory_bytes", "sm_clock_hz", "memory_clock_hz", "memory_bus_width_bits",
                         "bandwidth_bytes_per_s", "published_bandwidth_bytes_per_s"):
                v = getattr(d, name)
                row[name] = ("%d.%d" % v if v else None) if name == "compute_capability" else \
                    (float("nan") if v is None else v)
            rows.append({**row, "max_resident_threads": d.max_resident_threads, "measured": d.measured,
                         "source": d.source})
        return pd.DataFrame(rows)


# ---- building ---------------------------------------------------------------------------------------------------
def _build(name: str, values: dict[str, Any], sources: dict[str, str], *, source: str, measured: bool,
           published_bw: tuple[float, str] | None, url: str | None = None) -> DeviceQuery:
    """Fill the compute capability's limits where nothing else said, derive, and freeze."""
    v, s = dict(values), dict(sources)
    cc = v.get("compute_capability")
    for key, x in CC_LIMITS.get(cc, {}).items() if cc else ():
        if v.get(key) is None:
            v[key], s[key] = x, f"published: {_GUIDE} (compute capability {cc[0]}.{cc[1]})"
    warps = v["max_threads_per_sm"] // v["warp_size"] if v.get("max_threads_per_sm") and v.get("warp_size") else None
    clock, bus = v.get("memory_clock_hz"), v.get("memory_bus_width_bits")
    bandwidth = clock * 2 * bus / 8 if clock and bus else None     # double data rate: two transfers per clock
    for key, x in (("max_warps_per_sm", warps), ("bandwidth_bytes_per_s", bandwidth)):
        if x is not None:
            s[key] = "derived"
    if published_bw is not None:
        s["published_bandwidth_bytes_per_s"] = f"published: {published_bw[1]}"
    return DeviceQuery(name=name, **{k: v.get(k) for k in _FIELDS}, max_warps_per_sm=warps,
                       bandwidth_bytes_per_s=bandwidth,
                       published_bandwidth_bytes_per_s=None if published_bw is None else float(published_bw[0]),
                       source=source, measured=measured, sources={k: s[k] for k in sorted(s)}, url=url)


def _known() -> str:
    return (f"known: {', '.join(_BOARDS)} (or any name gpulab.reference.gpu_spec accepts for them, such as "
            "'Tesla T4' or 'NVIDIA A100-SXM4-40GB')")


def _published(name: Any, param: str) -> DeviceQuery:
    if not isinstance(name, str):
        raise TypeError(f"{param} must be GPU names (str), got {name!r}")
    try:
        spec = gpu_spec(name)
    except (KeyError, ValueError):
        spec = None
    board = _BOARDS.get(spec.name) if spec is not None else None
    if spec is None or board is None:
        raise ValueError(f"{param}: no published execution-model figures for {name!r}; {_known()}")
    values = {"compute_capability": spec.compute_capability, "sms": board.sms, "l2_bytes": board.l2_bytes,
              "sm_clock_hz": board.sm_clock_mhz * 1e6, "memory_clock_hz": board.memory_clock_mhz * 1e6,
              "memory_bus_width_bits": board.bus_bits, "memory_bytes": spec.memory_bytes}
    sources = {k: f"published: {board.source}" for k in ("sms", "l2_bytes", "sm_clock_hz", "memory_clock_hz",
                                                           "memory_bus_width_bits")}
    sources.update(compute_capability=f"published: {spec.source}", memory_bytes=f"published: {spec.source}")
    return _build(spec.name, values, sources, source=f"published: {board.source}; {_GUIDE}", measured=False,
                  published_bw=(spec.bandwidth_bytes_per_s, spec.source), url=board.url)


def published_device(name: str) -> DeviceQuery:
    """Published execution-model figures of the GPU called ``name`` (T4, A100 40GB SXM, A100 80GB SXM, H100 SXM,
    or any name :func:`gpulab.reference.gpu_spec` accepts for them); ``ValueError`` for another GPU.

    Example:
        >>> h100 = published_device("NVIDIA H100 80GB HBM3")
        >>> h100.name, h100.sms, h100.max_resident_threads, h100.shared_memory_per_block_optin_bytes // 1024
        ('H100 SXM', 132, 270336, 227)
    """
    return _published(name, "name")


def _positive(x: Any) -> int | None:
    """A number torch or NVML reported, or None for missing, zero or nonsense (a clock of 0 is not a clock)."""
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 else None


def _read_local(index: int) -> tuple[DeviceQuery, bool]:
    """Read CUDA device ``index`` through torch (and NVML for what this torch lacks); (result, NVML was used)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    get = lambda attr: getattr(props, attr, None)   # noqa: E731 - attributes differ between torch releases
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    major, minor = _positive(get("major")), get("minor")
    if major is not None and isinstance(minor, int):
        values["compute_capability"], sources["compute_capability"] = (major, minor), "torch"
    for attr, (key, factor) in _TORCH_FIELDS.items():
        x = _positive(get(attr))
        if x is not None:
            values[key], sources[key] = (x * factor if factor != 1 else x), "torch"
    used_nvml = False
    if any(values.get(k) is None for k in _NVML):
        from .telemetry import nvml

        for key, x, scale in zip(_NVML, nvml.clocks_and_bus(index), (1e6, 1e6, 1)):
            x = _positive(x)
            if values.get(key) is None and x is not None:
                values[key], sources[key], used_nvml = (x * scale if scale != 1 else x), "NVML", True
    for key in ("sm_clock_hz", "memory_clock_hz"):
        if values.get(key) is not None:
            values[key] = float(values[key])
    name = str(get("name") or f"cuda:{index}")
    try:
        spec = gpu_spec(name)
        published: tuple[float, str] | None = (spec.bandwidth_bytes_per_s, f"{spec.source} (gpulab.reference)")
    except (KeyError, ValueError):
        published = None
    how = "torch " + str(getattr(torch, "__version__", "?")).split("+")[0] + (" and NVML" if used_nvml else "")
    return _build(name, values, sources, source=f"this machine's cuda:{index}, read through {how}", measured=True,
                  published_bw=published), used_nvml


def _cuda_index(device: Any) -> tuple[int | None, str]:
    """The CUDA device index ``device`` names, or (None, why there is no local CUDA device to read)."""
    if isinstance(device, bool) or not (device is None or isinstance(device, (int, str)) or hasattr(device, "type")):
        raise TypeError(f"device must be None, an index, 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")
    index: int | None = None
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"device must be a CUDA index >= 0, got {device!r}")
        index = device
    elif isinstance(device, str) or hasattr(device, "type"):
        kind, _, number = (device if isinstance(device, str) else str(device.type)).strip().lower().partition(":")
        if not isinstance(device, str) and getattr(device, "index", None) is not None:
            number = str(device.index)
        if kind != "cuda":
            if kind in ("cpu", "mps", "xpu", "meta", "xla", "hpu") and not number:
                return None, f"device={device!r} is not a CUDA GPU: published figures only"
            raise ValueError(f"device must be None, an index, 'cpu', 'cuda', 'cuda:N' or a torch.device, "
                             f"got {device!r}")
        if number and not number.isdigit():
            raise ValueError(f"device must name a CUDA index such as 'cuda:0', got {device!r}")
        index = int(number) if number else None
    try:
        import torch
    except ImportError:
        return None, f"torch is not installed ({install_hint('torch')}): published figures only"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU here: published figures only"
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if index is None else index
    if index >= count:
        raise ValueError(f"device={device!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    return index, ""


@checked(device="devspec")
def device_query(device: Any = None, *, compare: Iterable[str] | str = ("T4", "A100 40GB SXM", "H100 SXM")
                 ) -> DeviceReport:
    """The execution-model figures of this machine's CUDA GPU (when there is one) beside published figures of
    the GPUs in ``compare``: the Python counterpart of CUDA's ``deviceQuery`` sample.

    ``device``: None (the current CUDA device), an index, ``"cuda"``, ``"cuda:N"``, a ``torch.device``, or
    ``"cpu"`` (published figures only). A machine without a CUDA GPU or without torch gives the published figures
    and a ``note`` saying why, never an error. ``compare``: names :func:`published_device` knows (T4, A100 40GB
    SXM, A100 80GB SXM, H100 SXM, or the names the cards report, such as "Tesla T4"); an unknown one raises
    ``ValueError`` listing the known ones. On older torch (2.5) the clocks and bus width come from NVML and the
    per-block limits from the CUDA Programming Guide's table for the device's compute capability, each labelled in
    ``DeviceQuery.sources``.

    Example:
        >>> r = device_query("cpu", compare=("Tesla T4", "H100 SXM"))
        >>> r.note
        "device='cpu' is not a CUDA GPU: published figures only"
        >>> [(d.name, d.max_resident_threads) for d in r.devices]
        [('T4', 40960), ('H100 SXM', 270336)]
        >>> print(repr(r).splitlines()[4])
        SMs                              40        132
    """
    names = [compare] if isinstance(compare, str) else compare
    if not isinstance(names, Iterable):
        raise TypeError(f"compare must be a sequence of GPU names, got {compare!r}")
    published: list[DeviceQuery] = []
    for name in names:
        d = _published(name, "compare")
        if all(p.name != d.name for p in published):
            published.append(d)
    index, why = _cuda_index(device)
    local = None if index is None else _read_local(index)[0]
    if local is not None:
        why = f"{local.name}: {local.source}; beside published figures"
    return DeviceReport(tuple(([local] if local else []) + published), local, why)
