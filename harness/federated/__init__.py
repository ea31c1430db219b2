"""Federated LoRA: SPRA-LoRA and its baselines (ffa, fedit, flora, hetlora, flexlora).

aggregate.py   pure aggregators over (tensors, weight) lists
projection.py  SPRA's seeded shared projection, merge-and-reset, rank-aware learning rate
"""
