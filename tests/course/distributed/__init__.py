"""Tests of ``gpulab.course.distributed``."""
