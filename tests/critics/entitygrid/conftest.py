"""Shared by the entity-grid tests: the fixture man pages and a critic fitted on their training split (parsing is
the cost, so both are built once per session)."""

from __future__ import annotations

import pytest



@pytest.fixture(scope="session")
def manpages(fixture_manpages):
    return fixture_manpages


@pytest.fixture(scope="session")
def fitted(manpages):
    from critics.entitygrid import EntityGridCritic

    return EntityGridCritic().fit(manpages["train"])
