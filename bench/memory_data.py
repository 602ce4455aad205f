"""Deterministic memory entries for the recall benchmark and its quality test.

``entries(n)`` makes ``n`` entries one user might have asked a bot to remember,
English and Chinese (about 7:3), from templates sharing the words such notes
share — "my", "cat", "favourite", "like", "sister", "我的", "喜欢", "猫",
"妹妹" — so that common terms are common (the failure the relevance normalisation
fixes) and the index's common-term paths are exercised. Four entries are
planted among them (:data:`QUERIES`), each the one intended answer to an
ordinary question that shares some of its words and not others (a question
asks for "the name", the note says "called"). The planted entries sit at fixed
fractions of the list (oldest first), so "the newest postings" never finds them
by luck. Same ``n``, same entries, on every machine.
"""

from __future__ import annotations

import random

PETS = ["cat", "dog", "rabbit", "parrot", "hamster", "goldfish", "turtle"]
PET_NAMES = ["Mimi", "Rex", "Bella", "Max", "Luna", "Coco", "Oscar", "Tiger", "Kiki", "Bao"]
PEOPLE = ["sister", "brother", "mother", "father", "aunt", "uncle", "cousin", "friend", "boss"]
CITIES = ["Berlin", "Paris", "Tokyo", "Shanghai", "Boston", "Madrid", "Oslo", "Seoul", "Lima"]
FOODS = ["sushi", "noodles", "curry", "tacos", "dumplings", "salad", "pasta", "ramen", "soup"]
THINGS = ["colour", "song", "movie", "book", "season", "sport", "game", "flower", "drink"]
VALUES = ["blue", "jazz", "autumn", "tennis", "chess", "roses", "tea", "green", "rock"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ACTS = ["running", "swimming", "reading", "cooking", "painting", "cycling", "hiking", "yoga"]
EN = [
    "my {pet} {name} likes {food}",
    "my {person}'s {pet} is called {name}",
    "my {person} lives in {city}",
    "my favourite {thing} is {value}",
    "I like {act} on {day}",
    "my {person} likes {food} and {act}",
    "my {pet} is {n} years old",
    "I visited {city} with my {person} in {day} week {n}",
    "my {person} and I like {value} {thing}",
    "remind me that my {pet} {name} needs a bath every {day}",
]
ZH_PETS = ["猫", "狗", "兔子", "鹦鹉", "仓鼠"]
ZH_NAMES = ["咪咪", "旺财", "花花", "小白", "球球", "毛毛", "点点"]
ZH_PEOPLE = ["妹妹", "哥哥", "妈妈", "爸爸", "姐姐", "弟弟", "朋友", "同事"]
ZH_CITIES = ["北京", "上海", "广州", "成都", "杭州", "西安", "深圳"]
ZH_FOODS = ["火锅", "饺子", "面条", "米饭", "包子", "烤鸭", "寿司"]
ZH_THINGS = ["颜色", "电影", "歌手", "季节", "运动", "动物", "书"]
ZH_VALUES = ["蓝色", "秋天", "篮球", "周杰伦", "熊猫", "红色", "夏天"]
ZH = [
    "我的{pet}叫{name}",
    "我喜欢吃{food}",
    "我{person}住在{city}",
    "我最喜欢的{thing}是{value}",
    "我{person}喜欢吃{food}",
    "我的{pet}{name}喜欢睡觉",
    "我和{person}周末去{city}",
    "我{person}的{pet}很可爱",
]

QUERIES: list[tuple[str, str]] = [
    # (question, the one entry it should find): ordinary questions, some of whose words the
    # note does not use ("name", "give"; "里", "哪一种")
    ("what name did my sister give her rabbit", "my sister's rabbit is called Clover"),
    ("which ice cream flavour do I always order", "my favourite ice cream flavour is pistachio"),
    ("你知道我妹妹的猫叫什么名字吗", "我妹妹的猫叫豆豆"),
    ("水果里我最喜欢哪一种", "我最喜欢的水果是芒果"),
]
PLANTED_AT = (0.05, 0.3, 0.55, 0.8)  # where each planted entry sits in the list (oldest first)
# generated notes that would answer a question as well as its planted entry: left out, so
# each question has exactly one right answer
RESERVED = ("my sister's rabbit is called", "我妹妹的猫叫", "我最喜欢的水果")


def _fill(rnd: random.Random, template: str, zh: bool) -> str:
    if zh:
        return template.format(
            pet=rnd.choice(ZH_PETS),
            name=rnd.choice(ZH_NAMES),
            person=rnd.choice(ZH_PEOPLE),
            city=rnd.choice(ZH_CITIES),
            food=rnd.choice(ZH_FOODS),
            thing=rnd.choice(ZH_THINGS),
            value=rnd.choice(ZH_VALUES),
        )
    return template.format(
        pet=rnd.choice(PETS),
        name=rnd.choice(PET_NAMES),
        person=rnd.choice(PEOPLE),
        city=rnd.choice(CITIES),
        food=rnd.choice(FOODS),
        thing=rnd.choice(THINGS),
        value=rnd.choice(VALUES),
        day=rnd.choice(DAYS),
        act=rnd.choice(ACTS),
        n=rnd.randint(1, 20),
    )


def entries(n: int, seed: int = 2026) -> list[str]:
    """``n`` entry texts (distinct), the four planted ones among them (n ≥ 20)."""
    rnd = random.Random(seed)
    planted = {int(n * at): text for at, (_, text) in zip(PLANTED_AT, QUERIES, strict=True)}
    out: list[str] = []
    seen = {text for _, text in QUERIES}
    serial = 0
    while len(out) < n:
        if len(out) in planted:
            out.append(planted[len(out)])
            continue
        zh = rnd.random() < 0.3
        text = _fill(rnd, rnd.choice(ZH if zh else EN), zh)
        if text.startswith(RESERVED):
            continue
        if text in seen:  # a repeat: make it another note (REMEMBER would merge it)
            serial += 1
            text = f"{text} ({serial})" if not zh else f"{text}（{serial}）"
        seen.add(text)
        out.append(text)
    return out
