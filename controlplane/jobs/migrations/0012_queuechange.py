"""The scheduling pass's change feed: a table and the triggers that fill it.

The triggers are the only writers: on any insert or delete of a queued job, and any update of a
column the scheduler reads (``adapters.REQUEST_COLUMNS``, and ``status``) of a job that was or
becomes queued, they add the job's id. A trigger sees every write, including queryset updates
and raw SQL, which model signals do not. PostgreSQL 13 or later (transaction ids as ``xid8``).
"""

import django.db.models.functions.datetime
from django.db import migrations, models

# The job columns whose change may change a queued job's place or chances.
WATCHED = (
    "status", "tenant_id", "world_size", "created_at", "priority", "bandwidth_floor_mbps",
    "bandwidth_ceiling_mbps", "deadline", "steps", "last_step", "started_at", "hyperparameters",
    "evictions", "evicted_at", "launch_faults", "launch_fault_at", "node_selector",
)  # fmt: skip
COLUMNS = ", ".join(WATCHED)

SQLITE = [
    f"""CREATE TRIGGER jobs_queuechange_{event.lower()} AFTER {event}{of} ON jobs_job
    FOR EACH ROW WHEN {when}
    BEGIN
        INSERT INTO jobs_queuechange (job_id, at)
        VALUES ({row}.id, strftime('%Y-%m-%d %H:%M:%f', 'now'));
    END"""
    for event, of, when, row in [
        ("INSERT", "", "NEW.status = 'queued'", "NEW"),
        ("UPDATE", f" OF {COLUMNS}", "OLD.status = 'queued' OR NEW.status = 'queued'", "NEW"),
        ("DELETE", "", "OLD.status = 'queued'", "OLD"),
    ]
]
POSTGRESQL = [
    """CREATE FUNCTION jobs_queuechange() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO jobs_queuechange (job_id, xid, at)
        VALUES (
            CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END,
            pg_current_xact_id()::text::bigint,
            clock_timestamp()
        );
        RETURN NULL;
    END $$""",
    *(
        f"""CREATE TRIGGER jobs_queuechange_{event.lower()} AFTER {event}{of} ON jobs_job
        FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION jobs_queuechange()"""
        for event, of, when in [
            ("INSERT", "", "NEW.status = 'queued'"),
            ("UPDATE", f" OF {COLUMNS}", "OLD.status = 'queued' OR NEW.status = 'queued'"),
            ("DELETE", "", "OLD.status = 'queued'"),
        ]
    ),
]
DROP = {
    "sqlite": [
        f"DROP TRIGGER IF EXISTS jobs_queuechange_{e}" for e in ("insert", "update", "delete")
    ],
    "postgresql": [
        *(
            f"DROP TRIGGER IF EXISTS jobs_queuechange_{e} ON jobs_job"
            for e in ("insert", "update", "delete")
        ),
        "DROP FUNCTION IF EXISTS jobs_queuechange()",
    ],
}


def create_triggers(apps, schema_editor):
    statements = {"sqlite": SQLITE, "postgresql": POSTGRESQL}.get(schema_editor.connection.vendor)
    if statements is None:
        raise RuntimeError(
            f"the scheduling feed has no triggers for {schema_editor.connection.vendor}"
        )
    for statement in statements:
        schema_editor.execute(statement, params=None)


def drop_triggers(apps, schema_editor):
    for statement in DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_job_artifact_bytes"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField()),
                ("xid", models.BigIntegerField(db_index=True, null=True)),
                (
                    "at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
