from django.urls import path

from controlplane.telemetry.consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
]
