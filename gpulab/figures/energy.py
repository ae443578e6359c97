"""Published figures on GPU energy: how NVML reports power and energy, how much of a run its power readings see,
and what choosing a power limit or batch size saves. Figures are percentages or seconds (their ``unit`` says
which); each names the hardware it was measured on."""
from __future__ import annotations

from .published import Published

_NVML_DOCS = ("NVIDIA NVML API Reference Guide, Device Queries",
              "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html")

FIGURES: tuple[Published, ...] = (
    Published("nvml-power-sampling", "On A100 and H100 cards, the board power that nvidia-smi and NVML report "
              "reflects only about a quarter of the running time; what the GPU draws in the remaining three "
              "quarters never enters the reading, so energy integrated from those samples can be far off for "
              "short or bursty work.", 25, 25, "% of runtime sampled", "NVIDIA A100 and H100",
              "Yang, Adamek & Armour, 'Part-time Power Measurements: nvidia-smi's Lack of Attention', "
              "arXiv 2312.02741, SC24",
              "https://arxiv.org/html/2312.02741v2", "2024",
              "Published at SC24 as 'Accurate and Convenient Energy Measurements for GPUs'. The study profiled "
              "over 70 GPUs from every generation since Fermi against an external power meter; "
              "its proposed measurement practices cut the energy error by 35% on average and by up to 65% in the "
              "cases it reports (abstract). The per-GPU power update periods and averaging windows are given in "
              "the paper's body, which is not quoted here."),
    Published("nvml-energy-counter", "NVML's nvmlDeviceGetPowerUsage averages board power over the last second on "
              "Ampere GPUs other than GA100 and on newer ones, and returns an instantaneous value on GA100 (A100) "
              "and older; nvmlDeviceGetTotalEnergyConsumption instead counts the energy used since the driver was "
              "last loaded, so two reads around a run give its energy without sampling power.", 1, 1,
              " s power-averaging window", "NVIDIA Ampere (except GA100) and newer GPUs", *_NVML_DOCS, "2025-12",
              "Energy counter: millijoules since the driver was last reloaded, on Volta or newer fully supported "
              "devices. Power: milliwatts for the board and its circuitry (memory included); the NVML field values "
              "NVML_FI_DEV_POWER_AVERAGE and NVML_FI_DEV_POWER_INSTANT ask for the averaged or the instant value "
              "explicitly. Wording checked in NVIDIA's nvml.h and its cuda-python NVML bindings (API guide vR590)."),
    Published("nvml-energy-window", "NVML's energy counter advances only about every 100 ms, so ML.ENERGY measure "
              "GPU energy over windows of at least about 5 s (repeating a short workload to fill them) with a "
              "cooldown of about 5 s between trials: shorter windows gave scattered, lower readings, and a GPU "
              "still warm from the previous trial drew more power.", 5, 5, " s measurement window",
              "8 x NVIDIA A100 (attention layer of Llama 3.2 3B)",
              "ML.ENERGY blog, 'Thermally Stable Profiling for Accurate GPU Energy Measurement'",
              "https://ml.energy/blog/energy/measurement/thermally-stable-profiling-for-accurate-gpu-energy-"
              "measurement/", "2026-02",
              "About 100 ms counter update (from NVIDIA's open GPU kernel module source, as the post cites); "
              "readings stabilised from 5 s windows on; 10 trials per setting. The post says the right window and "
              "cooldown depend on the workload, GPU and cooling, and should be profiled per setup."),
    Published("zeus-energy-efficiency", "Choosing the training batch size and the GPU power limit together for "
              "recurring training jobs, rather than the published default batch size at the maximum power limit, "
              "improved the energy efficiency of training by 15.3% to 75.8% across the workloads Zeus was "
              "evaluated on.", 15.3, 75.8, "% energy-efficiency gain", "NVIDIA V100, A40, RTX 6000 and P100",
              "You, Chung & Chowdhury, 'Zeus: Understanding and Optimizing GPU Energy Consumption of DNN "
              "Training', NSDI '23", "https://arxiv.org/abs/2208.06102", "2023-04",
              "Energy and time are measured to a target validation metric (energy- and time-to-accuracy). Saving "
              "energy can cost time: the paper describes a time-energy trade-off that the user steers with a "
              "weight between the two; the time cost at each end is in the paper's evaluation, not quoted here. "
              "GPUs: those of the published evaluation traces (github.com/ml-energy/zeus, "
              "examples/research_reproducibility/zeus_nsdi23/trace)."),
    Published("power-cap-energy", "Lowering the GPU power limit (power capping) while training a transformer "
              "language model cut its energy use by about 15%, with only a marginal increase in training time.",
              15, 15, "% less energy", "NVIDIA GPUs at the MIT Lincoln Laboratory Supercomputing Center",
              "McDonald, Li, Frey, Tiwari, Gadepally & Samsi, 'Great Power, Great Responsibility: "
              "Recommendations for Reducing Energy for Training Language Models', Findings of NAACL 2022",
              "https://aclanthology.org/2022.findings-naacl.151", "2022-07",
              "The 15% and 'marginal' time increase are the paper's abstract; the exact cap, GPU model and time "
              "overhead per model are in its body (arXiv 2205.09646), not quoted here."),
)
