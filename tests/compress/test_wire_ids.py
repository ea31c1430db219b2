"""Wire ids: each compressor class declares its own, no two share one, and a shipped id never changes
(a payload written by an earlier build names its compressor by this byte)."""
from __future__ import annotations

import pytest

from compress_inputs import lora_like, options
from harness.compress import NAMES, REGISTRY, WIRE_IDS, Payload, build
from harness.compress.base import BaseCompressor
from harness.compress.payload import PayloadError

# Ids that payloads in the wild carry: append a new compressor's here when it ships, never edit one.
SHIPPED = {"identity": 0, "spar": 1, "powersgd": 2, "topk": 3, "randk": 4, "quant": 5, "demo": 6}


def test_every_compressor_declares_a_wire_id_on_its_class_and_no_two_share_one():
    assert set(WIRE_IDS) == set(NAMES)
    assert all(REGISTRY[n].__dict__.get("wire_id") == WIRE_IDS[n] for n in NAMES)
    assert len(set(WIRE_IDS.values())) == len(WIRE_IDS)


def test_shipped_ids_are_stable():
    assert {n: WIRE_IDS.get(n) for n in SHIPPED} == SHIPPED


@pytest.mark.parametrize("name", NAMES)
def test_the_preamble_carries_the_declared_id_and_decodes_by_it(name):
    data = build(name, **options(name)).encode(lora_like()).to_bytes()
    assert data[5] == REGISTRY[name].wire_id
    assert Payload.from_bytes(data).compressor == name
    other = next(i for i in range(256) if i not in WIRE_IDS.values())
    with pytest.raises(PayloadError):          # another id byte: the CRC no longer matches
        Payload.from_bytes(data[:5] + bytes([other]) + data[6:])


def test_a_named_compressor_without_a_wire_id_fails_where_it_is_defined():
    with pytest.raises(TypeError, match="declares its wire id"):
        class NoId(BaseCompressor):          # noqa: F841 - its definition is the test
            name = "no_id_test"


def test_a_taken_wire_id_or_name_fails_naming_the_holder():
    with pytest.raises(ValueError, match="wire_id: 1 is taken by compressor 'spar'"):
        class Clash(BaseCompressor):         # noqa: F841
            name = "clash_test"
            wire_id = 1
    with pytest.raises(ValueError, match="name: 'spar' is taken by harness.compress.spar.Spar"):
        class Twin(BaseCompressor):          # noqa: F841
            name = "spar"
            wire_id = 250
    assert "clash_test" not in WIRE_IDS and WIRE_IDS["spar"] == 1
