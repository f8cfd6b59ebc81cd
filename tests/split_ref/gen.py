#!/usr/bin/env python3
"""Regenerates tests/data/split/*.json: llama.cpp's own split plans
(`llama_meta_device_get_split_state`) for every fixture under tests/data/arch
that llama.cpp loads, for the split-specific fixtures beside the goldens
(tests/split_ref/make_fixtures.py writes them), and for Gemma 3 270M when
models/ has it, for 2, 3 and 4 devices with equal and unequal weights.

Builds split_ref.cpp against the llama.cpp that scripts/fetch-references.sh
fetched and built (QUANTFORGE_REFS, default ~/.cache/quantforge/refs).
Where llama.cpp refuses (an architecture without tensor split mode) or
aborts (a GGML_ASSERT), the golden records that as an error.
"""
import json, os, pathlib, subprocess, sys, tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
REFS = pathlib.Path(os.environ.get("QUANTFORGE_REFS", pathlib.Path.home() / ".cache/quantforge/refs"))
LLAMA = REFS / "llama.cpp"
CONFIGS = [(2, None), (2, [3, 1]), (3, None), (3, [2, 1, 1]), (4, None), (4, [1, 2, 3, 4])]


def build(out):
    subprocess.run(
        ["g++", "-std=c++17", "-O1", f"-I{LLAMA}/include", f"-I{LLAMA}/src", f"-I{LLAMA}/ggml/include",
         str(REPO / "tests/split_ref/split_ref.cpp"), "-o", str(out), f"-L{LLAMA}/build/bin",
         "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{LLAMA}/build/bin"],
        check=True)


def plans(tool, model):
    result = []
    for devices, split in CONFIGS:
        args = [str(tool), str(model), str(devices)] + ([",".join(map(str, split))] if split else [])
        run = subprocess.run(args, capture_output=True, text=True)
        entry = {"devices": devices, "split": split}
        if run.returncode < 0:
            entry["error"] = "abort"
        else:
            doc = json.loads(run.stdout)
            if "error" in doc:
                entry["error"] = doc["error"]
            else:
                entry["tensors"] = doc["tensors"]
        result.append(entry)
    return result


def main():
    out_dir = REPO / "tests/data/split"
    out_dir.mkdir(exist_ok=True)
    fixtures = json.loads((REPO / "tests/data/arch/fixtures.json").read_text())["fixtures"]
    models = [REPO / "tests/data/arch" / f["file"] for f in fixtures if f.get("llama_cpp") == "ok"]
    models += sorted(out_dir.glob("*.gguf"))
    gemma = REPO / "models/gemma-3-270m-q4_k_m.gguf"
    if gemma.exists():
        models.append(gemma)
    with tempfile.TemporaryDirectory() as tmp:
        tool = pathlib.Path(tmp) / "split_ref"
        build(tool)
        for model in models:
            doc = {"model": str(model.relative_to(REPO)), "plans": plans(tool, model)}
            (out_dir / (model.stem + ".json")).write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
            errors = sorted({p["error"] for p in doc["plans"] if "error" in p})
            print(model.name, "errors: " + ", ".join(errors) if errors else "ok", file=sys.stderr)


if __name__ == "__main__":
    main()
