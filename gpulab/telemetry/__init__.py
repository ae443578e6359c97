"""GPU and host telemetry. ``nvml`` is the only module in gpulab that imports NVML (nvidia-ml-py)."""
