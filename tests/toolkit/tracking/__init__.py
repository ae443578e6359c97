"""Tests of ``gpulab.tracking``."""
