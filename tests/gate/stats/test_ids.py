"""Reason codes: rendered once from typed reasons, and read back by the same grammar."""

from __future__ import annotations

import pytest

from gate.stats.ids import Cell, MetricId, Reason, ReasonKind

EVERY_SHAPE = [
    Reason(ReasonKind.KILL, Cell(MetricId("ttft_p50"), "chat")),
    Reason(ReasonKind.KILL, Cell(MetricId("eval", "schema"), "all")),
    Reason(ReasonKind.UNPROVEN, Cell(MetricId("parity", "mean_logprob"), "undeclared")),
    Reason(ReasonKind.COLLAPSE, segment="code"),
    # A declared segment may hold a colon; a collapse's segment is everything after its head.
    Reason(ReasonKind.COLLAPSE, segment="tenant:a"),
    Reason(ReasonKind.CONTROL_PARITY, segment="length"),
    *(
        Reason(kind)
        for kind in ReasonKind
        if kind
        not in (
            ReasonKind.KILL,
            ReasonKind.UNPROVEN,
            ReasonKind.COLLAPSE,
            ReasonKind.CONTROL_PARITY,
        )
    ),
]


@pytest.mark.parametrize("reason", EVERY_SHAPE, ids=lambda r: r.code)
def test_every_reason_code_reads_back_as_the_reason_it_renders(reason):
    assert Reason.from_code(reason.code) == reason


@pytest.mark.parametrize(
    "code", ["kill", "kill:tpot", "kill:tpot:", "continue:unproven", "hold:nothing", "frobnicate"]
)
def test_a_code_the_gate_never_writes_is_unknown(code):
    assert Reason.from_code(code) is None
