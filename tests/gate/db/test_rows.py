"""Row types and column lists agree with the ORM tables they are written to."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest
from sqlalchemy import Boolean, Column, Enum, Float, Integer, String, Table, Text, Uuid

from collectors.normalise import GENERATION_HELD
from gate.db import rows
from gate.db.base import UTCDateTime
from gate.db.rows import SpanRow
from gate.db.storage import pg_copy

ROW_TABLES = [
    (rows.RequestRow, rows.REQUESTS),
    (rows.PairRow, rows.PAIRS),
    (rows.GenerationRow, rows.GENERATIONS),
    (rows.RehearsalRow, rows.REHEARSALS),
]


def _admits_none(hint: Any) -> bool:
    if hint is Any:
        return True
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _must_be_written(column: Column[Any]) -> bool:
    """Whether an INSERT that leaves the column out fails (NOT NULL, no default)."""
    generated = column.primary_key and column.autoincrement is True
    return not (column.nullable or column.default or column.server_default or generated)


@pytest.mark.parametrize(("row_type", "table"), ROW_TABLES, ids=lambda x: getattr(x, "name", ""))
def test_a_row_type_names_only_its_tables_columns(row_type: Any, table: Table) -> None:
    assert set(typing.get_type_hints(row_type)) - set(table.c.keys()) == set()


@pytest.mark.parametrize(("row_type", "table"), ROW_TABLES, ids=lambda x: getattr(x, "name", ""))
def test_a_row_type_writes_every_column_an_insert_needs(row_type: Any, table: Table) -> None:
    needed = {column.name for column in table.columns if _must_be_written(column)}
    generated = {"id"} if table is rows.GENERATIONS else set()
    assert needed - generated - set(typing.get_type_hints(row_type)) == set()


@pytest.mark.parametrize(("row_type", "table"), ROW_TABLES, ids=lambda x: getattr(x, "name", ""))
def test_a_field_that_may_be_none_is_a_nullable_column(row_type: Any, table: Table) -> None:
    hints = typing.get_type_hints(row_type)
    not_null = {name for name, hint in hints.items() if _admits_none(hint)}
    not_null = {name for name in not_null if not table.c[name].nullable}
    assert not_null == set()


def test_column_lists_follow_the_row_types_and_the_spans_table() -> None:
    assert tuple(typing.get_type_hints(rows.GenerationRow)) == rows.GENERATION_COLUMNS
    assert tuple(typing.get_type_hints(rows.PairRow)) == rows.PAIR_COLUMNS
    assert tuple(typing.get_type_hints(rows.RequestRow)) == rows.REQUEST_COLUMNS
    assert tuple(typing.get_type_hints(rows.RehearsalRow)) == rows.REHEARSAL_COLUMNS
    assert tuple(rows.SPANS.c.keys()) == rows.SPAN_COLUMNS
    # A span row carries every `spans` column but the time the collector received it.
    fields = {field.name for field in dataclasses.fields(SpanRow)}
    assert fields == set(rows.SPAN_COLUMNS) - {"received_at"}
    json = {column.name for column in rows.SPANS.columns if _expected_binary(column) == "jsonb"}
    assert set(pg_copy.SPAN_JSON) == json


def test_the_normalisers_held_attributes_name_generation_columns() -> None:
    assert set(GENERATION_HELD.values()) - set(rows.GENERATION_COLUMNS) == set()


def test_engine_fields_are_facts_and_generation_columns() -> None:
    facts = typing.get_type_hints(rows.EngineFacts)
    generation = typing.get_type_hints(rows.GenerationRow)
    assert set(rows.ENGINE_FIELDS) == set(facts) - {"trace_id", "parent_span_id", "started_at"}
    assert all(facts[name] == generation[name] for name in rows.ENGINE_FIELDS)
    assert set(rows.PAIR_SPAN_FIELDS) <= set(rows.PAIR_COLUMNS)


_BINARY = {
    Uuid: "uuid",
    Integer: "int4",
    Float: "float8",
    Boolean: "bool",
    UTCDateTime: "timestamptz",
}


def _expected_binary(column: Column[Any]) -> str:
    if isinstance(column.type, Enum | String | Text):
        return "text"
    for kind, name in _BINARY.items():
        if isinstance(column.type, kind):
            return name
    return "jsonb" if column.type.__class__.__name__ == "JSON" else "?"


@pytest.mark.parametrize("table", [rows.SPANS, rows.REQUESTS, rows.PAIRS, rows.GENERATIONS])
def test_every_written_column_has_a_binary_type(table: Table) -> None:
    # A column type the COPY code does not know would be sent as text and fail on insert.
    names = [
        column.name
        for column in table.columns
        if column.name != "id" or table is not rows.GENERATIONS
    ]
    found = pg_copy.binary_types(table, names)
    assert found == {name: _expected_binary(table.c[name]) for name in names}
