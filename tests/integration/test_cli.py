"""The ``synclane`` CLI, run as a subprocess against the live server and a real run."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import pytest

from controlplane.jobs.models import Job
from controlplane.telemetry.models import Alarm
from controlplane.tenancy.models import Tenant

from ..conftest import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SYNCLANE = str(Path(sys.executable).with_name("synclane"))


@pytest.fixture
def cli(tmp_path):
    """``cli(*args)``: run synclane with its own config folder; return the finished process."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "COLUMNS": "200"}

    def run(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [SYNCLANE, *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert proc.returncode == 0, (proc.stdout, proc.stderr)
        return proc

    run.config = tmp_path / "config" / "synclane" / "login.json"
    return run


@pytest.fixture
def alice_cli(cli, live, alice):
    cli("login", live.url, "--username", "alice", "--password", PASSWORD)
    return cli


def submit_json(cli, *args: str) -> dict:
    return json.loads(cli("submit", "--json", *args).stdout)


def queued_job(cli, tenant, name: str) -> dict:
    """A 1-rank job submitted through the CLI that stays queued (the tenant gets no slots)."""
    tenant.slot_quota = 0
    tenant.save()
    return submit_json(
        cli, "--tenant", tenant.slug, "--name", name, "--workload", "tiny_gpt",
        "--world-size", "1", "--steps", "5",
    )  # fmt: skip


def test_login_keeps_url_and_token_readable_by_the_owner_only(cli, live, alice):
    shown = cli("login", live.url, "--username", "alice", "--password", PASSWORD).stdout
    assert "tenants: vision" in shown
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert json.loads(cli.config.read_text())["url"] == live.url


def test_a_wrong_password_exits_1_with_the_servers_reason(cli, live, alice):
    proc = cli("login", live.url, "-u", "alice", "--password", "wrong", check=False)
    assert proc.returncode == 1
    first, *fields = proc.stderr.strip().splitlines()
    assert first.startswith("error: Invalid input: ") and fields, proc.stderr
    assert not cli.config.exists()


def test_submit_from_a_yaml_file_with_a_flag_overriding_it(alice_cli, vision, tmp_path):
    vision.slot_quota = 0  # stays queued: nothing runs in this test
    vision.save()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "tenant: vision\nname: from-file\nworkload: tiny_gpt\nworld_size: 2\nsteps: 50\n"
        "hyperparameters: {lr: 0.01}\n"
    )
    job = submit_json(alice_cli, str(spec), "--steps", "70", "--hp", "batch_size=4")
    assert (job["name"], job["steps"], job["status"]) == ("from-file", 70, "queued")
    assert job["hyperparameters"] == {"lr": 0.01, "batch_size": 4}
    listed = json.loads(alice_cli("ls", "--json", "--status", "queued").stdout)
    assert [j["id"] for j in listed] == [job["id"]]
    assert "from-file" in alice_cli("ls").stdout


def test_submit_from_a_toml_file(alice_cli, vision, tmp_path):
    vision.slot_quota = 0
    vision.save()
    spec = tmp_path / "job.toml"
    spec.write_text(
        'tenant = "vision"\nname = "toml"\nworkload = "tiny_gpt"\nworld_size = 1\nsteps = 5\n'
    )
    assert submit_json(alice_cli, str(spec))["name"] == "toml"


def test_bad_input_exits_1_with_one_line_and_each_field_and_writes_nothing(alice_cli, vision):
    proc = alice_cli(
        "submit", "--tenant", "vision", "--name", "x", "--workload", "tiny_gpt",
        "--world-size", "0", "--steps", "5", check=False,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1
    assert lines[0] == "error: Invalid input: world_size."
    assert lines[1].startswith("  world_size: ")
    assert Job.objects.count() == 0


def test_submit_count_queues_the_copies_in_one_request_or_none_of_them(alice_cli, vision):
    vision.slot_quota = 0  # they stay queued
    vision.save()
    sweep = ["submit", "--tenant", "vision", "--name", "sweep", "--workload", "tiny_gpt",
             "--steps", "5", "--count", "3"]  # fmt: skip
    jobs = json.loads(alice_cli(*sweep, "--world-size", "1", "--json").stdout)
    assert [(j["name"], j["status"]) for j in jobs] == [
        ("sweep-0", "queued"), ("sweep-1", "queued"), ("sweep-2", "queued")
    ]  # fmt: skip
    refused = alice_cli(*sweep, "--world-size", "0", check=False)
    assert refused.returncode == 1
    assert "  jobs[0].world_size: " in refused.stderr
    assert Job.objects.count() == 3


def test_a_missing_job_file_and_a_bad_assignment_are_one_line_errors(alice_cli, tmp_path):
    missing = alice_cli("submit", str(tmp_path / "nope.yaml"), check=False)
    assert (missing.returncode, missing.stderr.count("\n")) == (1, 1)
    bad = alice_cli("submit", "--hp", "novalue", check=False)
    assert bad.returncode == 1 and "expected NAME=VALUE" in bad.stderr


def test_another_tenants_job_is_not_found(cli, live, alice, bob, speech):
    from controlplane.jobs.models import Queue

    job = Job.objects.create(
        tenant=speech, queue=Queue.objects.get(tenant=speech), name="b", workload="tiny_gpt",
        world_size=1, steps=5, sync="full",
    )  # fmt: skip
    cli("login", live.url, "-u", "alice", "--password", PASSWORD)
    theirs = cli("status", str(job.pk), check=False)
    missing = cli("status", "999999", check=False)
    assert (theirs.returncode, theirs.stderr) == (1, missing.stderr)
    assert theirs.stderr.strip() == "error: No such job"


def test_priority_cancel_and_status_of_a_queued_job(alice_cli, vision):
    job = queued_job(alice_cli, vision, "q")
    assert "priority high" in alice_cli("priority", str(job["id"]), "high").stdout
    assert json.loads(alice_cli("cancel", "--json", str(job["id"])).stdout)["status"] == "cancelled"
    status = json.loads(alice_cli("status", "--json", str(job["id"])).stdout)
    assert [e["to_status"] for e in status["events"]][-1] == "cancelled"


def test_admins_read_and_set_quotas_and_see_nodes(cli, live, admin_user, vision):
    admin_user.set_password(PASSWORD)
    admin_user.save()
    cli("login", live.url, "-u", admin_user.username, "--password", PASSWORD)
    cli("quota", "set", "vision", "slot_quota=3", "cohort=research")
    quota = json.loads(cli("quota", "get", "vision", "--json").stdout)
    assert (quota["slot_quota"], quota["cohort"]) == (3, "research")
    bad = cli("quota", "set", "vision", "slot_quota=-1", check=False)
    assert bad.returncode == 1 and "slot_quota" in bad.stderr
    assert Tenant.objects.get(slug="vision").slot_quota == 3
    assert json.loads(cli("nodes", "--json").stdout)[0]["slots"] >= 1


def test_a_member_cannot_set_a_quota(alice_cli, vision):
    proc = alice_cli("quota", "set", "vision", "slot_quota=9", check=False)
    assert (proc.returncode, proc.stderr.strip()) == (1, "error: No such tenant")


def test_watch_follows_a_real_run_to_success_then_logs_artifacts_and_alarms_read_it(
    alice_cli, vision, tmp_path
):
    job = submit_json(
        alice_cli, "--tenant", "vision", "--name", "watched", "--workload", "tiny_gpt",
        "--world-size", "2", "--steps", "150",
    )  # fmt: skip
    started = time.monotonic()
    watched = alice_cli("watch", str(job["id"]), timeout=240)
    assert f"job {job['id']} succeeded at step 150/150 (loss " in watched.stdout
    assert "status: running" in watched.stdout
    assert "samples/s" in watched.stdout
    assert time.monotonic() - started < 240
    logs = alice_cli("logs", str(job["id"]), "--lines", "5").stdout.splitlines()
    assert 1 <= len(logs) <= 5
    as_json = json.loads(alice_cli("logs", str(job["id"]), "--lines", "5", "--json").stdout)
    assert as_json["lines"] == logs and as_json["offset"] > 0
    followed = alice_cli("logs", str(job["id"]), "-f", "--lines", "1", timeout=30)
    assert followed.stdout.strip()  # a finished job: -f prints what is there and returns
    alarms = json.loads(alice_cli("alarms", "--json", "--job", str(job["id"])).stdout)
    stored = Alarm.objects.filter(job_id=job["id"]).values_list("pk", flat=True)
    assert {a["alarm_id"] for a in alarms} == set(stored)  # a loaded machine may raise some
    listing = json.loads(alice_cli("artifacts", str(job["id"]), "--json").stdout)
    assert listing["file_count"] >= 1
    alice_cli("artifacts", str(job["id"]), "--download", "--to", str(tmp_path / "out"))
    for item in listing["files"]:
        assert (tmp_path / "out" / item["path"]).stat().st_size == item["size"]


def test_watch_of_a_cancelled_job_exits_1(alice_cli, vision):
    job = queued_job(alice_cli, vision, "c")
    alice_cli("cancel", str(job["id"]))
    proc = alice_cli("watch", str(job["id"]), check=False)
    assert proc.returncode == 1
    assert f"job {job['id']} cancelled" in proc.stdout


TRAIN_SCRIPT = """\
import torch
import torch.distributed as dist
from synclane import Reporter

dist.init_process_group("gloo")
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
reporter = Reporter.from_env()
x = torch.randn(32, 4)
y = x.sum(dim=1, keepdim=True)
for step in range(1, 21):
    loss = torch.nn.functional.mse_loss(net(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    reporter.log({"loss": loss.item()}, step=step)
print(f"trained 20 steps, loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


def stored_names(live, token: str, bundle_id: int) -> list[str]:
    """The file names in the archive the server stored as bundle ``bundle_id``."""
    response = httpx.get(
        f"{live.url}/api/v1/bundles/{bundle_id}/download/",
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
        return archive.getnames()


def test_submit_code_packs_the_folder_minus_its_ignores_and_the_job_succeeds(
    alice_cli, live, vision, tmp_path
):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_SCRIPT)
    (project / "secret.txt").write_text("not for the cluster")
    (project / ".synclaneignore").write_text("secret.txt\n")
    job = submit_json(
        alice_cli, "--tenant", "vision", "--name", "own-code", "--code", str(project),
        "--entrypoint", "train.py", "--world-size", "1", "--steps", "20", "--env", "GREETING=hi",
    )  # fmt: skip
    assert job["entrypoint"] == ["train.py"] and job["env"] == {"GREETING": "hi"}
    token = live.token("alice", PASSWORD)
    assert stored_names(live, token, job["bundle"]) == [".synclaneignore", "train.py"]
    watched = alice_cli("watch", str(job["id"]), timeout=300).stdout
    assert f"job {job['id']} succeeded" in watched
    assert "trained 20 steps" in alice_cli("logs", str(job["id"])).stdout


def test_a_refused_code_submit_exits_1_naming_the_field_and_keeps_no_bundle(
    alice_cli, vision, tmp_path
):
    (tmp_path / "train.py").write_text("print('never runs')\n")
    proc = alice_cli(
        "submit", "--tenant", "vision", "--name", "bad-env", "--code", str(tmp_path),
        "--entrypoint", "train.py", "--world-size", "1", "--steps", "1", "--env", "RANK=3",
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "env" in proc.stderr and "RANK" in proc.stderr, proc.stderr
    assert not vision.bundles.exists()
    assert not Job.objects.filter(name="bad-env").exists()


def test_code_without_an_entrypoint_exits_1_before_uploading(alice_cli, vision, tmp_path):
    (tmp_path / "train.py").write_text("print('never runs')\n")
    proc = alice_cli(
        "submit", "--tenant", "vision", "--name", "no-entry", "--code", str(tmp_path),
        "--world-size", "1", "--steps", "1", check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "--code needs --entrypoint" in proc.stderr
    assert not vision.bundles.exists()


def test_an_admin_cordons_drains_and_uncordons_a_node_and_a_member_may_not(
    cli, live, admin_user, alice
):
    import datetime as dt

    from django.utils import timezone

    from controlplane.jobs.models import Node

    # A node of its own (no worker behind it), so the live worker's stays ready; its last beat
    # is dated an hour ahead so that the live stack's short lost-after setting cannot make it
    # lost while the commands run.
    seen = timezone.now() + dt.timedelta(hours=1)
    Node.objects.create(name="cli-n9", slots=2, fabric_mbps=100, last_seen=seen)
    admin_user.set_password(PASSWORD)
    admin_user.save()
    cli("login", live.url, "-u", admin_user.username, "--password", PASSWORD)
    listed = {n["name"]: n for n in json.loads(cli("nodes", "ls", "--json").stdout)}
    assert listed["cli-n9"]["state"] == "ready"
    shown = cli("nodes", "cordon", "cli-n9", "--reason", "disk").stdout
    assert shown.strip() == f"node cli-n9 cordoned (cordoned by {admin_user.username}: disk)"
    drained = json.loads(cli("nodes", "drain", "cli-n9", "--json").stdout)
    assert (drained["state"], drained["requeued"]) == ("draining", [])
    assert "ready" in cli("nodes", "uncordon", "cli-n9").stdout
    assert Node.objects.get(name="cli-n9").state == "ready"
    missing = cli("nodes", "drain", "no-such-node", check=False)
    assert (missing.returncode, missing.stderr.strip()) == (1, "error: No such node")

    cli("login", live.url, "-u", "alice", "--password", PASSWORD)
    refused = cli("nodes", "cordon", "cli-n9", check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: Only site admins cordon, drain and uncordon nodes."
    assert Node.objects.get(name="cli-n9").state == "ready"
