"""LlamaIndex MetadataFilters -> where= translation (output checked exactly; end to end in test_llamaindex_store)."""
import pytest
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from vecsift.integrations.where import and_, where_from_llamaindex

F, OP = MetadataFilter, FilterOperator
MISSING = {"$exists": False}


def one(key, value, op):
    return where_from_llamaindex(MetadataFilters(filters=[F(key=key, value=value, operator=op)]))


@pytest.mark.parametrize("op,value,want", [
    (OP.EQ, "bob", {"a": "bob"}),
    (OP.EQ, 3, {"a": 3}),
    (OP.NE, "bob", {"a": {"$ne": "bob"}}),  # where=: $ne also matches a missing value, as LlamaIndex's != does
    (OP.GT, 2, {"a": {"$gt": 2}}),
    (OP.LT, 2.5, {"a": {"$lt": 2.5}}),
    (OP.GTE, 2, {"a": {"$gte": 2}}),
    (OP.LTE, 2, {"a": {"$lte": 2}}),
    (OP.IN, ["x", "y"], {"a": {"$in": ["x", "y"]}}),
    (OP.NIN, [1, 2], {"a": {"$nin": [1, 2]}}),
    (OP.ANY, ["x", "y"], {"a": {"$in": ["x", "y"]}}),  # a list field holding x or y
    (OP.ANY, [], {"a": {"$in": []}}),  # any() of nothing holds nowhere
    (OP.ALL, ["x", "y"], {"$and": [{"a": "x"}, {"a": "y"}]}),
    (OP.ALL, ["x"], {"a": "x"}),
    (OP.CONTAINS, "x", {"a": "x"}),
    (OP.TEXT_MATCH, "50%_off", {"a": {"$like": "%50\\%\\_off%"}}),  # wildcards in the text are literal
    (OP.TEXT_MATCH_INSENSITIVE, "Ab", {"a": {"$ilike": "%Ab%"}}),
    (OP.IS_EMPTY, None, {"$or": [{"a": MISSING}, {"a": ""}]}),  # kind unknown or string: "" is empty too
])
def test_each_operator(op, value, want):
    assert one("a", value, op) == want


def test_is_empty_follows_the_field_kind():
    f = MetadataFilters(filters=[F(key="a", value=None, operator=OP.IS_EMPTY)])
    assert where_from_llamaindex(f, {"a": "number"}) == {"a": MISSING}
    assert where_from_llamaindex(f, {"a": "string"}) == {"$or": [{"a": MISSING}, {"a": ""}]}


def test_conditions_and_nesting():
    a, b = F(key="a", value=1), F(key="b", value="x", operator=OP.GT)
    assert where_from_llamaindex(MetadataFilters(filters=[a, b])) == {"a": 1, "b": {"$gt": "x"}}  # one dict: AND
    assert where_from_llamaindex(MetadataFilters(filters=[a, F(key="a", value=2, operator=OP.NE)])) == {
        "$and": [{"a": 1}, {"a": {"$ne": 2}}]}
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


def test_bad_filters_are_refused():
    with pytest.raises(TypeError, match="text_match takes a string"):
        one("a", 3, OP.TEXT_MATCH)
    with pytest.raises(ValueError, match="takes a list"):
        one("a", "x", OP.IN)
    with pytest.raises(ValueError, match="'==' with a list"):
        one("a", ["x"], OP.EQ)
    with pytest.raises(ValueError, match="needs a value"):
        one("a", None, OP.GT)
    with pytest.raises(TypeError, match="MetadataFilters"):
        where_from_llamaindex({"a": 1})


def test_and_merges_disjoint_keys():
    assert and_([{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}
    assert and_([{"a": 1}, {"a": 2}]) == {"$and": [{"a": 1}, {"a": 2}]}
    assert and_([{"a": 1}, {"$or": [{"b": 1}, {"c": 1}]}]) == {"$and": [{"a": 1}, {"$or": [{"b": 1}, {"c": 1}]}]}
    assert and_([None, {}]) is None
