"""The words of bench/dialogues.py: small talk, events between two friends, and the
questions a user asks about them in other words than the friends used.

Every event is a dict: `rows` (slot values), `say` (one turn that tells it), `split`
(two turns of the teller around a friend's question: a question needs both), `ask`
(single-hop questions in other words), `hop` (questions needing both turns of `split`),
`when` (questions naming the day by a relative date: `{rel}`), `infer` (questions
whose answer follows from the turn without naming it). `{p}` is the teller, `{q}` the
friend.
"""

from __future__ import annotations

from typing import Any

SMALL_TALK = (
    "Morning! Barely slept, the neighbours were drilling again.",
    "Ugh, Monday. The coffee machine at work is broken too.",
    "It's pouring here, I got soaked on the way home.",
    "Finally some sunshine, I sat on the balcony for an hour.",
    "What are you up to this weekend?",
    "Nothing much, probably just laundry and a long nap.",
    "Traffic was insane today, took me an hour to get home.",
    "Did you watch the match last night? What a finish.",
    "I'm so tired of cold weather, I want summer already.",
    "Just made a huge pot of soup, that's dinner for three days.",
    "My phone keeps dying by lunch, I think the battery is gone.",
    "Haha, that's exactly what happened to me last year.",
    "How's your week going so far?",
    "Pretty busy but okay. Yours?",
    "Same old, same old. Work, home, sleep.",
    "I keep meaning to call my mum but never find the time.",
    "Lol, true.",
    "Ok, talk later!",
    "Sounds good, see you!",
    "Good night, sleep well.",
    "That's hilarious, I can't stop laughing.",
    "Oh no, I'm sorry to hear that.",
    "I need a holiday, seriously.",
    "The bus was late again, third time this week.",
    "Any plans for tonight?",
    "Just a movie and takeaway, nothing fancy.",
    "I started reading before bed instead of scrolling, feels better.",
    "My back hurts from sitting all day.",
    "We should catch up properly soon.",
    "Definitely, let's find a day.",
    "I burned the toast this morning, the whole flat smells of smoke.",
    "It's so quiet at the office with everyone on leave.",
    "I found an old photo of us from school, we looked so young!",
    "The supermarket was out of everything again.",
    "My sister called, she says hi.",
    "I can't believe it's already the end of the month.",
    "Time flies, honestly.",
    "I've been drinking way too much coffee lately.",
    "Do you still go to that cafe near the park?",
    "Sometimes, the new barista is not as good though.",
    "Wow, that sounds like a lot.",
    "Congrats, that's great news!",
    "Hmm, not sure, let me think about it.",
    "Can't talk long, in a meeting in five.",
    "Back now. What were we saying?",
    "I'm cooking pasta again, I'm so predictable.",
    "The heating is off in our building, freezing.",
    "My neighbour's cat sits on my windowsill every morning.",
    "Did you see the news today? Crazy.",
    "I'm trying to drink more water, it's harder than it sounds.",
    "Weekend went by way too fast.",
    "Yeah, totally agree.",
    "I'll send you the link later.",
    "Thanks, that's really kind of you.",
    "No worries at all.",
    "Let me know how it goes!",
    "I'm just chilling on the sofa right now.",
    "My laptop fan is so loud, it sounds like a plane.",
    "I think I'm catching a cold, my throat is scratchy.",
    "Take care of yourself, drink some tea.",
)

# The bot's replies to a friend's turn (the history is sent to it turn by turn).
ACKS = (
    "Noted.",
    "Got it, thanks for sharing.",
    "Sounds good!",
    "Okay, I'm following along.",
    "Thanks, I'll keep that in mind.",
    "Interesting, go on.",
    "Understood.",
    "Nice, thanks for the update.",
)
# The bot's replies to the user's own questions about the chat.
ANSWER_REPLIES = (
    "Let me look through what was said earlier; I'm not completely sure.",
    "I think that came up a while ago in the chat, but I can't pin it down.",
    "I'm not certain, it was mentioned some time back.",
    "Let me check the earlier conversation for that.",
)
# How the user rewords an earlier question when asking it again later.
RE_ASK = ("Remind me, {q}", "Quick question again: {q}", "{q}", "Sorry, I forgot: {q}")

EVENTS: tuple[dict[str, Any], ...] = (
    {
        "key": "pet",
        "rows": [
            {"animal": "puppy", "breed": "beagle", "name": "Biscuit"},
            {"animal": "kitten", "breed": "Maine Coon", "name": "Pixel"},
            {"animal": "puppy", "breed": "corgi", "name": "Waffles"},
            {"animal": "kitten", "breed": "Siamese", "name": "Mochi"},
        ],
        "say": [
            "Guess what, we brought home a little {breed} {animal}! The kids named it {name}.",
            "Big news: there's a tiny {breed} {animal} living with us now, {name}.",
        ],
        "split": [
            "We finally adopted a {animal} from the shelter!",
            "A {breed}. We're calling it {name}, it already chewed my slippers.",
        ],
        "friend": ["No way! What kind? Any name yet?", "Aww! What breed is it? Name?"],
        "ask": [
            "What did {p} name the {animal}?",
            "What is {p}'s new pet called?",
            "Which {breed} did {p} bring home?",
            "What animal did {p} adopt?",
        ],
        "hop": [
            "What breed is the {animal} {p} adopted, and what's it called?",
            "Which shelter animal did {p} take in and what's its name?",
        ],
        "when": [
            "What new family member did {p} get {rel}?",
            "What {animal} news did {p} have {rel}?",
        ],
        "infer": ["Does {p} have any animals at home?", "Would {p} need a pet sitter?"],
    },
    {
        "key": "trip",
        "rows": [
            {"place": "Lisbon", "sight": "the old tram up the hill"},
            {"place": "Kyoto", "sight": "the bamboo forest"},
            {"place": "Edinburgh", "sight": "the castle at night"},
            {"place": "Reykjavik", "sight": "the northern lights"},
        ],
        "say": [
            "Just got back from {place}! The best part was {sight}.",
            "{place} was amazing, honestly {sight} made the whole journey.",
        ],
        "split": [
            "Back home after a week away, exhausted but happy.",
            "{place}! We saw {sight}, I'm still dreaming about it.",
        ],
        "friend": ["Welcome back! Where did you end up going?", "Where were you, remind me?"],
        "ask": [
            "What did {p} like most about {place}?",
            "Which city did {p} travel to?",
            "Where did {p} go on holiday?",
        ],
        "hop": [
            "Where was {p} away for a week, and what impressed them most?",
            "What did {p} see on the trip, and in which city?",
        ],
        "when": ["Where was {p} travelling {rel}?", "Which trip did {p} come back from {rel}?"],
        "infer": ["Has {p} been abroad recently?", "Could {p} recommend a city break?"],
    },
    {
        "key": "job",
        "rows": [
            {"role": "product designer", "firm": "a fintech startup"},
            {"role": "data analyst", "firm": "a logistics company"},
            {"role": "nurse", "firm": "the children's hospital"},
            {"role": "sound engineer", "firm": "a radio station"},
        ],
        "say": [
            "I signed the contract! I'm starting as a {role} at {firm} next month.",
            "Officially hired: {role} at {firm}. Can't believe it.",
        ],
        "split": [
            "I got the offer!!! After five interviews.",
            "{role}, at {firm}. Better pay and a shorter commute.",
        ],
        "friend": ["Yesss! For which position?", "Amazing! What's the role?"],
        "ask": [
            "Where does {p} work as a {role} now?",
            "What new position did {p} accept?",
            "Which company hired {p}?",
        ],
        "hop": [
            "Which employer made {p} an offer and for what post?",
            "What role did {p} get after the interviews?",
        ],
        "when": ["What career news did {p} share {rel}?", "What job offer did {p} mention {rel}?"],
        "infer": ["Did {p} change careers this year?", "Is {p} happy with the commute now?"],
    },
    {
        "key": "hobby",
        "rows": [
            {"hobby": "pottery", "thing": "a wonky little bowl"},
            {"hobby": "rock climbing", "thing": "my first yellow route"},
            {"hobby": "watercolour painting", "thing": "a sunset over the river"},
            {"hobby": "salsa dancing", "thing": "a full routine without tripping"},
        ],
        "say": [
            "I signed up for a {hobby} class and today I managed {thing}!",
            "My new obsession is {hobby}. Finished {thing} this evening.",
        ],
        "split": [
            "I started something new on Thursdays, guess what.",
            "{hobby}! Tonight I did {thing}, so proud.",
        ],
        "friend": ["Tell me! What is it?", "No idea, what?"],
        "ask": [
            "What did {p} make in the {hobby} class?",
            "What pastime did {p} take up?",
            "Which weekly course did {p} enrol in?",
        ],
        "hop": [
            "What does {p} learn on Thursdays and what did they achieve?",
            "What's {p}'s new Thursday activity?",
        ],
        "when": [
            "What class did {p} talk about {rel}?",
            "What did {p} manage in the {hobby} lesson {rel}?",
        ],
        "infer": [
            "Is {p} doing anything creative or sporty in the evenings?",
            "Does {p} have a hobby?",
        ],
    },
    {
        "key": "health",
        "rows": [
            {"part": "ankle", "cause": "running for the bus"},
            {"part": "wrist", "cause": "falling off my bike"},
            {"part": "knee", "cause": "a football game"},
            {"part": "shoulder", "cause": "moving a wardrobe"},
        ],
        "say": [
            "Twisted my {part} {cause}, the doctor says two weeks of rest.",
            "So I hurt my {part} — {cause}, of all things. On crutches-level annoyed.",
        ],
        "split": [
            "Spent the afternoon in A&E, don't worry, I'm fine-ish.",
            "My {part}. It was {cause}, so embarrassing.",
        ],
        "friend": ["What?! What happened?", "Oh no, are you ok? What did you hurt?"],
        "ask": [
            "How did {p} hurt their {part}?",
            "What injury did {p} have?",
            "Why did the doctor tell {p} to rest?",
        ],
        "hop": ["How did {p} get hurt, and where?", "Why was {p} in A&E?"],
        "when": ["What happened to {p}'s health {rel}?", "How did {p} get injured {rel}?"],
        "infer": ["Should I ask {p} how they're recovering?", "Can {p} go hiking right now?"],
    },
    {
        "key": "purchase",
        "rows": [
            {"item": "a used Honda Civic", "price": "nine thousand"},
            {"item": "an electric scooter", "price": "six hundred"},
            {"item": "a second-hand piano", "price": "eleven hundred"},
            {"item": "a road bike", "price": "eight hundred"},
        ],
        "say": [
            "Treated myself: bought {item} for {price}. No regrets.",
            "I finally did it, {item} is mine, paid {price}.",
        ],
        "split": [
            "I made a big purchase today, my wallet is crying.",
            "{item}, {price} total. Worth it I think.",
        ],
        "friend": ["Ooh, what did you get?", "Spill! What was it?"],
        "ask": [
            "How much did {p} pay for {item}?",
            "What expensive thing did {p} buy?",
            "What did {p} spend their savings on?",
        ],
        "hop": ["How much did {p} pay, and for what?", "What was {p}'s big purchase?"],
        "when": ["What did {p} splurge on {rel}?", "What did {p} buy {rel}?"],
        "infer": ["Did {p} have any large expenses lately?", "Is {p} saving money at the moment?"],
    },
    {
        "key": "move",
        "rows": [
            {"area": "a flat near the river", "detail": "a tiny balcony"},
            {"area": "a house in the suburbs", "detail": "a garden with an apple tree"},
            {"area": "a loft downtown", "detail": "huge windows"},
            {"area": "a cottage by the lake", "detail": "a wood stove"},
        ],
        "say": [
            "Keys in hand! We're moving into {area}, it has {detail}.",
            "Signed the lease for {area} — {detail}, I'm in love.",
        ],
        "split": [
            "Boxes everywhere, we're relocating at last.",
            "It's {area}. And it has {detail}!",
        ],
        "friend": ["Where to?", "Finally! What's the new place like?"],
        "ask": [
            "What does {p}'s new place have?",
            "Where does {p} live now?",
            "What sort of home did {p} rent?",
        ],
        "hop": [
            "Where did {p} move to and what's special about it?",
            "What's {p}'s new home like?",
        ],
        "when": ["What housing news did {p} have {rel}?", "Where did {p} move {rel}?"],
        "infer": ["Would {p} need help unpacking?", "Should I send {p} a housewarming gift?"],
    },
    {
        "key": "family",
        "rows": [
            {"who": "my brother", "kin": "brother", "news": "he is getting married in June"},
            {"who": "my cousin", "kin": "cousin", "news": "she had twins"},
            {"who": "my dad", "kin": "dad", "news": "he retired after thirty years"},
            {"who": "my grandmother", "kin": "grandmother", "news": "she turned ninety"},
        ],
        "say": [
            "Family news: {who} — {news}! Everyone's emotional.",
            "Had the call with {who} tonight, {news}.",
        ],
        "split": [
            "Huge news in my family today.",
            "It's {who}: {news}. I cried a bit.",
        ],
        "friend": ["Oh? Good news I hope?", "What's going on?"],
        "ask": [
            "What news did {p} get about their {kin}?",
            "What happened with {p}'s relatives?",
            "Which relative of {p} had a big life event?",
        ],
        "hop": [
            "Who in {p}'s family had news and what was it?",
            "What was the family news {p} shared?",
        ],
        "when": [
            "What family occasion did {p} mention {rel}?",
            "What family news did {p} have {rel}?",
        ],
        "infer": [
            "Is there a celebration coming in {p}'s family?",
            "Should I congratulate {p}'s family?",
        ],
    },
    {
        "key": "concert",
        "rows": [
            {"band": "Arctic Monkeys", "venue": "the stadium"},
            {"band": "Coldplay", "venue": "the arena"},
            {"band": "a jazz trio", "venue": "a tiny basement bar"},
            {"band": "the city orchestra", "venue": "the opera house"},
        ],
        "say": [
            "Saw {band} live at {venue} tonight, my ears are still ringing.",
            "Tonight: {band} at {venue}. Best gig of my life.",
        ],
        "split": [
            "Just got home from the best show ever.",
            "{band}! At {venue}. Unreal.",
        ],
        "friend": ["Who did you see?", "Jealous! Which one?"],
        "ask": [
            "Where did {p} see {band}?",
            "Which band did {p} see live?",
            "What gig did {p} go to?",
        ],
        "hop": [
            "Which act did {p} see and where did they play?",
            "What was the best show {p} went to?",
        ],
        "when": ["What concert did {p} go to {rel}?", "Which performance did {p} attend {rel}?"],
        "infer": ["Does {p} enjoy live music?", "Would {p} like tickets to a show?"],
    },
    {
        "key": "food",
        "rows": [
            {"dish": "a mushroom risotto", "trick": "stirring in butter at the end"},
            {"dish": "homemade ramen", "trick": "a soft egg marinated overnight"},
            {"dish": "a lemon tart", "trick": "blind-baking the crust"},
            {"dish": "Georgian khachapuri", "trick": "cracking the egg in at the last minute"},
        ],
        "say": [
            "Made {dish} for dinner, the secret is {trick}.",
            "Kitchen win tonight: {dish}. Tip: {trick}.",
        ],
        "split": [
            "Cooked something ambitious tonight and it worked!",
            "{dish}. The trick was {trick}.",
        ],
        "friend": ["What did you make?", "Ooh, recipe?"],
        "ask": [
            "What's {p}'s trick for {dish}?",
            "What did {p} cook for dinner?",
            "What recipe did {p} nail?",
        ],
        "hop": ["What did {p} cook and what was the secret?", "What ambitious dish did {p} make?"],
        "when": ["What dish did {p} make {rel}?", "What did {p} cook {rel}?"],
        "infer": ["Is {p} a good cook?", "Could {p} host a dinner party?"],
    },
    {
        "key": "book",
        "rows": [
            {"book": "Project Hail Mary", "bit": "the friendship with the alien"},
            {"book": "The Secret History", "bit": "how dark it gets"},
            {"book": "Klara and the Sun", "bit": "the robot's view of the world"},
            {"book": "Dune", "bit": "the desert politics"},
        ],
        "say": [
            "Finished {book} last night, I loved {bit}.",
            "Can't stop thinking about {book}, especially {bit}.",
        ],
        "split": [
            "Stayed up till 3am finishing a novel.",
            "{book}. It's {bit} that got me.",
        ],
        "friend": ["Which one?", "Worth it? What was it?"],
        "ask": [
            "What did {p} love about {book}?",
            "Which novel did {p} finish?",
            "What was {p} reading?",
        ],
        "hop": [
            "What novel kept {p} up at night and what did they like in it?",
            "Which book did {p} stay up to finish?",
        ],
        "when": ["What did {p} finish reading {rel}?", "Which book did {p} talk about {rel}?"],
        "infer": ["What kind of literature is {p} into?", "Could I lend {p} a novel?"],
    },
    {
        "key": "exam",
        "rows": [
            {"exam": "the driving test", "score": "passed on the first try"},
            {"exam": "the IELTS", "score": "got a 7.5"},
            {"exam": "the accounting certification", "score": "passed with 82%"},
            {"exam": "the Spanish B2 exam", "score": "scraped through"},
        ],
        "say": [
            "Results are in: {exam}, {score}!",
            "I took {exam} and {score}, celebrating now.",
        ],
        "split": [
            "Got the results I was waiting for.",
            "{exam}: {score}. Relief.",
        ],
        "friend": ["And?? Tell me!", "Which results? How did it go?"],
        "ask": [
            "How did {p} do on {exam}?",
            "Which test did {p} take?",
            "What exam results did {p} get?",
        ],
        "hop": ["What test did {p} take and how did it go?", "What results was {p} waiting for?"],
        "when": ["What results did {p} get {rel}?", "Which exam did {p} pass {rel}?"],
        "infer": ["Was {p} studying for something?", "Did {p} pass their exam?"],
    },
)

# Relative dates a user writes, each with how it is resolved by bench/dialogues.py.
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}
