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
  5. With parts=True (the default) a compound token also emits its parts, the
     alphanumeric runs between "-", "." and "_": "os.path.join" gives
     "os.path.join", "os", "path", "join". This lets "join" find
     os.path.join while "os.path.join" still prefers the exact identifier
     (its whole token is rarer, so it carries a higher idf). Measured on the
     docstring evaluation set (bench/bench_bm25.py --parts-ab), parts help.
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
_PART = re.compile(r"[^\W_]+")

# A short English list (articles, auxiliaries, pronouns, prepositions); opt-in only,
# since a stopword can be a literal someone searches for.
ENGLISH_STOPWORDS = frozenset("""
a an and are as at be been but by can could did do does for from had has have
he her his how i if in into is it its me my no not of on or our she so such
than that the their them then there these they this those to was we were what
when where which who whom why will with would you your
""".split())


def normalize(text: str) -> str:
    """Steps 1-3: NFKC, strip zero-width/format characters, controls to spaces, lowercase."""
    text = unicodedata.normalize("NFKC", text)
    text = _ZERO_WIDTH.sub("", text)
    text = _CONTROL.sub(" ", text)
    return text.lower()


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
        tokens = _TOKEN.findall(normalize(text))
        if self.parts:
            extra = []
            for t in tokens:
                if not t.isalnum():  # a compound: has "-", "." or "_"
                    ps = _PART.findall(t)
                    if len(ps) > 1 or (ps and ps[0] != t):
                        extra.extend(ps)
            tokens += extra
        if self.stopwords:
            sw = self.stopwords
            tokens = [t for t in tokens if t not in sw]
        return tokens

    def config(self) -> dict:
        """What save() records so load() can rebuild the same tokeniser."""
        return {"parts": self.parts, "stopwords": sorted(self.stopwords)}

    @classmethod
    def from_config(cls, cfg: dict) -> "Tokenizer":
        return cls(parts=cfg.get("parts", True), stopwords=cfg.get("stopwords") or None)

    def __repr__(self):
        return f"Tokenizer(parts={self.parts}, stopwords={len(self.stopwords)} words)"


_DEFAULT = Tokenizer()


def tokenize(text: str) -> list:
    """Tokenise with the default rules (parts on, no stopwords)."""
    return _DEFAULT(text)
