import pytest

from vecsift.text.tokenize import ENGLISH_STOPWORDS, Tokenizer, normalize, tokenize

IDENTIFIERS = ["INC-2023-Q4-011", "TS-999", "E-429", "v2.3.1", "os.path.join", "snake_case_name"]


@pytest.mark.parametrize("ident", IDENTIFIERS)
def test_identifiers_stay_one_token(ident):
    toks = Tokenizer(parts=False)(f"see {ident}, then stop.")
    assert toks == ["see", ident.lower(), "then", "stop"]


def test_parts_are_extra_tokens_after_the_whole_ones():
    assert tokenize("Call os.path.join now") == ["call", "os.path.join", "now", "os", "path", "join"]
    assert tokenize("INC-2023-Q4-011") == ["inc-2023-q4-011", "inc", "2023", "q4", "011"]
    assert tokenize("snake_case_name") == ["snake_case_name", "snake", "case", "name"]
    assert tokenize("v2.3.1") == ["v2.3.1", "v2", "3", "1"]
    assert tokenize("__init__") == ["__init__", "init"]
    assert tokenize("plain words only") == ["plain", "words", "only"]
    assert tokenize("HTTPServer getHTTPResponse base64Encode") == [
        "httpserver", "gethttpresponse", "base64encode",
        "http", "server", "get", "http", "response", "base64", "encode"]
    assert tokenize("Hello WORLD Q4") == ["hello", "world", "q4"]
    assert tokenize("Ünï_Çode") == ["ünï_çode", "ünï", "çode"]


def test_sentence_punctuation_splits():
    assert Tokenizer(parts=False)("Hello, world! (yes) a;b end. Done?") == [
        "hello", "world", "yes", "a", "b", "end", "done"]
    # a dot or hyphen at a token's edge is not part of it
    assert Tokenizer(parts=False)("-flag trailing- .hidden") == ["flag", "trailing", "hidden"]


def test_nfkc_folds_full_width_and_ligatures():
    assert tokenize("ＴＳ－９９９") == tokenize("TS-999")
    assert tokenize("ﬁle") == ["file"]
    assert normalize("Ⅻ") == "xii"


def test_zero_width_removed_and_controls_split():
    assert tokenize("TS\u200b-999") == tokenize("TS-999")
    assert tokenize("re\u00adfund\ufeff") == ["refund"]
    assert Tokenizer(parts=False)("a\x00b\x1fc") == ["a", "b", "c"]
    assert Tokenizer(parts=False)("tab\tnew\nline\r\n") == ["tab", "new", "line"]


def test_lowercase_and_unicode_letters():
    assert tokenize("Straße ÉCOLE Ünïcode") == ["straße", "école", "ünïcode"]


def test_stopwords_optional():
    text = "How do I get my money back"
    assert tokenize(text) == ["how", "do", "i", "get", "my", "money", "back"]
    assert Tokenizer(stopwords="english")(text) == ["get", "money", "back"]
    assert Tokenizer(stopwords=["MONEY"])(text) == ["how", "do", "i", "get", "my", "back"]
    assert "the" in ENGLISH_STOPWORDS
    with pytest.raises(ValueError):
        Tokenizer(stopwords="klingon")


def test_config_roundtrip_and_type_errors():
    t = Tokenizer(parts=False, stopwords=["a", "b"])
    t2 = Tokenizer.from_config(t.config())
    assert t2("a c-d b") == t("a c-d b") == ["c-d"]
    with pytest.raises(TypeError):
        tokenize(b"bytes")
    assert tokenize("") == []
    assert tokenize("  ...  ") == []
