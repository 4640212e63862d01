"""The code half of a job spec: code, entrypoint and env, each error collected and named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controlplane.jobs.spec import JobSpec, SpecError

BASE = {"name": "n", "world_size": 2, "steps": 10}
SHA = "ab" * 32


def parse(**data) -> JobSpec:
    return JobSpec.from_input({**BASE, **data})


def errors_of(**data) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as info:
        parse(**data)
    return info.value.errors


def test_a_code_job_takes_a_command_line_split_like_a_shell():
    spec = parse(code=SHA, entrypoint="train.py --lr 0.1 --name 'my run'")
    assert spec.runs_code and spec.workload == ""
    assert spec.entrypoint == ("train.py", "--lr", "0.1", "--name", "my run")


def test_a_code_job_takes_an_argv_list_and_a_module():
    spec = parse(code="12", entrypoint=["-m", "pkg.train", "--x"])
    assert spec.entrypoint == ("-m", "pkg.train", "--x") and spec.code == "12"


def test_it_wants_a_workload_or_code_and_not_both():
    assert "is required" in errors_of()["workload"][0]
    assert "not both" in errors_of(workload="tiny_gpt", code=SHA, entrypoint="t.py")["code"][0]


def test_code_needs_an_entrypoint_and_an_entrypoint_needs_code():
    assert errors_of(code=SHA)["entrypoint"] == ["is required with code"]
    assert "needs code" in errors_of(workload="tiny_gpt", entrypoint="t.py")["entrypoint"][0]


@pytest.mark.parametrize(
    "entrypoint",
    ["../escape.py", "/abs/train.py", "train.sh", "-c print(1)", "-m", "-m 1bad", "", "'open"],
)
def test_an_entrypoint_outside_the_bundle_or_not_python_is_refused(entrypoint):
    assert "entrypoint" in errors_of(code=SHA, entrypoint=entrypoint)


@pytest.mark.parametrize("code", ["xyz", "abc", True, 3.5, ["a"]])
def test_code_must_be_an_id_or_a_hash(code):
    assert "code" in errors_of(code=code, entrypoint="t.py")


@pytest.mark.parametrize(
    "name",
    [
        "SYNCLANE_JOB_ID", "synclane_redis_url", "TORCHELASTIC_RUN_ID", "TORCH_HOME",
        "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD",
        "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "DJANGO_SECRET_KEY",
        "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PATH", "HOME", "1BAD", "A-B", "",
    ],
)  # fmt: skip
def test_reserved_or_malformed_env_names_are_refused(name):
    assert "env" in errors_of(code=SHA, entrypoint="t.py", env={name: "x"})


def test_every_setting_of_the_control_plane_is_refused_as_a_job_env_name():
    example = Path(__file__).resolve().parents[2] / ".env.example"
    names = re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example.read_text(), flags=re.M)
    assert len(names) > 20
    for name in names:
        assert "env" in errors_of(code=SHA, entrypoint="t.py", env={name: "x"}), name


def test_env_values_must_be_short_strings_and_every_bad_name_is_reported():
    errors = errors_of(code=SHA, entrypoint="t.py", env={"A": 1, "B": "x" * 5000, "RANK": "0"})
    assert len(errors["env"]) == 3


def test_a_plain_env_is_kept():
    assert parse(code=SHA, entrypoint="t.py", env={"MY_SEED": "3"}).env == {"MY_SEED": "3"}
