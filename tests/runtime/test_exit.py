"""A script that ends without closing anything leaves no process group or comm thread behind.

Gloo's worker threads torn down during interpreter finalization (no
``dist.destroy_process_group()``) aborted a rank now and then at exit ("terminate called
without an active exception"). ``wrap`` registers an exit handler that closes the session and
destroys the groups while the interpreter is whole; a handler the script registered before
``wrap`` runs after it and reports what is left.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.workloads.test_tiny_gpt import TORCHRUN, torchrun_env

SCRIPT = textwrap.dedent(
    """
    import atexit, threading
    import torch, torch.distributed as dist
    from torch import nn
    from synclane import wrap

    def report():  # registered first, so it runs after wrap()'s own exit handler
        threads = [t.name for t in threading.enumerate() if t.name.startswith("synclane-comm")]
        print(f"AT EXIT initialized={dist.is_initialized()} comm_threads={len(threads)}", flush=True)

    atexit.register(report)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.Linear(512, 8))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    model = wrap(net, optimizer=optimizer)
    for step in range(1, 16):
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(step + 100 * dist.get_rank()))
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("TRAINED", flush=True)  # and ends: no close(), no destroy_process_group()
    """
)


@pytest.mark.dist
@pytest.mark.parametrize("sync", ["adaptive", "powersgd"])
def test_a_script_that_closes_nothing_exits_cleanly(tmp_path: Path, sync: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # adaptive: averages on the background lane every 2 steps (one may be in flight at the
    # end); powersgd: torch's hook leaves asynchronous gloo work objects behind.
    env = torchrun_env(SYNCLANE_SYNC=sync, SYNCLANE_SYNC_PERIOD="2", SYNCLANE_PROBE_EVERY="0")
    done = subprocess.run(
        [*TORCHRUN, "--nproc-per-node", "2", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "terminate called" not in output
    assert done.stdout.count("TRAINED") == 2
    # Both ranks share torchrun's stdout: their lines may interleave, so read each report
    # on its own rather than line by line.
    reports = re.findall(r"AT EXIT initialized=(\w+) comm_threads=(\d+)", done.stdout)
    assert reports == [("False", "0")] * 2, done.stdout[-2000:]
