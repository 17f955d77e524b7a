"""LlamaIndex MetadataFilters -> where= translation (output checked exactly; end to end in test_llamaindex_store)."""
import pytest
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from vecsift.integrations.where import check_where, where_from_llamaindex

F, OP = MetadataFilter, FilterOperator
MISSING = {"$exists": False}


def one(key, value, op):
    return where_from_llamaindex(MetadataFilters(filters=[F(key=key, value=value, operator=op)]))


@pytest.mark.parametrize("op,value,want", [
    (OP.EQ, "bob", {"a": "bob"}),
    (OP.EQ, 3, {"a": 3}),
    (OP.NE, "bob", {"$or": [{"a": {"$ne": "bob"}}, {"a": MISSING}]}),  # a missing value matches != (LlamaIndex)
    (OP.GT, 2, {"a": {"$gt": 2}}),
    (OP.LT, 2.5, {"a": {"$lt": 2.5}}),
    (OP.GTE, 2, {"a": {"$gte": 2}}),
    (OP.LTE, 2, {"a": {"$lte": 2}}),
    (OP.IN, ["x", "y"], {"a": {"$in": ["x", "y"]}}),
    (OP.NIN, [1, 2], {"$or": [{"a": {"$nin": [1, 2]}}, {"a": MISSING}]}),
    (OP.ANY, ["x", "y"], {"$or": [{"a": "x"}, {"a": "y"}]}),  # list field holds x or y
    (OP.ANY, ["x"], {"a": "x"}),
    (OP.ANY, [], {"a": {"$in": []}}),  # any() of nothing holds nowhere
    (OP.ALL, ["x", "y"], {"$and": [{"a": "x"}, {"a": "y"}]}),
    (OP.ALL, [], {"a": {"$exists": True}}),
    (OP.CONTAINS, "x", {"a": "x"}),
    (OP.IS_EMPTY, None, {"$or": [{"a": MISSING}, {"a": ""}]}),
])
def test_each_operator(op, value, want):
    assert one("a", value, op) == want
    assert check_where(want) == want  # every output is valid where= language


def test_conditions_and_nesting():
    a, b = F(key="a", value=1), F(key="b", value="x", operator=OP.GT)
    assert where_from_llamaindex(MetadataFilters(filters=[a, b])) == {"a": 1, "b": {"$gt": "x"}}  # one dict: AND
    assert where_from_llamaindex(MetadataFilters(filters=[a, F(key="a", value=2, operator=OP.NE)])) == {
        "$and": [{"a": 1}, {"$or": [{"a": {"$ne": 2}}, {"a": MISSING}]}]}
    assert where_from_llamaindex(MetadataFilters(filters=[a, b], condition=FilterCondition.OR)) == {
        "$or": [{"a": 1}, {"b": {"$gt": "x"}}]}
    assert where_from_llamaindex(MetadataFilters(filters=[a, b], condition=FilterCondition.NOT)) == {
        "$not": {"$or": [{"a": 1}, {"b": {"$gt": "x"}}]}}  # NOT: none of them holds
    assert where_from_llamaindex(MetadataFilters(filters=[a], condition=FilterCondition.NOT)) == {"$not": {"a": 1}}
    nested = MetadataFilters(filters=[a, MetadataFilters(filters=[b, F(key="c", value=[1, 2], operator=OP.IN)],
                                                         condition=FilterCondition.OR)])
    assert where_from_llamaindex(nested) == {"$and": [{"a": 1}, {"$or": [{"b": {"$gt": "x"}},
                                                                          {"c": {"$in": [1, 2]}}]}]}
    assert where_from_llamaindex(MetadataFilters(filters=[])) is None
    assert where_from_llamaindex(None) is None


def test_unsupported_operators_are_refused():
    for op in (OP.TEXT_MATCH, OP.TEXT_MATCH_INSENSITIVE):
        with pytest.raises(ValueError, match=f"operator '{op.value}' is not supported"):
            one("a", "x", op)
    with pytest.raises(ValueError, match="takes a list"):
        one("a", "x", OP.IN)
    with pytest.raises(ValueError, match="'==' with a list"):
        one("a", ["x"], OP.EQ)
    with pytest.raises(ValueError, match="needs a value"):
        one("a", None, OP.GT)
    with pytest.raises(TypeError, match="MetadataFilters"):
        where_from_llamaindex({"a": 1})
