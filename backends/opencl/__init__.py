"""The opencl backend (see docs/)."""
