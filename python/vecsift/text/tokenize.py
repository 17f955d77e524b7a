"""The text tokeniser BM25 uses.

Steps, in order:
  1. NFKC normalisation (full-width letters, ligatures, superscripts fold to
     their plain forms, so "ＴＳ－９９９" matches "TS-999").
  2. Zero-width and other format characters (U+200B..U+200F, U+2060..U+2064,
     U+FEFF, soft hyphen, bidi controls) are removed, so a word with a hidden
     joiner inside stays one word; C0/C1 control characters become spaces.
  3. Lowercase.
  4. Tokens are runs of word characters joined by "-" or ".", so identifiers
     stay whole: "INC-2023-Q4-011", "TS-999", "E-429", "v2.3.1", "os.path.join"
     and "snake_case_name" are each one token. A trailing "." (end of a
     sentence) is not part of a token.
  5. With parts=True (the default) a compound token also emits its parts,
     after all whole tokens: the pieces between "-", "." and "_", and
     camelCase / CapWords pieces of ASCII words (digits stay attached):
     "os.path.join" -> "os.path.join", "os", "path", "join";
     "HTTPServer" -> "httpserver", "http", "server". "join" then finds
     os.path.join while the query "os.path.join" still prefers the exact
     identifier (the whole token is rarer, so its idf is higher). Measured on
     the docstring evaluation set (bench/bench_bm25.py, sparse hit@10):
     no parts 0.609, separator parts 0.732, separator + camelCase parts 0.777
     (English stopwords on top: 0.789; they stay opt-in, see step 6).
  6. Optional stopwords are dropped (whole tokens and parts alike).
"""
from __future__ import annotations

import re
import unicodedata

# Format characters that join what they sit between once removed.
_ZERO_WIDTH = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
# Control characters (not \t \n \r \v \f, which are already whitespace) act as separators.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_TOKEN = re.compile(r"\w+(?:[-.]\w+)*")
_SEPARATORS = re.compile(r"[-._]+")
# An ASCII piece splits at case changes: "getHTTPResponse" -> get, HTTP, Response.
_CAMEL = re.compile(r"[A-Z0-9]+(?![a-z])|[A-Z]?[a-z0-9]+")

# A short English list (articles, auxiliaries, pronouns, prepositions); opt-in only,
# since a stopword can be a literal someone searches for.
ENGLISH_STOPWORDS = frozenset("""
a an and are as at be been but by can could did do does for from had has have
he her his how i if in into is it its me my no not of on or our she so such
than that the their them then there these they this those to was we were what
when where which who whom why will with would you your
""".split())


def _clean(text: str) -> str:
    if not text.isascii():  # ASCII is already NFKC and has no zero-width characters
        text = unicodedata.normalize("NFKC", text)
        text = _ZERO_WIDTH.sub("", text)
    return _CONTROL.sub(" ", text)


def normalize(text: str) -> str:
    """Steps 1-3: NFKC, strip zero-width/format characters, controls to spaces, lowercase."""
    return _clean(text).lower()


def _parts(token: str) -> list:
    out = []
    for piece in _SEPARATORS.split(token):
        if piece:
            out += _CAMEL.findall(piece) if piece.isascii() else [piece]
    return out


class Tokenizer:
    """Callable text -> list of tokens (see the module docstring for the rules).

    stopwords: None (keep everything), "english" (ENGLISH_STOPWORDS) or an
    iterable of words (they are normalised the same way as text).
    """

    def __init__(self, parts: bool = True, stopwords=None):
        self.parts = bool(parts)
        if stopwords is None:
            self.stopwords = frozenset()
        elif isinstance(stopwords, str):
            if stopwords != "english":
                raise ValueError(f"stopwords must be None, 'english' or a list of words, got {stopwords!r}")
            self.stopwords = ENGLISH_STOPWORDS
        else:
            self.stopwords = frozenset(normalize(str(w)) for w in stopwords)

    def __call__(self, text: str) -> list:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        if not self.parts:
            tokens = _TOKEN.findall(normalize(text))
        else:
            raw = _TOKEN.findall(_clean(text))
            tokens = [t.lower() for t in raw]
            for t, low in zip(raw, tokens):
                if t.isalnum() and (t == low or t.istitle() or t.isupper()):
                    continue  # a plain word: lowercase, Capitalised or UPPER
                ps = _parts(t)
                if len(ps) > 1 or (ps and ps[0].lower() != low):
                    tokens += [p.lower() for p in ps]
        if self.stopwords:
            sw = self.stopwords
            tokens = [t for t in tokens if t not in sw]
        return tokens

    def config(self) -> dict:
        """What save() records so load() can rebuild the same tokeniser."""
        return {"parts": self.parts, "stopwords": sorted(self.stopwords)}

    @classmethod
    def from_config(cls, cfg: dict) -> "Tokenizer":
        """The tokeniser config() described; ValueError if cfg is not such a description (a damaged file)."""
        if not isinstance(cfg, dict):
            raise ValueError(f"tokenizer config must be an object, got {cfg!r}")
        parts, stopwords = cfg.get("parts", True), cfg.get("stopwords") or None
        if not isinstance(parts, bool) or not (stopwords is None or isinstance(stopwords, list) and
                                               all(isinstance(w, str) for w in stopwords)):
            raise ValueError(f"bad tokenizer config {cfg!r}")
        return cls(parts=parts, stopwords=stopwords)

    def __repr__(self):
        return f"Tokenizer(parts={self.parts}, stopwords={len(self.stopwords)} words)"


_DEFAULT = Tokenizer()


def tokenize(text: str) -> list:
    """Tokenise with the default rules (parts on, no stopwords)."""
    return _DEFAULT(text)
