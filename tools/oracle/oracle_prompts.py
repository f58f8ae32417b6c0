"""The prompts the float64 oracle is compared on: the llama oracle test and tools/oracle/arith_options.py share them."""

N_LOGIT_POS = 16  # positions whose logits the oracle test compares: short prompts are padded to this many tokens

PROMPTS = {
    "english": "The old lighthouse keeper climbed the spiral stairs every evening, counting each step as the "
               "waves crashed against the rocks below.",
    "code": "def merge_sorted(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n",
    "chatml": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "numbers": "Prices: 3.14, 27.5, 1024, 65536 and 99.99; the sum of 1234 and 5678 is",
    "multilingual": "Bonjour, comment ça va? Guten Morgen! ¿Dónde está la biblioteca? 今日はいい天気ですね。",
}


def prompt_ids(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    # Pad short prompts by repeating their own tokens so every prompt has at least N_LOGIT_POS tokens.
    while len(ids) < N_LOGIT_POS:
        ids = ids + ids
    return ids
