from csp.constants import SELF
from csp.decorators import csp_update
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from controlplane.accounts import api as accounts_api
from controlplane.accounts.views import LoginView, rate_limited
from controlplane.api import artifacts as artifacts_api
from controlplane.api import cluster as cluster_api
from controlplane.api import telemetry as telemetry_api
from controlplane.bundles import api as bundles_api
from controlplane.health import healthz
from controlplane.jobs import api
from controlplane.telemetry.metrics import metrics_view
from controlplane.usage import api as usage_api

# Redoc (vendored, served from our static files) runs a worker from a blob: URL. Scripts
# are still files only: the split Swagger view serves its init code as a script, not inline.
VENDORED_UI_CSP = csp_update({"worker-src": [SELF, "blob:"]})

urlpatterns = [
    path("", include("controlplane.dashboard.urls")),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The admin's login page, under the same login rate limits (django-axes locks it too).
    path("admin/login/", rate_limited(admin.site.login)),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        VENDORED_UI_CSP(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    path(
        "api/redoc/",
        VENDORED_UI_CSP(SpectacularRedocView.as_view(url_name="api-schema")),
        name="api-redoc",
    ),
    path("api/v1/auth/token/", accounts_api.TokenLogin.as_view(), name="api-token"),
    path("api/v1/auth/tokens/", accounts_api.TokenListCreate.as_view(), name="api-tokens"),
    path(
        "api/v1/auth/tokens/<int:token_id>/",
        accounts_api.TokenRevoke.as_view(),
        name="api-token-revoke",
    ),
    path("api/v1/jobs/", api.JobListCreate.as_view(), name="api-jobs"),
    path("api/v1/jobs/batch/", api.JobBatchCreate.as_view(), name="api-jobs-batch"),
    path("api/v1/jobs/<int:job_id>/", api.JobDetail.as_view(), name="api-job"),
    path("api/v1/jobs/<int:job_id>/cancel/", api.JobCancel.as_view(), name="api-job-cancel"),
    path("api/v1/jobs/<int:job_id>/priority/", api.JobPriority.as_view(), name="api-job-priority"),
    path("api/v1/jobs/<int:job_id>/events/", api.JobEvents.as_view(), name="api-job-events"),
    path(
        "api/v1/jobs/<int:job_id>/metrics/",
        telemetry_api.JobMetrics.as_view(),
        name="api-job-metrics",
    ),
    path("api/v1/jobs/<int:job_id>/links/", telemetry_api.JobLinks.as_view(), name="api-job-links"),
    path("api/v1/jobs/<int:job_id>/logs/", telemetry_api.JobLogs.as_view(), name="api-job-logs"),
    path(
        "api/v1/jobs/<int:job_id>/artifacts/",
        artifacts_api.JobArtifacts.as_view(),
        name="api-job-artifacts",
    ),
    path(
        "api/v1/jobs/<int:job_id>/artifacts/<path:path>",
        artifacts_api.JobArtifactDownload.as_view(),
        name="api-job-artifact",
    ),
    path("api/v1/alarms/", telemetry_api.AlarmList.as_view(), name="api-alarms"),
    path(
        "api/v1/alarms/<int:alarm_id>/acknowledge/",
        telemetry_api.AlarmAcknowledge.as_view(),
        name="api-alarm-acknowledge",
    ),
    path("api/v1/nodes/", cluster_api.NodeList.as_view(), name="api-nodes"),
    path(
        "api/v1/nodes/<str:name>/cordon/", cluster_api.NodeCordon.as_view(), name="api-node-cordon"
    ),
    path("api/v1/nodes/<str:name>/drain/", cluster_api.NodeDrain.as_view(), name="api-node-drain"),
    path(
        "api/v1/nodes/<str:name>/uncordon/",
        cluster_api.NodeUncordon.as_view(),
        name="api-node-uncordon",
    ),
    path("api/v1/allocations/", cluster_api.AllocationList.as_view(), name="api-allocations"),
    path("api/v1/cluster/share/", cluster_api.ClusterShare.as_view(), name="api-cluster-share"),
    path("api/v1/tenants/", usage_api.TenantList.as_view(), name="api-tenants"),
    path("api/v1/tenants/<slug:slug>/", usage_api.TenantDetail.as_view(), name="api-tenant"),
    path("api/v1/bundles/", bundles_api.BundleListCreate.as_view(), name="api-bundles"),
    path("api/v1/bundles/<int:bundle_id>/", bundles_api.BundleDetail.as_view(), name="api-bundle"),
    path(
        "api/v1/bundles/<int:bundle_id>/download/",
        bundles_api.BundleDownload.as_view(),
        name="api-bundle-download",
    ),
    path(
        "api/v1/internal/bundles/<str:sha256>/",
        api.InternalBundleFetch.as_view(),
        name="api-internal-bundle",
    ),
    path(
        "api/v1/tenants/<slug:slug>/usage/",
        usage_api.TenantUsageView.as_view(),
        name="api-tenant-usage",
    ),
    path(
        "api/v1/tenants/<slug:slug>/quota/",
        usage_api.TenantQuotaView.as_view(),
        name="api-tenant-quota",
    ),
]

# Paths under /api/ that no view owns, and unhandled exceptions there, answer with the API's
# error body instead of an HTML page (lib.api_errors).
handler404 = "controlplane.lib.api_errors.not_found"
handler500 = "controlplane.lib.api_errors.server_error"
