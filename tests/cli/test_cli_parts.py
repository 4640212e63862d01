"""The CLI's pure parts: saved login, job files, NAME=VALUE, backoff, progress, log follow."""

from __future__ import annotations

import stat

import httpx
import pytest

from controlplane.cli import config
from controlplane.cli.client import Api, CliError
from controlplane.cli.follow import follow_logs
from controlplane.cli.jobfile import load_job_file, parse_assignments, submit_body
from controlplane.cli.watch import Backoff, Progress, socket_url


def test_a_saved_login_is_0600_even_over_a_world_readable_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = config.config_file()
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    path.chmod(0o644)
    config.save(config.Login(url="http://h:1", token="t"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.load() == config.Login(url="http://h:1", token="t")


def test_no_saved_login_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.load() is None


def test_flags_override_the_file_and_hyperparameters_merge():
    body = submit_body(
        {"name": "f", "steps": 5, "hyperparameters": {"lr": 0.1, "seed": 1}},
        {"steps": 9, "name": None, "hyperparameters": {"lr": 0.2}},
    )
    assert body == {"name": "f", "steps": 9, "hyperparameters": {"lr": 0.2, "seed": 1}}


def test_assignments_read_json_scalars_else_strings():
    assert parse_assignments(["lr=1e-3", "n=4", "on=true", "cohort=research", "x="]) == {
        "lr": 0.001,
        "n": 4,
        "on": True,
        "cohort": "research",
        "x": "",
    }
    with pytest.raises(CliError, match="expected NAME=VALUE"):
        parse_assignments(["lr"])


def test_a_job_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(CliError, match="must hold a mapping"):
        load_job_file(path)
    bad = tmp_path / "job.toml"
    bad.write_text("name = \n")
    with pytest.raises(CliError, match="not valid TOML"):
        load_job_file(bad)


def test_backoff_doubles_up_to_its_cap_and_resets():
    backoff = Backoff(first_s=0.5, cap_s=3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_progress_never_goes_back_and_ignores_other_messages():
    p = Progress(job=1, steps=100)
    p.apply({"type": "metrics", "data": {"step": 40, "loss": 2.5, "samples_per_s": 300}})
    p.apply({"type": "status", "status": "running", "last_step": 30})
    p.apply({"type": "link", "data": {"step": 99}})
    assert (p.status, p.step, p.loss, p.samples_per_s) == ("running", 40, 2.5, 300.0)
    p.apply({"type": "status", "status": "succeeded", "last_step": 100})
    assert p.finished and p.step == 100


def test_the_socket_url_follows_the_scheme():
    assert socket_url("https://sync.example:8443", 7) == "wss://sync.example:8443/ws/jobs/7/"
    assert socket_url("http://127.0.0.1:8000", 7) == "ws://127.0.0.1:8000/ws/jobs/7/"


def answering(*answers: tuple[int, dict]) -> Api:
    """An Api whose HTTP answers are ``answers`` in turn (status, JSON), as a proxy would give."""
    queue = list(answers)

    def reply(request: httpx.Request) -> httpx.Response:
        status, body = queue.pop(0)
        return httpx.Response(status, json=body)

    api = Api(config.Login(url="http://control-plane", token="t"))
    api.http = httpx.Client(base_url="http://control-plane", transport=httpx.MockTransport(reply))
    return api


def test_follow_retries_a_proxys_503_and_prints_each_line_once():
    running, done = {"status": "running"}, {"status": "succeeded"}
    api = answering(
        (200, running), (200, {"lines": ["a"], "offset": 2}),
        (503, {"detail": "upstream restarting"}),
        (200, done), (200, {"lines": ["b"], "offset": 4}),
        (200, done), (200, {"lines": [], "offset": 4}),
    )  # fmt: skip
    out, waits = [], []
    follow_logs(api, 7, rank=0, stream="stdout", offset=0, write=out.append, sleep=waits.append)
    assert out == ["a\n", "b\n"]
    assert waits == [0.5]  # one back-off wait, for the 503


def test_follow_stops_on_an_answer_that_will_not_change():
    api = answering((404, {"detail": "Not found."}))
    with pytest.raises(CliError, match="Not found"):
        follow_logs(api, 7, rank=0, stream="stdout", offset=0, write=print, sleep=lambda s: None)
