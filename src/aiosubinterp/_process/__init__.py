"""The process backend: ProcessPool, its wire, and what runs in its worker
processes. Empty on purpose: a worker process imports only what it needs."""
