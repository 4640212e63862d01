from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "controlplane.jobs"
    label = "jobs"
    verbose_name = "Training jobs"
