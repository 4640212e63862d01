"""The browser's forms. Rules live in the services and JobSpec; forms only parse fields."""

from __future__ import annotations

from typing import Any

from django import forms

from controlplane.jobs.choices import PriorityClass, SyncStrategy, Workload
from controlplane.jobs.services import check_fits
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.telemetry.models import AlarmKind
from controlplane.tenancy.models import Tenant


class JobForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug")
    name = forms.CharField(max_length=100)
    workload = forms.ChoiceField(choices=Workload.choices)
    world_size = forms.IntegerField(initial=2)
    steps = forms.IntegerField(initial=200)
    sync = forms.ChoiceField(choices=SyncStrategy.choices, initial=SyncStrategy.FULL)
    priority = forms.ChoiceField(
        choices=[(c.label, c.label) for c in PriorityClass], initial="normal"
    )
    deadline = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    bandwidth_floor_mbps = forms.IntegerField(
        required=False, initial=0, label="Bandwidth floor (Mbit/s)"
    )
    bandwidth_ceiling_mbps = forms.IntegerField(required=False, label="Bandwidth ceiling (Mbit/s)")

    def __init__(self, *args: Any, tenants: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
        self.spec: JobSpec | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            self.spec = JobSpec.from_input(data)
            if data.get("tenant") is not None:
                check_fits(tenant=data["tenant"], spec=self.spec)
        except SpecError as exc:
            self.spec = None
            for field, reasons in exc.errors.items():
                for reason in reasons:
                    self.add_error(field if field in self.fields else None, reason)
        return data


class PriorityForm(forms.Form):
    priority = forms.TypedChoiceField(choices=PriorityClass.choices, coerce=int)


class QuotaForm(forms.Form):
    """A site admin's quota edit; the rules live in tenancy.services.tenant_set_quota."""

    slot_quota = forms.IntegerField(label="Slots")
    bandwidth_quota_mbps = forms.IntegerField(label="Bandwidth (Mbit/s)")
    max_running_jobs = forms.IntegerField(label="Max running jobs")
    fair_share_weight = forms.FloatField(label="Fair-share weight")
    cohort = forms.CharField(required=False, max_length=50)
    slot_borrowing_limit = forms.IntegerField(required=False, label="Slot borrowing limit")
    slot_lending_limit = forms.IntegerField(required=False, label="Slot lending limit")
    bandwidth_borrowing_limit_mbps = forms.IntegerField(
        required=False, label="Bandwidth borrowing limit (Mbit/s)"
    )
    bandwidth_lending_limit_mbps = forms.IntegerField(
        required=False, label="Bandwidth lending limit (Mbit/s)"
    )
    on_overuse = forms.ChoiceField(
        required=False,
        label="If the new quota is below current use",
        choices=[
            ("", "refuse the change"),
            ("preempt", "preempt now"),
            ("next_admission", "apply at next admission"),
        ],
    )

    def changes(self) -> dict[str, Any]:
        """The quota fields as submitted (on_overuse excluded)."""
        return {k: v for k, v in self.cleaned_data.items() if k != "on_overuse"}


class AlarmFilterForm(forms.Form):
    state = forms.ChoiceField(
        required=False, choices=[("", "any state"), ("open", "open"), ("cleared", "cleared")]
    )
    kind = forms.ChoiceField(required=False, choices=[("", "any kind"), *AlarmKind.choices])
    tenant = forms.CharField(required=False)
    unacknowledged = forms.BooleanField(required=False, label="unacknowledged only")
