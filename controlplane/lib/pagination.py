"""Cursor pagination for lists that grow while a client pages through them (jobs, alarms)."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    """Pages of ``page_size`` (default 50, at most 200), newest first unless ``ordering`` says.

    A cursor, unlike an offset, neither skips nor repeats rows when new ones arrive.
    """

    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"
    ordering = ("-created_at", "-id")


class NewestRaisedFirst(NewestFirst):
    ordering = ("-raised_at", "-id")
