"""workers/runtime/README.md's example, run exactly as written on two real ranks.

The block is read from the README byte for byte, saved as ``example.py`` in an empty folder
and run under ``torchrun`` with each strategy. After ``synchronize()`` both ranks evaluate
identical replicas, so they print the same validation loss.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.workloads.test_tiny_gpt import TORCHRUN, torchrun_env

README = Path(__file__).resolve().parents[2] / "workers" / "runtime" / "README.md"


def example() -> str:
    """The README's first python block (the one that starts with ``# example.py``)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks and blocks[0].startswith("# example.py"), "the README's example moved"
    return str(blocks[0])


@pytest.mark.dist
@pytest.mark.parametrize("sync", ["full", "adaptive", "powersgd", "localsgd", "none"])
def test_the_readme_example_runs_as_written(tmp_path: Path, sync: str) -> None:
    (tmp_path / "example.py").write_text(example())
    env = torchrun_env(
        SYNCLANE_SYNC=sync, SYNCLANE_RUN_DIR=str(tmp_path / "run"), SYNCLANE_CHECKPOINT_EVERY="20"
    )
    done = subprocess.run(
        [*TORCHRUN, "--nproc-per-node", "2", "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    # Two ranks print to one pipe: a line may land in the middle of the other's.
    printed = dict(re.findall(r"rank (\d) val_loss (\d+\.\d{6})", done.stdout))
    assert set(printed) == {"0", "1"}, done.stdout[-2000:]
    if sync != "none":  # none never communicates: its replicas stay apart
        assert printed["0"] == printed["1"], printed
    assert float(printed["0"]) < 1.386  # below chance (ln 4): it learned something
    assert sorted(p.name for p in (tmp_path / "run").glob("ckpt-*.pt")) == [
        "ckpt-00000040.pt",
        "ckpt-00000060.pt",
    ]
    # It shows the session its loss and passes the optimizer: no warning about either (the
    # one about its attention-free model choosing critical parameters by measurement is due).
    assert "seen no loss" not in done.stderr and "without optimizer" not in done.stderr
    assert ("no parameter name matches" in done.stderr) == (sync == "adaptive")
