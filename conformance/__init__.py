"""The riftco conformance suite: every protocol op of a backend against CPU float64.

Front ends: ``riftco conformance BACKEND[:DEVICE]`` (``cli.py``) and the pytest plugin
(``pytest --pyargs riftco.conformance --backend=NAME``). Both plan the same cases
(``suite.py``) from the op units in ``riftco.ops``: protocol checks, the error contract and
the domain checks (``contract.py``), numeric cases for every op with samples, forward and
backward, native and composite (``runner.py``, parameters drawn with hypothesis through
``draw.py``), eager vs replayed (``capture_check.py``), the end-to-end model check
(``model_check.py``), training steps (``training_check.py``) and per-op throughput
(``throughput.py``). Reports: a table, JSON and a self-contained HTML certificate
(``report.py``, ``html.py``). Needs the ``conformance`` extra (hypothesis). See
docs/BACKENDS.md.
"""
