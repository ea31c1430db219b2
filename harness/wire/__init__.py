"""What travels between roles, and how fast.

    sealed.py     the CRC32 trailer every wire format uses (a leaf: compress and the sync formats use it)
    links.py      link table, pacing (token bucket), seeded delays, the fluid ideal of concurrent flows
    transport.py  Channel: send/recv/broadcast/scatter/gather of bytes over torch.distributed, exact accounting

This file imports nothing, so ``harness.wire.sealed`` stays a leaf.
"""
