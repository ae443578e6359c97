"""The few reference models the course uses, and matching synthetic batches.

Small on purpose: each is a few readable lines of standard PyTorch, so a learner can see what is being
timed. Every model takes ``(inputs)`` and returns class logits.

Example:
    >>> import gpulab as gl
    >>> from gpulab import course
    >>> model = course.models.small_cnn()
    >>> x, y = course.models.example_batch("small_cnn", 8)
    >>> model(x).shape
    torch.Size([8, 10])
"""
from __future__ import annotations

from typing import Any, Callable

from ..._check import checked

__all__ = ["mlp", "residual_mlp", "small_cnn", "resnet_small", "tiny_transformer", "example_batch", "MODELS"]


def mlp(in_features: int = 784, hidden: int = 512, classes: int = 10, layers: int = 2) -> Any:
    """A multilayer perceptron for MNIST-shaped inputs (flattened 28x28)."""
    from torch import nn

    blocks: list[Any] = [nn.Flatten()]
    width = in_features
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    blocks.append(nn.Linear(width, classes))
    return nn.Sequential(*blocks)


def residual_mlp(in_features: int = 784, width: int = 256, blocks: int = 8, classes: int = 10) -> Any:
    """A stack of ``blocks`` identical residual blocks (a transformer's MLP half: LayerNorm, a linear layer four times
    as wide, GELU, back to ``width``, added to the input), held in ``.blocks``, between an input projection of the
    flattened input and a classifier: the repeated structure regional compilation compiles once (lesson 10)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x: Any) -> Any:
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    class ResidualMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Sequential(nn.Flatten(), nn.Linear(in_features, width))
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, classes))

        def forward(self, x: Any) -> Any:
            h = self.inp(x)
            for block in self.blocks:
                h = block(h)
            return self.head(h)

    return ResidualMLP()


def small_cnn(channels: int = 3, classes: int = 10, width: int = 32) -> Any:
    """Two conv blocks and a linear head for 32x32 images."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 8 * 8, classes),
    )


def _basic_block(cin: int, cout: int, stride: int) -> Any:
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))

    return BasicBlock()


def resnet_small(classes: int = 10, width: int = 16, blocks_per_stage: int = 1) -> Any:
    """A ResNet-style network for 32x32 images: three stages of residual blocks (width, 2x, 4x)."""
    from torch import nn

    layers: list[Any] = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    cin = width
    for stage, mult in enumerate((1, 2, 4)):
        for b in range(blocks_per_stage):
            stride = 2 if stage > 0 and b == 0 else 1
            layers.append(_basic_block(cin, width * mult, stride))
            cin = width * mult
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def tiny_transformer(vocab: int = 1000, d_model: int = 128, heads: int = 4, layers: int = 2, seq_len: int = 64,
                     classes: int = 10) -> Any:
    """Token embeddings + transformer encoder blocks + mean pooling + a linear classifier."""
    import torch
    from torch import nn

    class TinyTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
            layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, classes)

        def forward(self, tokens: Any) -> Any:
            h = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
            return self.head(self.encoder(h).mean(dim=1))

    return TinyTransformer()


MODELS: dict[str, tuple[Callable[..., Any], str]] = {
    "mlp": (mlp, "image28"),
    "residual_mlp": (residual_mlp, "image28"),
    "small_cnn": (small_cnn, "image32"),
    "resnet_small": (resnet_small, "image32"),
    "tiny_transformer": (tiny_transformer, "tokens"),
}


@checked(device="device")
def example_batch(model: str, batch_size: int, device: Any = "cpu", seed: int = 0, classes: int = 10) -> tuple[Any, Any]:
    """A seeded synthetic ``(inputs, targets)`` batch shaped for one of :data:`MODELS`.

    Targets depend on the inputs (a fixed random projection), so the data is learnable and accuracy
    checks mean something.
    """
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: choose from {sorted(MODELS)}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
    import torch

    g = torch.Generator().manual_seed(seed)
    kind = MODELS[model][1]
    if kind == "tokens":
        x = torch.randint(0, 1000, (batch_size, 64), generator=g)
        y = (x[:, :8].sum(dim=1) % classes)
    else:
        shape = (batch_size, 1, 28, 28) if kind == "image28" else (batch_size, 3, 32, 32)
        x = torch.randn(shape, generator=g)
        proj = torch.randn(x[0].numel(), classes, generator=torch.Generator().manual_seed(1234))
        y = (x.flatten(1) @ proj).argmax(dim=1)
    return x.to(device), y.to(device)
