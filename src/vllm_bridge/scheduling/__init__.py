"""The SLO scheduler: vLLM's v1 scheduler with a time-per-output-token
objective (``--additional-config '{"tpot_objective_ms": N}'``).

step_cost.py learns what a step costs from measured step times;
chunk_sizing.py turns that into the prefill tokens a step may take;
slo_scheduler.py is the scheduler class that vLLM's engine core runs.
"""
