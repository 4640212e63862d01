"""A zoo of small models of different families, each above 1 MB of parameters.

    from workers.workloads.zoo import ZOO
    spec = ZOO["rnn_lm"]
    model = spec.build(loss_inside=True)           # forward(x, y) returns the loss
    x, y = spec.batch(rank=0, step=1, size=4)
    loss = model(x, y)                              # or, loss_inside=False:
    loss = spec.loss(model(x), y)                   #   forward(x) returns the output

The runtime's tests run every sync strategy on each of them (tests/runtime/test_zoo.py), and
the benchmarks can train them as "a user's own model": a recurrent language model, an MLP
classifier with BatchNorm, a conv net and a transformer. Only the transformer has layers the
``adaptive`` strategy finds critical by name (``self_attn``); the others exercise its fallback.
Above 1 MB of parameters each, so that at DDP's default 1 MB buckets every one of them has
more than one bucket (the case that once hung ``powersgd``).

Batches are drawn from a generator seeded by (rank, step), so a resumed run sees the batches
an uninterrupted one would. Compute is kept tiny: a step of any of them takes milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 256
SEQ = 16


class RecurrentLM(nn.Module):
    """An LSTM language model over bytes: (batch, SEQ) tokens -> (batch, SEQ, VOCAB) logits."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 128)
        self.rnn = nn.LSTM(128, width, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        embedded = self.embed(tokens)
        if tokens.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # oneDNN has no bf16 LSTM on CPUs without AVX-512 ("could not create a primitive
            # descriptor"): under CPU autocast the recurrent layer runs in float32, the
            # embedding and the head stay in bf16.
            with torch.autocast("cpu", enabled=False):
                hidden, _ = self.rnn(embedded.float())
        else:
            hidden, _ = self.rnn(embedded)
        logits: torch.Tensor = self.head(hidden)
        return logits


class BatchNormMLP(nn.Module):
    """An MLP classifier with BatchNorm: (batch, 64) features -> (batch, 10) logits."""

    def __init__(self, width: int = 640) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(64, width),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Linear(width, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.layers(x)
        return logits


class ConvNet(nn.Module):
    """A conv classifier: (batch, 3, 16, 16) images -> (batch, 10) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(128 * 4 * 4, 160), nn.ReLU())
        self.out = nn.Linear(160, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.out(self.classifier(self.features(images)))
        return logits


class Transformer(nn.Module):
    """A transformer encoder classifier: (batch, SEQ) tokens -> (batch, 10) logits."""

    def __init__(self, width: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(SEQ, width))
        layer = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=4 * width, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embed(tokens) + self.position)
        logits: torch.Tensor = self.head(hidden.mean(dim=1))
        return logits


class LossInside(nn.Module):
    """``net`` with its loss computed in ``forward(x, y)`` (what ``wrap`` sees as a loss)."""

    def __init__(self, net: nn.Module, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        super().__init__()
        self.net = net
        self.loss = loss

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.net(x), y)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def class_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


def _generator(rank: int, step: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(1_000_003 * salt + 1009 * rank + step)


def lm_batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Byte sequences that repeat a short random motif (learnable), next-token targets."""
    g = _generator(rank, step, 1)
    motif = torch.randint(0, VOCAB, (size, 4), generator=g)
    stream = motif.repeat(1, SEQ // 4 + 1)
    return stream[:, :SEQ].contiguous(), stream[:, 1 : SEQ + 1].contiguous()


def features_batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian features whose label is the arg-max of a fixed projection."""
    g = _generator(rank, step, 2)
    x = torch.randn(size, 64, generator=g)
    projection = torch.randn(64, 10, generator=torch.Generator().manual_seed(7))
    return x, (x @ projection).argmax(dim=1)


def images_batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise images with a bright square whose quadrant is the label (10 classes: 4 used)."""
    g = _generator(rank, step, 3)
    images = 0.1 * torch.randn(size, 3, 16, 16, generator=g)
    labels = torch.randint(0, 4, (size,), generator=g)
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 2)
        images[i, :, 8 * r : 8 * r + 8, 8 * c : 8 * c + 8] += 1.0
    return images, labels


def tokens_batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences whose label is the most frequent token's value modulo 10."""
    g = _generator(rank, step, 4)
    tokens = torch.randint(0, 12, (size, SEQ), generator=g)
    return tokens, tokens.mode(dim=1).values % 10


@dataclass(frozen=True)
class ModelSpec:
    """One zoo entry: how to build the model, draw a batch and compute the loss."""

    name: str
    family: str
    make: Callable[[], nn.Module]
    batch: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]  # (rank, step, size)
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    has_attention: bool = False

    def build(self, *, loss_inside: bool, seed: int = 0) -> nn.Module:
        """The model with the same initial weights for a given seed (on every rank).

        ``loss_inside``: ``forward(x, y)`` returns the loss; else ``forward(x)`` the output.
        """
        torch.manual_seed(seed)
        net = self.make()
        return LossInside(net, self.loss) if loss_inside else net


ZOO: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("rnn_lm", "recurrent LM (LSTM)", RecurrentLM, lm_batch, lm_loss),
        ModelSpec(
            "bn_mlp", "MLP classifier with BatchNorm", BatchNormMLP, features_batch, class_loss
        ),
        ModelSpec("convnet", "conv net", ConvNet, images_batch, class_loss),
        ModelSpec(
            "transformer", "transformer encoder", Transformer, tokens_batch, class_loss, True
        ),
    )
}


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters."""
    return sum(q.numel() * q.element_size() for q in model.parameters())
