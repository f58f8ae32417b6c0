"""End-to-end tests of the tensorfold command line: info, run, and refusal of bad files."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from e2e_util import nan_norm_copy

PARAMS = 134_515_008
PROMPT = "The capital of France is"


def tf(tf_bin, *args, timeout=120, env=None):
    return subprocess.run([str(tf_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=None if env is None else {**os.environ, **env})


def shown(proc):
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-2000:]}\n--- stderr ---\n{proc.stderr[-2000:]}"


def param_counts(text):
    """Every number in the text read as a parameter count: 134515008, 134,515,008, 134.5M, 0.13B, 134.5 M."""
    out = []
    for m in re.finditer(r"(\d[\d,_]*(?:\.\d+)?)\s*([kKmMbBgG]?)", text):
        num = float(m.group(1).replace(",", "").replace("_", ""))
        out.append(num * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}[m.group(2).lower()])
    return out


def test_info(tf_bin, model_path):
    proc = tf(tf_bin, "info", model_path, timeout=60)
    assert proc.returncode == 0, shown(proc)
    out = proc.stdout + proc.stderr
    low = out.lower()
    for word in ("llama", "q4_1", "q8_0", "chatml"):
        assert word in low, f"info should mention {word!r}\n{shown(proc)}"
    near = [n for n in param_counts(out) if abs(n - PARAMS) / PARAMS < 0.01]
    assert near, f"info should give a parameter count near 134.5M\n{shown(proc)}"


def test_run_generates_with_summary(tf_bin, model_path):
    proc = tf(tf_bin, "run", model_path, "-p", PROMPT, "-n", 8, "--temperature", 0)
    assert proc.returncode == 0, shown(proc)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) >= 2, f"want generated text then a summary line\n{shown(proc)}"
    summary = lines[-1].lower()
    assert "prompt" in summary and "generated" in summary and "tok/s" in summary, \
        f"last stdout line should summarise prompt tokens, generated tokens and tok/s\n{shown(proc)}"
    text = "\n".join(lines[:-1]).replace(PROMPT, "", 1)
    assert text.strip(), f"no generated text on stdout\n{shown(proc)}"


def test_run_is_deterministic_at_temperature_0(tf_bin, model_path):
    a = tf(tf_bin, "run", model_path, "-p", PROMPT, "-n", 8, "--temperature", 0)
    b = tf(tf_bin, "run", model_path, "-p", PROMPT, "-n", 8, "--temperature", 0)
    assert a.returncode == 0 and b.returncode == 0, shown(a) + shown(b)
    # The summary line carries timings, so compare only the text above it.
    text = lambda p: [ln for ln in p.stdout.splitlines() if ln.strip()][:-1]
    assert text(a) == text(b)


def test_run_missing_file(tf_bin, tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    proc = tf(tf_bin, "run", missing, "-p", "hi", "-n", 1, timeout=60)
    assert proc.returncode != 0, shown(proc)
    assert "no-such-model.gguf" in proc.stdout + proc.stderr, f"message should name the file\n{shown(proc)}"


def _field_at(model_path, offset):
    """The GGUF metadata key whose bytes span `offset`, or None when gguf is not importable."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return None
    fields = sorted(GGUFReader(str(model_path)).fields.items(), key=lambda kv: kv[1].offset)
    hit = None
    for name, field in fields:
        if field.offset <= offset:
            hit = name
    return hit


@pytest.mark.parametrize("command", ["info", "run"])
def test_truncated_gguf_refused(tf_bin, model_path, tmp_path, command):
    if not str(model_path).endswith(".gguf") or not Path(model_path).is_file():
        pytest.skip("truncation test needs a single-file GGUF model")
    cut = tmp_path / "truncated.gguf"
    with open(model_path, "rb") as f:
        cut.write_bytes(f.read(1000))
    args = ["info", cut] if command == "info" else ["run", cut, "-p", "hi", "-n", 1]
    proc = tf(tf_bin, *args, timeout=60)
    assert proc.returncode != 0, shown(proc)
    out = (proc.stdout + proc.stderr).lower()
    field = _field_at(model_path, 1000)
    ok = "truncat" in out or (field is not None and field.lower() in out)
    assert ok, f"refusal should say 'truncated' or name the field being read ({field})\n{shown(proc)}"
    assert "segmentation" not in out and proc.returncode > 0, "a bad file must be refused, not crash"


def test_chat_interactive(tf_bin, model_path):
    # Two user turns on stdin, then an empty line ends the session; the second turn sees the first reply as history.
    proc = subprocess.run([str(tf_bin), "chat", str(model_path), "-n", "12", "--temperature", "0"],
                          input="What is the capital of France?\nAnd of Italy?\n\n", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, shown(proc)
    assert proc.stdout.count("> ") >= 3, shown(proc)
    assert "Paris" in proc.stdout, shown(proc)


def test_logits_rejects_out_of_vocab_ids(tf_bin, model_path, tmp_path):
    proc = tf(tf_bin, "logits", model_path, "--tokens", "1,999999", "--out", tmp_path / "x.npy")
    assert proc.returncode != 0 and "999999" in proc.stderr, shown(proc)


@pytest.mark.parametrize("command", ["run", "chat"])
def test_nan_logits_fail_the_command(tf_bin, model_path, tmp_path, command):
    """A model whose logits are NaN ends the command with the reason and a non-zero exit, not an empty success."""
    pytest.importorskip("gguf")
    nan = nan_norm_copy(model_path, tmp_path / "nan-norm.gguf")
    if command == "run":
        proc = tf(tf_bin, "run", nan, "-p", "hi", "-n", 3)
    else:
        proc = subprocess.run([str(tf_bin), "chat", str(nan), "-n", "3", "--chat-template", "chatml"], input="hi\n\n",
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, shown(proc)
    assert "logits row 0 holds NaN" in proc.stderr, shown(proc)


def _runs_on_cuda(tf_bin, model_path):
    proc = tf(tf_bin, "info", model_path, "--backend", "auto", timeout=60)
    assert proc.returncode == 0, shown(proc)  # a failing info (a bad TF_* switch exported) must not skip GPU tests
    return re.search(r"^backend:\s+cuda", proc.stdout, re.M) is not None


def _gpu_fixture(tf_bin, model_path, tmp_path, shape, mix):
    """A small random GGUF from tools/fixtures/gen_llama_gguf.py; skips unless CUDA runs the default model here."""
    if not _runs_on_cuda(tf_bin, model_path):
        pytest.skip("needs a CUDA build on a machine with a GPU")
    pytest.importorskip("gguf")
    path = tmp_path / f"{shape}-{mix}.gguf"
    gen = Path(__file__).resolve().parents[2] / "tools" / "fixtures" / "gen_llama_gguf.py"
    subprocess.run(["python3", str(gen), "--shape", shape, "--mix", mix, "--out", str(path)], check=True, timeout=120)
    return path


def test_info_names_the_backend(tf_bin, model_path):
    proc = tf(tf_bin, "info", model_path, timeout=60)
    assert proc.returncode == 0, shown(proc)
    assert re.search(r"^backend:\s+(cpu|cuda):", proc.stdout, re.M), f"info should say which backend runs\n{shown(proc)}"
    cpu = tf(tf_bin, "info", model_path, "--backend", "cpu", timeout=60)
    assert re.search(r"^backend:\s+cpu:", cpu.stdout, re.M), shown(cpu)


def test_backend_cuda_refused_at_startup_without_a_gpu(tf_bin, model_path):
    if _runs_on_cuda(tf_bin, model_path):
        pytest.skip("a CUDA device runs this model here; the refusal needs a machine without one")
    for args in (["run", model_path, "-p", "hi", "-n", "1", "--backend", "cuda"],
                 ["serve", model_path, "--port", "1", "--backend", "cuda"],
                 ["info", model_path, "--backend", "cuda"]):
        proc = tf(tf_bin, *args, timeout=60)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, shown(proc)
        assert "--backend cuda" in out and ("no CUDA backend" in out or "no CUDA device" in out), shown(proc)


def test_backend_unknown_value_refused(tf_bin, model_path):
    proc = tf(tf_bin, "run", model_path, "-p", "hi", "-n", "1", "--backend", "tpu", timeout=60)
    assert proc.returncode != 0 and "auto, cpu, cuda" in proc.stderr, shown(proc)


@pytest.mark.parametrize("flag,value", [("--parallel", 0), ("--chunk", 0), ("--context", 0), ("--draft-max", -1),
                                        ("--max-queue", -1), ("--prompt-cache-gib", -1)])
def test_serve_refuses_an_out_of_range_setting_naming_it(tf_bin, model_path, flag, value):
    proc = tf(tf_bin, "serve", model_path, "--port", "1", flag, value, timeout=60)
    assert proc.returncode != 0 and flag in proc.stderr, shown(proc)


def test_cuda_refuses_a_format_it_cannot_read(tf_bin, model_path, tmp_path):
    # Where CUDA runs the default model: a Q5_K model is refused by --backend cuda naming the tensor, and served on
    # the CPU by --backend auto with the reason.
    path = _gpu_fixture(tf_bin, model_path, tmp_path, "tiny", "q5_k")
    for args in (["info", path, "--backend", "cuda"], ["run", path, "-p", "hi", "-n", "1", "--backend", "cuda"]):
        proc = tf(tf_bin, *args, timeout=60)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Q5_K" in out and "token_embd.weight" in out, shown(proc)
    auto = tf(tf_bin, "info", path, "--backend", "auto", timeout=60)
    assert re.search(r"^backend:\s+cpu: CUDA cannot run this model: .*Q5_K", auto.stdout, re.M), shown(auto)
    ran = tf(tf_bin, "run", path, "-p", "hi", "-n", "2", "--backend", "auto", "--temperature", "0", timeout=120)
    assert ran.returncode == 0, shown(ran)


def test_cuda_refuses_a_head_size_it_cannot_run(tf_bin, model_path, tmp_path):
    # Where CUDA runs the default model: head size 48 is refused by --backend cuda naming it; auto runs on the CPU.
    path = _gpu_fixture(tf_bin, model_path, tmp_path, "tiny-hd48", "q8_0")
    proc = tf(tf_bin, "run", path, "-p", "hi", "-n", "1", "--backend", "cuda", timeout=60)
    assert proc.returncode != 0 and "head size 48" in proc.stdout + proc.stderr, shown(proc)
    auto = tf(tf_bin, "info", path, "--backend", "auto", timeout=60)
    assert re.search(r"^backend:\s+cpu: CUDA cannot run this model: .*head size 48", auto.stdout, re.M), shown(auto)


def test_cuda_refuses_rounds_past_its_row_limit_at_startup(tf_bin, model_path):
    # 17 prompt chunks of 4,096 rows can share a round: past the kernels' 65,535, refused before serving, by name.
    if not _runs_on_cuda(tf_bin, model_path):
        pytest.skip("needs a CUDA build on a machine with a GPU")
    proc = tf(tf_bin, "serve", model_path, "--port", "1", "--backend", "cuda", "--context", "4096", "--parallel", "17",
              "--chunk", "4096", "--prompt-cache-gib", "0", timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "69632 rows" in out and "--chunk" in out and "--parallel" in out, shown(proc)


def test_info_names_the_prompt_chunk_its_backend_serves_with(tf_bin, model_path):
    # GPU products fill the device only at 512 rows a forward; the CPU keeps 128, which bounds a round's latency.
    proc = tf(tf_bin, "info", model_path, "--backend", "auto", timeout=60)
    assert proc.returncode == 0, shown(proc)
    want = 512 if re.search(r"^backend:\s+cuda", proc.stdout, re.M) else 128
    assert re.search(rf"^serve --chunk: {want} prompt tokens a sequence per round", proc.stdout, re.M), shown(proc)
    cpu = tf(tf_bin, "info", model_path, "--backend", "cpu", timeout=60)
    assert re.search(r"^serve --chunk: 128 prompt tokens", cpu.stdout, re.M), shown(cpu)


@pytest.mark.parametrize("name,bad,takes", [("TF_ATTN_BUILD", "9", "0 to 4"), ("TF_MMA_SPLIT", "yes", "0 to 1"),
                                             ("TF_MMA_WGMMA", "off", "0 to 1"), ("TF_CUDA_PDL", "2", "0 to 1"),
                                             ("TF_CUDA_PREFETCH", "on", "0 to 1"), ("TF_MMA_GROUP", "3", "0 to 2"),
                                             ("TF_MMA_PREWAIT", "yes", "0 to 1"), ("TF_ATTN_PULL", "on", "0 to 1"),
                                             ("TF_CUDA_PROMPT_F16", "no", "0 to 1"),
                                             ("TF_CUDA_PROMPT_IMAGE", "auto", "0 to 1"),
                                             ("TF_CUDA_IMAGE_WIDE", "7", "0 to 3")])
def test_a_bad_cuda_developer_switch_is_refused_by_name(tf_bin, model_path, name, bad, takes):
    # The CPU backend never reads the CUDA switches; where CUDA runs, cuda and auto both refuse a bad value at startup.
    cpu = tf(tf_bin, "run", model_path, "-p", "hi", "-n", "1", "--backend", "cpu", env={name: bad})
    assert cpu.returncode == 0, shown(cpu)
    if not _runs_on_cuda(tf_bin, model_path):
        pytest.skip("the refusal needs a CUDA build on a machine with a GPU")
    for backend in ("cuda", "auto"):
        proc = tf(tf_bin, "run", model_path, "-p", "hi", "-n", "1", "--backend", backend, env={name: bad}, timeout=60)
        assert proc.returncode != 0 and f"{name}={bad}: takes {takes} or nothing" in proc.stderr, shown(proc)
    good = tf(tf_bin, "run", model_path, "-p", "hi", "-n", "1", "--backend", "cuda", env={name: "0"}, timeout=60)
    assert good.returncode == 0, shown(good)


def test_info_on_cuda_says_what_prompt_images_a_load_would_build(tf_bin, model_path):
    # info's figure for the prompt images must be what a load of the same file builds (bench prints the load's note).
    if not _runs_on_cuda(tf_bin, model_path):
        pytest.skip("prompt images need a CUDA build on a machine with a GPU")
    try:
        import gguf
    except ImportError:
        pytest.skip("gguf-py reads which layer matrices are Q4_K or Q6_K")
    kinds = (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K)
    has = any(t.name.startswith("blk.") and t.tensor_type in kinds for t in gguf.GGUFReader(str(model_path)).tensors)
    info = tf(tf_bin, "info", model_path, "--backend", "cuda", timeout=60)
    assert info.returncode == 0, shown(info)
    line = re.search(r"^prompt images: (.*)$", info.stdout, re.M)
    if not has:
        assert line is None, shown(info)
        return
    got = re.match(r"up to ([0-9.]+) GiB more", line.group(1)) if line else None
    assert got, shown(info)
    bench = tf(tf_bin, "bench", model_path, "--backend", "cuda", "-p", "16", "-n", "4", "-r", "1", timeout=120)
    loaded = re.search(r"^prompt images: ([0-9.]+) GiB of fp16 weights", bench.stdout + bench.stderr, re.M)
    assert bench.returncode == 0 and loaded and loaded.group(1) == got.group(1), shown(info) + shown(bench)
    off = tf(tf_bin, "info", model_path, "--backend", "cuda", env={"TF_CUDA_PROMPT_IMAGE": "0"}, timeout=60)
    assert off.returncode == 0 and re.search(r"^prompt images: none \(.*\): TF_CUDA_PROMPT_IMAGE=0$", off.stdout,
                                             re.M), shown(off)


@pytest.mark.parametrize("args,named", [(["--depth=-1"], "'-1' is not a --depth length"),
                                        (["--depth", "49100", "-n", "128"], "--depth 49100: depth + -n 128 + 1 must fit"),
                                        (["--depth", "4x"], "'4x' is not a --depth length"),
                                        (["--depth", ","], "--depth ',' lists no value"),
                                        (["--depth", "0"], "--depth 0: every entry must be at least 1"),
                                        (["--pp-list", "16,0"], "--pp-list 0: every entry must be at least 1"),
                                        (["--pp-list", "50000"], "--pp-list 50000: a prompt must fit"),
                                        (["--pp-list", "1x"], "'1x' is not a --pp-list length"),
                                        (["--streams", "0"], "--streams 0: every entry must be at least 1"),
                                        (["--streams", "x"], "'x' is not a --streams count"),
                                        (["--ubatch", "0"], "--ubatch 0: a forward needs at least one prompt row"),
                                        (["-p", "0"], "-p 0: the prompt needs at least one token"),
                                        (["--n-gen=-4"], "-n -4: generation needs at least one token"),
                                        (["-r", "0"], "-r 0: at least one repetition is needed"),
                                        (["--backend", "cuda", "-n", "2"], "-n 2 is too short: the device benchmark"),
                                        (["--backend", "cuda", "-p", "60000"], "-p 60000: a prompt must fit the CUDA"),
                                        (["--backend", "cuda", "-p", "49153"], "-p 49153: a prompt must fit the CUDA"),
                                        (["--backend", "cuda", "-n", "49152"], "-n 49152: the decode run must fit"),
                                        (["--depth", "49024", "-n", "128"], "--depth 49024: depth + -n 128 + 1")])
def test_bench_refuses_a_bad_device_option_before_loading(tf_bin, tmp_path, args, named):
    # The model file does not exist: the option must be refused before anything is loaded.
    proc = tf(tf_bin, "bench", str(tmp_path / "absent.gguf"), *args, timeout=60)
    assert proc.returncode != 0 and named in proc.stderr and "absent.gguf" not in proc.stderr, shown(proc)


@pytest.mark.parametrize("args,named", [(["-n", "49152"], "-n 49152: the decode run must fit"),
                                        (["-p", "49153"], "-p 49153: a prompt must fit the CUDA"),
                                        (["-n", "2"], "-n 2 is too short")])
def test_bench_auto_refuses_a_bad_device_option_once_cuda_is_chosen(tf_bin, model_path, args, named):
    # With --backend auto the backend is known only after the load: where it is CUDA, the same refusals follow.
    if not _runs_on_cuda(tf_bin, model_path):
        pytest.skip("needs a CUDA build on a machine with a GPU")
    proc = tf(tf_bin, "bench", model_path, "--backend", "auto", *args, timeout=120)
    assert proc.returncode != 0 and named in proc.stderr and "tok/s" not in proc.stdout, shown(proc)


@pytest.mark.parametrize("flag,value", [("--depth", "512"), ("--streams", "1,2"), ("--pp-list", "16,32"),
                                        ("--ubatch", "64")])
def test_bench_refuses_device_options_on_the_cpu(tf_bin, model_path, flag, value):
    proc = tf(tf_bin, "bench", model_path, "--backend", "cpu", "-p", "8", "-n", "4", "-r", "1", flag, value,
              timeout=120)
    assert proc.returncode != 0 and f"{flag} is measured by the device benchmark only" in proc.stderr, shown(proc)
    assert "tok/s" not in proc.stdout, shown(proc)
