"""Families of read routes that differ only in what they look up, built from table rows.

Each row names a route (path, endpoint name, summary) and what differs: the lookup or
query it runs on the state, and the answer model and field it fills. The endpoints are
one function a family; a row gives it the annotations FastAPI reads (the path parameter's
name and type, the request body's model, the answer model), so the OpenAPI document
describes each route as if written by hand.

- `ById`: ``GET .../{id}``: one event, item, edge, intent or task, or a 404 naming the id;
- `FilterQuery`: ``POST .../query``: a filter in the body, a pure query, a page of it;
- `PagedList`: ``GET ...``: a list the state gives, a page of it, each entry as its model;
- `ItemList`: ``GET .../graph/items/{item_id}/...``: a pure query from an item (404 if none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel

from projector.graph.selection import page
from projector.record_fold import LogState
from queryd.daemon.dependencies import Served, query_or_422
from queryd.daemon.models import STRICT, Answer, ItemListAnswer
from queryd.daemon.params import ItemId, Limit, MinSeq, Offset
from queryd.daemon.seq import stamp_seq

__all__ = [
    "ById",
    "FilterQuery",
    "ItemList",
    "PagedList",
    "add_by_id",
    "add_filter_query",
    "add_item_list",
    "add_paged_list",
]


# A table row's types become annotations at run time: mypy cannot check a type made of
# values, so `Annotated` is reached through Any here.
_ANNOTATED: Any = Annotated


def _typed(endpoint: Callable[..., Any], name: str, **annotations: Any) -> Callable[..., Any]:
    """`endpoint` named `name` (its OpenAPI operation id), with these annotations."""
    endpoint.__name__ = name
    endpoint.__annotations__.update(annotations)
    return endpoint


def _answer(answer: type[Answer], seq: int | None, field: str, value: Any) -> Answer:
    """`answer` with its seq and `field` set, not validated again (what the queries give
    is already of the answer's types)."""
    values: dict[str, Any] = {"seq": seq, field: value}
    return answer.model_construct(**values)


@dataclass(frozen=True)
class ById:
    path: str
    name: str
    summary: str
    param: str  # the path parameter, also the field a 404 names
    key_type: type
    what: str  # what a 404 says was not found
    lookup: Callable[[LogState, Any], Any]
    answer: type[Answer]
    field: str
    description: str | None = None  # of the path parameter


def add_by_id(router: APIRouter, spec: ById) -> None:
    async def endpoint(served: Served, key: Any, response: Response, min_seq: MinSeq = None) -> Any:
        state = await served.state(min_seq)
        found = served.found(spec.lookup(state, key), spec.param, spec.what, str(key), state)
        return _answer(spec.answer, stamp_seq(response, state.last_seq), spec.field, found)

    key = _ANNOTATED[spec.key_type, Path(alias=spec.param, description=spec.description)]
    router.get(spec.path, summary=spec.summary)(
        _typed(endpoint, spec.name, key=key, **{"return": spec.answer})
    )


@dataclass(frozen=True)
class FilterQuery:
    path: str
    name: str
    summary: str
    body: type[BaseModel]  # with a `filter`
    source: Callable[[LogState], Any]  # the part of the state queried
    query: Callable[[Any, Any], Sequence[Any]]  # a pure query: (source, filter) -> found
    answer: type[Answer]
    field: str


def add_filter_query(router: APIRouter, spec: FilterQuery) -> None:
    async def endpoint(
        served: Served,
        body: Any,
        response: Response,
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> Any:
        state = await served.state(min_seq)
        found = page(query_or_422(spec.query, spec.source(state), body.filter), offset, limit)
        return _answer(spec.answer, stamp_seq(response, state.last_seq), spec.field, found)

    router.post(spec.path, summary=spec.summary)(
        _typed(endpoint, spec.name, body=_ANNOTATED[spec.body, STRICT], **{"return": spec.answer})
    )


@dataclass(frozen=True)
class PagedList:
    path: str
    name: str
    summary: str
    rows: Callable[[LogState], Sequence[Any]]
    out: Callable[[Any], BaseModel]  # one of them as its answer model
    answer: type[Answer]
    field: str


def add_paged_list(router: APIRouter, spec: PagedList) -> None:
    async def endpoint(
        served: Served,
        response: Response,
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> Any:
        state = await served.state(min_seq)
        chosen = page(spec.rows(state), offset, limit)
        found = [spec.out(row) for row in chosen]
        return _answer(spec.answer, stamp_seq(response, state.last_seq), spec.field, found)

    router.get(spec.path, summary=spec.summary)(
        _typed(endpoint, spec.name, **{"return": spec.answer})
    )


@dataclass(frozen=True)
class ItemList:
    path: str  # after /logs/{log}/graph/items/{item_id}/
    summary: str
    query: Callable[[Any, str], list[Any]]  # a pure query: (graph, item_id) -> items


def add_item_list(router: APIRouter, spec: ItemList) -> None:
    async def endpoint(
        served: Served, item_id: ItemId, response: Response, min_seq: MinSeq = None
    ) -> ItemListAnswer:
        state = await served.state(min_seq)
        served.item(state, item_id)
        items = query_or_422(spec.query, state.graph, item_id)
        return ItemListAnswer.model_construct(seq=stamp_seq(response, state.last_seq), items=items)

    router.get(f"/logs/{{log}}/graph/items/{{item_id}}/{spec.path}", summary=spec.summary)(
        _typed(endpoint, "item_" + spec.path.replace("/", "_"))
    )
