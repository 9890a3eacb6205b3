"""privacy.Budget and data.units (issue 38): one request type, validated once; one unit vocabulary and one error."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import make_toy_dataset
from privsynth.data.units import ALL_UNITS, DATA_UNITS, check_unit, count_units
from privsynth.errors import InvalidData, InvalidUnit, PrivacyError
from privsynth.privacy import Budget
from privsynth.privacy.budget import as_budget


def test_a_budget_is_validated_once_and_frozen():
    b = Budget(8, 1e-5, "trajectory")
    assert (b.epsilon, b.delta, b.unit) == (8.0, 1e-5, "trajectory") and isinstance(b.epsilon, float)
    assert "add/remove one trajectory" in b.neighbouring_relation and "private" in b.neighbouring_relation
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.epsilon = 100.0  # type: ignore[misc]
    for bad in ((0, 1e-5, "transition"), (float("inf"), 1e-5, "transition"), (1, 1.0, "transition"),
                (1, 1e-5, "user")):
        with pytest.raises(PrivacyError):
            Budget(*bad)


def test_one_unit_error_that_both_callers_catch():
    with pytest.raises(InvalidUnit, match="unknown privacy unit 'user': choose 'transition' or 'trajectory'"):
        check_unit("user")
    assert issubclass(InvalidUnit, InvalidData) and issubclass(InvalidUnit, PrivacyError)
    assert check_unit("episode", aliases=True) == "trajectory" and check_unit("expert", ALL_UNITS) == "expert"
    with pytest.raises(InvalidUnit):
        check_unit("episode")  # aliases only where asked (split records)
    assert DATA_UNITS == ("transition", "trajectory")


def test_budget_checks_delta_against_the_units_of_a_dataset():
    ds = make_toy_dataset(lengths=(10, 10, 10))
    assert count_units(ds, "transition") == 30 and count_units(ds, "trajectory") == 3
    Budget(1.0, 1e-3, "transition").check_dataset(ds)
    with pytest.raises(PrivacyError, match="below 1/N"):
        Budget(1.0, 0.4, "trajectory").check_dataset(ds)  # 0.4 >= 1/3


def test_as_budget_is_the_one_door():
    b = Budget(2.0, 1e-5)
    assert as_budget(b) is b and as_budget(epsilon=2.0, delta=1e-5, default_unit="trajectory").unit == "trajectory"
    with pytest.raises(PrivacyError, match="not both"):
        as_budget(b, epsilon=3.0)
    with pytest.raises(PrivacyError, match="needs epsilon and delta"):
        as_budget(epsilon=1.0)
    with pytest.raises(PrivacyError, match="must be a privsynth.privacy.Budget"):
        as_budget((1.0, 1e-5))  # type: ignore[arg-type]


def test_release_and_registry_take_a_budget():
    import inspect

    from privsynth.release import synthesize
    from privsynth.synth import registry

    assert "budget" in inspect.signature(synthesize).parameters
    assert "budget" in inspect.signature(registry.fit).parameters
    with pytest.raises(PrivacyError, match="not both"):
        synthesize("x", budget=Budget(1.0, 1e-5), epsilon=2.0)
