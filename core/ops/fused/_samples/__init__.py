"""Conformance data of the fused ops: one module per op module of ``fused/``, same name,
each a ``SAMPLES`` dict from unit name to its :class:`~riftco.ops.samples.SampleSet`.

Test data, kept beside the units but out of the runtime: only conformance and the tests
import these modules (through ``OpUnit.sample_set``), never ``import riftco``.
"""
