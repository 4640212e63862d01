"""Hypothesis strategies for fuzzing the API with arbitrary JSON (shared by the fuzz tests)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The db fixture is function-scoped on purpose: every example runs in the test's
# transaction and compares row counts itself.
FUZZ = settings(
    max_examples=int(os.environ.get("SYNCLANE_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["", "0", "2", "2.0", "1e309", "\x00", "2026-02-30T10:00:00Z", "full"])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def bodies_around(valid: dict[str, Any], extra_keys: list[str]) -> st.SearchStrategy[Any]:
    """Bodies near ``valid``: some fields replaced by any JSON, some dropped, unknown keys added,
    and now and then a body that is not an object at all."""
    keys = sorted(valid) + extra_keys
    mutated = st.fixed_dictionaries(
        {},
        optional={key: json_values | st.just(valid.get(key)) for key in keys},
    ).map(lambda changes: {**valid, **changes})
    dropped = st.sets(st.sampled_from(sorted(valid))).map(
        lambda gone: {k: v for k, v in valid.items() if k not in gone}
    )
    return mutated | dropped | json_values


def nested(depth: int) -> str:
    """A JSON body nested ``depth`` levels deep, as text (too deep to build as an object)."""
    return '{"name": ' + "[" * depth + "]" * depth + "}"
