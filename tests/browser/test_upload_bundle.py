"""A user uploads her own training code from the submit form and watches it train live."""

from __future__ import annotations

import tarfile

import pytest

from .conftest import wait_for
from .test_submit_and_watch import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A small classifier of the test's own (not a built-in workload), using the runtime the way
# docs/user-guide.md shows. Each rank prints lines naming itself, so the log's rank selector
# can be checked; the short sleep keeps it running while the page watches.
TRAIN = b"""\
import sys
import time

import torch
import torch.distributed as dist
from synclane import Checkpointer, Reporter, wrap
from torch import nn

steps = int(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
reporter = Reporter.from_env()
model = wrap(net, optimizer=optimizer, reporter=reporter)
centres = torch.randn(3, 8, generator=torch.Generator().manual_seed(7))

with Checkpointer(model, optimizer) as ckpt:
    for step in range(ckpt.resume() + 1, steps + 1):
        data = torch.Generator().manual_seed(step * 100 + rank)
        labels = torch.randint(0, 3, (32,), generator=data)
        x = centres[labels] + 0.5 * torch.randn(32, 8, generator=data)
        loss = nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reporter.log({"loss": loss.item()}, step=step)
        print(f"blobs rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        ckpt.step_done(step)
        time.sleep(0.1)
    ckpt.close()
"""


def blobs_bundle(path):
    """A .tar.gz holding the training script above as train.py."""
    with tarfile.open(path, "w:gz") as archive:
        script = path.parent / "train.py"
        script.write_bytes(TRAIN)
        archive.add(script, arcname="train.py")
    return path


def test_a_user_uploads_her_code_from_the_form_and_watches_it_train(page, live, alice, tmp_path):
    log_in(page, live, "alice")
    page.select_option("select[name=tenant]", "vision")
    page.fill("input[name=name]", "blobs from the browser")
    page.select_option("select[name=workload]", "")  # my own code
    page.set_input_files("input[name=code_file]", str(blobs_bundle(tmp_path / "blobs.tar.gz")))
    page.fill("input[name=entrypoint]", "train.py 150")
    page.fill("input[name=world_size]", "2")
    page.fill("input[name=steps]", "150")
    page.click("form.submit-form button[type=submit]")

    page.wait_for_url(f"{live.url}/jobs/*/")
    assert "train.py 150" in page.content()  # the job page names the code it runs
    wait_for(page, "document.getElementById('live-state').textContent === 'live'", timeout_s=15)
    # 1. The loss chart gains points over the websocket while the script trains.
    wait_for(page, "window.synclane.points >= 3", timeout_s=120)
    seen = page.evaluate("window.synclane.points")
    wait_for(page, f"window.synclane.points > {seen}", timeout_s=60)
    # 2. The live log shows rank 0's lines, and rank 1's once rank 1 is picked.
    wait_for(
        page,
        "document.getElementById('log-view').textContent.includes('blobs rank 0 step')",
        timeout_s=30,
    )
    lines = page.evaluate("window.synclane.logLines")
    wait_for(page, f"window.synclane.logLines > {lines}", timeout_s=30)
    page.select_option("#log-source", "1")
    wait_for(
        page,
        "document.getElementById('log-view').textContent.includes('blobs rank 1 step')",
        timeout_s=30,
    )
    assert "blobs rank 0 step" not in page.inner_text("#log-view")
    # 3. It runs to the end.
    wait_for(
        page, "document.getElementById('job-status').textContent === 'succeeded'", timeout_s=180
    )
