"""Schemathesis runs every operation of the OpenAPI schema with generated input against the
live server: no input gives a 500, and every answer matches what the schema declares."""

from __future__ import annotations

import pytest
import schemathesis
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from controlplane.accounts.services import token_issue
from controlplane.jobs.models import Job, Queue
from controlplane.telemetry.models import Alarm, MetricSample

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The schema as the server serves it at /api/schema/ (same generator, same settings).
schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))


@pytest.fixture
def admin_token(admin_user, vision, speech) -> str:
    """A site admin's token, and a little data for the operations to find (job 1, alarm 1)."""
    job = Job.objects.create(
        tenant=vision, queue=Queue.objects.get(tenant=vision), name="fuzz", workload="tiny_gpt",
        world_size=1, steps=5, sync="full", status="running",
    )  # fmt: skip
    MetricSample.objects.create(job=job, step=1, reported_at=timezone.now(), data={"loss": 1.0})
    Alarm.objects.create(job=job, kind="sync_drift", raised_at=timezone.now())
    return token_issue(user=admin_user, name="fuzz")[1]


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_no_generated_request_gives_a_500_or_breaks_the_schema(case, live, admin_token):
    case.call_and_validate(
        base_url=live.url,
        headers={"Authorization": f"Token {admin_token}"},
        checks=[not_a_server_error, response_schema_conformance],
    )
