from django.contrib import admin

from controlplane.jobs.models import Job, JobEvent, Queue


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "from_status", "to_status", "reason", "actor"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "status", "world_size", "priority", "created_at"]
    list_filter = ["status", "tenant", "priority"]
    # Status changes only through jobs.state.transition(), never by editing the row.
    readonly_fields = ["status", "status_reason"]
    inlines = [JobEventInline]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["tenant", "name", "policy", "preemption"]
