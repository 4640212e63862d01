"""The ``synclane`` commands (typer). Reads take ``--json`` for scripts.

Exit codes: 0 done; 1 the server refused (the one-line reason, then each bad field) or
could not be reached; 2 bad usage (typer's own message); ``watch`` exits 1 when the job
ends in anything but ``succeeded``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as Bar
from rich.table import Table

from controlplane.cli import config
from controlplane.cli.bundle import pack
from controlplane.cli.client import Api, CliError, decoded
from controlplane.cli.jobfile import load_job_file, parse_assignments, submit_body
from controlplane.cli.watch import Progress, watch

app = typer.Typer(
    help="Submit, watch and manage Synclane training jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
quota_app = typer.Typer(help="Tenant quotas (site admins).", no_args_is_help=True)
app.add_typer(quota_app, name="quota")
nodes_app = typer.Typer(help="Nodes: list; cordon, drain, uncordon (site admins).")
app.add_typer(nodes_app, name="nodes")
out = Console()
err = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of a table.")]
JobId = Annotated[int, typer.Argument(help="Job id.", min=1)]


def api() -> Api:
    login = config.load()
    if login is None:
        raise CliError("not logged in: run `synclane login URL`")
    return Api(login)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    grid = Table(title=title)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*("" if v is None else str(v) for v in row))
    out.print(grid)


@app.command()
def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000")],
    token: Annotated[
        str | None, typer.Option(help="An API token (else username/password).")
    ] = None,
    username: Annotated[str | None, typer.Option("--username", "-u")] = None,
    password: Annotated[str | None, typer.Option(help="Prompted for when not given.")] = None,
) -> None:
    """Check the credentials and keep URL and token in your config folder (mode 0600)."""
    url = url.rstrip("/")
    if token is None:
        if username is None:
            raise CliError("give --token, or --username (and the password when asked)")
        password = password or typer.prompt("Password", hide_input=True)
        try:
            response = httpx.post(
                f"{url}/api/v1/auth/token/",
                json={"username": username, "password": password},
                timeout=15,
            )
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {url}: {exc}", unreachable=True) from None
        token = str(decoded(response)["token"])
    session = Api(config.Login(url=url, token=token))
    tenants = session.get("/api/v1/tenants/")
    path = config.save(session.login)
    names = ", ".join(t["slug"] for t in tenants) or "none"
    out.print(f"logged in to {url} (tenants: {names}); saved in {path}")


@app.command()
def submit(
    job_file: Annotated[Path | None, typer.Argument(help="A YAML or TOML job file.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant slug.")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    workload: Annotated[str | None, typer.Option()] = None,
    world_size: Annotated[int | None, typer.Option(help="Ranks (slots).")] = None,
    steps: Annotated[int | None, typer.Option()] = None,
    sync: Annotated[str | None, typer.Option(help="full, adaptive, powersgd, localsgd")] = None,
    priority: Annotated[str | None, typer.Option(help="low, normal, high, critical")] = None,
    deadline: Annotated[str | None, typer.Option(help="ISO 8601 date and time.")] = None,
    bandwidth_floor_mbps: Annotated[int | None, typer.Option()] = None,
    bandwidth_ceiling_mbps: Annotated[int | None, typer.Option()] = None,
    hp: Annotated[
        list[str] | None, typer.Option(help="Hyper-parameter NAME=VALUE; repeat.")
    ] = None,
    code: Annotated[
        Path | None, typer.Option(help="Pack this folder (e.g. .) as the job's code bundle.")
    ] = None,
    entrypoint: Annotated[
        str | None, typer.Option(help="With --code: what to run, e.g. 'train.py --lr 0.1'.")
    ] = None,
    env: Annotated[list[str] | None, typer.Option(help="Variable NAME=VALUE; repeat.")] = None,
    node_selector: Annotated[
        list[str] | None, typer.Option(help="Node label KEY=VALUE every node must carry; repeat.")
    ] = None,
    count: Annotated[
        int,
        typer.Option(min=1, help="Submit this many copies (NAME-0, NAME-1, …) in one request."),
    ] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job from flags, a job file, or both (flags win).

    With ``--code DIR`` the folder is packed (minus what ``DIR/.synclaneignore`` lists) and
    uploaded as a code bundle, and the job runs ``--entrypoint`` from it. With ``--count N``
    the N copies go in one request, queued all together or (a refused one) none.
    """
    flags = {
        "tenant": tenant,
        "name": name,
        "workload": workload,
        "world_size": world_size,
        "steps": steps,
        "sync": sync,
        "priority": priority,
        "deadline": deadline,
        "bandwidth_floor_mbps": bandwidth_floor_mbps,
        "bandwidth_ceiling_mbps": bandwidth_ceiling_mbps,
        "hyperparameters": parse_assignments(hp or []),
        "entrypoint": entrypoint,
    }
    body = submit_body(load_job_file(job_file) if job_file else {}, flags)
    if env:
        body["env"] = {**(body.get("env") or {}), **env_assignments(env)}
    if node_selector:
        labels = env_assignments(node_selector, option="--node-selector")
        body["node_selector"] = {**(body.get("node_selector") or {}), **labels}
    session = api()

    def send(body: dict[str, Any]) -> Any:
        if count == 1:
            return session.post("/api/v1/jobs/", body)
        return session.post("/api/v1/jobs/batch/", copies(body, count))["jobs"]

    sent = submit_with_code(session, body, code, send) if code else send(body)
    if as_json:
        print_json(sent)
        return
    for job in sent if count > 1 else [sent]:
        out.print(f"job {job['id']} {job['status']}: {job['status_reason'] or 'submitted'}")


def copies(body: dict[str, Any], count: int) -> dict[str, Any]:
    """The batch submit body of ``count`` copies of ``body``, named NAME-0 … NAME-(count-1)."""
    job = {k: v for k, v in body.items() if k != "tenant"}
    name = job.get("name") or "job"
    return {
        "tenant": body.get("tenant"),
        "jobs": [{**job, "name": f"{name}-{i}"} for i in range(count)],
    }


def env_assignments(pairs: list[str], *, option: str = "--env") -> dict[str, str]:
    """``["A=1", "B=x"]`` -> ``{"A": "1", "B": "x"}``: environment values stay strings."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"{option} {pair!r}: expected NAME=VALUE")
        values[name] = value
    return values


def submit_with_code(
    session: Api, body: dict[str, Any], folder: Path, send: Callable[[dict[str, Any]], Any]
) -> Any:
    """Upload ``folder`` as a bundle, then submit ``body`` running it with ``send``; return
    what that gave.

    A refused submit deletes the bundle it just created, so bad input stores nothing
    (a bundle that was already there stays).
    """
    if not body.get("entrypoint"):
        raise CliError("--code needs --entrypoint (what to run, e.g. 'train.py 300')")
    bundle, created = upload_code(session, folder, tenant=body.get("tenant"))
    try:
        return send({**body, "code": str(bundle["id"])})
    except CliError:
        if created:
            with contextlib.suppress(CliError):
                session.call("DELETE", f"/api/v1/bundles/{bundle['id']}/")
        raise


def upload_code(session: Api, folder: Path, *, tenant: Any) -> tuple[Any, bool]:
    """Pack ``folder`` and upload it as a bundle of ``tenant``; return it and whether new."""
    if not isinstance(tenant, str) or not tenant:
        raise CliError("--code needs --tenant (or tenant in the job file)")
    if not folder.is_dir():
        raise CliError(f"--code {folder}: not a folder")
    archive, names = pack(folder)
    if not names:
        raise CliError(f"--code {folder}: nothing to pack (everything is ignored)")
    name = f"{folder.resolve().name or 'code'}.tar.gz"
    bundle, created = session.upload_bundle(tenant, archive, name)
    files = f"{len(names)} file{'' if len(names) == 1 else 's'}"
    err.print(f"packed {files} of {folder} into bundle {bundle['id']}", highlight=False)
    return bundle, created


@app.command("ls")
def list_jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
    name: Annotated[str | None, typer.Option(help="Name contains.")] = None,
    ordering: Annotated[str | None, typer.Option(help="e.g. name, -priority")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs of your tenants, newest first."""
    page = api().get(
        "/api/v1/jobs/", status=status, tenant=tenant, name=name, ordering=ordering, page_size=limit
    )
    jobs = page["results"]
    if as_json:
        return print_json(jobs)
    table(
        "Jobs",
        ["id", "tenant", "name", "status", "priority", "step", "queue", "Mbit/s"],
        [
            [
                j["id"],
                j["tenant"],
                j["name"],
                j["status"],
                j["priority"],
                f"{j['last_step'] or 0}/{j['steps']}",
                j["queue_position"],
                j["allocation_mbps"],
            ]
            for j in jobs
        ],
    )


@app.command()
def status(job: JobId, as_json: JsonFlag = False) -> None:
    """One job: its state, why, its progress and its history."""
    session = api()
    data = session.get(f"/api/v1/jobs/{job}/")
    events = session.get(f"/api/v1/jobs/{job}/events/")
    if as_json:
        return print_json({**data, "events": events})
    out.print(
        f"[bold]job {data['id']}[/] {data['name']} ({data['tenant']}): [bold]{data['status']}[/]"
    )
    for label, key in (
        ("reason", "status_reason"),
        ("queue position", "queue_position"),
        ("allocation Mbit/s", "allocation_mbps"),
        ("restarts", "restarts"),
        ("exit", "exit_reason"),
    ):
        if data.get(key) not in (None, ""):
            out.print(f"  {label}: {data[key]}")
    out.print(f"  step: {data['last_step'] or 0}/{data['steps']}")
    table(
        "Events",
        ["at", "from", "to", "reason", "by"],
        [
            [e["created_at"], e["from_status"], e["to_status"], e["reason"], e["actor"]]
            for e in events
        ],
    )


@app.command("watch")
def watch_job(job: JobId) -> None:
    """Live progress from the job's websocket (step, ETA, loss, samples/s) until it ends."""
    session = api()
    columns = (
        TextColumn("job {task.fields[job]} [bold]{task.fields[status]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("loss {task.fields[loss]}  {task.fields[speed]} samples/s"),
    )
    with Bar(*columns, console=out) as bar:
        task = bar.add_task("", total=None, job=job, status="…", loss="-", speed="-")

        def show(p: Progress) -> None:
            bar.update(
                task,
                total=p.steps,
                completed=p.step,
                status=p.status,
                loss="-" if p.loss is None else f"{p.loss:.4f}",
                speed="-" if p.samples_per_s is None else f"{p.samples_per_s:.1f}",
            )

        final = watch(session, job, show=show, note=lambda text: bar.console.print(text))
        show(final)
    loss = "-" if final.loss is None else f"{final.loss:.4f}"
    out.print(f"job {job} {final.status} at step {final.step}/{final.steps} (loss {loss})")
    if final.status != "succeeded":
        raise typer.Exit(1)


@app.command()
def logs(
    job: JobId,
    rank: Annotated[int, typer.Option(min=0)] = 0,
    stream: Annotated[str, typer.Option(help="stdout, stderr or torchrun")] = "stdout",
    lines: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    interval: Annotated[float, typer.Option(help="Seconds between follow reads.")] = 1.0,
    as_json: JsonFlag = False,
) -> None:
    """A rank's log; with -f, keep printing until the job ends (retries on errors).

    ``--json`` prints the API's answer (lines and the byte offset to read on from).
    """
    from controlplane.cli.follow import follow_logs, retrying

    session = api()
    path = f"/api/v1/jobs/{job}/logs/"

    def tail() -> Any:
        return session.get(path, rank=rank, stream=stream, lines=lines)

    first = retrying(tail) if follow else tail()  # -f rides out a restarting server
    if as_json:
        return print_json(first)
    for line in first["lines"]:
        sys.stdout.write(line + "\n")
    if follow:
        follow_logs(
            session, job, rank=rank, stream=stream, offset=first["offset"], interval=interval
        )


@app.command()
def artifacts(
    job: JobId,
    download: Annotated[bool, typer.Option("--download", help="Fetch every file.")] = False,
    to: Annotated[Path, typer.Option(help="Folder to download into.")] = Path("."),
    as_json: JsonFlag = False,
) -> None:
    """A job's artifacts (checkpoints, summaries); --download fetches them into --to."""
    session = api()
    listing = session.get(f"/api/v1/jobs/{job}/artifacts/")
    if as_json and not download:
        return print_json(listing)
    if not download:
        rows = [[f["path"], f["size"], f["modified"]] for f in listing["files"]]
        table(f"Artifacts of job {job}", ["path", "bytes", "modified"], rows)
        return None
    root = to.resolve()
    for item in listing["files"]:
        dest = (root / item["path"]).resolve()
        if not dest.is_relative_to(root):
            raise CliError(f"refusing to write {item['path']!r} outside {root}")
        size = session.download(f"/api/v1/jobs/{job}/artifacts/{item['path']}", dest)
        out.print(f"{dest} ({size} bytes)", highlight=False)
    return None


@app.command()
def cancel(job: JobId, as_json: JsonFlag = False) -> None:
    """Cancel a job (a running one is stopped: SIGTERM, then SIGKILL after a grace period)."""
    data = api().post(f"/api/v1/jobs/{job}/cancel/")
    print_json(data) if as_json else out.print(f"job {job} {data['status']}")


@app.command()
def priority(
    job: JobId,
    level: Annotated[str, typer.Argument(help="low, normal, high or critical")],
    as_json: JsonFlag = False,
) -> None:
    """Change a job's priority (tenant admins)."""
    data = api().post(f"/api/v1/jobs/{job}/priority/", {"priority": level})
    print_json(data) if as_json else out.print(f"job {job} priority {data['priority']}")


@app.command()
def alarms(
    state: Annotated[str | None, typer.Option(help="open or cleared")] = None,
    kind: Annotated[str | None, typer.Option()] = None,
    tenant: Annotated[str | None, typer.Option()] = None,
    job: Annotated[int | None, typer.Option(min=1)] = None,
    unacknowledged: Annotated[bool, typer.Option("--unacknowledged")] = False,
    ack: Annotated[int | None, typer.Option(help="Acknowledge this alarm id.", min=1)] = None,
    as_json: JsonFlag = False,
) -> None:
    """List alarms of your tenants' jobs (filtered), or acknowledge one with --ack ID."""
    session = api()
    if ack is not None:
        alarm = session.post(f"/api/v1/alarms/{ack}/acknowledge/")
        return print_json(alarm) if as_json else out.print(f"alarm {ack} acknowledged")
    page = session.get(
        "/api/v1/alarms/",
        state=state,
        kind=kind,
        tenant=tenant,
        job=job,
        unacknowledged="true" if unacknowledged else None,
    )
    rows = page["results"]
    if as_json:
        return print_json(rows)
    table(
        "Alarms",
        ["id", "job", "kind", "step", "value", "raised", "cleared", "ack"],
        [
            [
                a["alarm_id"],
                a["job"],
                a["kind"],
                a["step"],
                a["value"],
                a["raised_at"],
                a["cleared_at"],
                a["acknowledged_by"] or ("yes" if a["acknowledged"] else ""),
            ]
            for a in rows
        ],
    )


def _state(node: dict[str, Any]) -> str:
    reason = node.get("state_reason") or ""
    return f"{node['state']} ({reason})" if reason else str(node["state"])


def _show_nodes(as_json: bool) -> None:
    rows = api().get("/api/v1/nodes/")
    if as_json:
        return print_json(rows)
    table(
        "Nodes",
        ["name", "state", "slots", "used", "address", "labels", "links", "fabric Mbit/s", "seen"],
        [
            [
                n["name"],
                _state(n),
                n["slots"],
                n["used"],
                n["address"],
                ",".join(f"{k}={v}" for k, v in sorted(n["labels"].items())),
                n["link_state"],
                n["fabric_mbps"],
                n["last_seen"],
            ]
            for n in rows
        ],
    )
    return None


@nodes_app.callback(invoke_without_command=True)
def nodes(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Nodes: state, slots, slots your tenants use, labels; `nodes ls` is the same."""
    if ctx.invoked_subcommand is None:
        _show_nodes(as_json)


@nodes_app.command("ls")
def nodes_ls(as_json: JsonFlag = False) -> None:
    """List the nodes: state (ready, cordoned, draining, lost), slots, use, labels."""
    _show_nodes(as_json)


NodeName = Annotated[str, typer.Argument(help="The node's name (see `synclane nodes ls`).")]
Reason = Annotated[str | None, typer.Option(help="Why (kept with the node's state).")]


def _node_action(action: str, name: str, reason: str | None) -> dict[str, Any]:
    body = {"reason": reason} if reason else None
    result: dict[str, Any] = api().post(f"/api/v1/nodes/{quote(name, safe='')}/{action}/", body)
    return result


@nodes_app.command("cordon")
def nodes_cordon(name: NodeName, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """No new placements on the node; its running jobs keep running (site admins)."""
    node = _node_action("cordon", name, reason)
    print_json(node) if as_json else out.print(f"node {name} {_state(node)}", highlight=False)


@nodes_app.command("drain")
def nodes_drain(name: NodeName, reason: Reason = None, as_json: JsonFlag = False) -> None:
    """Cordon the node, then its jobs checkpoint and requeue elsewhere (site admins)."""
    node = _node_action("drain", name, reason)
    if as_json:
        return print_json(node)
    jobs = ", ".join(str(j) for j in node["requeued"]) or "none"
    out.print(f"node {name} {_state(node)}; jobs asked to requeue: {jobs}", highlight=False)
    return None


@nodes_app.command("uncordon")
def nodes_uncordon(name: NodeName, as_json: JsonFlag = False) -> None:
    """The node takes new placements again (site admins)."""
    node = _node_action("uncordon", name, None)
    print_json(node) if as_json else out.print(f"node {name} {_state(node)}", highlight=False)


@quota_app.command("get")
def quota_get(tenant: str, as_json: JsonFlag = False) -> None:
    """Show a tenant's quota."""
    data = api().get(f"/api/v1/tenants/{tenant}/quota/")
    if as_json:
        return print_json(data)
    table(
        f"Quota of {tenant}", ["field", "value"], [[k, v] for k, v in data.items() if k != "tenant"]
    )


@quota_app.command("set")
def quota_set(
    tenant: str,
    changes: Annotated[list[str], typer.Argument(help="FIELD=VALUE, e.g. slot_quota=8")],
    on_overuse: Annotated[str | None, typer.Option(help="preempt or next_admission")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change quota fields; below current use needs --on-overuse."""
    body: dict[str, Any] = parse_assignments(changes)
    if on_overuse:
        body["on_overuse"] = on_overuse
    data = api().call("PATCH", f"/api/v1/tenants/{tenant}/quota/", body=body)
    print_json(data) if as_json else out.print(f"quota of {tenant} updated")


def main() -> None:
    """Console-script entry point: a CliError is one line (and its fields), exit code 1."""
    try:
        app()
    except CliError as exc:
        err.print(f"error: {exc.message}", highlight=False, markup=False)
        for field, reasons in exc.fields.items():
            err.print(f"  {field}: {'; '.join(reasons)}", highlight=False, markup=False)
        sys.exit(1)
