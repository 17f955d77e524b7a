"""langchain-tests' standard VectorStoreIntegrationTests (sync and async, nothing skipped) on the vecsift store."""
import inspect

import pytest
from langchain_tests.integration_tests.vectorstores import VectorStoreIntegrationTests

from vecsift.integrations.langchain import VecsiftVectorStore

# The suite's async tests are unmarked (its own projects run asyncio_mode=auto); in strict mode
# pytest-asyncio would skip them, so they get the asyncio mark here. The functions stay the suite's
# own objects, so no standard test is overridden (test_no_overrides_DO_NOT_OVERRIDE checks that).
for _name, _fn in vars(VectorStoreIntegrationTests).items():
    if _name.startswith("test_") and inspect.iscoroutinefunction(_fn):
        if not any(m.name == "asyncio" for m in getattr(_fn, "pytestmark", [])):
            pytest.mark.asyncio(_fn)


class TestVecsiftStandard(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path):
        store = VecsiftVectorStore(self.get_embeddings(), path=tmp_path / "kb")
        try:
            yield store
        finally:
            store.close()


class TestVecsiftStandardBinaryIndex(VectorStoreIntegrationTests):
    """The same suite over an existing bq collection with filter fields (the store attached, not creating)."""

    @pytest.fixture()
    def vectorstore(self, tmp_path):
        import vecsift

        coll = vecsift.Collection.create(tmp_path / "kb", 6, index="bq", filter_fields=["id"])
        store = VecsiftVectorStore(self.get_embeddings(), coll)
        try:
            yield store
        finally:
            coll.close()
