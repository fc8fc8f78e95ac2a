"""Graph-fusion passes vllm-bridge adds to Inductor's post-grad pipeline,
declared as data (catalogue.py) and run by one pass manager (manager.py)."""
