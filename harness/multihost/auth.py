"""Mutual challenge-response of agent 0 and one peer, and the keys that seal every later line.

On a new control connection (docs/security.md has the threat model):

  agent 0 -> peer   {"op": "challenge", "v": 1, "nonce": N0}          N0: 32 fresh random bytes, hex
  peer -> agent 0   {"op": "hello", ..., "nonce": N1, "proof": P}      P = HMAC(K, "hello" | N0 | N1 | hello)
  agent 0 -> peer   {"op": "admitted", "proof": Q}                     Q = HMAC(K, "admit" | N0 | N1 | hello)

K is the run's secret (harness.multihost.secret), HMAC is HMAC-SHA256, ``hello`` the canonical
JSON of the hello without its proof (so rank, address and plan digest are bound to the proof).
Agent 0 admits the peer only when P matches, the peer believes agent 0 only when Q matches; both
are compared in constant time (hmac.compare_digest). A hello recorded from an earlier connection
or run answers another N0 and does not match; the two labels differ, so a proof cannot be
reflected. After admission each direction has its own key, HMAC(K, direction | N0 | N1), and every
line carries HMAC(key, sequence number | body) (harness.multihost.control.Line): a line that is
altered, replayed, reordered or injected into the connection does not verify.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets

PROTOCOL = 1                    # the "v" of the challenge
NONCE_BYTES = 32                # random bytes per nonce (64 hex digits)
MAC_HEX = 64                    # hex digits of one HMAC-SHA256
TO_PEER, TO_LEAD = "agent0->peer", "peer->agent0"


def nonce() -> str:
    """A fresh nonce: NONCE_BYTES random bytes from the OS, as hex."""
    return secrets.token_hex(NONCE_BYTES)


def canonical(msg: dict) -> bytes:
    """The bytes a proof covers: ``msg`` without ``proof``, as sorted, compact JSON."""
    return json.dumps({k: v for k, v in msg.items() if k != "proof"}, sort_keys=True,
                      separators=(",", ":")).encode()


def _mac(key: bytes, label: str, *parts: bytes) -> str:
    return hmac.new(key, b"\0".join((b"narrowband-control/1", label.encode(), *parts)), hashlib.sha256).hexdigest()


def hello_proof(secret: bytes, challenge: str, hello: dict) -> str:
    """P: the peer's proof that it holds ``secret``, bound to agent 0's nonce and to its whole hello."""
    return _mac(secret, "hello", challenge.encode(), str(hello.get("nonce", "")).encode(), canonical(hello))


def admit_proof(secret: bytes, challenge: str, hello: dict) -> str:
    """Q: agent 0's proof that it holds ``secret``, bound to both nonces and to the hello it admits."""
    return _mac(secret, "admit", challenge.encode(), str(hello.get("nonce", "")).encode(), canonical(hello))


def matches(expected: str, given: object) -> bool:
    """Constant-time comparison of a proof or line MAC (``given`` may be anything a peer sent)."""
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def session_key(secret: bytes, direction: str, challenge: str, peer_nonce: str) -> bytes:
    """The key that seals the lines of one direction (TO_PEER or TO_LEAD) of one connection."""
    return bytes.fromhex(_mac(secret, direction, challenge.encode(), peer_nonce.encode()))


def line_mac(key: bytes, seq: int, body: bytes) -> str:
    """The MAC of the ``seq``-th line (0, 1, ...) of one direction: HMAC(key, seq as 8 bytes | body)."""
    return hmac.new(key, seq.to_bytes(8, "big") + body, hashlib.sha256).hexdigest()
