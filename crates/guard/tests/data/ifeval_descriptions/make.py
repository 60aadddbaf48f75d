"""IFEval's 25 instruction types as the official checker describes them (the `build_description`
templates of google-research's instruction_following_eval/instructions.py, Apache-2.0), each filled
with arguments drawn as the checker draws them and set after a task of our own, one or two per
prompt. The rows have the shape of ifeval_visible.jsonl (`prompt`, `instruction_id_list`, `kwargs`)
so extraction can be measured on phrasings that were not written from the visible prompts.

Usage: python3 make.py > descriptions.jsonl   (no dependencies; seeded, deterministic)
"""
import json
import random

rng = random.Random(20261129)
REL = ("less than", "at least")
LANGS = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "ja": "Japanese",
         "ko": "Korean", "hi": "Hindi", "ru": "Russian", "vi": "Vietnamese", "pt": "Portuguese", "ar": "Arabic",
         "fi": "Finnish", "sw": "Swahili", "th": "Thai", "ta": "Tamil", "ur": "Urdu", "bn": "Bengali",
         "fa": "Persian", "bg": "Bulgarian", "mr": "Marathi", "te": "Telugu", "pa": "Punjabi", "gu": "Gujarati",
         "kn": "Kannada", "ne": "Nepali"}
WORDS = ["river", "lantern", "harvest", "engine", "velvet", "orbit", "pepper", "ladder", "meadow", "signal",
         "copper", "thunder", "garden", "puzzle", "anchor", "violet", "summit", "marble", "compass", "willow"]
TASKS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a bill becomes a law in the United States.",
    "Write a product description for a solar-powered backpack.",
    "Describe the water cycle to a ten-year-old.",
    "Write a cover letter for a barista position at a small cafe.",
    "Give me advice on preparing for a job interview at a bank.",
    "Write a poem about the first snowfall of winter.",
    "Summarize the causes of the French Revolution.",
    "Write a blog post about learning to play the guitar as an adult.",
    "Compose an email inviting my team to a Friday lunch.",
    "What are the pros and cons of working from home?",
    "Write a review of a fictional restaurant called The Blue Fig.",
]


def row(kind):
    n = rng.randint
    if kind == "language:response_language":
        code = rng.choice(sorted(LANGS))
        return f"Your ENTIRE response should be in {LANGS[code]} language, no other language is allowed.", {"language": code}
    if kind == "length_constraints:number_sentences":
        rel, k = rng.choice(REL), n(1, 20)
        return f"Your response should contain {rel} {k} sentences.", {"relation": rel, "num_sentences": k}
    if kind == "detectable_content:number_placeholders":
        k = n(1, 4)
        return (f"The response must contain at least {k} placeholders represented by square brackets, such as [address].",
                {"num_placeholders": k})
    if kind == "detectable_format:number_bullet_lists":
        k = n(1, 5)
        return (f"Your answer must contain exactly {k} bullet points. Use the markdown bullet points such as:\n"
                "* This is point 1. \n* This is point 2", {"num_bullets": k})
    if kind == "detectable_format:constrained_response":
        return ("Answer with one of the following options: ('My answer is yes.', 'My answer is no.', 'My answer is maybe.')",
                {})
    if kind == "detectable_format:number_highlighted_sections":
        k = n(1, 4)
        return (f"Highlight at least {k} sections in your answer with markdown, i.e. *highlighted section*.",
                {"num_highlights": k})
    if kind == "detectable_format:multiple_sections":
        s, k = rng.choice(("Section", "SECTION")), n(1, 5)
        return (f"Your response must have {k} sections. Mark the beginning of each section with {s} X, such as:\n"
                f"{s} 1\n[content of section 1]\n{s} 2\n[content of section 2]", {"section_spliter": s, "num_sections": k})
    if kind == "length_constraints:number_paragraphs":
        k = n(1, 5)
        return (f"There should be {k} paragraphs. Paragraphs are separated with the markdown divider: ***",
                {"num_paragraphs": k})
    if kind == "detectable_content:postscript":
        m = rng.choice(("P.S.", "P.P.S"))
        return f"At the end of your response, please explicitly add a postscript starting with {m}", {"postscript_marker": m}
    if kind == "keywords:existence":
        kws = rng.sample(WORDS, 2)
        return f"Include keywords {kws} in the response.", {"keywords": kws}
    if kind == "keywords:frequency":
        w, rel, k = rng.choice(WORDS), rng.choice(REL), n(1, 3)
        return (f"In your response, the word {w} should appear {rel} {k} times.",
                {"keyword": w, "relation": rel, "frequency": k})
    if kind == "length_constraints:number_words":
        rel, k = rng.choice(REL), n(50, 500)
        return f"Answer with {rel} {k} words.", {"relation": rel, "num_words": k}
    if kind == "detectable_format:json_format":
        return "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.", {}
    if kind == "length_constraints:nth_paragraph_first_word":
        k = n(1, 5)
        i, w = n(1, k), rng.choice(WORDS)
        return (f"There should be {k} paragraphs. Paragraphs and only paragraphs are separated with each other by two "
                f"new lines as if it was '\\n\\n' in python. Paragraph {i} must start with word {w}.",
                {"num_paragraphs": k, "nth_paragraph": i, "first_word": w})
    if kind == "keywords:forbidden_words":
        kws = rng.sample(WORDS, 2)
        return f"Do not include keywords {kws} in the response.", {"forbidden_words": kws}
    if kind == "combination:two_responses":
        return ("Give two different responses. Responses and only responses should be separated by 6 asterisk "
                "symbols: ******.", {})
    if kind == "startend:end_checker":
        e = rng.choice(("Any other questions?", "Is there anything else I can help with?"))
        return (f"Finish your response with this exact phrase {e}. No other words should follow this phrase.",
                {"end_phrase": e})
    if kind == "detectable_format:title":
        return "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.", {}
    if kind == "keywords:letter_frequency":
        l, rel, k = rng.choice("abcdefghijklmnopqrstuvwxyz"), rng.choice(REL), n(1, 10)
        return (f"In your response, the letter {l} should appear {rel} {k} times.",
                {"letter": l, "let_relation": rel, "let_frequency": k})
    if kind == "change_case:english_capital":
        return "Your entire response should be in English, and in all capital letters.", {}
    if kind == "change_case:english_lowercase":
        return ("Your entire response should be in English, and in all lowercase letters. No capital letters are "
                "allowed.", {})
    if kind == "punctuation:no_comma":
        return "In your entire response, refrain from the use of any commas.", {}
    if kind == "change_case:capital_word_frequency":
        rel, k = rng.choice(REL), n(1, 20)
        return (f"In your response, words with all capital letters should appear {rel} {k} times.",
                {"capital_relation": rel, "capital_frequency": k})
    if kind == "startend:quotation":
        return "Wrap your entire response with double quotation marks.", {}
    raise KeyError(kind)


KINDS = ["keywords:existence", "keywords:frequency", "keywords:forbidden_words", "keywords:letter_frequency",
         "language:response_language", "length_constraints:number_sentences", "length_constraints:number_paragraphs",
         "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
         "detectable_content:number_placeholders", "detectable_content:postscript",
         "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
         "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
         "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
         "combination:repeat_prompt", "startend:end_checker", "change_case:capital_word_frequency",
         "change_case:english_capital", "change_case:english_lowercase", "punctuation:no_comma", "startend:quotation"]
REPEAT = ("First repeat the request word for word without change, then give your answer (1. do not say any words or "
          "characters before repeating the request; 2. the request you need to repeat does not include this sentence)")

key = 0
plans = [[k] for k in KINDS for _ in range(4)]
for _ in range(30):
    a, b = rng.sample([k for k in KINDS if k != "combination:repeat_prompt"], 2)
    plans.append([a, b])
for plan in plans:
    task = rng.choice(TASKS)
    ids, kwargs, parts = [], [], []
    for kind in plan:
        if kind == "combination:repeat_prompt":
            ids.append(kind)
            kwargs.append({"prompt_to_repeat": task})
            parts.append(REPEAT)
            continue
        text, kw = row(kind)
        ids.append(kind)
        kwargs.append(kw)
        parts.append(text)
    key += 1
    print(json.dumps({"key": key, "prompt": " ".join([task] + parts), "instruction_id_list": ids, "kwargs": kwargs}))
