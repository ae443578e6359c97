"""Tests of ``gpulab.course.capstone``."""
