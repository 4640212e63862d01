"""No runtime, no torch.distributed: just a program torchrun starts on every rank."""

import os
import sys

rank = os.environ.get("RANK", "?")
print(f"hello from rank {rank}: {' '.join(sys.argv[1:])}", flush=True)
