"""The one "not now" error of the services: the object's state does not allow the action.

Services raise a subclass (a bundle still used by an unfinished job, the artifacts of a
job that still runs); the API's error handler (``api_errors``) answers it with a 409 and
its message as ``detail``, so no view maps it by hand. Plain Python: services raise it
without knowing about HTTP.
"""

from __future__ import annotations


class Conflict(Exception):
    """The object is in a state that does not allow this action now (HTTP 409).

    The message is shown to the caller as is: say what blocks it and when it will not.
    """
