"""The suite's time budget, named here once. Every whole run of a tier records its wall time and each
test's seconds in pytest's cache (tests/conftest.py); the next run of the quick tier fails when the
last record of a tier is over its budget, naming the slowest tests, so that a slow test is seen the
day it lands, not when CI (90 minutes at most) stops."""

import pytest

# On this repository's 2-core machine: CI runs the full tier on a machine about 1.4x slower and stops
# at 90 minutes; the quick tier is what a developer runs before every commit.
BUDGET_S = {"quick": 3 * 60, "full": 40 * 60}


@pytest.mark.parametrize("tier", sorted(BUDGET_S))
def test_the_last_whole_run_of_each_tier_was_inside_its_budget(tier, request):
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider
    record = cache.get(f"elastic-launcher/durations/{tier}", None) if cache is not None else None
    if record is None:
        pytest.skip(f"no whole run of the {tier} tier recorded on this machine yet")
    slowest = sorted(record["tests"].items(), key=lambda item: -item[1])[:10]
    assert record["wall_s"] <= BUDGET_S[tier], (
        f"the {tier} tier took {record['wall_s']:.0f} s on {record['finished']}, over its budget of "
        f"{BUDGET_S[tier]} s; slowest: " + ", ".join(f"{nodeid} {seconds:.0f} s" for nodeid, seconds in slowest))
