"""The route table every adapter classifies by matches the API the emulator serves.

The table states each Supermemory route once (generation, method, path template, operation,
read / write / pass-through, scope rule, query field, record id, semconv operation, record
count); the 3.x, 5.x and httpx adapters all read it. Here it is checked route by route against
the emulator, and its lookups against the paths clients send.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from wm_middleware._api.routes import (
    ROUTES,
    UNKNOWN_WRITE,
    Match,
    Route,
    attempted,
    compile_template,
    find,
    find_in,
    query_of,
    record_id_of,
    route_named,
)
from wm_middleware._api.tenancy import TenantScope, read_scopes, server_of, tenant_of, write_scopes
from wm_middleware.emulator.app import api_routes

# Routes of the real API the emulator does not serve: third-party OAuth connections and the
# connectors that sync them, and the aliases older 3.x SDKs (3.16) sent.
NOT_EMULATED = {
    ("POST", "/v3/connections/{id}/connection"),
    ("POST", "/v3/connections/{id}/documents"),
    ("POST", "/v3/connections/{provider}"),
    ("POST", "/v3/connections/{id}/configure"),
    ("POST", "/v3/connections/{provider}/import"),
    ("DELETE", "/v3/connections/{id}"),
    ("POST", "/v3/memories"),
    ("POST", "/v3/memories/file"),
    ("PATCH", "/v3/memories/{id}"),
    ("DELETE", "/v3/memories/{id}"),
    ("POST", "/v3/memories/list"),
    ("POST", "/ns/{ns}/connectors"),
    ("PATCH", "/ns/{ns}/connectors/{id}"),
    ("DELETE", "/ns/{ns}/connectors/{id}"),
    ("POST", "/ns/{ns}/connectors/{id}/sync"),
}


def _shape(template: str) -> str:
    """A template with its parameter names erased: ``{id}`` and ``{x}`` are the same segment."""
    return re.sub(r"\{\w+\}", "{}", template)


def _example(route: Route) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: f"some-{m[1]}", route.template)


def _found(method: str, path: str) -> Match:
    """What the table finds for ``method path``, which must be a call to the API."""
    found = find(method, path)
    assert found is not None, f"{method} {path}: no route"
    return found


def test_a_template_matches_one_segment_per_name() -> None:
    pattern = compile_template("/ns/{ns}/document/{id}")
    found = pattern.fullmatch("/ns/team/document/doc-1")
    assert found is not None
    assert found.groupdict() == {"ns": "team", "id": "doc-1"}
    assert pattern.fullmatch("/ns/team/x/document/doc-1") is None


def test_every_emulator_route_is_in_the_table_and_every_table_route_in_the_emulator() -> None:
    emulated = {(method, _shape(template)) for method, template in api_routes()}
    table = {(route.method, _shape(route.template)) for route in ROUTES}
    not_emulated = {(method, _shape(template)) for method, template in NOT_EMULATED}
    assert emulated - table == set()
    assert table - emulated == not_emulated
    assert not_emulated <= table


def test_the_table_states_each_route_once() -> None:
    keys = [(route.method, _shape(route.template)) for route in ROUTES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.template}")
def test_every_route_is_found_by_its_own_path(route: Route) -> None:
    found = _found(route.method, _example(route))
    assert found.route is route
    assert found.namespace == ("some-ns" if "{ns}" in route.template else None)
    # Behind any base path too (``/v5/ns/...``, ``/api/v4/...``), as the httpx transport sees it.
    behind = find_in(route.method, "/api/v5" + _example(route))
    assert behind is not None
    assert behind.route is route


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.template}")
def test_reads_scope_by_tags_or_namespace_and_passes_scope_nothing(route: Route) -> None:
    if route.kind == "read":
        assert route.scope == ("tags" if route.generation == 3 else "namespace")
        assert route.method == "POST"
    if route.kind == "pass":
        assert route.scope == "none"
    if route.method == "GET":
        assert route.kind == "pass"


def test_unknown_calls_under_the_api_are_writes_of_the_whole_tenant() -> None:
    for path in ("/v3/brand-new", "/v4/memories/brand-new", "/ns/a/brand-new"):
        found = _found("POST", path)
        assert found.route is UNKNOWN_WRITE
        assert found.route.scope == "tenant"
    assert find("GET", "/v3/brand-new") is None
    assert find("POST", "/elsewhere/v9") is None
    # A plain httpx client may call anything: only known routes count there.
    assert find_in("POST", "/api/v3/brand-new") is None


def test_a_namespace_named_like_an_api_root_stays_a_namespace() -> None:
    found = find_in("POST", "/v5/ns/v3/search")
    assert found is not None
    assert (found.route.operation, found.namespace) == ("search", "v3")
    assert _found("POST", "/ns/team%2Fa/search").namespace == "team/a"


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.template}")
def test_every_route_names_its_semconv_operation(route: Route) -> None:
    expected = {"read": {"search_memory"}, "pass": {None}}.get(
        route.kind, {"upsert_memory", "update_memory", "delete_memory"}
    )
    assert route.semconv in expected
    if route.kind == "write":
        assert route.deletes == (route.method == "DELETE")


def test_reads_name_their_query_field_by_generation() -> None:
    search3 = _found("POST", "/v4/search")
    search5 = _found("POST", "/ns/a/search")
    listed = _found("POST", "/v3/documents/list")
    assert query_of(search3, {"q": "tea", "query": "no"}) == "tea"
    assert query_of(search5, {"q": "no", "query": "tea"}) == "tea"
    assert query_of(listed, {"q": "tea"}) is None
    assert query_of(search3, {"q": 3}) is None


@pytest.mark.parametrize(
    ("method", "path", "body", "record"),
    [
        ("PATCH", "/v3/documents/doc-1", {}, "doc-1"),
        ("DELETE", "/v3/documents/doc%2F1", {}, "doc/1"),
        ("DELETE", "/v4/memories", {"id": "mem-1", "containerTag": "t"}, "mem-1"),
        ("PATCH", "/v4/memories", {"id": "mem-2", "newContent": "x"}, "mem-2"),
        ("PATCH", "/ns/a/document/doc-3", {}, "doc-3"),
        ("POST", "/v3/documents", {"id": "not-a-target"}, None),
        ("POST", "/ns/a/document", {}, None),
    ],
)
def test_a_call_naming_one_record_names_its_id(
    method: str, path: str, body: dict[str, object], record: str | None
) -> None:
    assert record_id_of(_found(method, path), body) == record


@pytest.mark.parametrize(
    ("method", "path", "body", "count"),
    [
        ("POST", "/v3/documents", {"content": "x"}, 1),
        ("POST", "/v3/documents/batch", {"documents": [{}, {}, {}]}, 3),
        ("DELETE", "/v3/documents/bulk", {"ids": ["a", "b"]}, 2),
        ("DELETE", "/v3/documents/bulk", {"containerTags": ["t"]}, None),
        ("DELETE", "/ns/a/memories", {"ids": ["a"]}, 1),
        ("PATCH", "/v3/settings", {}, None),
        ("DELETE", "/ns/a", {}, None),
        ("POST", "/v3/brand-new", {}, None),
    ],
)
def test_the_records_a_write_attempts(
    method: str, path: str, body: dict[str, object], count: int | None
) -> None:
    assert attempted(_found(method, path), body) == count


def test_scopes_are_plain_tuples_a_tenant_scope_reads_back() -> None:
    tenant = tenant_of("http://x/", "sk-secret")
    assert "sk-secret" not in repr(tenant)
    scopes = (*read_scopes(tenant, ["t"], "Tea?"), *write_scopes(tenant, ()))
    typed = [TenantScope.parse(scope) for scope in scopes]
    assert [None if t is None else t.kind for t in typed] == [
        "tenant",
        "tag",
        None,  # the query scope names no tenant
        "tenant",
    ]
    for scope, parsed in zip(scopes, typed, strict=True):
        assert type(scope) in (tuple, str)  # the shared tier encodes plain tuples only
        if parsed is not None:
            assert parsed.plain() == scope
    assert TenantScope.parse(("tag", tenant)) is None
    assert TenantScope.parse(("other", tenant)) is None


# -- where a read's answer lists its records: one rule per route, for every adapter -------------
def test_every_read_route_says_where_its_answer_lists_its_records() -> None:
    reads = [route for route in ROUTES if route.kind == "read"]
    assert reads
    assert all(route.results for route in reads), [r for r in reads if not r.results]
    assert all(not route.results for route in ROUTES if route.kind != "read")


def test_an_answer_is_counted_by_its_route_as_json_and_as_a_model_alike() -> None:
    profile = route_named(3, "profile")
    facts = {"static": ["likes tea"], "dynamic": ["in Lisbon", "travelling"]}
    assert profile.records_in({"searchResults": {"results": [{}, {}]}, "profile": facts}) == 2
    assert profile.records_in({"profile": facts}) == 3
    model = SimpleNamespace(search_results=None, profile=SimpleNamespace(**facts))
    assert profile.records_in(model) == 3  # attributes by the snake_case of the JSON names
    listed = route_named(5, "list")
    assert listed.records_in({"documents": [{}], "memories": [{}, {}]}) == 3
    assert listed.records_in({"total": 0}) is None
    assert route_named(3, "search.memories").records_in("not json") is None


def test_server_of_reads_the_address_and_the_port_the_scheme_implies() -> None:
    assert server_of("https://api.supermemory.ai") == ("api.supermemory.ai", 443)
    assert server_of("http://127.0.0.1:8123/api/") == ("127.0.0.1", 8123)
    assert server_of("http://localhost") == ("localhost", 80)
    assert server_of("::not a url::") == ("", None)
