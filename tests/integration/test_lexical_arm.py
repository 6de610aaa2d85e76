"""History search never does worse than its own lexical arm.

A small fixed chat between two friends, forwarded to the bot turn by turn (written for
this test, in the way people write: facts told in questions, short replies, the same
words used about different things), the user's own earlier questions about it (turns
that had the bot search its history), and questions with the turns that answer them.
Stored through the product's own path, embedded by the product's background worker with
the local model, searched as the tool searches: the fused ranking finds the answer in
its first ten at least as often as the lexical ranking alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.services.embedding_worker import EmbeddingWorker
from src.services.embeddings import LocalEmbedder
from src.storage.conversation_repo import ConversationRepository
from src.storage.embedding_repo import EmbeddingRepository
from src.storage.search_ranking import SemanticQuery
from src.storage.search_repo import SearchRepository, StopWordsOnly

Pool = AsyncConnectionPool[Any]
OWNER = 7_160_001
START = datetime(2026, 2, 2, 18, 0, tzinfo=UTC)
SET_TIME = "UPDATE messages SET created_at = %s WHERE id = %s"
SEARCHED = {"tool_calls": [{"id": "c1", "name": "search_history", "args": {"query": "x"}}]}

# Sessions of the chat, a few days apart: (speaker, text). Tags name the answering turns.
SESSIONS: list[list[tuple[str, str, str]]] = [
    [
        ("Priya", "Hey Marco! How was your weekend?", ""),
        ("Marco", "Pretty good! I finally tried that pottery class on Saturday.", "pottery"),
        ("Priya", "No way, how did it go?", ""),
        ("Marco", "My bowl collapsed twice, but the teacher said that's normal.", "bowl"),
        ("Priya", "Haha, classic. I spent Sunday repainting the kitchen, a sage green.", "kitchen"),
        ("Marco", "Sage green sounds lovely. Did you do it all by yourself?", ""),
        ("Priya", "My brother Dev helped with the ceiling.", "dev"),
        ("Marco", "Nice of him. Work has been hectic for me, lots of deadlines.", ""),
        ("Priya", "Same here, the quarterly report is due Friday.", ""),
        ("Marco", "Good luck with it! Talk soon.", ""),
    ],
    [
        ("Marco", "Guess what, I signed up for the Lisbon half marathon in October!", "marathon"),
        ("Priya", "Whoa! Have you ever run that far?", ""),
        ("Marco", "Only ten kilometres so far, so I need a training plan.", ""),
        ("Priya", "Did you know my cousin Anjali ran Lisbon two years ago?", "anjali"),
        ("Marco", "Really? I should ask her for tips.", ""),
        ("Priya", "She swears by running with a club on Tuesday evenings.", ""),
        ("Marco", "Good idea. How's the kitchen looking now?", ""),
        ("Priya", "Great! We also bought a new oak table for it.", "table"),
        ("Marco", "You have to host a dinner then.", ""),
        ("Priya", "Definitely, once the chairs arrive.", ""),
    ],
    [
        ("Priya", "Marco, did you hear that I'm adopting a rescue greyhound next month?", "dog"),
        ("Marco", "That's amazing! What's its name?", ""),
        ("Priya", "Her name is Juniper, she is four and very shy.", "juniper"),
        ("Marco", "Juniper, cute. Greyhounds are couch potatoes, right?", ""),
        ("Priya", "Mostly! She needs two short walks a day.", ""),
        ("Marco", "I'll come along on a walk sometime.", ""),
        ("Priya", "Please do. How's the training going?", ""),
        ("Marco", "Slowly. I pulled a calf muscle last week, so I'm resting.", "calf"),
        ("Priya", "Ouch. Rest properly, don't rush back.", ""),
        ("Marco", "Yes. My physio gave me stretches.", ""),
    ],
    [
        ("Marco", "Yes! Last week.", "promotion"),
        ("Priya", "Wait, you got the team lead job?", "promotion"),
        ("Marco", "I did, starting in March. More meetings, more money.", "promotion"),
        ("Priya", "Congratulations! We have to celebrate.", ""),
        ("Marco", "Dinner at your place with the new oak table?", ""),
        ("Priya", "Deal. I'll make my mum's biryani.", "biryani"),
        ("Marco", "I'll bring a bottle of Portuguese wine.", ""),
        ("Priya", "Perfect. Juniper arrives on the 14th, by the way.", ""),
        ("Marco", "Can't wait to meet her.", ""),
        ("Priya", "She is going to love you.", ""),
    ],
    [
        ("Priya", "I started a ceramics course too, inspired by your pottery stories!", "ceramics"),
        ("Marco", "Ha! Did your first bowl survive?", ""),
        ("Priya", "It cracked in the kiln, so no.", ""),
        ("Marco", "Welcome to the club. I've moved on to mugs.", "mugs"),
        ("Priya", "Make me one with a greyhound on it?", ""),
        ("Marco", "Deal. The calf is better, I ran eight kilometres on Sunday.", "eight"),
        ("Priya", "Great news! Is Lisbon still on?", ""),
        ("Marco", "Yes, and I booked a flat in Alfama for the race weekend.", "alfama"),
        ("Priya", "Alfama is beautiful. Take lots of photos.", ""),
        ("Marco", "I will!", ""),
    ],
]
# The user's own questions to the bot about the chat, asked along the way (each had the
# bot search its history): noise to the search, as they repeat what is asked later.
ASKED = [
    (2, "Remind me, what was Marco's pottery class like?"),
    (3, "What did Priya paint her kitchen?"),
    (4, "Which race is Marco training for?"),
]
# Question, the tags of the turns that answer it.
QUESTIONS = [
    ("What class did Marco take on Saturday?", "pottery"),
    ("What happened to Marco's first bowl?", "bowl"),
    ("What colour did Priya paint her kitchen?", "kitchen"),
    ("Who helped Priya with the ceiling?", "dev"),
    ("Which race did Marco sign up for?", "marathon"),
    ("Who in Priya's family has run the Lisbon race?", "anjali"),
    ("What furniture did Priya buy?", "table"),
    ("What dog is Priya adopting?", "dog"),
    ("What is the name of Priya's greyhound?", "juniper"),
    ("How did Marco hurt himself while training?", "calf"),
    ("When was Marco promoted to team lead?", "promotion"),
    ("What dish will Priya cook for the celebration dinner?", "biryani"),
    ("What course did Priya start?", "ceramics"),
    ("What does Marco make in pottery now?", "mugs"),
    ("How far did Marco run after his injury?", "eight"),
    ("Where is Marco staying in Lisbon?", "alfama"),
]


async def store(pool: Pool) -> tuple[dict[str, set[int]], datetime]:
    """Store the chat (and the user's own questions) as turns; return the answering
    messages' ids by tag and the time after the last session."""
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(OWNER)
    answers: dict[str, set[int]] = {}
    at = START

    async def add(role: str, text: str, meta: dict[str, Any] | None = None) -> int:
        nonlocal at
        row = await repo.append_message(conv, role, text, meta)
        async with pool.connection() as conn:
            await conn.execute(SET_TIME, (at, row["id"]))
        at += timedelta(seconds=30)
        return int(row["id"])

    for n, session in enumerate(SESSIONS):
        at = START + timedelta(days=4 * n)
        for speaker, text, tag in session:
            message = await add("user", f"{speaker}: {text}")
            if tag:
                answers.setdefault(tag, set()).add(message)
            await add("assistant", "Noted.")
        for after, question in ASKED:
            if after == n:
                await add("user", question)
                await add("assistant", "", SEARCHED)
                await add("assistant", "Let me look back through the chat.")
    return answers, at + timedelta(days=1)


def recall(found: dict[str, list[int]], answers: dict[str, set[int]]) -> float:
    """Return the share of questions with an answering message among their results."""
    hits = sum(1 for q, tag in QUESTIONS if answers[tag] & set(found[q]))
    return hits / len(QUESTIONS)


async def test_the_fused_ranking_finds_at_least_what_its_lexical_arm_finds(pool: Pool) -> None:
    answers, now = await store(pool)
    embedder = LocalEmbedder()
    worker = EmbeddingWorker(EmbeddingRepository(pool), embedder, 64)
    while await worker.run_once():
        pass
    search = SearchRepository(pool, semantic_weight=3.0)
    lexical: dict[str, list[int]] = {}
    fused: dict[str, list[int]] = {}
    for question, _tag in QUESTIONS:
        try:
            rows = await search.search_messages(OWNER, question, 10, now=now)
        except StopWordsOnly:
            rows = []
        lexical[question] = [r["id"] for r in rows]
        vector = SemanticQuery(embedder.query, embedder.model)
        rows = await search.search_messages(OWNER, question, 10, semantic=vector, now=now)
        fused[question] = [r["id"] for r in rows]
    assert recall(lexical, answers) >= 0.5  # the set is not trivially missed
    assert recall(fused, answers) >= recall(lexical, answers)
