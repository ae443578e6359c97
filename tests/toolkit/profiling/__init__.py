"""Tests of ``gpulab.profiling``."""
