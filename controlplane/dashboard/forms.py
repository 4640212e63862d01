"""The browser's job form. Rules live in jobs.spec.JobSpec; this only renders fields."""

from __future__ import annotations

from typing import Any

from django import forms

from controlplane.jobs.choices import PriorityClass, SyncStrategy, Workload
from controlplane.jobs.spec import JobSpec, SpecError
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
    bandwidth_floor_mbps = forms.IntegerField(required=False, initial=0, label="Bandwidth floor (Mbit/s)")
    bandwidth_ceiling_mbps = forms.IntegerField(required=False, label="Bandwidth ceiling (Mbit/s)")

    def __init__(self, *args: Any, tenants: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
        self.spec: JobSpec | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            self.spec = JobSpec.from_input(data)
        except SpecError as exc:
            for field, reasons in exc.errors.items():
                for reason in reasons:
                    self.add_error(field if field in self.fields else None, reason)
        return data
