"""Federated LoRA: SPRA-LoRA and its baselines (ffa, fedit, flora, hetlora, flexlora).

entry.py       entry of every role process (rank 0 server, rank k client k-1; harness.run launches it)
settings.py    Settings: every federated knob, checked once by the planner, sent to the roles
server.py      the round loop: select, send, collect (fan-out per client), aggregate, evaluate
client.py      local training of one client per round, its upload
party.py       what server and clients build alike: adapter, task, bases, merges
methods/       the methods, one module each (spra+ffa, fedit, flora, hetlora, flexlora): METHODS by discovery, build()
aggregate.py   pure aggregators over (tensors, weight) lists
adapter.py     a PeftModel seen as coefficients in a shared basis (what parties exchange)
projection.py  SPRA's seeded shared projection, merge-and-reset, rank-aware learning rate, checksum
messages.py    DownMsg / UpMsg: what goes over the wire each round
codec.py       their sealed byte format (CRC32)
population.py  a population: N seeded clients (rank, link, availability), K sampled a round, P executors
pool.py        the population's server and executor loops (an executor takes on a sampled client's identity)
relink.py      an executor's link set to its client's: qdiscs through pyroute2, the channel's link table
snr.py         the gradient SNR study (python -m harness.commands.snr), an entry point
"""
