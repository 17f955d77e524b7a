"""LangChain filter dicts are where= language: checked (unknown operators refused up front) and passed on."""
import pytest

from vecsift.integrations.where import and_, check_where, where_from_langchain


@pytest.mark.parametrize("f", [
    {"lang": "en"},
    {"lang": "en", "year": 2024},
    {"year": {"$gte": 2020, "$lt": 2025}},
    {"lang": {"$in": ["en", "de"]}, "year": {"$nin": [2019]}},
    {"year": {"$between": [2020, 2022]}},
    {"tag": {"$exists": True}},
    {"$and": [{"lang": "en"}, {"$or": [{"year": 2024}, {"year": {"$lt": 2000}}]}]},
    {"$not": {"lang": {"$ne": "en"}}},
    {"lang": ["en", "de"]},
    {"draft": False, "score": 0.5, "note": None},
])
def test_valid_filters_pass_through(f):
    assert where_from_langchain(f) == f


def test_none_and_empty():
    assert where_from_langchain(None) is None
    assert where_from_langchain({}) == {}


@pytest.mark.parametrize("f,err", [
    ({"lang": {"$like": "e%"}}, r"unknown operator '\$like'"),
    ({"$xor": [{"a": 1}]}, r"unknown operator '\$xor'"),
    ({"$and": []}, "non-empty list"),
    ({"$or": {"a": 1}}, "non-empty list"),
    ({"a": {"$in": "en"}}, "takes a list"),
    ({"a": {"$between": [1]}}, r"\[low, high\]"),
    ({"a": {"$exists": "yes"}}, "true or false"),
    ({"a": {"$gt": {"x": 1}}}, "scalar"),
    ({"a": {}}, "empty condition"),
    ({"$and": [{"a": {"$lte": [1]}}]}, r"filter\['\$and'\]\[0\]\['a'\]"),  # the path of the bad part is named
])
def test_bad_filters_refused_with_the_reason(f, err):
    with pytest.raises(ValueError, match=err):
        where_from_langchain(f)


def test_type_errors():
    with pytest.raises(TypeError, match="must be a dict"):
        where_from_langchain([("a", 1)])
    with pytest.raises(TypeError, match="keys must be strings"):
        check_where({1: "a"})


def test_and_merges_disjoint_keys():
    assert and_([{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}
    assert and_([{"a": 1}, {"a": 2}]) == {"$and": [{"a": 1}, {"a": 2}]}
    assert and_([{"a": 1}, {"$or": [{"b": 1}, {"c": 1}]}]) == {"$and": [{"a": 1}, {"$or": [{"b": 1}, {"c": 1}]}]}
    assert and_([None, {}]) is None
