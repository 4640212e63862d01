"""topics_encoder: a transformer encoder that tells which of four topics a sequence is about.

    torchrun --standalone --nnodes 1 --nproc-per-node 2 -m workers.workloads.topics_encoder --steps 200

The sequences are generated inside the package, deterministically (fixed generator seed, no
download): 64 token ids, four topics of eight keyword ids each; every position is one of its
topic's keywords with probability 0.25, any id otherwise, so a sequence only tells its topic
through the share of keywords it holds. 4,096 training and 512 held-out sequences of
``--seq-len`` tokens. Training: see classify.py.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from workers.workloads.classify import Split, Task, run

VOCAB = 64
TOPICS = 4
KEYWORDS_PER_TOPIC = 8
KEYWORD_SHARE = 0.25
TRAIN_SEQUENCES, VAL_SEQUENCES = 4096, 512
DATA_SEED = 4321  # the dataset is the package's: the same for every run and --seed


def make_split(count: int, seq_len: int, gen: torch.Generator) -> Split:
    labels = torch.randint(0, TOPICS, (count,), generator=gen)
    noise = torch.randint(0, VOCAB, (count, seq_len), generator=gen)
    keyword = torch.randint(0, KEYWORDS_PER_TOPIC, (count, seq_len), generator=gen)
    keyword += (labels * KEYWORDS_PER_TOPIC).unsqueeze(1)
    use_keyword = torch.rand(count, seq_len, generator=gen) < KEYWORD_SHARE
    return Split(x=torch.where(use_keyword, keyword, noise), y=labels)


def topics(args: argparse.Namespace) -> tuple[Split, Split]:
    """Return (train, validation): the same sequences on every rank and in every run."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    return (
        make_split(TRAIN_SEQUENCES, args.seq_len, gen),
        make_split(VAL_SEQUENCES, args.seq_len, gen),
    )


class TopicsEncoder(nn.Module):
    """Token + position embeddings, a 2-layer transformer encoder, mean pooling, a linear head."""

    def __init__(self, seq_len: int, d_model: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, TOPICS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return topic logits."""
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.encoder(self.tok(ids) + self.pos(pos)).mean(dim=1))


TASK = Task(
    name="topics_encoder",
    data=topics,
    model=lambda args: TopicsEncoder(args.seq_len),
    lr=3e-3,
)

if __name__ == "__main__":
    run(TASK)
