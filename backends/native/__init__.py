"""riftco's native CPU backend: numpy storage with fused ops compiled from C (cffi, OpenMP)."""
