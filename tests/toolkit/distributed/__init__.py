"""Tests of ``gpulab.distributed``."""
