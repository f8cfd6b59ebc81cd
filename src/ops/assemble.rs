//! `assemble` and `unbundle`: a language model and its llama.cpp mmproj files
//! as one tensor set, a bundle, and each part back out of it exactly.
//!
//! This module owns the bundle format (`docs/BUNDLE.md`): the bundle's own
//! `general.*` and `bundle.*` keys, and every part's keys and tensor names
//! put behind its role name. Which role a file has and whether a projector
//! fits the language model are [`crate::arch::clip`]'s facts. Moves
//! descriptors only: a tensor keeps its key and data, whatever its name.

use crate::arch::clip::{self, ClipError, Encoder, InputWidth, PartRole, ProjectorWidth};
use crate::artifact::{HeaderEnd, Tensor, TensorSet};
use crate::model::{Array, Endian, Metadata, Value};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};

pub const ASSEMBLE_SPEC: OpSpec = OpSpec::new("assemble", 1, &[]).with_many_inputs();

pub const UNBUNDLE_SPEC: OpSpec =
    OpSpec::new("unbundle", 1, &[ParamSpec::required("part", ParamKind::Str).fanning_out()]);

/// A bundle's `general.architecture` and `general.type`, and the namespace
/// of its own keys (GGUF puts an architecture's keys under its name).
const BUNDLE: &str = "bundle";
const ARCHITECTURE_KEY: &str = "general.architecture";
const TYPE_KEY: &str = "general.type";
const VERSION_KEY: &str = "bundle.version";
const PARTS_KEY: &str = "bundle.parts";
const FORMAT_VERSION: u32 = 1;

/// `unbundle`: which part to take out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnbundleOptions {
    pub part: PartRole,
}

impl UnbundleOptions {
    pub fn from_params(p: &Params) -> Result<UnbundleOptions, Vec<Diagnostic>> {
        let roles = PartRole::ALL.map(PartRole::name);
        let Some((name, _)) = p.str("part") else {
            let message = format!("`unbundle` needs a `part`: one of {}", roles.join(", "));
            return Err(vec![p.error("part", message)]);
        };
        match PartRole::from_name(name) {
            Some(part) => Ok(UnbundleOptions { part }),
            None => Err(vec![p.error("part", format!("unknown part `{name}`")).suggest(name, roles)]),
        }
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "part": self.part.name() })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    #[error("{}: {problem}", part_label(*number, *role))]
    Part { number: usize, role: Option<PartRole>, problem: ClipError },
    #[error(
        "part {number} is already a bundle: `assemble` takes a language model and its mmproj files \
         (`unbundle` gives them back)"
    )]
    AlreadyBundle { number: usize },
    #[error("no language model among the {count} parts (a part whose general.architecture is not clip)")]
    NoLanguageModel { count: usize },
    #[error("part {number} is a language model alone: a bundle needs at least one mmproj part")]
    NoProjector { number: usize },
    #[error("two {role} parts: part {first} and part {second}")]
    DuplicateRole { role: PartRole, first: usize, second: usize },
    #[error(
        "{} and {} both hold a {encoder} encoder: a bundle has at most one of each",
        part_label(first.0, Some(first.1)),
        part_label(second.0, Some(second.1))
    )]
    SharedEncoder { encoder: Encoder, first: (usize, PartRole), second: (usize, PartRole) },
    #[error(
        "the {encoder} projector ({projector}) outputs {} values per token, but the language model ({}) takes {} \
         ({language})",
        projector.width,
        language.architecture,
        language.width
    )]
    WidthMismatch { encoder: Encoder, projector: ProjectorWidth, language: InputWidth },
    #[error(
        "{role} tensor `{tensor}` would be named `{role}.{tensor}`, {bytes} bytes: \
         a GGUF tensor name is at most {} bytes",
        crate::formats::gguf::MAX_TENSOR_NAME_BYTES
    )]
    NameTooLong { role: PartRole, tensor: String, bytes: usize },
    #[error("not a bundle: {TYPE_KEY} is {found}, not `{BUNDLE}`")]
    NotBundle { found: String },
    #[error("{VERSION_KEY} is {found}: this quantforge reads bundle version {FORMAT_VERSION} (u32)")]
    UnsupportedVersion { found: String },
    #[error("malformed bundle: {problem}")]
    Malformed { problem: String },
    #[error("the bundle has no {part} part (it holds {parts})")]
    UnknownPart { part: PartRole, parts: String },
}

fn part_label(number: usize, role: Option<PartRole>) -> String {
    match role {
        Some(role) => format!("part {number} ({role})"),
        None => format!("part {number}"),
    }
}

/// One input of `assemble`: its 1-based position (for errors) and role.
struct Part<'a> {
    number: usize,
    role: PartRole,
    set: &'a TensorSet,
}

/// The parts as one bundle: the language model first, then the mmproj
/// parts in the order given. Each part's role comes from its metadata, so
/// the order of `parts` changes only the order of the mmproj parts.
pub fn assemble(parts: &[&TensorSet]) -> Result<TensorSet, AssembleError> {
    let classified = classify(parts)?;
    let (language, projectors): (Vec<&Part>, Vec<&Part>) =
        classified.iter().partition(|part| part.role == PartRole::Language);
    let Some(&language) = language.first() else {
        return Err(AssembleError::NoLanguageModel { count: parts.len() });
    };
    if projectors.is_empty() {
        return Err(AssembleError::NoProjector { number: language.number });
    }
    check_widths(language, &projectors)?;

    let bundle_order: Vec<&Part> = std::iter::once(language).chain(projectors).collect();
    let mut metadata = Metadata::new();
    metadata.set(ARCHITECTURE_KEY, Value::string(BUNDLE));
    metadata.set(TYPE_KEY, Value::string(BUNDLE));
    metadata.set(VERSION_KEY, Value::U32(FORMAT_VERSION));
    let part_names = bundle_order.iter().map(|part| part.role.name()).collect();
    metadata.set(PARTS_KEY, Value::Array(Array::String(part_names)));
    let mut tensors = Vec::with_capacity(bundle_order.iter().map(|part| part.set.tensors.len()).sum());
    for part in &bundle_order {
        let prefix = prefix(part.role);
        // The bundle's own keys start with `general.` or `bundle.`, never
        // with a role name, so no part key can land on one.
        metadata.append_prefixed(&prefix, &part.set.metadata);
        for tensor in &part.set.tensors {
            let name = format!("{prefix}{}", tensor.name);
            if name.len() > crate::formats::gguf::MAX_TENSOR_NAME_BYTES {
                return Err(AssembleError::NameTooLong {
                    role: part.role,
                    tensor: tensor.name.clone(),
                    bytes: name.len(),
                });
            }
            tensors.push(Tensor { name, ..tensor.clone() });
        }
    }
    Ok(TensorSet { endian: Endian::Little, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None })
}

/// Each part's role, checking that no role or encoder comes twice and that
/// every part is a model or mmproj, not a bundle.
fn classify<'a>(parts: &[&'a TensorSet]) -> Result<Vec<Part<'a>>, AssembleError> {
    let mut classified: Vec<Part<'a>> = Vec::with_capacity(parts.len());
    for (index, &set) in parts.iter().enumerate() {
        let number = index + 1;
        if is_bundle(&set.metadata) {
            return Err(AssembleError::AlreadyBundle { number });
        }
        let role =
            clip::part_role(&set.metadata).map_err(|problem| AssembleError::Part { number, role: None, problem })?;
        for earlier in &classified {
            if earlier.role == role {
                return Err(AssembleError::DuplicateRole { role, first: earlier.number, second: number });
            }
            if let Some(&encoder) = role.encoders().iter().find(|e| earlier.role.encoders().contains(e)) {
                let (first, second) = ((earlier.number, earlier.role), (number, role));
                return Err(AssembleError::SharedEncoder { encoder, first, second });
            }
        }
        classified.push(Part { number, role, set });
    }
    Ok(classified)
}

/// Every encoder's projector must output what the language model takes,
/// or llama.cpp's mtmd refuses the pair when it loads them.
fn check_widths(language: &Part, projectors: &[&Part]) -> Result<(), AssembleError> {
    let input = clip::language_input_width(&language.set.metadata).map_err(|problem| AssembleError::Part {
        number: language.number,
        role: Some(language.role),
        problem,
    })?;
    for part in projectors {
        let infos = part.set.infos();
        for &encoder in part.role.encoders() {
            let projector = clip::projector_output_width(&part.set.metadata, &infos, encoder)
                .map_err(|problem| AssembleError::Part { number: part.number, role: Some(part.role), problem })?;
            if projector.width != input.width {
                return Err(AssembleError::WidthMismatch { encoder, projector, language: input });
            }
        }
    }
    Ok(())
}

/// Part `part` of `bundle`, exactly as it was given to `assemble`: the same
/// metadata (keys, order, types, values) and tensors (names, shapes, types,
/// order, keys, data).
pub fn unbundle(bundle: &TensorSet, part: PartRole) -> Result<TensorSet, AssembleError> {
    let parts = bundle_parts(&bundle.metadata)?;
    if !parts.contains(&part) {
        let parts = parts.iter().map(|role| role.name()).collect::<Vec<_>>().join(", ");
        return Err(AssembleError::UnknownPart { part, parts });
    }
    let metadata = part_metadata(&bundle.metadata, part);
    if metadata.is_empty() {
        let problem = format!("{PARTS_KEY} lists {part}, but no key starts with `{}`", prefix(part));
        return Err(AssembleError::Malformed { problem });
    }
    let tensors = bundle
        .tensors
        .iter()
        .filter_map(|tensor| Some(Tensor { name: name_in_part(&tensor.name, part)?.to_owned(), ..tensor.clone() }))
        .collect();
    Ok(TensorSet { endian: bundle.endian, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None })
}

/// The roles of a bundle's parts in bundle order (`bundle.parts`), once the
/// metadata is checked to be a bundle of a version this code reads.
pub fn bundle_parts(metadata: &Metadata) -> Result<Vec<PartRole>, AssembleError> {
    if !is_bundle(metadata) {
        let found = match metadata.get(TYPE_KEY) {
            Some(value) => value.as_str().map_or_else(|| format!("a {}", value.value_type()), |s| format!("`{s}`")),
            None => "absent".to_owned(),
        };
        return Err(AssembleError::NotBundle { found });
    }
    match metadata.get(VERSION_KEY) {
        Some(Value::U32(FORMAT_VERSION)) => {}
        Some(Value::U32(other)) => return Err(AssembleError::UnsupportedVersion { found: other.to_string() }),
        Some(other) => return Err(AssembleError::UnsupportedVersion { found: format!("a {}", other.value_type()) }),
        None => return Err(AssembleError::UnsupportedVersion { found: "absent".to_owned() }),
    }
    let Some(Value::Array(Array::String(names))) = metadata.get(PARTS_KEY) else {
        return Err(AssembleError::Malformed { problem: format!("{PARTS_KEY} is not an array of strings") });
    };
    let role = |name: &[u8]| {
        std::str::from_utf8(name).ok().and_then(PartRole::from_name).ok_or_else(|| AssembleError::Malformed {
            problem: format!("{PARTS_KEY} holds `{}`, which is not a part role", String::from_utf8_lossy(name)),
        })
    };
    names.iter().map(role).collect()
}

/// Whether `metadata` says it is a bundle (`general.type` = `bundle`).
pub fn is_bundle(metadata: &Metadata) -> bool {
    metadata.get_str(TYPE_KEY) == Some(BUNDLE)
}

/// What a part's keys and tensor names start with in a bundle.
fn prefix(role: PartRole) -> String {
    format!("{}.", role.name())
}

/// Part `role`'s metadata in a bundle: the keys under `role.`, that prefix removed.
pub fn part_metadata(bundle: &Metadata, role: PartRole) -> Metadata {
    bundle.strip_key_prefix(&prefix(role))
}

/// The name a bundle's tensor has in part `role`, when it belongs to it.
pub fn name_in_part(name: &str, role: PartRole) -> Option<&str> {
    name.strip_prefix(role.name())?.strip_prefix('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::TensorData;
    use crate::key::Key;
    use crate::model::TensorInfo;
    use crate::params::{Param, ParamValue};
    use crate::types::GgmlType;

    fn set(entries: &[(&str, Value)], tensors: &[(&str, &[u64])]) -> TensorSet {
        let mut metadata = Metadata::new();
        for (key, value) in entries {
            metadata.set(key, value.clone());
        }
        let file = Key::of_bytes(format!("{entries:?}").as_bytes());
        let tensors = tensors
            .iter()
            .enumerate()
            .map(|(i, (name, dims))| Tensor::from_input(file, i, &TensorInfo::new(*name, dims.to_vec(), GgmlType::F16)))
            .collect();
        TensorSet { endian: Endian::Little, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None }
    }

    fn language(width: u32) -> TensorSet {
        set(
            &[
                ("general.architecture", Value::string("llama")),
                ("general.type", Value::string("model")),
                ("llama.embedding_length", Value::U32(width)),
                ("tokenizer.ggml.tokens", Value::Array(Array::String(["a", "b"].into()))),
            ],
            &[("token_embd.weight", &[32, 2]), ("output_norm.weight", &[32])],
        )
    }

    fn vision(width: u64) -> TensorSet {
        set(
            &[
                ("general.architecture", Value::string("clip")),
                ("clip.has_vision_encoder", Value::Bool(true)),
                ("clip.projector_type", Value::string("mlp")),
            ],
            &[("mm.0.weight", &[16, 16]), ("mm.2.weight", &[16, width])],
        )
    }

    fn audio(width: u64) -> TensorSet {
        set(
            &[
                ("general.architecture", Value::string("clip")),
                ("clip.has_audio_encoder", Value::Bool(true)),
                ("clip.projector_type", Value::string("ultravox")),
            ],
            &[("mm.a.mlp.2.weight", &[8, width])],
        )
    }

    fn vision_audio(vision_width: u64, audio_width: u64) -> TensorSet {
        set(
            &[
                ("general.architecture", Value::string("clip")),
                ("clip.has_vision_encoder", Value::Bool(true)),
                ("clip.has_audio_encoder", Value::Bool(true)),
                ("clip.vision.projector_type", Value::string("qwen2.5vl_merger")),
                ("clip.audio.projector_type", Value::string("qwen2a")),
            ],
            &[("mm.2.bias", &[vision_width]), ("mm.a.fc.weight", &[8, audio_width])],
        )
    }

    fn assert_same(got: &TensorSet, want: &TensorSet) {
        assert_eq!(got.endian, want.endian);
        assert_eq!(got.metadata.iter().collect::<Vec<_>>(), want.metadata.iter().collect::<Vec<_>>());
        assert_eq!(got.tensors, want.tensors);
    }

    #[test]
    fn every_part_comes_back_exactly() {
        let (lm, v, a) = (language(32), vision(32), audio(32));
        let bundle = assemble(&[&a, &lm, &v]).unwrap();
        assert_eq!(bundle_parts(&bundle.metadata).unwrap(), [PartRole::Language, PartRole::Audio, PartRole::Vision]);
        let head: Vec<_> = bundle.metadata.iter().take(4).collect();
        let parts = Value::Array(Array::String(["language", "audio", "vision"].into()));
        assert_eq!(
            head,
            [
                ("general.architecture", &Value::string("bundle")),
                ("general.type", &Value::string("bundle")),
                ("bundle.version", &Value::U32(1)),
                ("bundle.parts", &parts),
            ]
        );
        assert_eq!(bundle.metadata.get("language.general.type"), Some(&Value::string("model")));
        let names: Vec<&str> = bundle.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "language.token_embd.weight",
                "language.output_norm.weight",
                "audio.mm.a.mlp.2.weight",
                "vision.mm.0.weight",
                "vision.mm.2.weight"
            ]
        );
        assert!(matches!(bundle.tensors[0].data, TensorData::Input { index: 0, .. }));
        for (role, part) in [(PartRole::Language, &lm), (PartRole::Vision, &v), (PartRole::Audio, &a)] {
            assert_same(&unbundle(&bundle, role).unwrap(), part);
        }
    }

    #[test]
    fn part_keys_named_like_the_bundles_own_keys_stay_in_their_part() {
        let mut lm = language(32);
        lm.metadata.set("bundle.parts", Value::U8(7));
        lm.metadata.set("bundle.version", Value::string("mine"));
        let v = vision(32);
        let bundle = assemble(&[&lm, &v]).unwrap();
        assert_eq!(bundle_parts(&bundle.metadata).unwrap(), [PartRole::Language, PartRole::Vision]);
        assert_same(&unbundle(&bundle, PartRole::Language).unwrap(), &lm);
        for role in PartRole::ALL {
            assert!(![BUNDLE, "general"].contains(&role.name()), "{role} would share the bundle's namespaces");
        }
    }

    #[test]
    fn a_file_with_both_encoders_is_checked_for_each() {
        let lm = language(32);
        let both = vision_audio(32, 32);
        let bundle = assemble(&[&both, &lm]).unwrap();
        assert_same(&unbundle(&bundle, PartRole::VisionAudio).unwrap(), &both);
        let err = assemble(&[&lm, &vision_audio(32, 48)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the audio projector (qwen2a, mm.a.fc.weight) outputs 48 values per token, but the language model \
             (llama) takes 32 (llama.embedding_length)"
        );
        let err = assemble(&[&lm, &both, &vision(32)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "part 2 (vision-audio) and part 3 (vision) both hold a vision encoder: a bundle has at most one of each"
        );
    }

    #[test]
    fn parts_that_cannot_be_bundled() {
        let (lm, v) = (language(32), vision(32));
        let err = assemble(&[&lm]).unwrap_err();
        assert_eq!(err.to_string(), "part 1 is a language model alone: a bundle needs at least one mmproj part");
        let err = assemble(&[]).unwrap_err();
        assert_eq!(err, AssembleError::NoLanguageModel { count: 0 });
        let err = assemble(&[&lm, &v, &language(32)]).unwrap_err();
        assert_eq!(err.to_string(), "two language parts: part 1 and part 3");
        let bundle = assemble(&[&lm, &v]).unwrap();
        let err = assemble(&[&bundle, &audio(32)]).unwrap_err();
        assert_eq!(err, AssembleError::AlreadyBundle { number: 1 });
        let mut nameless = lm.clone();
        nameless.metadata.remove("llama.embedding_length");
        let err = assemble(&[&v, &nameless]).unwrap_err();
        assert_eq!(err.to_string(), "part 2 (language): llama.embedding_length: missing");
    }

    #[test]
    fn tensor_names_stay_within_ggufs_limit() {
        let lm = language(32);
        let mut v = vision(32);
        v.tensors[0].name = "x".repeat(crate::formats::gguf::MAX_TENSOR_NAME_BYTES - "vision.".len());
        let bundle = assemble(&[&lm, &v]).unwrap();
        assert_eq!(bundle.tensors[2].name.len(), crate::formats::gguf::MAX_TENSOR_NAME_BYTES);
        v.tensors[0].name.push('x');
        let err = assemble(&[&lm, &v]).unwrap_err();
        assert!(matches!(err, AssembleError::NameTooLong { role: PartRole::Vision, bytes: 64, .. }), "{err}");
    }

    #[test]
    fn unbundle_reads_only_bundles_it_understands() {
        let (lm, v) = (language(32), vision(32));
        let err = unbundle(&lm, PartRole::Language).unwrap_err();
        assert_eq!(err.to_string(), "not a bundle: general.type is `model`, not `bundle`");
        let bundle = assemble(&[&lm, &v]).unwrap();
        let err = unbundle(&bundle, PartRole::Audio).unwrap_err();
        assert_eq!(err.to_string(), "the bundle has no audio part (it holds language, vision)");

        let mut later = bundle.clone();
        later.metadata.set("bundle.version", Value::U32(2));
        let err = unbundle(&later, PartRole::Vision).unwrap_err();
        assert_eq!(err.to_string(), "bundle.version is 2: this quantforge reads bundle version 1 (u32)");

        let mut odd = bundle.clone();
        odd.metadata.set("bundle.parts", Value::Array(Array::String(["language", "smell"].into())));
        let err = unbundle(&odd, PartRole::Language).unwrap_err();
        assert_eq!(err.to_string(), "malformed bundle: bundle.parts holds `smell`, which is not a part role");

        let mut hollow = bundle.clone();
        hollow.metadata.set("bundle.parts", Value::Array(Array::String(["language", "audio"].into())));
        let err = unbundle(&hollow, PartRole::Audio).unwrap_err();
        assert_eq!(err.to_string(), "malformed bundle: bundle.parts lists audio, but no key starts with `audio.`");
    }

    #[test]
    fn unbundle_reads_its_part_parameter() {
        let params = |value: &str| Params {
            entries: vec![("part".into(), Param { value: ParamValue::Str(value.into()), span: 10..20 })],
            span: 0..30,
        };
        let options = UnbundleOptions::from_params(&params("vision-audio")).unwrap();
        assert_eq!(options.part, PartRole::VisionAudio);
        assert_eq!(options.key_params(), serde_json::json!({ "part": "vision-audio" }));
        let problems = UnbundleOptions::from_params(&params("visoin")).unwrap_err();
        assert_eq!(problems[0].message, "unknown part `visoin`");
        assert_eq!(problems[0].hint.as_deref(), Some("did you mean `vision`?"));
        assert_eq!(problems[0].span, 10..20);
        let problems = UnbundleOptions::from_params(&Params::default()).unwrap_err();
        assert_eq!(problems[0].message, "`unbundle` needs a `part`: one of language, vision, audio, vision-audio");
    }
}
