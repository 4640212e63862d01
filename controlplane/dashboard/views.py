"""Pages: job list with the submit form, job page, cancel."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.dashboard.charts import metrics_history
from controlplane.dashboard.forms import JobForm
from controlplane.jobs.access import get_actable_job_for, get_job_for, jobs_for
from controlplane.jobs.services import job_cancel, job_submit, queue_position
from controlplane.tenancy.access import acting_tenants_for


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
    context = {
        "job": job,
        "events": job.events.select_related("actor"),
        "queue_position": queue_position(job),
        "history": metrics_history(job),
        "can_act": acting_tenants_for(request.user).filter(pk=job.tenant_id).exists(),
    }
    return render(request, "dashboard/job_detail.html", context)


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job_cancel(job=get_actable_job_for(request.user, job_id), actor=request.user)
    return redirect("job-detail", job_id=job_id)
