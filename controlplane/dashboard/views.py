"""Pages: jobs, a job, tenants, the cluster, alarms. Thin: validate, call one helper, render."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Prefetch
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlplane.bundles.access import bundles_for, get_actable_bundle_for
from controlplane.bundles.services import BundleError, bundle_delete, bundle_upload
from controlplane.dashboard import charts, history
from controlplane.dashboard.forms import AlarmFilterForm, JobForm, PriorityForm, QuotaForm
from controlplane.jobs import artifacts
from controlplane.jobs.access import get_actable_job_for, get_job_for, jobs_for
from controlplane.jobs.adapters import MBPS
from controlplane.jobs.choices import ACTIVE
from controlplane.jobs.models import Job, Node
from controlplane.jobs.nodes import node_cordon, node_drain, node_uncordon
from controlplane.jobs.placement import ranks_per_node, torchrun_stream
from controlplane.jobs.services import job_cancel, job_set_priority, job_submit, queue_position
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.lib.conflict import Conflict
from controlplane.telemetry.services import (
    alarm_acknowledge,
    alarms_for,
    filtered_alarms,
    get_actable_alarm_for,
)
from controlplane.tenancy.access import (
    AnyUser,
    acting_tenants_for,
    get_tenant_for,
    membership_of,
    tenants_for,
)
from controlplane.tenancy.models import Role, Tenant
from controlplane.tenancy.quotas import QuotaError
from controlplane.usage.services import tenant_set_quota, tenant_usage

ARTIFACTS_SHOWN = 200  # files listed on the job page (the API lists more)
BUNDLES_SHOWN = 500  # bundles listed on the bundles page (the API pages through all)


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    tenants = acting_tenants_for(request.user)
    form = JobForm(request.POST or None, request.FILES or None, tenants=tenants)
    if request.method == "POST" and form.is_valid() and form.spec is not None:
        job = _submit_form(request, form, form.spec)
        if job is not None:
            return redirect("job-detail", job_id=job.pk)
    jobs = jobs_for(request.user).order_by("-created_at", "-id")[:100]
    status = 400 if request.method == "POST" else 200
    return render(request, "dashboard/job_list.html", {"jobs": jobs, "form": form}, status=status)


def _submit_form(request: HttpRequest, form: JobForm, spec: JobSpec) -> Job | None:
    """Store the form's bundle upload (if any) and submit; None with form errors if refused."""
    tenant = form.cleaned_data["tenant"]
    upload = form.cleaned_data.get("code_file")
    try:
        if upload is not None:
            bundle, _ = bundle_upload(
                tenant=tenant,
                filename=upload.name or "",
                chunks=upload.chunks(),
                actor=request.user,
            )
            spec = dataclasses.replace(spec, code=bundle.sha256)
        return job_submit(tenant=tenant, spec=spec, actor=request.user)
    except BundleError as exc:
        form.add_error("code_file", str(exc))
    except SpecError as exc:
        for field, reasons in exc.errors.items():
            for reason in reasons:
                form.add_error(field if field in form.fields else None, reason)
    return None


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_job_for(request.user, job_id)
    data = history.job_history(job)
    context = {
        "job": job,
        "events": job.events.select_related("actor"),
        "queue_position": queue_position(job),
        "history": data,
        "figures": job_figures(data),
        "eta_s": history.eta_seconds(job),
        "has_metrics": job.samples.exists(),
        "ranks": range(job.world_size),
        "torchrun_logs": torchrun_logs(job),
        "artifacts": artifacts.list_artifacts(job.run_dir, limit=ARTIFACTS_SHOWN),
        "can_act": acting_tenants_for(request.user).filter(pk=job.tenant_id).exists(),
        "is_tenant_admin": _is_tenant_admin(request.user, job.tenant),
        "priority_form": PriorityForm(initial={"priority": job.priority}),
    }
    return render(request, "dashboard/job_detail.html", context)


def torchrun_logs(job: Job) -> list[tuple[str, str]]:
    """(log source, label) of each torchrun output of the job: one per node of a run across
    nodes ("torchrun n1", "torchrun n2", in node-rank order), else one "torchrun"."""
    if not ranks_per_node(job.placement):
        return [("torchrun", "torchrun")]
    return [
        (torchrun_stream(node_rank), f"torchrun {row.get('node', node_rank)}")
        for node_rank, row in enumerate(job.rank_nodes)
    ]


def job_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The job page's figures from ``history.job_history`` output."""
    metrics = data["metrics"]
    return {
        "loss": charts.loss_figure(metrics),
        "throughput": charts.throughput_figure(metrics),
        "time": charts.step_time_figure(metrics),
        "bandwidth": charts.bandwidth_figure(metrics),
        "drift": charts.drift_figure(
            metrics, threshold=data["drift_threshold"], periods=data["periods"]
        ),
        "heatmap": charts.heatmap_figure(data["links"]),
    }


@login_required
@require_GET
def job_history_json(request: HttpRequest, job_id: int) -> JsonResponse:
    """History as JSON; ``?after_step=N`` returns only what came after step N (backfill)."""
    job = get_job_for(request.user, job_id)
    raw = request.GET.get("after_step")
    # ASCII digits only, and few: str.isdigit() admits "²", which int() refuses.
    after = int(raw) if raw and re.fullmatch(r"[0-9]{1,9}", raw) else None
    return JsonResponse(history.job_history(job, after_step=after))


@login_required
@require_GET
def job_artifact(request: HttpRequest, job_id: int, path: str) -> HttpResponseBase:
    """Download one of the job's files (the API's ``.../artifacts/<path>`` for the page)."""
    job = get_job_for(request.user, job_id)
    try:
        fh, size = artifacts.open_artifact(job.run_dir, path)
    except artifacts.ArtifactPathError as exc:
        return HttpResponseBadRequest(f"path: {exc}")
    except FileNotFoundError:
        raise Http404("No such artifact") from None
    response = FileResponse(fh, as_attachment=True, filename=path.rsplit("/", 1)[-1])
    response["Content-Length"] = str(size)
    return response


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job_cancel(job=get_actable_job_for(request.user, job_id), actor=request.user)
    return redirect("job-detail", job_id=job_id)


@login_required
@require_POST
def job_priority_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """Tenant admins (and site admins) change a job's priority; others get a 404."""
    job = get_actable_job_for(request.user, job_id)
    if not _is_tenant_admin(request.user, job.tenant):
        raise Http404("No such job")
    form = PriorityForm(request.POST)
    if form.is_valid():
        job_set_priority(job=job, priority=form.cleaned_data["priority"], actor=request.user)
    return redirect("job-detail", job_id=job_id)


@login_required
def bundle_list(request: HttpRequest) -> HttpResponse:
    """The code bundles of the caller's tenants, newest first, with the jobs that ran each."""
    return _bundle_page(request)


def _bundle_page(request: HttpRequest, *, refused: str = "", status: int = 200) -> HttpResponse:
    """The bundles page; ``refused`` says why a delete was refused (shown above the table)."""
    bundles = (
        bundles_for(request.user)
        .annotate(job_count=Count("jobs"))
        .prefetch_related(Prefetch("jobs", Job.objects.order_by("-id")[:5], to_attr="recent_jobs"))
        .order_by("tenant__slug", "-last_used_at", "-id")[:BUNDLES_SHOWN]
    )
    context = {
        "bundles": bundles,
        "acting": set(acting_tenants_for(request.user).values_list("pk", flat=True)),
        "refused": refused,
    }
    return render(request, "dashboard/bundle_list.html", context, status=status)


@login_required
@require_POST
def bundle_delete_view(request: HttpRequest, bundle_id: int) -> HttpResponse:
    """Delete a bundle of a tenant the caller acts for (else 404); 409 while a job uses it."""
    try:
        bundle_delete(bundle=get_actable_bundle_for(request.user, bundle_id))
    except Conflict as exc:
        return _bundle_page(request, refused=str(exc), status=409)
    return redirect("bundle-list")


@login_required
def tenant_list(request: HttpRequest) -> HttpResponse:
    tenants = list(tenants_for(request.user))
    rows = [{"tenant": t, "usage": tenant_usage(t)} for t in tenants]
    return render(request, "dashboard/tenant_list.html", {"rows": rows})


@login_required
def tenant_detail(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = get_tenant_for(request.user, slug)
    usage = tenant_usage(tenant)
    context = {
        "tenant": tenant,
        "usage": usage,
        "queue": history.tenant_queue(tenant),
        "running": history.tenant_running(tenant),
        "alarms": alarms_for(request.user).filter(job__tenant=tenant)[:20],
        "usage_figure": charts.usage_bars(
            [
                ("slots", usage.slots_used, usage.slots_nominal, usage.slots_borrowed),
                (
                    "bandwidth",
                    usage.bandwidth_bps / MBPS,
                    usage.bandwidth_nominal_bps / MBPS,
                    usage.bandwidth_borrowed_bps / MBPS,
                ),
            ],
            title="Use against quota",
        ),
        "is_site_admin": request.user.is_superuser,
    }
    return render(request, "dashboard/tenant_detail.html", context)


@login_required
def tenant_quota(request: HttpRequest, slug: str) -> HttpResponse:
    """Site admins edit a tenant's quotas; anyone else gets a 404."""
    if not request.user.is_superuser:
        raise Http404("No such page")
    tenant = get_tenant_for(request.user, slug)
    form = QuotaForm(request.POST or None, initial=_quota_initial(tenant))
    if request.method == "POST" and form.is_valid():
        try:
            tenant_set_quota(
                tenant=tenant,
                actor=request.user,
                changes=form.changes(),
                on_overuse=form.cleaned_data["on_overuse"] or None,
            )
        except QuotaError as exc:
            for field, reasons in exc.errors.items():
                for reason in reasons:
                    form.add_error(field if field in form.fields else None, reason)
        else:
            return redirect("tenant-detail", slug=tenant.slug)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "dashboard/tenant_quota.html", {"tenant": tenant, "form": form}, status=status
    )


@login_required
def cluster(request: HttpRequest) -> HttpResponse:
    """Site admins see the whole cluster; members see the nodes and their tenants' share."""
    tenants = tenants_for(request.user)
    visible = jobs_for(request.user)
    share = history.cluster_share(tenants)
    nodes = history.cluster_nodes(visible)
    context = {
        "nodes": nodes,
        "running": visible.filter(status__in=ACTIVE).order_by("tenant__slug", "pk"),
        "figures": {
            "topology": charts.topology_figure(nodes, []),
            "allocation": charts.stacked_area_figure(
                "Bandwidth allocation by tenant", "Mbit/s", share["allocation"], x_title=""
            ),
            "throughput": charts.line_figure(
                "Throughput of all runs",
                "samples/s",
                [(key, s["name"], s) for key, s in sorted(share["throughput"].items())],
                x_title="",
            ),
        },
        "is_site_admin": request.user.is_superuser,
    }
    return render(request, "dashboard/cluster.html", context)


NODE_ACTIONS = ("cordon", "drain", "uncordon")


@login_required
@require_POST
def node_action_view(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Site admins cordon, drain or uncordon a node from the cluster page; others get a 403."""
    if not request.user.is_superuser:
        raise PermissionDenied("Only site admins cordon, drain and uncordon nodes.")
    node = Node.objects.filter(name=name).first()
    if node is None or action not in NODE_ACTIONS:
        raise Http404("No such node")
    reason = request.POST.get("reason", "").strip()[:200]
    if action == "cordon":
        node_cordon(node=node, actor=request.user, reason=reason)
    elif action == "drain":
        node_drain(node=node, actor=request.user, reason=reason)
    else:
        node_uncordon(node=node, actor=request.user)
    return redirect("cluster")


@login_required
def alarm_list(request: HttpRequest) -> HttpResponse:
    form = AlarmFilterForm(request.GET or None)
    alarms = alarms_for(request.user)
    if form.is_valid():
        alarms = filtered_alarms(alarms, form.cleaned_data)
    context = {
        "form": form,
        "alarms": alarms[:200],
        "tenants": tenants_for(request.user),
        "acting": set(acting_tenants_for(request.user).values_list("pk", flat=True)),
    }
    return render(request, "dashboard/alarm_list.html", context)


@login_required
@require_POST
def alarm_acknowledge_view(request: HttpRequest, alarm_id: int) -> HttpResponse:
    alarm_acknowledge(alarm=get_actable_alarm_for(request.user, alarm_id), actor=request.user)
    back = request.POST.get("next", "")
    return redirect(back if back.startswith("/") and not back.startswith("//") else "alarm-list")


def _is_tenant_admin(user: AnyUser, tenant: Tenant) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    membership = membership_of(user, tenant)
    return membership is not None and membership.role == Role.TENANT_ADMIN


def _quota_initial(tenant: Tenant) -> dict[str, Any]:
    return {name: getattr(tenant, name) for name in QuotaForm.base_fields if hasattr(tenant, name)}
