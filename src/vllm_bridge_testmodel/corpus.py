"""Seeded English-like training text for the tokenizer: sentences over a
built-in word list, made-up words, numbers and punctuation."""

from __future__ import annotations

import random
from collections.abc import Iterator


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_DETERMINERS = _words(
    "the a this that every some no one each another my your our their his her its"
)
_ADJECTIVES = _words(
    """red blue green small large old new quiet loud bright dark happy sad quick
    slow warm cold early late strong weak simple complex strange common rare
    heavy light soft hard clean dirty empty full hidden open narrow wide long
    short ancient modern gentle careful"""
)
_NOUNS = _words(
    """cat dog bird tree river mountain city house road car train ship window
    door table chair book letter story song music garden field forest island
    market street bridge tower teacher student doctor farmer writer painter
    child friend family village country world morning evening night day week
    year winter summer spring autumn rain snow wind storm light shadow stone
    water fire paper glass metal machine engine computer program system model
    data network server question answer problem idea plan reason number game
    team"""
)
_VERBS = _words(
    """saw found took made gave kept left brought built carried watched followed
    opened closed painted wrote read heard moved crossed visited reached
    remembered forgot changed started finished helped asked answered lifted
    pushed pulled turned covered"""
)
_INTRANSITIVE = _words(
    """slept waited laughed smiled arrived returned walked ran jumped listened
    rested worked danced sang stayed shouted whispered vanished appeared grew
    fell rose"""
)
_ADVERBS = _words(
    """slowly quickly quietly suddenly carefully happily softly finally again
    today yesterday always never often rarely soon later together alone almost
    nearly"""
)
_PREPOSITIONS = _words(
    "in on under over near behind beside across through into from with without "
    "after before"
)
_CONJUNCTIONS = _words("and but so because while although when until if")
_PRONOUNS = _words("I you he she we they it")
_QUESTION_WORDS = _words("who what where when why how which")
_AUXILIARIES = _words("did does will can")

# Syllable parts for made-up words; "" entries allow open syllables.
_ONSETS = (
    "",
    *_words(
        """b bl br c ch cl cr d dr f fl fr g gl gr h j k kr l m n p pl pr qu r s
        sh sk sl sm sn sp st str t th tr v w wh y z"""
    ),
)
_NUCLEI = _words("a e i o u ai ea ee oo ou ie oa y au")
_CODAS = ("", "", "", *_words("n r s t l m nd nt st ck ng rd sh th x rn lt mp"))


def _make_lexicon(rng: random.Random, size: int) -> list[str]:
    """Return ``size`` distinct pronounceable made-up words."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
            for _ in range(rng.choice((1, 2, 2, 3)))
        )
        if len(word) > 2 and word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _number(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return str(rng.randrange(10, 1000))
    if kind == 2:
        return str(rng.randrange(1900, 2040))
    if kind == 3:
        return f"{rng.randrange(100)}.{rng.randrange(100):02d}"
    if kind == 4:
        return f"{rng.randrange(24):02d}:{rng.randrange(60):02d}"
    if kind == 5:
        return f"{rng.randrange(101)}%"
    return f"${rng.randrange(1, 10000)}"


class _SentenceMaker:
    """Random sentences from a tiny grammar over real and made-up words."""

    def __init__(self, rng: random.Random, lexicon_size: int) -> None:
        self.rng = rng
        self.lexicon = _make_lexicon(rng, lexicon_size)
        # Zipf-like weights: frequent made-up words become whole tokens while
        # rare ones stay split, much as in natural text.
        self.cum_weights: list[float] = []
        total = 0.0
        for rank in range(lexicon_size):
            total += 1.0 / (rank + 10)
            self.cum_weights.append(total)

    def made_up(self) -> str:
        return self.rng.choices(self.lexicon, cum_weights=self.cum_weights)[0]

    def noun(self) -> str:
        return self.rng.choice(_NOUNS) if self.rng.random() < 0.5 else self.made_up()

    def noun_phrase(self) -> str:
        rng = self.rng
        parts = [rng.choice(_DETERMINERS)]
        if rng.random() < 0.5:
            parts.append(rng.choice(_ADJECTIVES))
        parts.append(self.noun())
        if rng.random() < 0.15:
            parts += [rng.choice(_PREPOSITIONS), rng.choice(_DETERMINERS), self.noun()]
        return " ".join(parts)

    def subject(self) -> str:
        roll = self.rng.random()
        if roll < 0.2:
            return self.rng.choice(_PRONOUNS)
        if roll < 0.35:
            return self.made_up().capitalize()
        return self.noun_phrase()

    def clause(self) -> str:
        rng = self.rng
        parts = [self.subject()]
        if rng.random() < 0.6:
            parts += [rng.choice(_VERBS), self.noun_phrase()]
        else:
            parts.append(rng.choice(_INTRANSITIVE))
        if rng.random() < 0.4:
            parts.append(rng.choice(_ADVERBS))
        if rng.random() < 0.3:
            parts += [rng.choice(_PREPOSITIONS), self.noun_phrase()]
        if rng.random() < 0.2:
            parts += ["at", _number(rng)]
        return " ".join(parts)

    def sentence(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            question = rng.choice(_QUESTION_WORDS)
            text = f"{question} {rng.choice(_AUXILIARIES)} {self.clause()}?"
        elif roll < 0.3:
            text = f"{self.clause()}, {rng.choice(_CONJUNCTIONS)} {self.clause()}."
        elif roll < 0.37:
            quoted = _capitalize(self.clause())
            text = f'"{quoted}," {rng.choice(_PRONOUNS)} said.'
        elif roll < 0.42:
            text = f"{self.clause()} ({_number(rng)} {self.noun()}s)."
        elif roll < 0.46:
            # A little code-like text, so brackets and operators get merges.
            key, other = self.noun(), self.noun()
            values = f"[{_number(rng)}, {_number(rng)}]"
            text = f"{key}_{rng.randrange(100)} = {_number(rng)}; {other}: {values}"
        elif roll < 0.5:
            text = f"{self.clause()}!"
        else:
            text = f"{self.clause()}."
        return _capitalize(text)


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def generate_corpus(n_words: int, lexicon_size: int, seed: int = 0) -> Iterator[str]:
    """Yield deterministic English-like paragraphs, about ``n_words`` words."""
    rng = random.Random(seed)
    maker = _SentenceMaker(rng, lexicon_size)
    words = 0
    while words < n_words:
        sentences = (maker.sentence() for _ in range(rng.randrange(1, 6)))
        paragraph = " ".join(sentences)
        words += paragraph.count(" ") + 1
        yield paragraph + "\n"
