"""The durability check can fail: each mutant of a durable path breaks the rule it names.

A mutant is a monkeypatch applied in the child process just before the
operation begins (:data:`tests.integration.durability.child.MUTANTS`). Each must produce
a violation of its rule, under both recorders; a mutant of an object put,
delete, ``atomic_write``, an intake quarantine, an advance or a commit into a
new case folder must also produce a bad crash state.
"""

from __future__ import annotations

import pytest

from tests.integration.durability.child import MUTANTS
from tests.integration.durability.harness import run_scenario

#: mutant → the rules its violations must name
RULES = {
    "put-no-object-fsync": ("(a)",),  # object file not fsynced before its rename
    "put-no-object-folder-fsync": ("(b)",),  # object folder not fsynced after the rename
    "restore-no-syncfs": ("(a)",),  # restored tree renamed into place unsynced
    "atomic-write-no-folder-fsync": ("(b)",),  # atomic_write acknowledged before its folder fsync
    "put-trusts-existing-object": ("(a)", "(b)"),  # an existing object acknowledged as it was found
    "put-object-root-not-durable": ("(c)",),  # the store's new folders: parents not fsynced
    "restore-no-parent-fsync": ("(b)",),  # the restored folder's rename not synced
    "delete-no-folder-fsync": ("(d)",),  # unlinks acknowledged before the folder fsync
    "checkpoint-no-object-folder-fsync": ("(b)",),  # objects not durable at the publish commit
    "checkpoint-trusts-found-objects": ("(b)",),  # a crashed writer's unsynced objects published as found
    "intake-publish-no-folder-fsync": ("(b)",),  # a generation linked into place, its folder not synced
    "intake-commit-folder-not-durable": ("(c)",),  # the new case folders: parents not synced
    "intake-cache-no-fsync": ("(a)",),  # the cached copy linked into place unsynced
    "intake-quarantine-parent-not-synced": ("(c)",),  # the new quarantine folder: quarantine/ not synced
    "intake-ack-no-inbox-fsync": ("(d)",),  # the input's removal from the inbox not synced
    "intake-writer-no-fsync": ("(a)",),  # a generation linked into place unsynced
    "intake-span-writer-no-fsync": ("(a)",),  # a generation that closes a span linked into place unsynced
    "intake-collect-no-folder-fsync": ("(d)",),  # unreferenced generations removed, the folder not synced
    "intake-commit-plain-mkdir": ("(c)",),  # commit() makes the case folders with a plain mkdir
}
CRASHES = {
    "put",
    "put-existing",
    "gc-delete",
    "atomic-write",
    "intake-quarantine",
    "intake-advance",
    "intake-advance-span",
    "intake-collect",
    "intake-commit-new-folder",
}


def test_every_mutant_names_its_rule() -> None:
    assert set(RULES) == set(MUTANTS)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_fails_the_durability_check(mutant: str, recorder: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    scenario = MUTANTS[mutant][0]
    run = run_scenario(scenario, recorder, str(tmp_path), mutant=mutant)
    for rule in RULES[mutant]:
        assert any(v.startswith(rule) for v in run.violations), f"no {rule} violation:\n" + "\n".join(run.violations)
    if scenario in CRASHES:
        assert run.crashes, "no crash state shows the mutant's damage"
