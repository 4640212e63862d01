from django.apps import AppConfig


class BundlesConfig(AppConfig):
    name = "controlplane.bundles"
    verbose_name = "Code bundles"
