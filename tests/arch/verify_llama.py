"""Checks the architecture fixtures against llama.cpp's own loader.

usage: python3 tests/arch/verify_llama.py [--mtmd] [FIXTURE_DIR]

FIXTURE_DIR defaults to tests/data/arch. Compiles tests/arch/llama_load.cpp
against the reference build ($QUANTFORGE_REFS/llama.cpp, default
~/.cache/quantforge/refs; `scripts/fetch-references.sh --build` makes it) into
a temporary directory, loads every fixture in its own process with
llama_model_load_from_file (hyperparameters, vocabulary, and every
create_tensor name/shape check of src/models/<arch>.cpp; no weights are used)
and compares with fixtures.json:

- a fixture whose `llama_cpp` is "ok" must load, and llama.cpp's n_embd,
  n_layer, n_head, n_head_kv, n_ctx_train and n_vocab must equal the expected
  hyperparameters;
- any other fixture must fail with `llama_cpp` in llama.cpp's error log.

With --mtmd it also compiles llama.cpp's multimodal library (tools/mtmd, about
two minutes at -O0 on one core; the reference build does not include it) and
tests/arch/mtmd_pair.cpp, and checks every entry of fixtures.json "pairs":
mtmd_init_from_file with a warmup encode must succeed for a pair that fits and
fail with the expected message for one that does not.

Exits 0 when every fixture behaves as described, 1 otherwise, 2 when the
reference build is missing (nothing is checked then).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFS = Path(os.environ.get("QUANTFORGE_REFS", Path.home() / ".cache" / "quantforge" / "refs"))
LLAMA = REFS / "llama.cpp"


def build(tmp: Path) -> Path:
    exe = tmp / "llama_load"
    lib = LLAMA / "build" / "bin"
    subprocess.run(
        ["g++", "-O0", "-std=c++17", f"-I{LLAMA / 'include'}", f"-I{LLAMA / 'ggml' / 'include'}",
         str(REPO / "tests" / "arch" / "llama_load.cpp"), f"-L{lib}", f"-Wl,-rpath,{lib}",
         "-lllama", "-lggml", "-lggml-base", "-o", str(exe)],
        check=True)
    return exe


def build_mtmd(tmp: Path) -> Path:
    """tools/mtmd's library sources (its CMakeLists.txt, less the helpers) and
    mtmd_pair.cpp, linked against the reference libllama."""
    mtmd = LLAMA / "tools" / "mtmd"
    lib = LLAMA / "build" / "bin"
    flags = ["-O0", "-g0", "-std=c++17", "-fPIC", "-DLLAMA_SHARED", "-DLLAMA_BUILD", "-Wno-cast-qual",
             f"-I{mtmd}", f"-I{LLAMA / 'include'}", f"-I{LLAMA / 'ggml' / 'include'}", f"-I{LLAMA / 'vendor'}"]
    sources = [mtmd / n for n in ("mtmd.cpp", "mtmd-audio.cpp", "mtmd-image.cpp", "clip.cpp")]
    sources += sorted((mtmd / "models").glob("*.cpp"))
    objects = []
    for src in sources:
        obj = tmp / (src.stem + ".o")
        subprocess.run(["g++", *flags, "-c", str(src), "-o", str(obj)], check=True)
        objects.append(str(obj))
    exe = tmp / "mtmd_pair"
    subprocess.run(["g++", *flags, str(REPO / "tests" / "arch" / "mtmd_pair.cpp"), *objects, f"-L{lib}",
                    f"-Wl,-rpath,{lib}", "-lllama", "-lggml", "-lggml-base", "-o", str(exe)], check=True)
    return exe


def check_pairs(exe: Path, fixture_dir: Path, pairs: list) -> int:
    failures = 0
    for p in pairs:
        r = subprocess.run([str(exe), str(fixture_dir / p["lm"]), str(fixture_dir / p["mmproj"])],
                           capture_output=True, text=True)
        out = r.stdout + r.stderr
        ok = r.returncode == 0 and out.startswith("OK")
        good = ok if p["mtmd"] == "ok" else (not ok and p["mtmd"] in out)
        failures += not good
        verdict = "fits" if ok else "rejected: " + p["mtmd"] if good else out.strip()[-400:]
        print(f"{'ok' if good else 'FAIL':4} {p['lm']} + {p['mmproj']}: {verdict}")
    return failures


def load(exe: Path, path: Path) -> dict:
    r = subprocess.run([str(exe), str(path)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    # the loader aborted (GGML_ASSERT): keep its stderr as the log
    return {"ok": False, "log": (r.stderr or "")[-2000:], "aborted": True}


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--mtmd"]
    with_mtmd = "--mtmd" in sys.argv[1:]
    fixture_dir = Path(args[0]) if args else REPO / "tests" / "data" / "arch"
    if not (LLAMA / "build" / "bin" / "libllama.so").exists():
        print(f"no llama.cpp build under {LLAMA}; run scripts/fetch-references.sh --build", file=sys.stderr)
        return 2
    doc = json.loads((fixture_dir / "fixtures.json").read_text(encoding="utf-8"))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        for fx in doc["fixtures"]:
            got = load(exe, fixture_dir / fx["file"])
            want = fx["llama_cpp"]
            if want == "ok":
                problems = []
                if not got["ok"]:
                    problems.append(f"failed to load: {got['log'].strip()}")
                else:
                    h = fx["hparams"]
                    pairs = [("n_embd", "embedding_length"), ("n_layer", "block_count"),
                             ("n_head", "head_count"), ("n_head_kv", "head_count_kv"),
                             ("n_ctx_train", "context_length"), ("n_vocab", "vocab_size")]
                    for ours, theirs in pairs:
                        if h is not None and got[ours] != h[theirs]:
                            problems.append(f"{theirs}: llama.cpp {got[ours]}, fixtures.json {h[theirs]}")
                status = "ok" if not problems else "FAIL"
                detail = got.get("desc", "") if not problems else "; ".join(problems)
            else:
                log = got.get("log", "")
                problems = [] if (not got["ok"] and want in log) else [f"expected failure '{want}', got {got}"]
                status = "ok" if not problems else "FAIL"
                detail = "rejected: " + want if not problems else "; ".join(problems)
            failures += bool(problems)
            print(f"{status:4} {fx['file']:28} {detail}")
        if with_mtmd:
            failures += check_pairs(build_mtmd(Path(tmp)), fixture_dir, doc["pairs"])
    print(f"{failures} check(s) disagree with llama.cpp" if failures else "all fixtures agree with llama.cpp")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
