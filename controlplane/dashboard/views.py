"""Pages: jobs, a job, tenants, the cluster, alarms. Thin: validate, call one helper, render."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlplane.dashboard import charts, history
from controlplane.dashboard.forms import AlarmFilterForm, JobForm, PriorityForm, QuotaForm
from controlplane.dashboard.logs import run_log_tails
from controlplane.jobs.access import get_actable_job_for, get_job_for, jobs_for
from controlplane.jobs.choices import ACTIVE
from controlplane.jobs.services import job_cancel, job_set_priority, job_submit, queue_position
from controlplane.telemetry.services import alarm_acknowledge, alarms_for, get_actable_alarm_for
from controlplane.tenancy.access import (
    AnyUser,
    acting_tenants_for,
    get_tenant_for,
    membership_of,
    tenants_for,
)
from controlplane.tenancy.models import Role, Tenant
from controlplane.tenancy.services import QuotaError, tenant_set_quota, tenant_usage


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    tenants = acting_tenants_for(request.user)
    form = JobForm(request.POST or None, tenants=tenants)
    if request.method == "POST" and form.is_valid() and form.spec is not None:
        job = job_submit(tenant=form.cleaned_data["tenant"], spec=form.spec, actor=request.user)
        return redirect("job-detail", job_id=job.pk)
    jobs = jobs_for(request.user).order_by("-created_at", "-id")[:100]
    status = 400 if request.method == "POST" else 200
    return render(request, "dashboard/job_list.html", {"jobs": jobs, "form": form}, status=status)


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
        "logs": run_log_tails(job.run_dir),
        "can_act": acting_tenants_for(request.user).filter(pk=job.tenant_id).exists(),
        "is_tenant_admin": _is_tenant_admin(request.user, job.tenant),
        "priority_form": PriorityForm(initial={"priority": job.priority}),
    }
    return render(request, "dashboard/job_detail.html", context)


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
    after = int(raw) if raw and raw.isdigit() else None
    return JsonResponse(history.job_history(job, after_step=after))


@login_required
@require_GET
def job_logs(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_job_for(request.user, job_id)
    return render(request, "dashboard/_logs.html", {"logs": run_log_tails(job.run_dir)})


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
                    usage.bandwidth_used_mbps,
                    usage.bandwidth_nominal_mbps,
                    usage.bandwidth_borrowed_mbps,
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


@login_required
def alarm_list(request: HttpRequest) -> HttpResponse:
    form = AlarmFilterForm(request.GET or None)
    alarms = alarms_for(request.user)
    if form.is_valid():
        alarms = _filtered(alarms, form.cleaned_data)
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


def _filtered(alarms: Any, f: dict[str, Any]) -> Any:
    if f.get("state") == "open":
        alarms = alarms.filter(cleared_at__isnull=True)
    elif f.get("state") == "cleared":
        alarms = alarms.filter(cleared_at__isnull=False)
    if f.get("kind"):
        alarms = alarms.filter(kind=f["kind"])
    if f.get("tenant"):
        alarms = alarms.filter(job__tenant__slug=f["tenant"])
    if f.get("unacknowledged"):
        alarms = alarms.filter(acknowledged=False)
    return alarms


def _is_tenant_admin(user: AnyUser, tenant: Tenant) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    membership = membership_of(user, tenant)
    return membership is not None and membership.role == Role.TENANT_ADMIN


def _quota_initial(tenant: Tenant) -> dict[str, Any]:
    return {name: getattr(tenant, name) for name in QuotaForm.base_fields if hasattr(tenant, name)}
