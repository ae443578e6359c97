"""NVML's records of a device, copied at one moment (re-exported by :mod:`gpulab.telemetry.nvml`, which reads them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["NVMLDevice", "MemoryInfo", "DeviceOrder", "PcieLink"]


@dataclass(frozen=True)
class NVMLDevice:
    """Static facts about one GPU or MIG slice.

    ``index`` is NVML's index of the physical GPU (PCI order, blind to ``CUDA_VISIBLE_DEVICES``). A MIG
    slice has ``parent_uuid`` (its card's ``GPU-…`` UUID), ``mig_index`` (its slot on the card) and its own
    ``MIG-…`` UUID, name and memory.
    """

    index: int
    name: str
    uuid: str
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    pci_bus_id: str | None = None
    mig_enabled: bool | None = None
    parent_uuid: str | None = None
    mig_index: int | None = None

    @property
    def is_mig(self) -> bool:
        """True for a MIG slice (a ``MIG-…`` device), False for a whole GPU."""
        return self.parent_uuid is not None


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory as NVML reports it, copied at one moment.

    With the v2 query (drivers since R510) ``used_bytes`` is what processes allocated, which is what
    ``nvidia-smi`` shows as used, and ``reserved_bytes`` is what the driver and firmware keep. The v1 query
    folds the reserve into ``used_bytes``; then ``reserved_bytes`` is None and ``note`` says so.
    """

    total_bytes: int
    free_bytes: int
    used_bytes: int
    reserved_bytes: int | None
    version: Literal[1, 2]
    note: str = ""


@dataclass(frozen=True)
class DeviceOrder:
    """The GPUs a CUDA process sees, in CUDA's order, and how sure that mapping is.

    ``source`` says how the order was found: ``"torch"`` (UUIDs of the devices torch initialised: exact),
    ``"env"`` (``CUDA_VISIBLE_DEVICES`` parsed like CUDA does) or ``"nvml"`` (NVML's PCI order). ``ambiguous``
    is True when CUDA's fastest-first order could differ from PCI order (different GPU models and no
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) or when several MIG slices could be meant; ``notes`` say why and what to set.
    """

    devices: tuple[NVMLDevice, ...]
    source: Literal["torch", "env", "nvml"]
    ambiguous: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PcieLink:
    """A GPU's PCIe link as NVML reads it: the ``generation`` and ``width`` (lanes) the link can run at, the lower of
    what the GPU and the slot support (``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width``), and the generation and
    width it runs at now (``current_*``: an idle GPU lowers them to save power, so they read low between copies)."""

    generation: int
    width: int
    current_generation: int | None = None
    current_width: int | None = None

    def __str__(self) -> str:
        now = (f"; running at Gen{self.current_generation} x{self.current_width} now"
               if self.current_generation and self.current_width else "")
        return f"PCIe Gen{self.generation} x{self.width}{now}"
