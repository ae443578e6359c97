"""Input pipelines: lesson 06 (input pipelines and DALI), and the image sets later lessons read.

Image sets on disk, synthetic or real (``images``, ``downloads``), batched augmentation (``augment``), the lesson's
pipelines in PyTorch, TensorFlow and DALI (``pipelines``, ``dali``) and DALI's wheel installed into a running
notebook (``dali_install``).
"""
