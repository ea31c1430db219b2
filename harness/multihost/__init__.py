"""The per-host agent of a run across hosts, one concept per module (``python -m harness.commands.node``,
its docstring and docs/multihost.md say what happens per run):

  control      the control channel between the agents: JSON lines over TCP on the real network
  host         this host: its address and interface towards MASTER_ADDR, whether it can shape
  runs         the runs every agent plans alike, and their digest
  agent        Agent: hello and verdict, this host's overlay, the probe's two halves; ask / handle
  calibration  the calibration gate: every shaped pair probed before anything is launched
  local_launch this host's roles: where each runs, their payload, start, watch, stop
  lead         agent 0: one run across every host (run.json written here)
  follow       every other agent: do what agent 0 asks
"""
