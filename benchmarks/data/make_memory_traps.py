"""Write ``memory_traps.jsonl``: memory-search queries that a near-duplicate must never answer.

Each line is ``{"id", "kind", "a", "b", "same_answer"}``: ``a`` is the cached query, ``b`` the
new one. The traps (``same_answer`` false) are pairs an agent's memory search could plausibly
send one after the other, one word or phrase apart, whose answers are different facts:

* ``entity``: another thing or named person (``tea`` / ``coffee``, ``Alice`` / ``Bob``);
* ``number_date``: another number, day, month or relative date (``last week`` / ``next week``);
* ``negation``: a negation or an opposite (``likes`` / ``does not like``, ``open`` / ``closed``);
* ``scope``: a broader or narrower set (``all projects`` / ``the latest project``);
* ``tense``: another time frame (``did`` / ``does``, ``used to work`` / ``works``);
* ``another_user``: another person's memory (``my`` / ``her``, ``user 12`` / ``user 21``).

``near_repeat`` pairs (``same_answer`` true) are the same query retyped (case, punctuation,
spacing, hesitations, greetings): what a reuse should find. Deterministic: rerun with
``python benchmarks/data/make_memory_traps.py`` and the file is byte for byte the same.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

OUT = Path(__file__).with_name("memory_traps.jsonl")

ENTITY = [
    ("what does the user think about {0}", [("tea", "coffee"), ("cats", "dogs"),
     ("remote work", "office work"), ("jazz", "rock music"), ("python", "rust")]),
    ("the user's {0} preferences", [("coffee", "tea"), ("seating", "meal"), ("email", "phone"),
     ("hotel", "flight"), ("font", "colour")]),
    ("notes from the meeting with {0}", [("Alice", "Bob"), ("Priya", "Tom"),
     ("the design team", "the sales team"), ("Acme Corp", "Globex"), ("Dr Patel", "Dr Jones")]),
    ("what is {0}'s phone number", [("Alice", "Bob"), ("Maria", "Mario"),
     ("the landlord", "the plumber"), ("Sam", "Sara")]),
    ("where did the user leave the {0}", [("car keys", "house keys"), ("passport", "wallet"),
     ("charger", "laptop")]),
    ("the user's favourite {0}", [("restaurant in Paris", "restaurant in Rome"), ("book", "film"),
     ("sport", "hobby"), ("city", "country")]),
    ("allergies related to {0}", [("peanuts", "shellfish"), ("penicillin", "ibuprofen")]),
    ("how does the user take their {0}", [("coffee", "tea"), ("steak", "eggs")]),
    ("what project is {0} working on", [("Alice", "Alicia"), ("the intern", "the manager")]),
    ("the user's account at {0}", [("Barclays", "HSBC"), ("Netflix", "Spotify"),
     ("GitHub", "GitLab")]),
    ("what did {0} recommend", [("the doctor", "the dentist"), ("Jan", "Jen")]),
]  # fmt: skip

NUMBER_DATE = [
    ("meetings with the team {0}", [("last week", "next week"), ("this week", "last week"),
     ("yesterday", "tomorrow"), ("on Monday", "on Tuesday"), ("this morning", "this afternoon")]),
    ("what happened in {0}", [("2023", "2024"), ("May", "June"), ("March 2022", "March 2021"),
     ("the first quarter", "the second quarter"), ("January", "February")]),
    ("the status of order {0}", [("48213", "48231"), ("#1002", "#1020"), ("A-17", "A-71")]),
    ("the top {0} restaurants the user liked", [("3", "5"), ("three", "ten"), ("10", "100")]),
    ("tasks due {0}", [("today", "tomorrow"), ("on Friday", "on Thursday"),
     ("by the 15th", "by the 25th"), ("this month", "next month"), ("in two days", "in ten days")]),
    ("the user's flight on {0}", [("12 March", "13 March"), ("the 3rd", "the 4th"),
     ("Sunday", "Saturday")]),
    ("what the user spent {0}", [("last month", "last year"), ("in April", "in August"),
     ("over 100 dollars", "over 1000 dollars")]),
    ("the user's appointment at {0}", [("9am", "10am"), ("3 pm", "5 pm"), ("noon", "midnight")]),
    ("the {0} meeting with the client", [("first", "second"), ("weekly", "monthly")]),
    ("reminders set for {0} days from now", [("2", "7"), ("30", "3")]),
    ("what the user did {0} years ago", [("two", "three"), ("5", "15")]),
]  # fmt: skip

NEGATION = [
    ("foods the user {0}", [("likes", "does not like"), ("likes", "dislikes"), ("eats", "avoids"),
     ("can eat", "cannot eat"), ("enjoys", "doesn't enjoy")]),
    ("is the user {0}", [("vegetarian", "not vegetarian"), ("available on weekends",
     "unavailable on weekends"), ("allergic to nuts", "not allergic to nuts"),
     ("happy with the plan", "unhappy with the plan")]),
    ("things the user {0} to do at work", [("wants", "doesn't want"), ("likes", "hates"),
     ("agreed", "disagreed")]),
    ("topics the user asked me {0} bring up", [("to", "never to"), ("to", "not to")]),
    ("is the office {0} on Sundays", [("open", "closed")]),
    ("did the user {0} the subscription", [("renew", "not renew"), ("start", "stop"),
     ("enable", "disable"), ("accept", "reject")]),
    ("settings the user turned {0}", [("on", "off")]),
    ("features the user {0}", [("included", "excluded"), ("added", "removed"),
     ("approved", "denied"), ("uses", "never uses")]),
    ("people the user {0} trusts", [("always", "never")]),
    ("meals {0} meat", [("with", "without")]),
    ("apps the user {0}", [("installed", "uninstalled"), ("subscribed to", "unsubscribed from"),
     ("connected", "disconnected")]),
    ("is it {0} for the user to travel", [("safe", "unsafe"), ("possible", "impossible"),
     ("legal", "illegal")]),
]  # fmt: skip

SCOPE = [
    ("{0} of the user's projects", [("all", "the latest"), ("every one", "the first"),
     ("some", "all"), ("each", "none")]),
    ("the user's {0}", [("order", "orders"), ("address", "addresses"), ("child", "children"),
     ("company", "companies"), ("email account", "email accounts")]),
    ("{0} meetings this week", [("all", "only the important"), ("the recent", "the oldest")]),
    ("what the user said about {0} trip", [("the last", "every"), ("the", "any")]),
    ("{0} notes about the budget", [("my latest", "all my"), ("the newest", "the oldest")]),
    ("the user's {0} preferences", [("work", "home"), ("current", "previous")]),
    ("documents shared with {0} team", [("the whole", "only one"), ("the entire", "another")]),
    ("{0} the user's goals", [("list all", "list the first of"), ("most of", "few of")]),
    ("contacts in the {0} group", [("family", "work"), ("close friends", "all friends")]),
    ("the user's recent {0}", [("purchase", "purchases"), ("trip", "trips")]),
    ("passwords the user stored for {0} account", [("this", "every"), ("one", "each")]),
]  # fmt: skip

TENSE = [
    ("where {0}", [("did the user live", "does the user live"), ("does the user work",
     "will the user work"), ("was the user born", "is the user living")]),
    ("the user {0} at Google", [("used to work", "works"), ("worked", "works"),
     ("will work", "worked")]),
    ("what {0} the user eat for breakfast", [("did", "does"), ("will", "did"), ("does", "will")]),
    ("the car the user {0}", [("owned", "owns"), ("had", "has"), ("used to drive", "drives")]),
    ("what the user {0}", [("liked", "likes"), ("wanted", "wants"), ("planned", "plans"),
     ("was reading", "is reading"), ("studied", "studies")]),
    ("is the user {0} to Berlin", [("moving", "going to move"), ("travelling", "going to travel")]),
    ("who {0} the user's manager", [("was", "is"), ("will be", "was")]),
    ("the user's {0} job", [("previous", "current"), ("next", "previous")]),
    ("projects the user {0} on", [("worked", "works"), ("was working", "will work")]),
    ("what the user {0} about the move", [("decided", "decides"), ("had said", "says")]),
]  # fmt: skip

ANOTHER_USER = [
    ("{0} dietary preferences", [("my", "her"), ("my", "his"), ("our", "their"),
     ("your", "my"), ("the user's", "her")]),
    ("{0}'s birthday", [("Sarah", "Tom"), ("the user's mother", "the user's father"),
     ("my sister", "my brother"), ("Kim", "Jim")]),
    ("what does {0} like to read", [("the user", "his wife"), ("he", "she"),
     ("my son", "my daughter")]),
    ("notes of user {0}", [("12", "21"), ("alice", "bob"), ("7", "8")]),
    ("where does {0} work", [("my husband", "my wife"), ("she", "they"), ("the user", "her boss")]),
    ("{0} calendar for today", [("my", "your"), ("Alex's", "Sam's"), ("the user's", "their")]),
    ("the address of {0}", [("me", "him"), ("my parents", "her parents"), ("Ana", "Anna")]),
    ("what {0} said about the project", [("I", "she"), ("we", "they"), ("Lee", "Li")]),
    ("allergies {0} mentioned", [("I", "he"), ("my kid", "my partner")]),
    ("{0} password hints", [("my", "their"), ("Bob's", "Rob's")]),
    ("what {0} prefer for dinner", [("do I", "does she"), ("do we", "do they")]),
]  # fmt: skip

KINDS = {
    "entity": ENTITY,
    "number_date": NUMBER_DATE,
    "negation": NEGATION,
    "scope": SCOPE,
    "tense": TENSE,
    "another_user": ANOTHER_USER,
}

REPEATS = [
    "what does the user drink in the morning",
    "the user's dietary preferences",
    "where does the user work",
    "notes from the meeting with Alice",
    "what did the user say about the move",
    "the user's favourite restaurant in Paris",
    "tasks due on Friday",
    "is the user vegetarian",
    "the user's current job",
    "what does the user think about remote work",
]
RETYPED = [
    "{0}?",
    "{cap}?",
    "  {0}  ",
    "{upper}",
    "um, {0}",
    "so {0}",
    "{0}, please",
    "hi, {0}? thanks",
]


def row(kind: str, number: int, a: str, b: str, same_answer: bool) -> dict[str, object]:
    return {"id": f"{kind}-{number:03d}", "kind": kind, "a": a, "b": b, "same_answer": same_answer}


def rows() -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    for kind, templates in KINDS.items():
        number = itertools.count(1)
        for template, pairs in templates:
            for first, second in pairs:
                for a, b in ((first, second), (second, first)):
                    found.append(
                        row(kind, next(number), template.format(a), template.format(b), False)
                    )
    number = itertools.count(1)
    for query in REPEATS:
        for shape in RETYPED:
            retyped = shape.format(query, cap=query[:1].upper() + query[1:], upper=query.upper())
            found.append(row("near_repeat", next(number), query, retyped, True))
    return found


def main() -> None:
    with OUT.open("w", encoding="utf-8") as out:
        for row in rows():
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
