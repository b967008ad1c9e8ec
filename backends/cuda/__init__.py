"""CUDA backend: shaders/ kernels compiled by NVRTC to CUBIN, run through cuda.bindings."""
