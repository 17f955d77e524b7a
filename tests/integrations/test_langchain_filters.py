"""LangChain filter dicts through the store: Collection's where= language, every operator end to end."""
import pytest
from langchain_core.documents import Document

from test_langchain_store import HashEmbeddings
from vecsift.integrations.langchain import VecsiftVectorStore
from vecsift.integrations.where import where_from_langchain

DOCS = [
    Document(id="a", page_content="alpha", metadata={"lang": "en", "year": 2021, "score": 0.5, "tags": ["x", "y"],
                                                     "draft": False, "date": "2024-01-15"}),
    Document(id="b", page_content="beta", metadata={"lang": "de", "year": 2023, "score": 0.9, "tags": ["y"],
                                                    "draft": True, "date": "2024-03-01"}),
    Document(id="c", page_content="gamma", metadata={"lang": "en", "year": 2024, "score": 0.1, "tags": [],
                                                     "date": "2024-06-30"}),
    Document(id="d", page_content="delta", metadata={"lang": "fr", "score": 0.7, "tags": ["z"], "draft": False}),
    Document(id="e", page_content="epsilon", metadata={"lang": "English", "year": 2020}),
]
FIELDS = ["lang", "year", "score", "tags", "draft", "date"]

CASES = [
    ({"lang": "en"}, "ac"),
    ({"lang": "en", "year": 2024}, "c"),
    ({"lang": ["de", "fr"]}, "bd"),
    ({"year": {"$eq": 2023}}, "b"),
    ({"year": {"$ne": 2023}}, "acde"),  # a missing value matches $ne
    ({"year": {"$gt": 2021}}, "bc"),
    ({"year": {"$gte": 2021, "$lt": 2024}}, "ab"),
    ({"score": {"$lte": 0.5}}, "ac"),
    ({"year": {"$between": [2020, 2021]}}, "ae"),
    ({"lang": {"$in": ["de", "fr"]}}, "bd"),
    ({"lang": {"$nin": ["en", "de"]}}, "de"),
    ({"year": {"$exists": True}}, "abce"),
    ({"year": {"$exists": False}}, "d"),
    ({"tags": "y"}, "ab"),  # a list field: holds the value
    ({"tags": {"$in": ["x", "z"]}}, "ad"),
    ({"tags": {"$exists": False}}, "e"),  # the key: c's [] is there (PGVector), d's is too
    ({"draft": True}, "b"),
    ({"date": {"$between": ["2024-02-01", "2024-06-30"]}}, "bc"),
    ({"lang": {"$like": "E%"}}, "e"),
    ({"lang": {"$ilike": "e%"}}, "ace"),
    ({"$or": [{"lang": "de"}, {"year": {"$lt": 2021}}]}, "be"),
    ({"$and": [{"lang": "en"}, {"$or": [{"year": 2021}, {"score": {"$lt": 0.2}}]}]}, "ac"),
    ({"$not": {"lang": "en"}}, "bde"),
    ({"year": {"$not": {"$gt": 2021}}}, "ade"),
    ({"must": [{"key": "lang", "match": {"value": "en"}}], "must_not": [{"key": "year", "range": {"gt": 2022}}]},
     "a"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = VecsiftVectorStore.from_documents(DOCS, HashEmbeddings(), path=tmp_path_factory.mktemp("f") / "kb",
                                          filter_fields=FIELDS)
    yield s
    s.close()


@pytest.mark.parametrize("f,want", CASES, ids=[str(c[0]) for c in CASES])
def test_filter(store, f, want):
    for mode in ("dense", "hybrid"):
        got = store.similarity_search("alpha beta gamma delta epsilon", k=10, filter=f, mode=mode)
        assert "".join(sorted(d.id for d in got)) == want
    assert where_from_langchain(f) is f  # passed on unchanged


@pytest.mark.parametrize("f,err,match", [
    ({"author": "me"}, ValueError, "unknown filter field 'author'"),
    ({"lang": {"$regex": "e.*"}}, ValueError, r"unknown operator '\$regex'"),
    ({"$xor": [{"lang": "en"}]}, ValueError, r"unknown operator '\$xor'"),
    ({"year": {"$gt": "soon"}}, TypeError, "holds number values"),
    ({"lang": {"$in": "en"}}, TypeError, "takes a list"),
    ([("lang", "en")], TypeError, "must be a dict"),
])
def test_bad_filters_are_refused(store, f, err, match):
    with pytest.raises(err, match=match):
        store.similarity_search("alpha", k=3, filter=f)


def test_exists_means_the_key_is_there_even_when_null(tmp_path):
    docs = [Document(id="p", page_content="p", metadata={"mood": 0.9, "n": 1}),
            Document(id="q", page_content="q", metadata={"mood": None, "n": 2}),  # key there, value null
            Document(id="r", page_content="r", metadata={"n": 3})]
    s = VecsiftVectorStore.from_documents(docs, HashEmbeddings(), path=tmp_path / "kb", filter_fields=["mood", "n"])

    def ids(f):
        return "".join(sorted(d.id for d in s.similarity_search("p", k=5, filter=f)))

    assert ids({"mood": {"$exists": True}}) == "pq"
    assert ids({"mood": {"$exists": False}}) == "r"
    assert ids({"mood": {"$exists": True, "$gt": 0.5}}) == "p"
    assert ids({"$or": [{"mood": {"$exists": False}}, {"n": 1}]}) == "pr"
    assert ids({"$not": {"mood": {"$exists": True}}}) == "r"
    assert ids({"mood": {"$not": {"$exists": False}}}) == "pq"
    assert ids({"undeclared": {"$exists": False}}) == "pqr"  # $exists works on any key
    assert ids({"mood": {"$gt": 0.5}}) == "p"
    s.close()


def test_exists_by_keys_rewrites_only_exists():
    from vecsift.integrations.where import exists_by_keys

    k = "_keys"
    assert exists_by_keys({"a": {"$exists": True}}, k) == {k: "a"}
    assert exists_by_keys({"a": {"$exists": False}}, k) == {"$not": {k: "a"}}
    assert exists_by_keys({"a": {"$exists": True, "$gt": 1}, "b": 2}, k) == {"a": {"$gt": 1}, k: "a", "b": 2}
    assert exists_by_keys({"$or": [{"a": {"$exists": True}}, {"b": {"$exists": True}}]}, k) == {
        "$or": [{k: "a"}, {k: "b"}]}
    assert exists_by_keys({"a": {"$exists": True}, "b": {"$exists": False}}, k) == {
        "$and": [{k: "a"}, {"$not": {k: "b"}}]}
    assert exists_by_keys({"a": {"$not": {"$exists": True}}}, k) == {"$not": {k: "a"}}
    assert exists_by_keys({"a": {"$not": {"$gt": 3}}}, k) == {"a": {"$not": {"$gt": 3}}}  # no $exists: as given
    plain = {"a": 1, "b": {"$in": [1, 2]}, "$and": [{"c": {"$lt": 3}}]}
    assert exists_by_keys(plain, k) == plain
    qdrant = {"must": [{"is_empty": {"key": "a"}}]}
    assert exists_by_keys(qdrant, k) is qdrant
