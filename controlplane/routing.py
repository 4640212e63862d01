from django.urls import path

from controlplane.telemetry import consumers

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
    path("ws/tenants/<slug:slug>/", consumers.TenantConsumer.as_asgi()),
    path("ws/cluster/", consumers.ClusterConsumer.as_asgi()),
    path("ws/alarms/", consumers.AlarmsConsumer.as_asgi()),
]
