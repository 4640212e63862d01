from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "controlplane.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from controlplane.telemetry import signals  # noqa: F401 - connects the receivers
