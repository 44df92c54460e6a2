"""A fake CUDA runtime and driver (shared libraries named like NVIDIA's) for GPU-less hosts."""
