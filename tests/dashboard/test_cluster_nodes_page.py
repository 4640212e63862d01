"""The cluster page shows each node's state; site admins cordon, drain and uncordon from it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from controlplane.jobs.choices import JobStatus, NodeState
from controlplane.jobs.models import Job, Node

from .conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(settings) -> dict[str, Node]:
    settings.SYNCLANE_NODE_LOST_AFTER_S = 30
    now = timezone.now()
    made = {
        "n1": Node(name="n1", slots=4, fabric_mbps=1000, last_seen=now, labels={"gpu": "h200"}),
        "n2": Node(name="n2", slots=4, fabric_mbps=1000, last_seen=now, state="cordoned"),
        "n3": Node(name="n3", slots=2, fabric_mbps=500, last_seen=now - dt.timedelta(minutes=5)),
    }
    Node.objects.bulk_create(made.values())
    return made


def row_of(html: str, name: str) -> str:
    start = html.index(f'<tr class="node-row" data-node="{name}">')
    return html[start : html.index("</tr>", start)]


def test_the_page_shows_each_nodes_state_and_labels(client, alice, nodes):
    html = client_for(client, alice).get(reverse("cluster")).text
    assert 'class="node-state state-ready">ready<' in row_of(html, "n1")
    assert "<code>gpu=h200</code>" in row_of(html, "n1")
    assert 'class="node-state state-cordoned">cordoned<' in row_of(html, "n2")
    assert 'class="node-state state-lost">lost<' in row_of(html, "n3")


def test_members_see_no_node_buttons_and_may_not_post_them(client, alice, nodes):
    member = client_for(client, alice)
    assert "Cordon</button>" not in member.get(reverse("cluster")).text
    url = reverse("node-action", args=["n1", "cordon"])
    assert member.post(url).status_code == 403
    assert Node.objects.get(name="n1").state == NodeState.READY


def test_admins_get_the_buttons_each_state_allows(client, root, nodes):
    html = client_for(client, root).get(reverse("cluster")).text
    ready, cordoned = row_of(html, "n1"), row_of(html, "n2")
    assert "Cordon</button>" in ready and "Drain</button>" in ready
    assert "Uncordon</button>" not in ready
    assert "Uncordon</button>" in cordoned and "Drain</button>" in cordoned
    assert "Cordon</button>" not in cordoned.replace("Uncordon</button>", "")


def test_an_admin_drains_a_node_from_the_page(client, root, nodes, vision):
    job = Job.objects.create(
        tenant=vision,
        queue=vision.queues.get(name="default"),
        name="here",
        workload="tiny_gpt",
        world_size=2,
        steps=5,
        sync="full",
        status=JobStatus.RUNNING,
        placement={"node": "n1"},
    )
    admin = client_for(client, root)
    response = admin.post(reverse("node-action", args=["n1", "drain"]), {"reason": "fan"})
    assert response.status_code == 302 and response["Location"] == reverse("cluster")
    assert Node.objects.get(name="n1").state == NodeState.DRAINING
    assert Job.objects.get(pk=job.pk).preempt_requested
    html = admin.get(reverse("cluster")).text
    assert "drained by root: fan" in row_of(html, "n1")


def test_an_unknown_node_or_action_is_a_404(client, root, nodes):
    admin = client_for(client, root)
    assert admin.post(reverse("node-action", args=["nope", "cordon"])).status_code == 404
    assert admin.post(reverse("node-action", args=["n1", "reboot"])).status_code == 404
