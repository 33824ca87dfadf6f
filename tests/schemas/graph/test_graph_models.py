"""Seed 003 wire contract: ids, errors, models, commands, filters, envelopes, serialization."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from projector.graph.reducer import apply_command
from projector.graph.serialization import from_json, parse, stringify, to_json
from projector.graph.state import create_graph_state
from schemas.graph.commands import EdgeCreate, MemoryCommandAdapter, MemoryCreate, MemoryUpdate
from schemas.graph.envelopes import (
    EventEnvelope,
    create_event_envelope,
    parse_iso_ms,
    wrap_edge_state_event,
    wrap_lifecycle_event,
    wrap_state_event,
)
from schemas.graph.errors import (
    DuplicateMemoryError,
    EdgeNotFoundError,
    InvalidIntentTransitionError,
    InvalidTaskTransitionError,
    InvalidTimestampError,
    MemexError,
    MemoryNotFoundError,
)
from schemas.graph.filters import EdgeFilter, MemoryFilter, QueryOptions, SortOption
from schemas.graph.ids import extract_timestamp, safe_extract_timestamp, uuid7
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item
from schemas.graph.scoring import DecayConfig, ScoreWeights

ITEM_ID = "01890a5d-ac96-774b-bcce-b302099a8057"  # a v7 id at ms 1688096058518
EDGE_ID = "01890a5d-ac96-7000-8000-000000000001"


def _item(**kw: object) -> MemoryItem:
    args: dict[str, object] = dict(
        scope="user:laz/general",
        kind="observation",
        content={"k": 1},
        author="agent:a",
        source_kind="observed",
        authority=0.9,
    )
    args.update(kw)
    return create_memory_item(**args)  # type: ignore[arg-type]


# -- ids --------------------------------------------------------------------------------------


def test_uuid7_roundtrips_its_timestamp() -> None:
    u = uuid7(1_700_000_000_123)
    assert len(u) == 36 and u[14] == "7" and u[19] in "89ab"
    assert extract_timestamp(u) == 1_700_000_000_123
    assert safe_extract_timestamp(u) == 1_700_000_000_123
    assert extract_timestamp(ITEM_ID) == 1688096058518


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not-a-uuid",
        "01890a5d-ac96-474b-bcce-b302099a8057",  # v4
        "01890a5d-ac96-774b-7cce-b302099a8057",  # wrong variant
    ],
)
def test_extract_timestamp_rejects_non_v7(bad: str) -> None:
    with pytest.raises(InvalidTimestampError):
        extract_timestamp(bad)
    assert safe_extract_timestamp(bad) is None


def test_safe_extract_timestamp_none_for_zero_ts() -> None:
    assert safe_extract_timestamp("00000000-0000-7000-8000-000000000000") is None


# -- errors -----------------------------------------------------------------------------------


def test_errors_carry_their_attributes() -> None:
    e = MemoryNotFoundError("x")
    assert isinstance(e, MemexError) and e.item_id == "x"
    assert EdgeNotFoundError("e").edge_id == "e"
    assert DuplicateMemoryError("d").item_id == "d"
    t = InvalidIntentTransitionError("i", "completed", "active")
    assert (t.intent_id, t.from_status, t.to_status) == ("i", "completed", "active")
    t2 = InvalidTaskTransitionError("t", "pending", "completed")
    assert (t2.task_id, t2.from_status, t2.to_status) == ("t", "pending", "completed")


# -- items and edges --------------------------------------------------------------------------


def test_create_memory_item_created_at_rules() -> None:
    assert _item(created_at=5).created_at == 5
    assert _item(id=ITEM_ID).created_at == 1688096058518  # the id's v7 timestamp
    it = _item(id="plain-id")  # not v7: the wall clock
    assert it.created_at is not None and it.created_at > 1688096058518
    minted = _item()
    assert extract_timestamp(minted.id) == minted.created_at


@pytest.mark.parametrize("field", ["authority", "conviction", "importance"])
@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_out_of_range_scores_raise_validation_error(field: str, value: float) -> None:
    with pytest.raises(ValidationError):
        _item(**{field: value})


def test_edge_weight_and_authority_bounded() -> None:
    with pytest.raises(ValidationError):
        create_edge(
            from_="a", to="b", kind="SUPPORTS", author="x", source_kind="observed", authority=1.5
        )
    with pytest.raises(ValidationError):
        create_edge(
            from_="a",
            to="b",
            kind="SUPPORTS",
            author="x",
            source_kind="observed",
            authority=0.5,
            weight=-1,
        )


def test_factories_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        create_memory_item("s", "k", {}, "a", "o", 0.5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        create_edge("a", "b", "K", "x", "o", 0.5)  # type: ignore[misc]


def test_models_are_frozen() -> None:
    it = _item()
    with pytest.raises(ValidationError):
        it.authority = 0.1  # type: ignore[misc]


def test_edge_from_alias_both_ways() -> None:
    e = create_edge(
        from_="a",
        to="b",
        kind="SUPPORTS",
        author="x",
        source_kind="observed",
        authority=0.5,
        edge_id=EDGE_ID,
    )
    assert e.active is True
    assert e.model_dump(by_alias=True)["from"] == "a"
    assert e.model_dump()["from_"] == "a"  # the seed's plain dump says from_
    assert Edge.model_validate({**e.model_dump(by_alias=True), "from": "z"}).from_ == "z"
    assert Edge.model_validate({**e.model_dump(by_alias=False)}).from_ == "a"


# -- commands ---------------------------------------------------------------------------------


def test_command_tags_and_dispatch() -> None:
    cmd = MemoryCommandAdapter.validate_python(
        {"type": "memory.update", "item_id": "x", "partial": {"authority": 0.2}, "author": "a"}
    )
    assert isinstance(cmd, MemoryUpdate)
    with pytest.raises(ValidationError):
        MemoryCommandAdapter.validate_python({"type": "memory.explode"})
    with pytest.raises(ValidationError):  # a dict command is validated: bad score
        apply_command(
            create_graph_state(),
            {"type": "memory.create", "item": {**_item().model_dump(), "authority": 2}},
        )


def test_command_json_is_wire_identical() -> None:
    item = create_memory_item(
        id=ITEM_ID,
        scope="s",
        kind="observation",
        content={"a": 1},
        author="x",
        source_kind="derived_deterministic",
        authority=1.0,
    )
    assert MemoryCreate(item=item).model_dump_json(exclude_none=True) == (
        '{"type":"memory.create","item":{"id":"01890a5d-ac96-774b-bcce-b302099a8057",'
        '"scope":"s","kind":"observation","content":{"a":1},"author":"x",'
        '"source_kind":"derived_deterministic","authority":1.0,"created_at":1688096058518}}'
    )
    edge = create_edge(
        from_="a",
        to="b",
        kind="DERIVED_FROM",
        author="x",
        source_kind="observed",
        authority=0.5,
        edge_id=EDGE_ID,
    )
    assert EdgeCreate(edge=edge).model_dump_json(exclude_none=True, by_alias=True) == (
        '{"type":"edge.create","edge":{"edge_id":"01890a5d-ac96-7000-8000-000000000001",'
        '"from":"a","to":"b","kind":"DERIVED_FROM","author":"x","source_kind":"observed",'
        '"authority":0.5,"active":true}}'
    )


# -- filters and options ----------------------------------------------------------------------


def test_filter_aliases_serialize_bare() -> None:
    f = MemoryFilter.model_validate({"not": {"kind": "a"}, "or": [{"scope": "s"}]})
    assert f.not_ is not None and f.not_.kind == "a"
    assert f.or_ is not None and f.or_[0].scope == "s"
    assert f.model_dump(exclude_none=True, by_alias=True) == {
        "not": {"kind": "a"},
        "or": [{"scope": "s"}],
    }
    assert f.model_dump(exclude_none=True) == {"not_": {"kind": "a"}, "or_": [{"scope": "s"}]}
    assert MemoryFilter(not_=MemoryFilter(kind="a")).not_ is not None
    assert EdgeFilter.model_validate({"from": "x"}).from_ == "x"
    assert EdgeFilter().active_only is None  # the seed's default; read as True


def test_unknown_sort_field_and_decay_enums_are_value_errors_when_used() -> None:
    # C10: accepted by validation, as the seed's models; a ValueError only when used.
    SortOption(field="popularity", order="asc")
    with pytest.raises(ValidationError):
        QueryOptions.model_validate({"sort": {"field": "authority"}})  # order is required
    DecayConfig(rate=0.1, interval="month", type="exponential")
    DecayConfig(rate=0.1, interval="day", type="cubic")
    with pytest.raises(ValidationError):
        DecayConfig(rate=1.5, interval="day", type="linear")
    with pytest.raises(ValidationError):
        QueryOptions(limit=-1)


def test_score_weights_are_unbounded() -> None:
    assert ScoreWeights(authority=5.0, importance=-2.0).authority == 5.0


# -- envelopes and timestamps -----------------------------------------------------------------


def test_parse_iso_ms_strict() -> None:
    assert parse_iso_ms("1970-01-01T00:00:00.000Z") == 0
    assert parse_iso_ms("2024-02-29T12:00:00.5Z") == parse_iso_ms("2024-02-29T12:00:00.500Z")
    assert parse_iso_ms("2024-01-01T01:00:00.000+01:00") == parse_iso_ms("2024-01-01T00:00:00.000Z")
    assert parse_iso_ms("2024-01-01T00:00:00Z") == 1704067200000


@pytest.mark.parametrize(
    "bad",
    [
        "2024-01-01T00:00:00.000",  # no offset
        "2024-01-01 00:00:00.000Z",  # no T
        "2024-01-01T00:00:00.0001Z",  # finer than ms
        "2023-02-29T00:00:00.000Z",  # not a leap year
        "2024-04-31T00:00:00.000Z",
        "2024-01-01T24:00:00.000Z",
        "2024-01-01T00:00:60.000Z",
        "2024-01-01T00:00:00.000+24:00",
        "2024-01-01T00:00:00.000+0100",
        "2024-01-01",
    ],
)
def test_parse_iso_ms_rejects(bad: str) -> None:  # (any script's digits pass, as in the seed)
    with pytest.raises(InvalidTimestampError):
        parse_iso_ms(bad)


def test_envelopes() -> None:
    env = create_event_envelope("memory.create", {"x": 1}, trace_id="t")
    assert env.namespace == "memory" and env.type == "memory.create" and env.trace_id == "t"
    assert extract_timestamp(env.id) > 0
    assert parse_iso_ms(env.ts) > 0 and env.ts.endswith("Z") and len(env.ts) == 24
    item = _item(id=ITEM_ID)
    _, events = apply_command(create_graph_state(), MemoryCreate(item=item))
    w = wrap_lifecycle_event(events[0], "cause-1")
    assert isinstance(w, EventEnvelope)
    assert w.type == "memory.created" and w.namespace == "memory"
    assert w.payload["cause_id"] == "cause-1" and w.payload["cause_type"] == "memory.create"
    # C19: the payload holds the model itself, and the event's namespace and type.
    assert w.payload["item"] is item and "edge" not in w.payload
    assert (w.payload["namespace"], w.payload["type"]) == ("memory", "memory.created")
    s = wrap_state_event(item, "c")
    assert s.type == "state.memory" and s.payload["item"] is item
    e = create_edge(
        from_="a", to="b", kind="ALIAS", author="x", source_kind="observed", authority=1.0
    )
    es = wrap_edge_state_event(e, "c")
    assert es.type == "state.edge" and es.payload["edge"] is e


# -- serialization ----------------------------------------------------------------------------


def test_to_json_shape_is_the_ts_on_disk_shape() -> None:
    item = create_memory_item(
        id=ITEM_ID,
        scope="s",
        kind="observation",
        content={"a": None},
        author="x",
        source_kind="observed",
        authority=0.5,
        parents=["p"],
    )
    edge = create_edge(
        from_=ITEM_ID,
        to="p",
        kind="DERIVED_FROM",
        author="x",
        source_kind="observed",
        authority=1.0,
        edge_id=EDGE_ID,
    )
    st = apply_command(create_graph_state(), MemoryCreate(item=item)).state
    st = apply_command(st, EdgeCreate(edge=edge)).state
    expected = (
        '{"items":[["01890a5d-ac96-774b-bcce-b302099a8057",{"id":"01890a5d-ac96-774b-bcce-'
        'b302099a8057","scope":"s","kind":"observation","content":{"a":null},"author":"x",'
        '"source_kind":"observed","parents":["p"],"authority":0.5,"created_at":1688096058518}]],'
        '"edges":[["01890a5d-ac96-7000-8000-000000000001",{"edge_id":"01890a5d-ac96-7000-8000-'
        '000000000001","from":"01890a5d-ac96-774b-bcce-b302099a8057","to":"p",'
        '"kind":"DERIVED_FROM","author":"x","source_kind":"observed","authority":1.0,'
        '"active":true}]]}'
    )
    assert stringify(st) == expected
    assert json.loads(stringify(st, pretty=True)) == to_json(st)
    assert stringify(st, pretty=True).startswith('{\n  "items": [')
    back = parse(expected)
    assert back == st and list(back.items) == [ITEM_ID]
    assert back.edges[EDGE_ID].from_ == ITEM_ID
    assert from_json({}).items == {} and len(from_json({"items": []}).edges) == 0
    # An entry is kept under its key, as the seed keeps it.
    assert list(from_json({"items": [["other-id", to_json(st)["items"][0][1]]]}).items) == [
        "other-id"
    ]
