from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "controlplane.tenancy"
    label = "tenancy"
    verbose_name = "Tenants and quotas"
