"""shapes_cnn: a small convolutional classifier on 16x16 images of four shapes.

    torchrun --standalone --nnodes 1 --nproc-per-node 2 -m workers.workloads.shapes_cnn --steps 200

The images are generated inside the package, deterministically (fixed generator seed, no
download): a horizontal bar, a vertical bar, a diagonal or a hollow square, at a random place
and size, on Gaussian noise. 4,096 training and 512 held-out images. Training: see classify.py.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from workers.workloads.classify import Split, Task, run

SIZE = 16
CLASSES = ("horizontal", "vertical", "diagonal", "square")
TRAIN_IMAGES, VAL_IMAGES = 4096, 512
DATA_SEED = 1234  # the dataset is the package's: the same for every run and --seed
NOISE = 0.35


def draw(label: int, gen: torch.Generator) -> torch.Tensor:
    """One image of class ``label``: the shape at a random place and size, plus noise."""
    img = torch.randn(SIZE, SIZE, generator=gen) * NOISE
    length = int(torch.randint(6, 13, (1,), generator=gen))
    r, c = (int(v) for v in torch.randint(0, SIZE - length + 1, (2,), generator=gen))
    if label == 0:
        img[r, c : c + length] += 1.0
    elif label == 1:
        img[r : r + length, c] += 1.0
    elif label == 2:
        steps = torch.arange(length)
        img[r + steps, c + steps] += 1.0
    else:
        img[r, c : c + length] += 1.0
        img[r + length - 1, c : c + length] += 1.0
        img[r : r + length, c] += 1.0
        img[r : r + length, c + length - 1] += 1.0
    return img


def make_split(count: int, gen: torch.Generator) -> Split:
    labels = torch.randint(0, len(CLASSES), (count,), generator=gen)
    images = torch.stack([draw(int(label), gen) for label in labels])
    return Split(x=images.unsqueeze(1), y=labels)


def shapes(_args: argparse.Namespace) -> tuple[Split, Split]:
    """Return (train, validation): the same images on every rank and in every run."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    return make_split(TRAIN_IMAGES, gen), make_split(VAL_IMAGES, gen)


class ShapesCNN(nn.Module):
    """Two conv blocks and a linear head: about 2,300 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * (SIZE // 4) ** 2, len(CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits."""
        return self.head(self.features(x).flatten(1))


TASK = Task(name="shapes_cnn", data=shapes, model=lambda _args: ShapesCNN(), lr=3e-3)

if __name__ == "__main__":
    run(TASK)
