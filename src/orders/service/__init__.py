"""Orchestration over the ports: the one code path every host (Function, worker) runs."""
