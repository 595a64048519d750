"""bench/wer.py: the word error rate the ASR benchmarks report (no nerve needed)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

# bench/ is not a package; `make test` runs pytest without PYTHONPATH, so the path is added here.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from wer import WordErrors, corpus_wer, normalize, number_to_words, wer, word_errors  # noqa: E402


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (20, "twenty"), (45, "forty five"),
    (90, "ninety"), (100, "one hundred"), (180, "one hundred eighty"), (472, "four hundred seventy two"),
    (1000, "one thousand"), (1500, "one thousand five hundred"), (20_017, "twenty thousand seventeen"),
    (1_000_001, "one million one"), (999_999_999,
                                      "nine hundred ninety nine million nine hundred ninety nine thousand "
                                      "nine hundred ninety nine"),
])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


def test_number_to_words_range():
    with pytest.raises(ValueError):
        number_to_words(-1)
    with pytest.raises(ValueError):
        number_to_words(1_000_000_000)
    # distinct numbers give distinct words (no two readings collide)
    assert len({number_to_words(n) for n in range(0, 100_000, 7)}) == len(range(0, 100_000, 7))


@pytest.mark.parametrize("text, words", [
    ("Turn left 90 degrees.", "turn left ninety degrees"),
    ("turn left ninety degrees", "turn left ninety degrees"),
    ("Robot, STOP!", "robot stop"),
    ("forty-five", "forty five"),
    ("45", "forty five"),
    ("one hundred and eighty", "one hundred eighty"),
    ("180", "one hundred eighty"),
    ("1,500 steps", "one thousand five hundred steps"),
    ("007", "zero zero seven"),
    ("4 7 2", "four seven two"),
    ("2.5 meters", "two point five meters"),
    ("90°", "ninety degrees"),
    ("10% speed", "ten percent speed"),
    ("the 3rd and 21st", "the third and twenty first"),
    ("40th 12th 100th", "fortieth twelfth one hundredth"),
    ("fifty centimetres", "fifty centimeters"),
    ("don't go", "don't go"),
    ("'quoted'", "quoted"),
    ("go back and stop", "go back and stop"),          # "and" outside a number stays
    ("a hundred and stop", "a hundred and stop"),      # ... also after a scale word not followed by a number
    ("  ", ""),
])
def test_normalize(text, words):
    assert normalize(text) == words.split()


def test_identical_and_number_forms():
    assert wer("turn left ninety degrees", "Turn left 90 degrees.") == 0.0
    assert wer("turn right one hundred and eighty degrees", "turn right 180 degrees") == 0.0
    assert wer("speed 15", "speed fifteen") == 0.0
    assert wer("go forward two meters", "Go forward 2 metres!") == 0.0


def test_digit_string_is_not_a_cardinal():
    assert wer("four seven two", "4 7 2") == 0.0
    e = word_errors("four seven two", "472")  # "four (hundred) seven->seventy two"
    assert (e.substitutions, e.deletions, e.insertions, e.words) == (1, 0, 1, 3)


def test_edit_counts():
    e = word_errors("turn left ninety degrees", "turn right ninety degrees")
    assert (e.substitutions, e.deletions, e.insertions, e.words) == (1, 0, 0, 4)
    e = word_errors("turn left ninety degrees", "turn ninety degrees")
    assert (e.substitutions, e.deletions, e.insertions) == (0, 1, 0)
    e = word_errors("robot stop", "the robot stop now")
    assert (e.substitutions, e.deletions, e.insertions) == (0, 0, 2)
    assert e.wer == 1.0
    e = word_errors("open gripper", "")
    assert (e.deletions, e.wer) == (2, 1.0)
    e = word_errors("a b c d e", "x b d e y")  # sub a->x, del c, ins y
    assert e.errors == 3


def test_levenshtein_against_brute_force():
    """The alignment's total equals a plain edit distance on random word strings."""
    import random
    rnd = random.Random(1234)

    def distance(a, b):
        prev = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            cur = [i]
            for j, y in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
            prev = cur
        return prev[-1]

    vocab = ["go", "stop", "left", "right", "open", "close"]
    for _ in range(300):
        a = [rnd.choice(vocab) for _ in range(rnd.randint(0, 8))]
        b = [rnd.choice(vocab) for _ in range(rnd.randint(0, 8))]
        e = word_errors(" ".join(a), " ".join(b))
        assert e.errors == distance(a, b)
        assert e.words == len(a)
        # the script is consistent: ref words = hits + subs + dels, hyp words = hits + subs + ins
        assert len(a) - e.deletions + e.insertions == len(b)


def test_empty_reference():
    assert wer("", "") == 0.0
    assert math.isinf(wer("", "stop"))


def test_corpus_wer_is_pooled():
    total = corpus_wer([("robot stop", "robot stop"), ("turn left ninety degrees", "turn left")])
    assert total == WordErrors(0, 2, 0, 6)
    assert total.wer == pytest.approx(2 / 6)  # not the mean of 0 and 0.5
