"""gpulab.course.data.augment: one batched augmentation for lessons 06 and 08 (shape, dtype, range, seeding, effect)."""
from __future__ import annotations

import pytest
import torch

from gpulab.course.data.augment import augment_batch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def images(n=32, c=3, h=32, w=32, seed=0):
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_shape_dtype_and_range_without_and_with_normalisation():
    x = images()
    y = augment_batch(x, size=24, jitter=0.3, generator=gen(0))
    assert y.shape == (32, 3, 24, 24) and y.dtype == torch.float32 and y.device == x.device
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0
    assert augment_batch(x, generator=gen(0)).shape == (32, 3, 32, 32)          # default: the input's size
    z = augment_batch(x, size=24, jitter=0.3, mean=MEAN, std=STD, generator=gen(0))
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    assert torch.allclose(z, (y - mean) / std, atol=1e-6)                     # same draws, then normalised
    low, high = (0 - mean) / std, (1 - mean) / std
    assert bool((z >= low - 1e-6).all()) and bool((z <= high + 1e-6).all())
    floats = augment_batch(x.float() / 255, size=24, jitter=0.3, generator=gen(0))
    assert torch.allclose(floats, y, atol=1e-6)                                # uint8 and [0, 1] floats agree


def test_deterministic_under_a_seed_and_different_across_seeds():
    x = images()
    a = augment_batch(x, jitter=0.3, generator=gen(7))
    b = augment_batch(x, jitter=0.3, generator=gen(7))
    c = augment_batch(x, jitter=0.3, generator=gen(8))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c, atol=1e-3)
    torch.manual_seed(3)
    d = augment_batch(x)                                                       # the global generator
    torch.manual_seed(3)
    assert torch.equal(d, augment_batch(x))


def test_it_augments_each_image_differently():
    x = images(n=64)
    plain = x.float() / 255
    y = augment_batch(x, generator=gen(1))
    per_image = (y - plain).abs().flatten(1).amax(dim=1)
    assert bool((per_image > 0.05).all())                                    # every image changed
    # flip only: every image is itself or its mirror image, and both happen
    flip_only = augment_batch(x, scale=(1.0, 1.0), ratio=(1.0, 1.0), generator=gen(2))
    same = [torch.allclose(f, p, atol=1e-5) for f, p in zip(flip_only, plain)]
    mirrored = [torch.allclose(f, p.flip(-1), atol=1e-5) for f, p in zip(flip_only, plain)]
    assert all(s or m for s, m in zip(same, mirrored))
    assert 10 < sum(mirrored) < 54
    # no flip, whole image: the identity
    assert torch.allclose(augment_batch(x, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, generator=gen(2)),
                          plain, atol=1e-5)
    # crops: a pixel-wise different picture, still of the same image statistics
    crops = augment_batch(x, flip=False, generator=gen(3))
    assert not torch.allclose(crops, plain, atol=1e-2)


def test_jitter_changes_brightness_per_image():
    x = torch.full((16, 3, 8, 8), 128, dtype=torch.uint8)
    y = augment_batch(x, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, jitter=0.3, generator=gen(4))
    levels = y.mean(dim=(1, 2, 3))
    assert float(levels.min()) >= 128 / 255 * 0.7 - 1e-6 and float(levels.max()) <= 128 / 255 * 1.3 + 1e-6
    assert float(levels.max() - levels.min()) > 0.05                        # each image its own factor


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(x=[[1]]), TypeError, "list"),
    (dict(x=torch.zeros(3, 8, 8)), ValueError, r"\(3, 8, 8\)"),
    (dict(x=torch.zeros(2, 3, 8, 8, dtype=torch.int64)), TypeError, "int64"),
    (dict(size=0), ValueError, "size"),
    (dict(scale=(0.5, 1.5)), ValueError, "scale"),
    (dict(scale=0.5), TypeError, "scale"),
    (dict(ratio=(2.0, 1.0)), ValueError, "ratio"),
    (dict(flip=1), TypeError, "flip"),
    (dict(jitter=1.0), ValueError, "jitter"),
    (dict(mean=MEAN), ValueError, "mean and std"),
    (dict(mean=(0.5,), std=(0.5,)), ValueError, "one value per channel"),
    (dict(mean=MEAN, std=(0.2, 0.0, 0.2)), ValueError, "std"),
    (dict(generator="seed"), TypeError, "generator"),
])
def test_bad_input_is_refused(kwargs, error, match):
    kwargs = {"x": images(n=2, h=8, w=8), **kwargs}
    with pytest.raises(error, match=match):
        augment_batch(**kwargs)
