"""Code bundles: a tenant's uploaded training code, addressed by the archive's sha256."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.tenancy.models import Tenant


class CodeBundle(models.Model):
    """One archive of one tenant. The same bytes uploaded twice are one bundle."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="bundles")
    sha256 = models.CharField(max_length=64)
    kind = models.CharField(max_length=10)  # "zip" or "tar.gz", read from the content
    filename = models.CharField(max_length=255)  # as uploaded first, for people
    size = models.PositiveBigIntegerField()  # archive bytes
    file_count = models.PositiveIntegerField()
    total_bytes = models.PositiveBigIntegerField()  # uncompressed
    # Relative paths of the .py files: an entrypoint is checked against them at submit.
    python_files = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "sha256"], name="one_bundle_per_hash")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.short_hash}"

    @property
    def short_hash(self) -> str:
        return self.sha256[:12]

    def has_module(self, module: str) -> bool:
        """True if ``python -m module`` finds a file of this bundle (module.py or __main__)."""
        base = module.replace(".", "/")
        return f"{base}.py" in self.python_files or f"{base}/__main__.py" in self.python_files
