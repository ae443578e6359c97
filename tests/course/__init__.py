"""The course's scaffolding (``gpulab.course``), mirrored: a folder per part of the course."""
