from django.urls import path

from controlplane.dashboard import views

urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/history.json", views.job_history_json, name="job-history"),
    path("jobs/<int:job_id>/artifacts/<path:path>", views.job_artifact, name="job-artifact"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("jobs/<int:job_id>/priority/", views.job_priority_view, name="job-priority"),
    path("bundles/", views.bundle_list, name="bundle-list"),
    path("bundles/<int:bundle_id>/delete/", views.bundle_delete_view, name="bundle-delete"),
    path("tenants/", views.tenant_list, name="tenant-list"),
    path("tenants/<slug:slug>/", views.tenant_detail, name="tenant-detail"),
    path("tenants/<slug:slug>/quota/", views.tenant_quota, name="tenant-quota"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/nodes/<str:name>/<str:action>/", views.node_action_view, name="node-action"),
    path("alarms/", views.alarm_list, name="alarm-list"),
    path(
        "alarms/<int:alarm_id>/acknowledge/", views.alarm_acknowledge_view, name="alarm-acknowledge"
    ),
]
