"""Speech -> structured robot commands: a JSON grammar, its matcher, and a router to a link.

    grammar = nerve.commands.Grammar.load()             # the default, robot_grammar.json
    grammar.parse("Turn left 90 degrees.")              # {"action": "turn", "direction": "left", "degrees": 90}
    grammar.parse_all("set speed ten and open the gripper")   # two commands
    rec = nerve.asr.Recognizer(words=grammar.words())   # it can only say what the grammar uses
    router = CommandRouter(grammar, link).start()       # link: anything with send(cmd, urgent=False)
    for ev in stream.accept_waveform(block):
        router.feed(ev)                                 # safety commands from partials, the rest from finals

The grammar file format and pattern language are documented in docs/COMMANDS.md. In short:
a rule's ``pattern`` is words (``turn``), word choices (``turn|rotate``), optional items
(``robot?``, ``(... )?``), groups of alternative sequences (``(a b | c)``, bars with spaces)
and slots (``<degrees:angle>``, typed by the file's ``types`` or the built-in ``number`` and
``digits``); its ``command`` is a JSON object whose ``"$slot"`` strings take the slot values.

Matching is exact over the whole text (after lower-casing, dropping punctuation, applying the
aliases and removing the fillers); the first rule in file order that matches wins, each slot
taking its longest reading first. Unknown text gives None: a robot must not guess.
"""

from __future__ import annotations

import collections
import copy
import json
import re
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from .errors import InputError

__all__ = ["Grammar", "Rule", "CommandRouter", "Dispatch", "DEFAULT_GRAMMAR"]

DEFAULT_GRAMMAR = Path(__file__).with_name("robot_grammar.json")
FORMAT = "nerve-command-grammar"

# ---- numbers as the recogniser spells them (nerve.asr.tokenizer's words; kept here so the
# grammar does not import the speech stack)
_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_ONE_VALUE = {w: i for i, w in enumerate(_ONES)}
_DIGIT_WORDS = {w: str(i) for i, w in enumerate(_ONES[:10])}
_DIGIT_WORDS["oh"] = "0"
_WORD_MAX = 999  # the largest number words can say here (no "thousand" in the vocabulary)


def _number_words(n: int) -> List[str]:
    """0 <= n <= 999 in words, the spelling numbers_to_words gives: 120 -> one hundred twenty."""
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        tens = next(w for w, v in _TENS.items() if v == n // 10 * 10)
        return [tens] + ([_ONES[n % 10]] if n % 10 else [])
    return [_ONES[n // 100], "hundred"] + (_number_words(n % 100) if n % 100 else [])


def _below_hundred(toks: Sequence[str], i: int) -> Iterator[Tuple[int, int]]:
    """Readings (value, end) of 0..99 in words at toks[i], longest first."""
    if i >= len(toks):
        return
    t = toks[i]
    if t in _TENS:
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if 1 <= _ONE_VALUE.get(nxt, 0) <= 9:
            yield _TENS[t] + _ONE_VALUE[nxt], i + 2
        yield _TENS[t], i + 1
    elif t in _ONE_VALUE:
        yield _ONE_VALUE[t], i + 1


def _number_at(toks: Sequence[str], i: int) -> Iterator[Tuple[Union[int, float], int]]:
    """Readings (value, end) of a number at toks[i], longest first: a digit token ("90",
    "2.5": free-text recognition) or words up to 999 ("one hundred twenty", "hundred")."""
    if i >= len(toks):
        return
    t = toks[i]
    if t[0].isdigit():
        yield (float(t) if "." in t else int(t)), i + 1
        return
    hundreds = None
    if 1 <= _ONE_VALUE.get(t, 0) <= 9 and i + 1 < len(toks) and toks[i + 1] == "hundred":
        hundreds, k = _ONE_VALUE[t] * 100, i + 2
    elif t == "hundred":
        hundreds, k = 100, i + 1
    if hundreds is not None:
        for rest, j in _below_hundred(toks, k):
            if rest:
                yield hundreds + rest, j
        yield hundreds, k
    yield from _below_hundred(toks, i)


# ---- slot types

class _Type:
    kind = ""

    def readings(self, toks: Sequence[str], i: int) -> Iterator[Tuple[Any, int]]:
        raise NotImplementedError

    def words(self) -> Set[str]:
        raise NotImplementedError

    def spoken(self) -> Optional[List[Tuple[List[str], Any]]]:
        """Every way to say it (for phrases()), or None when unbounded."""
        raise NotImplementedError


class _WordsType(_Type):
    kind = "words"

    def __init__(self, values: Dict[Tuple[str, ...], Any]):
        self.values = values
        self.longest = max(len(k) for k in values)

    def readings(self, toks, i):
        for n in range(min(self.longest, len(toks) - i), 0, -1):
            key = tuple(toks[i:i + n])
            if key in self.values:
                yield self.values[key], i + n

    def words(self):
        return {w for key in self.values for w in key}

    def spoken(self):
        return [(list(k), v) for k, v in self.values.items()]


class _NumberType(_Type):
    kind = "number"

    def __init__(self, lo: float = 0, hi: float = _WORD_MAX, scale: float = 1, integer: bool = False):
        self.lo, self.hi, self.scale, self.integer = lo, hi, scale, integer

    def _value(self, raw):
        v = raw * self.scale
        if self.scale != 1:
            v = round(v, 9)  # 50 * 0.01 is 0.5, not 0.5000000000000001
        return int(v) if isinstance(v, float) and v.is_integer() else v

    def readings(self, toks, i):
        for raw, j in _number_at(toks, i):
            if self.lo <= raw <= self.hi and not (self.integer and isinstance(raw, float)):
                yield self._value(raw), j

    def _range(self) -> range:
        lo = max(0, int(-(-self.lo // 1)))
        return range(lo, int(min(self.hi, _WORD_MAX)) + 1)

    def words(self):
        return {w for n in self._range() for w in _number_words(n)}

    def spoken(self):
        return [(_number_words(n), self._value(n)) for n in self._range()]


class _DigitsType(_Type):
    """A digit string: digit words (zero..nine, "oh"), digit tokens, and whole numbers read as
    their digits ("one two three" -> "123"; "one hundred twenty three" -> "123": a
    vocabulary-constrained recogniser spells Moonshine's "123" that way). Each number is read
    whole, longest first ("twenty one" is "21", never "201"): one reading per end position,
    so matching stays linear in the text's length."""
    kind = "digits"

    def __init__(self, min_length: int = 1, max_length: int = 32):
        self.min_length, self.max_length = min_length, max_length

    @staticmethod
    def _item(toks, i) -> Optional[Tuple[str, int]]:
        if i >= len(toks):
            return None
        t = toks[i]
        if t.isdigit():
            return t, i + 1
        if t in _DIGIT_WORDS and t not in _ONE_VALUE:  # "oh"
            return _DIGIT_WORDS[t], i + 1
        for value, j in _number_at(toks, i):  # the longest reading
            return (str(value), j) if isinstance(value, int) else None  # "2.5" is no digit string
        return None

    def readings(self, toks, i):
        found, acc = [], ""
        while True:
            item = self._item(toks, i)
            if item is None or len(acc) + len(item[0]) > self.max_length:
                break
            acc, i = acc + item[0], item[1]
            if len(acc) >= self.min_length:
                found.append((acc, i))
        return reversed(found)  # longest first

    def words(self):
        return set(_DIGIT_WORDS) | {w for n in range(_WORD_MAX + 1) for w in _number_words(n)}

    def spoken(self):
        return None


_BUILTIN_TYPES = {"number": _NumberType(), "digits": _DigitsType()}


# ---- patterns: parsed into a small tree, matched by backtracking over the tokens

@dataclass(frozen=True)
class _Word:
    choices: Tuple[str, ...]


@dataclass(frozen=True)
class _Slot:
    name: str
    type: _Type


@dataclass(frozen=True)
class _Opt:
    node: Any


@dataclass(frozen=True)
class _Seq:
    items: Tuple[Any, ...]


@dataclass(frozen=True)
class _Alt:
    options: Tuple[_Seq, ...]


_WORD_RE = re.compile(r"[a-z]+")
_LEX = re.compile(r"\s*(?:(\()|(\))|(\|)(?=\s|$)|(<[^>]*>)|([^\s()<>?]+)|(\?)|(\S))")


class _PatternError(Exception):
    pass


class _PatternParser:
    """pattern := seq (" | " seq)* ; seq := item+ ; item := atom "?"? ;
    atom := word("|"word)* | "<" name ":" type ">" | "(" pattern ")" """

    def __init__(self, text: str, types: Dict[str, _Type]):
        self.text, self.types = text, types
        self.toks: List[Tuple[str, str]] = []
        for m in _LEX.finditer(text):
            kind = ("(", ")", "|", "slot", "word", "?", "bad")[m.lastindex - 1]
            if kind == "bad":
                raise _PatternError(f"unexpected {m.group(m.lastindex)!r}")
            self.toks.append((kind, m.group(m.lastindex)))
        self.pos = 0

    def parse(self) -> _Alt:
        if not self.toks:
            raise _PatternError("empty pattern")
        node = self._alternatives()
        if self.pos < len(self.toks):
            raise _PatternError(f"unexpected {self.toks[self.pos][1]!r} (unbalanced parentheses?)")
        return node

    def _peek(self) -> Optional[str]:
        return self.toks[self.pos][0] if self.pos < len(self.toks) else None

    def _alternatives(self) -> _Alt:
        options = [self._sequence()]
        while self._peek() == "|":
            self.pos += 1
            options.append(self._sequence())
        return _Alt(tuple(options))

    def _sequence(self) -> _Seq:
        items = []
        while self._peek() not in (None, "|", ")"):
            kind, text = self.toks[self.pos]
            self.pos += 1
            if kind == "(":
                node: Any = self._alternatives()
                if self._peek() != ")":
                    raise _PatternError("'(' without ')'")
                self.pos += 1
            elif kind == "slot":
                node = self._slot(text)
            elif kind == "word":
                choices = text.split("|")
                for w in choices:
                    if not _WORD_RE.fullmatch(w):
                        raise _PatternError(f"{text!r}: words are lower-case letters a-z"
                                            " (a bar between alternatives takes spaces around it)")
                node = _Word(tuple(choices))
            else:
                raise _PatternError(f"unexpected {text!r}")
            if self._peek() == "?":
                self.pos += 1
                node = _Opt(node)
            items.append(node)
        if not items:
            raise _PatternError("empty alternative (nothing between bars or parentheses)")
        return _Seq(tuple(items))

    def _slot(self, text: str) -> _Slot:
        inner = text[1:-1].strip()
        name, _, type_name = inner.partition(":")
        name, type_name = name.strip(), type_name.strip()
        if not type_name:
            type_name = name
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise _PatternError(f"slot {text}: the name must be lower-case letters, digits and _")
        if "|" in type_name:  # an inline word list: the value is the word said
            words = type_name.split("|")
            if not all(_WORD_RE.fullmatch(w) for w in words):
                raise _PatternError(f"slot {text}: inline choices must be lower-case words")
            return _Slot(name, _WordsType({(w,): w for w in words}))
        slot_type = self.types.get(type_name)
        if slot_type is None:
            known = ", ".join(sorted(self.types))
            raise _PatternError(f"slot {text}: unknown slot type {type_name!r} (known: {known})")
        return _Slot(name, slot_type)


Bindings = Dict[str, Any]


def _match(node, toks: Sequence[str], i: int, binds: Bindings) -> Iterator[Tuple[int, Bindings]]:
    """Every way `node` matches toks[i:...], as (end, bindings), longer readings first."""
    if isinstance(node, _Word):
        if i < len(toks) and toks[i] in node.choices:
            yield i + 1, binds
    elif isinstance(node, _Slot):
        for value, j in node.type.readings(toks, i):
            yield j, {**binds, node.name: value}
    elif isinstance(node, _Opt):
        yield from _match(node.node, toks, i, binds)
        yield i, binds
    elif isinstance(node, _Seq):
        yield from _match_seq(node.items, 0, toks, i, binds)
    else:
        for option in node.options:
            yield from _match(option, toks, i, binds)


def _match_seq(items, k, toks, i, binds):
    if k == len(items):
        yield i, binds
        return
    for j, b in _match(items[k], toks, i, binds):
        yield from _match_seq(items, k + 1, toks, j, b)


def _slots(node) -> Set[str]:
    """Slot names a node may bind; raises when one path could bind a name twice."""
    if isinstance(node, _Slot):
        return {node.name}
    if isinstance(node, _Word):
        return set()
    if isinstance(node, _Opt):
        return _slots(node.node)
    if isinstance(node, _Seq):
        seen: Set[str] = set()
        for item in node.items:
            names = _slots(item)
            twice = seen & names
            if twice:
                raise _PatternError(f"slot {sorted(twice)[0]!r} appears twice in one sequence")
            seen |= names
        return seen
    return set().union(*(_slots(o) for o in node.options))


def _can_be_empty(node) -> bool:
    if isinstance(node, _Opt):
        return True
    if isinstance(node, (_Word, _Slot)):
        return False
    if isinstance(node, _Seq):
        return all(_can_be_empty(i) for i in node.items)
    return any(_can_be_empty(o) for o in node.options)


def _pattern_words(node) -> Set[str]:
    if isinstance(node, _Word):
        return set(node.choices)
    if isinstance(node, _Slot):
        return node.type.words()
    if isinstance(node, _Opt):
        return _pattern_words(node.node)
    parts = node.items if isinstance(node, _Seq) else node.options
    return set().union(*(_pattern_words(p) for p in parts))


def _literal_words(node) -> Set[str]:
    """Words written in the pattern itself (slot types not included)."""
    if isinstance(node, _Word):
        return set(node.choices)
    if isinstance(node, _Slot):
        return set()
    if isinstance(node, _Opt):
        return _literal_words(node.node)
    parts = node.items if isinstance(node, _Seq) else node.options
    return set().union(*(_literal_words(p) for p in parts))


def _expand(node, limit: int) -> List[Tuple[Tuple[str, ...], Bindings]]:
    """Every (words, bindings) the node can say; raises _PatternError past `limit`."""
    if isinstance(node, _Word):
        return [((w,), {}) for w in node.choices]
    if isinstance(node, _Slot):
        spoken = node.type.spoken()
        if spoken is None:
            raise _PatternError(f"slot <{node.name}> ({node.type.kind}) can say unboundedly many things")
        return [(tuple(ws), {node.name: v}) for ws, v in spoken]
    if isinstance(node, _Opt):
        return _expand(node.node, limit) + [((), {})]
    if isinstance(node, _Alt):
        out = []
        for option in node.options:
            out += _expand(option, limit)
            if len(out) > limit:
                raise _PatternError(f"more than {limit} phrases")
        return out
    out = [((), {})]
    for item in node.items:
        parts = _expand(item, limit)
        if len(out) * len(parts) > limit:
            raise _PatternError(f"more than {limit} phrases")
        out = [(a + b, {**ba, **bb}) for a, ba in out for b, bb in parts]
    return out


def _fill(template: Any, binds: Bindings) -> Any:
    """The command with "$slot" strings replaced; a key whose slot was not said is left out."""
    if isinstance(template, dict):
        out = {}
        for k, v in template.items():
            if isinstance(v, str) and v.startswith("$") and v[1:] not in binds:
                continue
            out[k] = _fill(v, binds)
        return out
    if isinstance(template, list):
        return [_fill(v, binds) for v in template if not (isinstance(v, str) and v.startswith("$")
                                                          and v[1:] not in binds)]
    if isinstance(template, str) and template.startswith("$"):
        return copy.deepcopy(binds[template[1:]])
    return copy.deepcopy(template)


def _refs(template: Any) -> Set[str]:
    if isinstance(template, dict):
        return set().union(set(), *(_refs(v) for v in template.values()))
    if isinstance(template, list):
        return set().union(set(), *(_refs(v) for v in template))
    if isinstance(template, str) and template.startswith("$"):
        return {template[1:]}
    return set()


# ---- the grammar

@dataclass
class Rule:
    index: int
    name: str
    pattern: str
    command: dict
    safety: bool
    tree: _Alt = field(repr=False)
    examples: List[str] = field(default_factory=list)

    @property
    def action(self) -> str:
        return self.command["action"]


_TOP_KEYS = {"format", "version", "description", "fillers", "connectors", "aliases", "types", "rules"}
_RULE_KEYS = {"name", "pattern", "command", "safety", "examples", "description"}
_TYPE_KEYS = {"words": {"kind", "values", "description"},
              "number": {"kind", "min", "max", "scale", "integer", "description"},
              "digits": {"kind", "min_length", "max_length", "description"}}
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z]+")


class Grammar:
    """A command grammar (docs/COMMANDS.md). Immutable once loaded: safe to share between
    threads."""

    def __init__(self, data: Any, source: str = "<grammar>"):
        self.source = source
        self._build(copy.deepcopy(data))  # the caller's dict may change later; the rules must not

    @classmethod
    def load(cls, path: Union[str, Path, None] = None) -> "Grammar":
        """The grammar in a JSON file (None: the default robot grammar shipped with nerve)."""
        path = Path(path) if path is not None else DEFAULT_GRAMMAR
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: cannot read the grammar file: {e}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None
        return cls(data, str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>") -> "Grammar":
        """A grammar from an already parsed JSON object (validated like a file)."""
        return cls(data, source)

    # -- loading and validation

    def _fail(self, where: str, problem: str):
        raise InputError(f"{self.source}: {where}: {problem}")

    def _build(self, data: Any) -> None:
        if not isinstance(data, dict):
            self._fail("top level", "a grammar is a JSON object")
        unknown = set(data) - _TOP_KEYS
        if unknown:
            self._fail("top level", f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})")
        if data.get("format", FORMAT) != FORMAT:
            self._fail("format", f"expected {FORMAT!r}, got {data['format']!r}")
        if data.get("version") != 1:
            self._fail("version", f"this nerve reads version 1, got {data.get('version')!r}")
        self.fillers = set(self._word_list(data, "fillers", single=True))
        self.connectors = [tuple(c.split()) for c in self._word_list(data, "connectors", single=False)]
        self.connectors.sort(key=len, reverse=True)  # "and then" before "and"
        self.types: Dict[str, _Type] = dict(_BUILTIN_TYPES)
        types = data.get("types", {})
        if not isinstance(types, dict):
            self._fail("types", "must be an object {name: type}")
        for name, spec in types.items():
            self.types[name] = self._type(name, spec)
        rules = data.get("rules")
        if not isinstance(rules, list) or not rules:
            self._fail("rules", "must be a non-empty list")
        self.rules = [self._rule(i, r) for i, r in enumerate(rules)]
        safety = {r.action for r in self.rules if r.safety}
        for r in self.rules:
            if not r.safety and r.action in safety:
                self._fail(f"rules[{r.index}]", f"action {r.action!r} is a safety action in another rule;"
                                                " mark every rule of that action \"safety\": true")
        self.safety_actions = frozenset(safety)
        self._words = set().union(*(_pattern_words(r.tree) for r in self.rules))
        self._words |= self.fillers | {w for c in self.connectors for w in c}
        self.aliases = self._aliases(data.get("aliases", {}))
        for r in self.rules:
            for example in r.examples:
                got = self._parse_one(self._tokens(example))
                if got is None or got[0] is not r:
                    which = "no rule" if got is None else f"rules[{got[0].index}] ({got[0].name})"
                    self._fail(f"rules[{r.index}] ({r.name})", f"example {example!r} is matched by {which}")

    def _word_list(self, data: dict, key: str, single: bool) -> List[str]:
        items = data.get(key, [])
        if not isinstance(items, list) or not all(isinstance(w, str) for w in items):
            self._fail(key, "must be a list of strings")
        for w in items:
            parts = w.split()
            if not parts or not all(_WORD_RE.fullmatch(p) for p in parts) or (single and len(parts) != 1):
                self._fail(key, f"{w!r} is not {'a lower-case word' if single else 'lower-case words'}")
        return [" ".join(w.split()) for w in items]

    def _type(self, name: str, spec: Any) -> _Type:
        where = f"types.{name}"
        if name in _BUILTIN_TYPES:
            self._fail(where, f"{name!r} is a built-in type")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            self._fail(where, "type names are lower-case letters, digits and _")
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str) or spec["kind"] not in _TYPE_KEYS:
            self._fail(where, f"needs \"kind\": one of {', '.join(sorted(_TYPE_KEYS))}")
        kind = spec["kind"]
        unknown = set(spec) - _TYPE_KEYS[kind]
        if unknown:
            self._fail(where, f"unknown key {sorted(unknown)[0]!r} for kind {kind!r}")
        if kind == "words":
            values = spec.get("values")
            if not isinstance(values, dict) or not values:
                self._fail(where, "\"values\" must be a non-empty object {spoken words: value}")
            table = {}
            for spoken, value in values.items():
                key = tuple(spoken.split())
                if not key or not all(_WORD_RE.fullmatch(w) for w in key):
                    self._fail(where, f"{spoken!r}: spoken forms are lower-case words")
                table[key] = value
            return _WordsType(table)

        def num(key, default, lo=None):
            v = spec.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (lo is not None and v < lo):
                self._fail(where, f"{key!r} must be a number{'' if lo is None else f' >= {lo}'}, got {v!r}")
            return v
        if kind == "number":
            lo, hi, scale = num("min", 0), num("max", _WORD_MAX), num("scale", 1)
            if lo > hi:
                self._fail(where, f"min {lo} > max {hi}")
            if scale <= 0:
                self._fail(where, f"scale must be > 0, got {scale}")
            integer = spec.get("integer", False)
            if not isinstance(integer, bool):
                self._fail(where, "\"integer\" must be true or false")
            return _NumberType(lo, hi, scale, integer)
        lo, hi = num("min_length", 1, 1), num("max_length", 32, 1)
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo > hi:
            self._fail(where, "min_length and max_length must be integers, min_length <= max_length")
        return _DigitsType(lo, hi)

    def _rule(self, index: int, spec: Any) -> Rule:
        where = f"rules[{index}]"
        if not isinstance(spec, dict):
            self._fail(where, "a rule is an object {\"pattern\": ..., \"command\": {...}}")
        name = spec.get("name", "")
        if name:
            where += f" ({name})"
        unknown = set(spec) - _RULE_KEYS
        if unknown:
            self._fail(where, f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_RULE_KEYS))})")
        pattern = spec.get("pattern")
        if pattern is None:
            self._fail(where, "no \"pattern\"")
        if not isinstance(pattern, str):
            self._fail(where, "\"pattern\" must be a string")
        try:
            tree = _PatternParser(pattern, self.types).parse()
            slots = _slots(tree)
        except _PatternError as e:
            self._fail(where, f"pattern {pattern!r}: {e}")
        if _can_be_empty(tree):
            self._fail(where, f"pattern {pattern!r} can match empty text (everything in it is optional)")
        fillers = _literal_words(tree) & self.fillers
        if fillers:
            self._fail(where, f"pattern {pattern!r} uses {sorted(fillers)[0]!r}, a filler (fillers are"
                              " removed before matching, so it could never match)")
        command = spec.get("command")
        if not isinstance(command, dict) or not isinstance(command.get("action"), str) or not command["action"]:
            self._fail(where, "\"command\" must be an object with a non-empty string \"action\"")
        refs = _refs(command)
        if "action" in refs or _refs(command["action"]):
            self._fail(where, "\"action\" must be a fixed string, not a slot")
        if refs - slots:
            self._fail(where, f"command refers to ${sorted(refs - slots)[0]}, which the pattern has no slot for")
        if slots - refs:
            self._fail(where, f"slot <{sorted(slots - refs)[0]}> is not used in the command")
        safety = spec.get("safety", False)
        if not isinstance(safety, bool):
            self._fail(where, "\"safety\" must be true or false")
        examples = spec.get("examples", [])
        if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
            self._fail(where, "\"examples\" must be a list of strings")
        return Rule(index, name or f"rule{index}", pattern, command, safety, tree, examples)

    def _aliases(self, spec: Any) -> Dict[str, Tuple[str, ...]]:
        if not isinstance(spec, dict):
            self._fail("aliases", "must be an object {word: replacement words}")
        out = {}
        for word, target in spec.items():
            where = f"aliases.{word}"
            if not _WORD_RE.fullmatch(word) or not isinstance(target, str) or not target.split():
                self._fail(where, "an alias maps one lower-case word to a string of words")
            if word in self._words:
                self._fail(where, f"{word!r} is already a word of the grammar")
            missing = [w for w in target.split() if w not in self._words]
            if missing:
                self._fail(where, f"{missing[0]!r} is not a word of the grammar")
            out[word] = tuple(target.split())
        return out

    # -- text -> commands

    def _tokens(self, text: str) -> List[str]:
        """Lower-case words and numbers; punctuation dropped; aliases applied; fillers removed."""
        if not isinstance(text, str):
            raise InputError(f"commands: text must be a str, got {type(text).__name__}")
        text = text.lower().replace("'", "").replace("\u2019", "").replace("\u00b0", " degrees ")
        text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,000 -> 1000
        out = []
        for tok in _TOKEN.findall(text):
            for w in self.aliases.get(tok, (tok,)):
                if w not in self.fillers:
                    out.append(w)
        return out

    def _parse_one(self, toks: Sequence[str]) -> Optional[Tuple[Rule, dict]]:
        if not toks:
            return None
        for rule in self.rules:
            for j, binds in _match(rule.tree, toks, 0, {}):
                if j == len(toks):
                    return rule, _fill(rule.command, binds)
        return None

    def parse(self, text: str) -> Optional[dict]:
        """The command said in `text` (one command; case, punctuation, fillers, number words
        or digits do not matter), or None when the text is not exactly one command."""
        got = self._parse_one(self._tokens(text))
        return got[1] if got else None

    def parse_all(self, text: str) -> Optional[List[dict]]:
        """The commands said in `text`, in order, separated by connectors ("turn left and go
        forward two meters"); [] for empty text, None when any part is not a command."""
        toks = self._tokens(text)
        dead: Set[int] = set()  # positions from which the rest cannot be parsed

        def connector(i: int) -> int:
            for c in self.connectors:
                if tuple(toks[i:i + len(c)]) == c:
                    return i + len(c)
            return i

        def rest(i: int, first: bool) -> Optional[List[dict]]:
            if i == len(toks):
                return []
            if i in dead:
                return None
            j = connector(i)
            if j == i and not first:
                return None  # two commands need a connector between them
            for start in ([j, i] if j != i and first else [j]):
                if start == len(toks):
                    return []  # a trailing connector (the speaker paused mid-sentence)
                for rule in self.rules:
                    for end, binds in _match(rule.tree, toks, start, {}):
                        tail = rest(end, False)
                        if tail is not None:
                            return [_fill(rule.command, binds)] + tail
            dead.add(i)
            return None

        return rest(0, True)

    def find_safety(self, text: str) -> List[dict]:
        """Every safety command anywhere in `text`, in order, whatever surrounds it (a partial
        transcript: "turn left stop" holds a stop). Each match takes its longest reading."""
        toks = self._tokens(text)
        found, i = [], 0
        safety_rules = [r for r in self.rules if r.safety]
        while i < len(toks):
            best = None
            for rule in safety_rules:
                for j, binds in _match(rule.tree, toks, i, {}):
                    if best is None or j > best[0]:
                        best = (j, _fill(rule.command, binds))
            if best is not None:
                found.append(best[1])
                i = best[0]
            else:
                i += 1
        return found

    def is_safety(self, command: Optional[dict]) -> bool:
        """True for a command of a safety action (a rule marked "safety": true)."""
        return isinstance(command, dict) and command.get("action") in self.safety_actions

    # -- what the recogniser may say

    def words(self) -> List[str]:
        """Every word the grammar can use, sorted: patterns, slot types (numbers as words),
        fillers and connectors (aliases are not included: they only rescue free text). Give it
        to ``Recognizer(words=...)``."""
        return sorted(self._words)

    def phrases(self, limit: int = 10000) -> List[str]:
        """Every single-command utterance, for ``Recognizer(phrases=...)`` (tighter than
        words=, but only for small grammars: raises InputError when a digits slot makes it
        unbounded or there are more than `limit`; the default grammar is one of those)."""
        out: Dict[str, None] = {}
        for rule in self.rules:
            try:
                said = _expand(rule.tree, limit)
            except _PatternError as e:
                raise InputError(f"{self.source}: rules[{rule.index}] ({rule.name}): cannot list phrases: {e};"
                                 " use words()") from None
            for ws, _ in said:
                out[" ".join(ws)] = None
            if len(out) > limit:
                raise InputError(f"{self.source}: more than {limit} phrases; use words()")
        return list(out)


# ---- the router: recogniser events -> commands -> link

@dataclass
class Dispatch:
    """One command on its way to the robot, with the time of each step (``clock`` seconds).

    status: "queued" -> "sending" -> "acked" | "failed" (a safety command is retried, so it
    goes back to "queued"); "duplicate" (a safety command of a final already sent from a
    partial of the same segment: never sent again); "cancelled" (queued when the router
    closed, or dropped by a safety command under ``cancel_on_safety``).
    """
    command: dict
    source: str                 # "partial" or "final"
    text: str                   # the transcript it came from
    segment: int
    urgent: bool
    heard: float                # the event reached the router (or the caller's stamp)
    parsed: float
    # stream time (s) of the event's end: for a partial, the position the stream had reached
    # when it fired; for a final, the VAD segment's end (speech end + the endpointer's padding),
    # which the final follows by the end-of-speech silence
    audio_end_s: float = 0.0
    sent: Optional[float] = None
    acked: Optional[float] = None
    ack: Any = None
    error: Optional[BaseException] = None
    status: str = "queued"
    attempts: int = 0

    def latencies_ms(self) -> Dict[str, float]:
        """parse (heard -> parsed), queue (parsed -> sent), link (sent -> acked) and total
        (heard -> acked), for the steps reached."""
        out = {"parse": (self.parsed - self.heard) * 1e3}
        if self.sent is not None:
            out["queue"] = (self.sent - self.parsed) * 1e3
            if self.acked is not None:
                out["link"] = (self.acked - self.sent) * 1e3
                out["total"] = (self.acked - self.heard) * 1e3
        return out

    def to_json(self) -> dict:
        out = {"command": self.command, "source": self.source, "text": self.text, "segment": self.segment,
               "urgent": self.urgent, "status": self.status, "attempts": self.attempts}
        out.update({k + "_ms": round(v, 3) for k, v in self.latencies_ms().items()})
        if self.error is not None:
            out["error"] = str(self.error)
        return out


class CommandRouter:
    """Recogniser events -> grammar -> ``link.send(command, urgent=...)``.

    - A safety command (``grammar.is_safety``) is sent as soon as a *partial* holds it, with
      ``urgent=True``, ahead of every queued command. The final of that segment does not send
      it again: per segment the router counts the safety commands sent from partials and skips
      that many in the final (so "stop ... go forward ... stop" still sends the second stop).
      A safety command is never dropped: a failed send is retried every ``retry_s`` until it
      is acked or the router is closed (``safety_attempts`` bounds that when set; an
      InputError from the link — the command itself is unsendable — is not retried).
    - Other commands come only from finals (``grammar.parse_all``: "x and y" gives two), in
      order, urgent=False; a failed one is reported ("failed", with the error) and not retried
      (the link already retried; a late motion command is worse than none).
    - ``cancel_on_safety=True``: a safety command also cancels the commands still queued
      (default False: they are sent after it, as the robot's own stop semantics decide).

    background=True: ``start()`` runs a sender thread, ``feed`` never blocks on the link.
    background=False: nothing is sent until ``flush()``, which sends the queue in the caller's
    thread (tests; a caller with its own loop).

    Threads: ``feed``, ``flush``, ``close`` and ``dispatches`` may be called from any thread.
    The link is only ever called by one thread at a time (the sender, or flush's caller), so it
    need not be thread-safe. ``on_update(dispatch)`` runs after each step (queued, sent,
    acked, failed, duplicate, cancelled) in the thread that made it; keep it short (an exception
    from it is printed to stderr and otherwise ignored).
    """

    def __init__(self, grammar: Grammar, link: Any, *, background: bool = True,
                 on_update: Optional[Callable[[Dispatch], None]] = None, cancel_on_safety: bool = False,
                 retry_s: float = 0.05, safety_attempts: Optional[int] = None,
                 clock: Callable[[], float] = time.perf_counter):
        if not callable(getattr(link, "send", None)):
            raise InputError("CommandRouter: link must have a send(command, urgent=False) method")
        if safety_attempts is not None and safety_attempts < 1:
            raise InputError(f"safety_attempts must be >= 1 or None, got {safety_attempts}")
        self.grammar, self.link = grammar, link
        self.background = background
        self.on_update = on_update
        self.cancel_on_safety = cancel_on_safety
        self.retry_s = retry_s
        self.safety_attempts = safety_attempts
        self.clock = clock
        self._lock = threading.Condition()
        self._send_lock = threading.Lock()  # one caller of link.send at a time
        self._urgent: Deque[Dispatch] = collections.deque()
        self._normal: Deque[Dispatch] = collections.deque()
        self._in_flight: Optional[Dispatch] = None
        self._partial_safety: Dict[int, int] = {}  # segment -> safety commands sent from partials
        self._all: List[Dispatch] = []
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    # -- input

    def start(self) -> "CommandRouter":
        if self.background and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nerve-command-router", daemon=True)
            self._thread.start()
        return self

    def feed(self, event: Any, heard: Optional[float] = None) -> List[Dispatch]:
        """Takes a recogniser Event (type "partial"/"final", text, segment, end_s); returns the
        dispatches it created (empty when it holds no command). Never blocks on the link."""
        heard = self.clock() if heard is None else heard
        kind, text = event.type, event.text or ""
        segment = int(getattr(event, "segment", 0))
        end_s = float(getattr(event, "end_s", 0.0))
        if kind == "partial":
            commands = [(c, True) for c in self.grammar.find_safety(text)]
        elif kind == "final":
            parsed = self.grammar.parse_all(text)
            if parsed is None:  # not understood as a whole: still obey any safety command in it
                parsed = self.grammar.find_safety(text)
            commands = [(c, self.grammar.is_safety(c)) for c in parsed]
        else:
            raise InputError(f"CommandRouter.feed: event type must be 'partial' or 'final', got {kind!r}")
        parsed_at = self.clock()
        made, updates = [], []
        with self._lock:
            if self._closed:
                raise InputError("CommandRouter.feed after close()")
            already = self._partial_safety.get(segment, 0)
            if kind == "final":
                self._partial_safety.pop(segment, None)
                for old in [s for s in self._partial_safety if s < segment]:
                    del self._partial_safety[old]  # segments whose final never came
            else:
                # a partial is the whole segment so far: only the safety commands beyond those
                # already sent are new
                self._partial_safety[segment] = max(already, len(commands))
                commands = commands[already:]
            skip = already if kind == "final" else 0
            for command, urgent in commands:
                d = Dispatch(command, kind, text, segment, urgent, heard, parsed_at, end_s)
                if urgent and skip:
                    skip -= 1
                    d.status = "duplicate"
                elif urgent:
                    if self.cancel_on_safety:
                        while self._normal:
                            dropped = self._normal.popleft()
                            dropped.status = "cancelled"
                            updates.append(dropped)
                    self._urgent.append(d)
                else:
                    self._normal.append(d)
                self._all.append(d)
                made.append(d)
                updates.append(d)
            self._lock.notify_all()
        for d in updates:
            self._notify(d)
        return made

    # -- sending

    def _next(self) -> Optional[Dispatch]:
        """Takes the next dispatch to send (urgent first); call with the lock held."""
        queue = self._urgent if self._urgent else self._normal
        if not queue:
            return None
        d = queue.popleft()
        d.status = "sending"
        self._in_flight = d
        return d

    def _send(self, d: Dispatch) -> bool:
        """Sends one dispatch; False when a safety command must be retried."""
        d.attempts += 1
        d.sent = self.clock()
        self._notify(d)
        try:
            ack = self.link.send(d.command, urgent=d.urgent)
        except Exception as e:  # noqa: BLE001 - any link failure is reported on the dispatch
            d.error = e
            with self._lock:
                self._in_flight = None
                # an InputError is the command itself (too big, not JSON): no retry can fix it
                retry = d.urgent and not self._closed and not isinstance(e, InputError) and (
                    self.safety_attempts is None or d.attempts < self.safety_attempts)
                d.status = "queued" if retry else "failed"
                if retry:
                    self._urgent.appendleft(d)
                self._lock.notify_all()
            self._notify(d)
            return not retry
        d.acked, d.ack, d.error = self.clock(), ack, None
        with self._lock:
            d.status = "acked"
            self._in_flight = None
            self._lock.notify_all()
        self._notify(d)
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._urgent and not self._normal and not self._closed:
                    self._lock.wait()
                if self._closed and not self._urgent and not self._normal:
                    return
            with self._send_lock:  # always _send_lock before _lock (flush takes them so too)
                with self._lock:
                    d = self._next()
                ok = self._send(d) if d is not None else True
            if not ok:
                time.sleep(self.retry_s)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """background=False: sends everything queued now, in this thread. background=True:
        waits until the queue is empty and nothing is in flight. True when that happened
        (False: timed out)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.background and self._thread is not None:
            with self._lock:
                while self._urgent or self._normal or self._in_flight is not None:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._lock.wait(left)
            return True
        with self._send_lock:
            while True:
                with self._lock:
                    d = self._next()
                if d is None:
                    return True
                if not self._send(d):
                    if deadline is not None and time.monotonic() >= deadline:
                        return False
                    time.sleep(self.retry_s)

    def close(self, timeout: Optional[float] = 5.0) -> None:
        """Sends what is queued (waiting up to `timeout`), then stops the sender; what could
        not be sent in time is marked "cancelled"."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            left = list(self._urgent) + list(self._normal)
            self._urgent.clear()
            self._normal.clear()
            for d in left:
                d.status = "cancelled"
            self._lock.notify_all()
        for d in left:
            self._notify(d)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "CommandRouter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def dispatches(self) -> List[Dispatch]:
        """Every dispatch so far, in the order they were made."""
        with self._lock:
            return list(self._all)

    def _notify(self, d: Dispatch) -> None:
        if self.on_update is not None:
            try:
                self.on_update(d)
            except Exception:  # noqa: BLE001 - a broken printer must not stop a stop from going out
                traceback.print_exc()
