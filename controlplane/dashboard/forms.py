"""The browser's forms. Rules live in the services and JobSpec; forms only parse fields."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from controlplane.jobs.choices import PriorityClass, SyncStrategy, Workload
from controlplane.jobs.services import check_fits, check_storage
from controlplane.jobs.spec import JobSpec, SpecError
from controlplane.telemetry.models import AlarmKind
from controlplane.tenancy.models import Tenant
from controlplane.tenancy.quotas import QUOTA_MAXIMUM

WHOLE = re.compile(r"[-+]?[0-9]{1,10}")
# Stands for the bundle being uploaded with the form while the other fields are checked.
UPLOAD_PLACEHOLDER = "0" * 64


class WholeNumberField(forms.IntegerField):
    """An integer typed as digits only: Django's IntegerField quietly turns "2.0" into 2."""

    def to_python(self, value: Any) -> int | None:
        if isinstance(value, str) and value.strip() and not WHOLE.fullmatch(value.strip()):
            raise forms.ValidationError("Enter a whole number.", code="invalid")
        return super().to_python(value)


class JobForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug")
    name = forms.CharField(max_length=100)
    workload = forms.ChoiceField(
        choices=[("", "— my own code (below) —"), *Workload.choices], required=False
    )
    # Tenant code: upload an archive here, or name a bundle already uploaded; the view
    # stores the upload (services.bundle_upload) only once every other field is valid.
    code_file = forms.FileField(required=False, label="Code bundle (.zip or .tar.gz)")
    code = forms.CharField(required=False, max_length=64, label="or a bundle id / sha256")
    entrypoint = forms.CharField(
        required=False, max_length=2000, help_text="train.py --lr 0.1, or -m pkg.train"
    )
    world_size = WholeNumberField(initial=2)
    steps = WholeNumberField(initial=200)
    sync = forms.ChoiceField(choices=SyncStrategy.choices, initial=SyncStrategy.FULL)
    priority = forms.ChoiceField(
        choices=[(c.label, c.label) for c in PriorityClass], initial="normal"
    )
    deadline = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    bandwidth_floor_mbps = WholeNumberField(
        required=False, initial=0, label="Bandwidth floor (Mbit/s)"
    )
    bandwidth_ceiling_mbps = WholeNumberField(required=False, label="Bandwidth ceiling (Mbit/s)")

    def __init__(self, *args: Any, tenants: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = tenants
        self.spec: JobSpec | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        spec_input = {k: v for k, v in data.items() if k != "code_file" and v != ""}
        if data.get("code_file") is not None:
            if data.get("code"):
                self.add_error("code", "upload a bundle or name one, not both")
            # The upload is stored by the view; until then the spec names a placeholder.
            spec_input["code"] = UPLOAD_PLACEHOLDER
        try:
            self.spec = JobSpec.from_input(spec_input, also_known={"tenant"})
            if data.get("tenant") is not None:
                check_fits(tenant=data["tenant"], spec=self.spec)
                check_storage(tenant=data["tenant"])
        except SpecError as exc:
            self.spec = None
            for field, reasons in exc.errors.items():
                for reason in reasons:
                    self.add_error(field if field in self.fields else None, reason)
        return data


class PriorityForm(forms.Form):
    priority = forms.TypedChoiceField(choices=PriorityClass.choices, coerce=int)


def _quota_int(label: str, *, required: bool = True) -> WholeNumberField:
    """A quota number: whole, not negative, within the database column's range."""
    return WholeNumberField(label=label, required=required, min_value=0, max_value=QUOTA_MAXIMUM)


class QuotaForm(forms.Form):
    """A site admin's quota edit; the rules live in usage.services.tenant_set_quota."""

    slot_quota = _quota_int("Slots")
    bandwidth_quota_mbps = _quota_int("Bandwidth (Mbit/s)")
    max_running_jobs = _quota_int("Max running jobs")
    fair_share_weight = forms.FloatField(
        label="Fair-share weight", min_value=0.01, max_value=QUOTA_MAXIMUM
    )
    cohort = forms.SlugField(required=False, max_length=50)
    slot_borrowing_limit = _quota_int("Slot borrowing limit", required=False)
    slot_lending_limit = _quota_int("Slot lending limit", required=False)
    bandwidth_borrowing_limit_mbps = _quota_int(
        "Bandwidth borrowing limit (Mbit/s)", required=False
    )
    bandwidth_lending_limit_mbps = _quota_int("Bandwidth lending limit (Mbit/s)", required=False)
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
