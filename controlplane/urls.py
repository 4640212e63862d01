from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from rest_framework.authtoken.views import obtain_auth_token

from controlplane.health import healthz
from controlplane.jobs import api
from controlplane.tenancy import api as tenancy_api

urlpatterns = [
    path("", include("controlplane.dashboard.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/v1/auth/token/", obtain_auth_token, name="api-token"),
    path("api/v1/jobs/", api.JobListCreate.as_view(), name="api-jobs"),
    path("api/v1/jobs/<int:job_id>/", api.JobDetail.as_view(), name="api-job"),
    path("api/v1/jobs/<int:job_id>/cancel/", api.JobCancel.as_view(), name="api-job-cancel"),
    path("api/v1/jobs/<int:job_id>/priority/", api.JobPriority.as_view(), name="api-job-priority"),
    path(
        "api/v1/tenants/<slug:slug>/usage/",
        tenancy_api.TenantUsageView.as_view(),
        name="api-tenant-usage",
    ),
    path(
        "api/v1/tenants/<slug:slug>/quota/",
        tenancy_api.TenantQuotaView.as_view(),
        name="api-tenant-quota",
    ),
]
