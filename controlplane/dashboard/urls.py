from django.urls import path

from controlplane.dashboard import views

urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
]
