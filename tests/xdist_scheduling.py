"""How pytest-xdist shares the test modules among its workers (``--dist loadscope``, pyproject's
addopts): a module's tests on one worker, so that its module fixtures (trained smoke models,
a DVC pipeline) are built once; modules that share a costly session fixture on the same
worker; the longest modules handed out first, so that no worker is left with a long module
at the end while the other idles."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: modules that share a session fixture too costly to build twice → the scope they join
SHARED_SCOPES = {
    # `served` (conftest.py): an `mlflow server` and two smoke models trained against it
    "tests/test_tracking_server.py": "tests/test_resume.py",
    "tests/test_mlflow_ui.py": "tests/test_resume.py",
}

#: long tests that share no module fixture with their module: a scope of their own, so that
#: they need not wait on the worker that runs their module's other tests
OWN_SCOPES = frozenset({
    # its own server and training, beside the `served` ones of its module
    "tests/test_tracking_server.py::"
    "test_a_server_dying_mid_training_fails_fast_and_the_run_resumes",
})

#: the scopes that take longest (docs/PERFORMANCE.md, "The test suite and CI"), roughly longest
#: first; the others, each a minute or less, follow in collection order, so that no long scope
#: is left for the end. The second needs no built project, so the second worker starts at once
#: while the first builds it.
LONGEST_FIRST: tuple[str, ...] = (
    "tests/test_pipeline.py",  # `dvc repro` of a smoke study, then `dvc exp run`s
    "tests/test_seed003_script.py",  # a clone and eleven `multilab` processes
    "tests/test_resume.py",  # with the modules of SHARED_SCOPES: the served models
    *sorted(OWN_SCOPES),
    "tests/test_user_corpora.py",
    "tests/test_real_languages_smoke.py",
    "tests/test_studies.py",
    "tests/test_distributed.py",
    "tests/test_downstream.py",
    "tests/test_train_safety.py",
    "tests/test_tracking_failures.py",
    "tests/test_vocab_units.py",
    "tests/test_corpus.py",
    "tests/test_faults.py",  # every writing command x four faults, one module fixture
    "tests/test_bad_input.py",
    "tests/test_probe.py",
    "tests/test_architecture.py",
)


class ModuleScheduling(LoadScopeScheduling):
    """``loadscope`` by module (:data:`SHARED_SCOPES` joined, :data:`OWN_SCOPES` apart),
    :data:`LONGEST_FIRST` first."""

    def _split_scope(self, nodeid: str) -> str:
        test = nodeid.split("[", 1)[0]  # every parameter of a test in one scope
        if test in OWN_SCOPES:
            return test
        module = nodeid.split("::", 1)[0]
        return SHARED_SCOPES.get(module, module)

    def _assign_work_unit(self, node) -> None:
        """Hand out the longest waiting scope (the first one waiting when none is listed)."""
        longest = min(self.workqueue, key=_rank)  # min keeps the first of equals
        self.workqueue.move_to_end(longest, last=False)
        super()._assign_work_unit(node)


def _rank(scope: str) -> int:
    return LONGEST_FIRST.index(scope) if scope in LONGEST_FIRST else len(LONGEST_FIRST)
