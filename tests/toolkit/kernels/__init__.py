"""Tests of ``gpulab.kernels``."""
