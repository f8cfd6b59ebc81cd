//! Split planning across devices (issue 18) equals llama.cpp's own
//! `llama_meta_device_get_split_state`: goldens from `tests/split_ref/gen.py`
//! for every architecture fixture llama.cpp loads, a MiMo-like fused QKV with
//! key heads wider than value heads, Qwen3-Next- and Qwen3.5-like hybrids
//! (gated attention, linear-attention mixers), and Gemma 3 270M, at
//! 2, 3 and 4 devices with equal and unequal weights.

use crate::common;

use quantforge::arch::split::{self, Axis, Devices};
use quantforge::formats::{ModelFile, OpenOptions};
use serde_json::Value;

fn axis_name(axis: Axis) -> Value {
    match axis {
        Axis::Split(a) => Value::from(a),
        Axis::Mirrored => Value::from("mirrored"),
        Axis::Partial => Value::from("partial"),
    }
}

#[test]
fn plans_equal_llama_cpp_for_every_fixture_device_count_and_weighting() {
    let dir = common::repo().join("tests/data/split");
    let mut compared = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let model_path = common::repo().join(golden["model"].as_str().unwrap());
        if !model_path.exists() {
            eprintln!("skipping {}: {} is not here (scripts/fetch-models.sh)", path.display(), model_path.display());
            continue;
        }
        let model = ModelFile::open(&model_path, OpenOptions::default()).unwrap();
        for expected in golden["plans"].as_array().unwrap() {
            let count = expected["devices"].as_u64().unwrap() as usize;
            let weights = expected["split"].as_array().map(|w| w.iter().map(|v| v.as_f64().unwrap() as f32).collect());
            let what = format!("{} on {count} devices, weights {weights:?}", model_path.display());
            let devices = Devices::new(count, weights).unwrap();
            let ours = split::plan(&model.metadata, &model.tensors, &devices);
            if let Some(error) = expected.get("error") {
                let refusal = ours.err().unwrap_or_else(|| panic!("{what}: llama.cpp says {error}, ours planned"));
                eprintln!("{what}: refused as llama.cpp does ({error}): {refusal}");
                continue;
            }
            let ours = ours.unwrap_or_else(|e| panic!("{what}: {e}"));
            let golden_tensors = expected["tensors"].as_array().unwrap();
            assert_eq!(ours.tensors.len(), golden_tensors.len(), "{what}: tensor count");
            for g in golden_tensors {
                let name = g["name"].as_str().unwrap();
                let t = ours.tensors.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{what}: no {name}"));
                let (ne, nr) = t.ggml_state();
                let ne: Vec<u64> = ne;
                let expected_ne: Vec<u64> = g["ne"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
                let expected_nr: Vec<u32> =
                    g["nr"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
                assert_eq!(
                    (axis_name(t.axis), &ne, &nr),
                    (g["axis"].clone(), &expected_ne, &expected_nr),
                    "{what}: {name}"
                );
            }
            compared += 1;
        }
    }
    assert!(compared >= 6 * 25, "only {compared} plans compared");
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Over random LLaMA-shaped models (head counts and sizes, K wider than V,
/// fused or separate QKV, quantized or not, 1 to 8 devices, random
/// weights): every cut falls on a multiple of its segment's granularity,
/// Q and K cuts on whole K heads and V cuts on whole V heads, an axis-0 cut
/// never inside a quantization block — or the plan refuses, naming the tensor.
#[test]
fn every_boundary_falls_on_whole_heads_and_blocks() {
    use quantforge::model::{Metadata, TensorInfo, Value};
    use quantforge::types::GgmlType;

    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut planned, mut refused) = (0, 0);
    for _ in 0..400 {
        let n_head_kv = rng.pick(&[1u64, 2, 4, 8]);
        let n_head = n_head_kv * rng.pick(&[1u64, 2, 4, 8]);
        let head_k = rng.pick(&[64u64, 80, 96, 128, 192]);
        let head_v = if rng.below(3) == 0 { rng.pick(&[64u64, 128]) } else { head_k };
        let n_embd = rng.pick(&[256u64, 512, 1024]);
        let n_ff = rng.pick(&[512u64, 768, 2816]);
        let ty = rng.pick(&[GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K]);
        let fused = rng.below(2) == 0;
        let n_layer = 1 + rng.below(3);

        let mut metadata = Metadata::default();
        metadata.set("general.architecture", Value::string("llama"));
        for (key, value) in [
            ("block_count", n_layer),
            ("embedding_length", n_embd),
            ("feed_forward_length", n_ff),
            ("attention.head_count", n_head),
            ("attention.head_count_kv", n_head_kv),
            ("attention.key_length", head_k),
            ("attention.value_length", head_v),
        ] {
            metadata.set(&format!("llama.{key}"), Value::U32(value as u32));
        }
        let fits = |dims: &[u64]| ty.row_size(dims[0]).is_some();
        let tensor = |name: String, dims: Vec<u64>| {
            let ty = if fits(&dims) { ty } else { GgmlType::F16 };
            TensorInfo::new(name, dims, ty)
        };
        let mut tensors = vec![tensor("token_embd.weight".into(), vec![n_embd, 1000])];
        for il in 0..n_layer {
            let (q, kv_k, kv_v) = (n_head * head_k, n_head_kv * head_k, n_head_kv * head_v);
            if fused {
                tensors.push(tensor(format!("blk.{il}.attn_qkv.weight"), vec![n_embd, q + kv_k + kv_v]));
            } else {
                tensors.push(tensor(format!("blk.{il}.attn_q.weight"), vec![n_embd, q]));
                tensors.push(tensor(format!("blk.{il}.attn_k.weight"), vec![n_embd, kv_k]));
                tensors.push(tensor(format!("blk.{il}.attn_v.weight"), vec![n_embd, kv_v]));
            }
            tensors.push(tensor(format!("blk.{il}.attn_output.weight"), vec![n_head * head_v, n_embd]));
            tensors.push(tensor(format!("blk.{il}.ffn_up.weight"), vec![n_embd, n_ff]));
            tensors.push(tensor(format!("blk.{il}.ffn_down.weight"), vec![n_ff, n_embd]));
        }
        let count = 1 + rng.below(8) as usize;
        let weights = (rng.below(2) == 0).then(|| (0..count).map(|_| 1.0 + rng.below(4) as f32).collect());
        let devices = Devices::new(count, weights).unwrap();
        let plan = match split::plan(&metadata, &tensors, &devices) {
            Ok(plan) => plan,
            Err(e) => {
                let message = e.to_string();
                assert!(message.starts_with("blk."), "a refusal names the tensor: {message}");
                refused += 1;
                continue;
            }
        };
        for t in &plan.tensors {
            let Axis::Split(axis) = t.axis else { continue };
            for (s, segment) in t.segments.iter().enumerate() {
                assert_eq!(segment.extents.iter().sum::<u64>(), segment.size, "{}: segment {s} adds up", t.name);
                let head =
                    if t.name.contains("attn_v") || (t.name.contains("attn_qkv") && s == 2) { head_v } else { head_k };
                let attention = ["attn_q", "attn_k", "attn_v"].iter().any(|p| t.name.contains(p));
                if attention && segment.size % head == 0 {
                    assert_eq!(segment.granularity % head, 0, "{}: segment {s} granularity on whole heads", t.name);
                }
                // Every cut is on a whole unit; only the last device, which
                // takes the rest of the segment, may hold a part of one.
                let ragged = segment.extents.iter().filter(|&&e| e % segment.granularity != 0).count();
                assert!(ragged <= 1, "{}: {:?} in units of {}", t.name, segment.extents, segment.granularity);
                if axis == 0 {
                    for &e in &segment.extents {
                        assert_eq!(e % t.ggml_type.block_size(), 0, "{}: an axis-0 cut inside a block", t.name);
                    }
                }
            }
        }
        planned += 1;
    }
    assert!(planned > 300, "only {planned} of 400 planned ({refused} refused)");
}

/// Malformed metadata is an error naming the key (or the tensor and the
/// numbers), never a panic; a refused architecture says so.
#[test]
fn malformed_models_are_refused_by_key() {
    let plan = |file: &str, count: usize| {
        let model =
            ModelFile::open(&common::repo().join("tests/data/arch").join(file), OpenOptions::default()).unwrap();
        split::plan(&model.metadata, &model.tensors, &Devices::new(count, None).unwrap())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let kv = plan("broken-head-count-kv.gguf", 2).unwrap_err();
    assert!(kv.starts_with("llama.attention.head_count_kv: ") && kv.contains("does not divide"), "{kv}");
    assert_eq!(plan("olmo2.gguf", 2).unwrap_err(), "llama.cpp has no tensor split mode for architecture `olmo2`");
    for file in ["broken-block-count.gguf", "broken-expert-count.gguf", "broken-head-count.gguf", "unknown-arch.gguf"] {
        for count in 1..=4 {
            let _ = plan(file, count);
        }
    }
    assert!(Devices::new(0, None).is_err() && Devices::new(17, None).is_err());
    assert!(Devices::new(2, Some(vec![1.0, -1.0])).is_err() && Devices::new(2, Some(vec![f32::NAN, 1.0])).is_err());
}

/// `shard-devices` writes one file per device; `merge` given any one of them
/// writes the original back byte for byte — fused QKV in three segments,
/// experts, biases, fused gate/up, and Gemma when it is here.
#[test]
fn device_shards_merge_back_to_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let mut models: Vec<std::path::PathBuf> = ["mimo-like.gguf", "qwen3next-like.gguf", "qwen35-like.gguf"]
        .iter()
        .map(|f| common::repo().join("tests/data/split").join(f))
        .collect();
    for fixture in ["llama3.gguf", "mixtral.gguf", "qwen2.gguf", "phi3.gguf", "gemma3.gguf", "lfm2.gguf"] {
        models.push(common::repo().join("tests/data/arch").join(fixture));
    }
    models.extend(common::gemma());
    for model in &models {
        for (count, split) in [(2, None), (3, Some("1,2,3")), (4, None)] {
            let prefix = dir.path().join("shard");
            let count_text = count.to_string();
            let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
                vec![&"shard-devices", model, &prefix, &"--devices", &count_text];
            if let Some(split) = &split {
                args.extend([&"--split" as &dyn AsRef<std::ffi::OsStr>, split]);
            }
            common::stdout_of_success(common::quantforge_with(&args));
            let any = dir.path().join(format!("shard-dev{}-of-{count}.gguf", count - 1));
            let merged = dir.path().join("merged.gguf");
            common::stdout_of_success(common::quantforge_with(&[&"merge", &any, &merged]));
            assert!(
                std::fs::read(&merged).unwrap() == std::fs::read(model).unwrap(),
                "{} across {count} devices does not merge back",
                model.display()
            );
        }
    }
    // A missing shard is named.
    let prefix = dir.path().join("lost");
    let model = common::repo().join("tests/data/split/mimo-like.gguf");
    common::stdout_of_success(common::quantforge_with(&[&"shard-devices", &model, &prefix, &"--devices", &"2"]));
    std::fs::remove_file(dir.path().join("lost-dev1-of-2.gguf")).unwrap();
    let out = common::quantforge_with(&[&"merge", &dir.path().join("lost-dev0-of-2.gguf"), &dir.path().join("m.gguf")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("lost-dev1-of-2.gguf"), "{stderr}");
}
