"""The riftco conformance suite: every protocol op of a backend against CPU float64.

Front ends: ``riftco conformance BACKEND[:DEVICE]`` (``cli.py``) and the pytest plugin
(``pytest --pyargs riftco.conformance --backend=NAME``). Both plan the same cases
(``suite.py``): protocol checks (``contract.py``), numeric cases for every primitive and
fused op, forward and backward (``cases_*.py``, run by ``runner.py`` with hypothesis), the
error contract (``contract.py``) and the end-to-end model hook (``model_check.py``).
Tolerances live in one table (``tolerances.py``). See docs/BACKENDS.md.
"""
