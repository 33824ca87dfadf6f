"""The epistemic graph's routes: items, scoring and retrieval, integrity, edges, intents,
tasks, stats and slices, all at the head of the log.

The routes that differ only in the lookup or query they run are rows of tables
(`queryd.daemon.routes.families`); the others are written out. The table rows sit where
their routes were registered by hand before, which keeps the order in which routes match.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from projector.graph.intents import IntentState
from projector.graph.selection import filter_items, page, sort_items
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState
from projector.record_fold import LogState
from queryd.daemon.dependencies import Served, query_or_422
from queryd.daemon.errors import ERROR_RESPONSES
from queryd.daemon.models import (
    Contradiction,
    ContradictionsAnswer,
    EdgeAnswer,
    EdgesAnswer,
    EdgesQuery,
    ExportAnswer,
    ExportQuery,
    GraphStats,
    IntentAnswer,
    IntentsAnswer,
    IntentsQuery,
    ItemAnswer,
    ItemListAnswer,
    ItemsAnswer,
    ItemsQuery,
    ScoredAnswer,
    ScoredQuery,
    SmartRetrieveQuery,
    StaleAnswer,
    StaleItem,
    StatsAnswer,
    StrictBody,
    SupportNodeOut,
    SupportTreeAnswer,
    TaskAnswer,
    TasksAnswer,
    TasksQuery,
)
from queryd.daemon.params import ItemId, MinSeq
from queryd.daemon.routes.families import (
    ById,
    FilterQuery,
    ItemList,
    PagedList,
    add_by_id,
    add_filter_query,
    add_item_list,
    add_paged_list,
)
from queryd.daemon.seq import stamp_seq
from queryd.graph.costs import cost_function
from queryd.graph.edges import get_edge_by_id, get_edges
from queryd.graph.integrity import (
    get_alias_group,
    get_aliases,
    get_contradictions,
    get_dependents,
    get_stale_items,
)
from queryd.graph.intents import get_intent_by_id, get_intents
from queryd.graph.navigation import get_children, get_parents, get_related_items
from queryd.graph.retrieval import get_support_set, get_support_tree, smart_retrieve
from queryd.graph.scoring import get_scored_items
from queryd.graph.stats import get_stats
from queryd.graph.tasks import get_task_by_id, get_tasks
from queryd.graph.transplant import export_slice

__all__ = ["router"]

router = APIRouter(tags=["graph"], responses=ERROR_RESPONSES)


def _graph(state: LogState) -> GraphState:
    return state.graph


def _intents(state: LogState) -> IntentState:
    return state.intents


def _tasks(state: LogState) -> TaskState:
    return state.tasks


def _in(
    source: Callable[[LogState], Any], by_id: Callable[[Any, str], Any], state: LogState, key: str
) -> Any:
    """`by_id(source(state), key)`: one record of the part of the state `source` gives."""
    return by_id(source(state), key)


@router.post("/logs/{log}/graph/items/query", summary="get_items")
async def query_items(
    served: Served,
    body: StrictBody[ItemsQuery],
    response: Response,
    min_seq: MinSeq = None,
) -> ItemsAnswer:
    state = await served.state(min_seq)
    options = body.options
    matched = query_or_422(filter_items, state.graph, body.filter)
    ordered = matched
    if options is not None and options.sort is not None:
        ordered = query_or_422(sort_items, matched, options.sort)
    chosen = page(ordered, options.offset, options.limit) if options is not None else list(ordered)
    return ItemsAnswer.model_construct(
        seq=stamp_seq(response, state.last_seq), items=chosen, total=len(matched)
    )


add_by_id(
    router,
    ById(
        path="/logs/{log}/graph/items/{item_id}",
        name="get_item",
        summary="one item",
        param="item_id",
        key_type=str,
        description="a memory item id",
        what="memory item",
        lookup=lambda state, item_id: state.graph.items.get(item_id),
        answer=ItemAnswer,
        field="item",
    ),
)


@router.post("/logs/{log}/graph/scored", summary="get_scored_items")
async def scored(
    served: Served,
    body: StrictBody[ScoredQuery],
    response: Response,
    min_seq: MinSeq = None,
) -> ScoredAnswer:
    state = await served.state(min_seq)
    items = query_or_422(get_scored_items, state.graph, body.weights, body.options)
    return ScoredAnswer.model_construct(seq=stamp_seq(response, state.last_seq), items=items)


@router.post(
    "/logs/{log}/graph/smart_retrieve",
    summary="score, contradiction policy, diversity, budget pack (named cost function)",
)
async def smart(
    served: Served,
    body: StrictBody[SmartRetrieveQuery],
    response: Response,
    min_seq: MinSeq = None,
) -> ScoredAnswer:
    state = await served.state(min_seq)
    items = query_or_422(
        smart_retrieve,
        state.graph,
        budget=body.budget,
        cost_fn=cost_function(body.cost),
        weights=body.weights,
        filter=body.filter,
        contradictions=body.contradictions,
        diversity=body.diversity,
    )
    return ScoredAnswer.model_construct(seq=stamp_seq(response, state.last_seq), items=items)


@router.get(
    "/logs/{log}/graph/items/{item_id}/support_tree",
    summary="the provenance tree of an item, flat in pre-order",
)
async def support_tree(
    served: Served, item_id: ItemId, response: Response, min_seq: MinSeq = None
) -> SupportTreeAnswer:
    state = await served.state(min_seq)
    served.item(state, item_id)
    root = get_support_tree(state.graph, item_id)
    nodes: list[SupportNodeOut] = []
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        nodes.append(
            SupportNodeOut.model_construct(
                item=node.item, parents=[p.item.id for p in node.parents]
            )
        )
        stack.extend(reversed(node.parents))
    return SupportTreeAnswer.model_construct(
        seq=stamp_seq(response, state.last_seq), root=item_id, nodes=nodes
    )


for item_list in (
    ItemList("support_set", "get_support_set: the item, then its ancestors", get_support_set),
    ItemList("aliases", "get_aliases: direct alias targets", get_aliases),
    ItemList("alias_group", "get_alias_group: the whole alias component", get_alias_group),
    ItemList("parents", "get_parents", get_parents),
    ItemList("children", "get_children", get_children),
):
    add_item_list(router, item_list)


@router.get(
    "/logs/{log}/graph/items/{item_id}/dependents",
    summary="get_dependents: children, or all descendants",
)
async def dependents(
    served: Served,
    item_id: ItemId,
    response: Response,
    transitive: Annotated[bool, Query()] = False,
    min_seq: MinSeq = None,
) -> ItemListAnswer:
    state = await served.state(min_seq)
    served.item(state, item_id)
    items = get_dependents(state.graph, item_id, transitive=transitive)
    return ItemListAnswer.model_construct(seq=stamp_seq(response, state.last_seq), items=items)


@router.get(
    "/logs/{log}/graph/items/{item_id}/related",
    summary="get_related_items: items joined by active edges",
)
async def related(
    served: Served,
    item_id: ItemId,
    response: Response,
    direction: Annotated[Literal["from", "to", "both"], Query()] = "both",
    min_seq: MinSeq = None,
) -> ItemListAnswer:
    state = await served.state(min_seq)
    served.item(state, item_id)
    items = get_related_items(state.graph, item_id, direction)
    return ItemListAnswer.model_construct(seq=stamp_seq(response, state.last_seq), items=items)


for paged_list in (
    PagedList(
        path="/logs/{log}/graph/contradictions",
        name="contradictions",
        summary="get_contradictions",
        rows=lambda state: get_contradictions(state.graph),
        out=lambda found: Contradiction.model_construct(**found._asdict()),
        answer=ContradictionsAnswer,
        field="contradictions",
    ),
    PagedList(
        path="/logs/{log}/graph/stale",
        name="stale",
        summary="get_stale_items",
        rows=lambda state: get_stale_items(state.graph),
        out=lambda found: StaleItem.model_construct(**found._asdict()),
        answer=StaleAnswer,
        field="stale",
    ),
):
    add_paged_list(router, paged_list)

# Edges, intents and tasks: a filter query (POST .../KINDS/query), then one by id
# (GET .../KINDS/{KIND_id}); one row a kind.
for kinds, kind, source, query, by_id, body, answers, answer in (
    ("edges", "edge", _graph, get_edges, get_edge_by_id, EdgesQuery, EdgesAnswer, EdgeAnswer),
    (
        "intents",
        "intent",
        _intents,
        get_intents,
        get_intent_by_id,
        IntentsQuery,
        IntentsAnswer,
        IntentAnswer,
    ),
    ("tasks", "task", _tasks, get_tasks, get_task_by_id, TasksQuery, TasksAnswer, TaskAnswer),
):
    add_filter_query(
        router,
        FilterQuery(
            path=f"/logs/{{log}}/graph/{kinds}/query",
            name=f"query_{kinds}",
            summary=f"get_{kinds}",
            body=body,
            source=source,
            query=query,
            answer=answers,
            field=kinds,
        ),
    )
    add_by_id(
        router,
        ById(
            path=f"/logs/{{log}}/graph/{kinds}/{{{kind}_id}}",
            name=f"get_{kind}",
            summary=f"one {kind}",
            param=f"{kind}_id",
            key_type=str,
            what=kind,
            lookup=partial(_in, source, by_id),
            answer=answer,
            field=kind,
        ),
    )


@router.get("/logs/{log}/graph/stats", summary="get_stats")
async def stats(served: Served, response: Response, min_seq: MinSeq = None) -> StatsAnswer:
    state = await served.state(min_seq)
    return StatsAnswer.model_construct(
        seq=stamp_seq(response, state.last_seq), stats=GraphStats.of(get_stats(state.graph))
    )


@router.post("/logs/{log}/graph/export_slice", summary="export_slice")
async def export(
    served: Served,
    body: StrictBody[ExportQuery],
    response: Response,
    min_seq: MinSeq = None,
) -> ExportAnswer:
    state = await served.state(min_seq)
    found = query_or_422(export_slice, state.graph, state.intents, state.tasks, options=body)
    return ExportAnswer.model_construct(seq=stamp_seq(response, state.last_seq), slice=found)
