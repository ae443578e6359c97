"""Tests of ``gpulab.telemetry``."""
