"""Whatever the body, a quota change answers 200 or a 400 naming fields, and a 400 changes
nothing, through the API and the page's form alike (hypothesis)."""

from __future__ import annotations

import json

import pytest
from django.forms.models import model_to_dict
from django.test import Client
from hypothesis import event, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from controlplane.tenancy.models import Tenant

from ..fuzz import FUZZ, bodies_around, nested

VALID = {
    "slot_quota": 4,
    "bandwidth_quota_mbps": 1000,
    "max_running_jobs": 4,
    "fair_share_weight": 1.5,
    "cohort": "lab",
    "slot_borrowing_limit": None,
    "slot_lending_limit": 2,
    "bandwidth_borrowing_limit_mbps": 100,
    "bandwidth_lending_limit_mbps": None,
    "on_overuse": "next_admission",
}


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser("root", password="x" * 12)


@pytest.fixture
def api(admin) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin)
    return client


def quota_row(tenant: Tenant) -> dict:
    return model_to_dict(Tenant.objects.get(pk=tenant.pk))


@FUZZ
@given(body=bodies_around(VALID, extra_keys=["slug", "name", "warp"]))
def test_no_quota_body_gives_a_500_or_changes_anything_on_a_400(api, vision, body):
    before = quota_row(vision)
    response = api.patch(
        "/api/v1/tenants/vision/quota/", data=json.dumps(body), content_type="application/json"
    )
    event(f"status {response.status_code}")
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        errors = response.json()
        assert isinstance(errors, dict) and errors
        assert quota_row(vision) == before


form_values = st.dictionaries(
    st.sampled_from(sorted(VALID)),
    st.text(max_size=12) | st.sampled_from(["4", "4.0", "-1", "1e3", "2147483648", "nan", "inf"]),
)


@FUZZ
@given(changes=form_values)
def test_no_quota_form_post_gives_a_500_or_changes_anything_when_refused(admin, vision, changes):
    client = Client()
    client.force_login(admin)
    before = quota_row(vision)
    base = {k: "" if v is None else str(v) for k, v in VALID.items()}
    response = client.post("/tenants/vision/quota/", {**base, **changes})
    event(f"status {response.status_code}")
    assert response.status_code in (302, 400)
    if response.status_code == 400:
        assert quota_row(vision) == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"slot_quota": 2**31}, "slot_quota"),
        ({"slot_quota": 4.0}, "slot_quota"),
        ({"slot_quota": "4"}, "slot_quota"),
        ({"slot_quota": True}, "slot_quota"),
        ({"fair_share_weight": "1.5"}, "fair_share_weight"),
        ({"fair_share_weight": 1e300}, "fair_share_weight"),
        ({"cohort": {"name": "lab"}}, "cohort"),
        ({"cohort": "x" * 51}, "cohort"),
        ({"cohort": "l\x00b"}, "cohort"),
        ({"slot_lending_limit": ""}, "slot_lending_limit"),
        ({"on_overuse": ["preempt"]}, "on_overuse"),
    ],
)
def test_a_mistyped_quota_is_a_400_naming_the_field(api, vision, change, field):
    before = quota_row(vision)
    response = api.patch(
        "/api/v1/tenants/vision/quota/", data=json.dumps(change), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert quota_row(vision) == before


def test_a_deeply_nested_quota_body_is_a_400(api, vision):
    response = api.patch(
        "/api/v1/tenants/vision/quota/", data=nested(10_000), content_type="application/json"
    )
    assert response.status_code == 400
    assert "body" in response.json()


def test_the_quota_form_refuses_a_decimal_where_a_whole_number_is_due(admin, vision):
    client = Client()
    client.force_login(admin)
    base = {k: "" if v is None else str(v) for k, v in VALID.items()}
    response = client.post("/tenants/vision/quota/", {**base, "slot_quota": "6.0"})
    assert response.status_code == 400
    assert quota_row(vision)["slot_quota"] == 4
