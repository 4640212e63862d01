"""A password hasher for the test process: Django's PBKDF2 with 1,000 iterations.

The suite creates hundreds of users and logs them in; at the production 1,000,000 iterations
each hash costs about 0.25 s of CPU here, most of the unit tier's time. The algorithm name is
Django's own, and a PBKDF2 hash carries its iteration count, so a server with the production
settings still verifies these passwords; but it upgrades them at the first login, which ends the
sessions made for that user, so tests marked integration or browser hash with the production
hasher (tests/conftest.py).
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000
