//! `quantforge pack` and `unpack`: a quantization ladder stored as its base
//! model, its importance matrix and, per file, the derivation that makes
//! it (the preset its file type names, with or without the importance
//! matrix, and the flags its tensors' types imply), plus whatever bytes that
//! derivation does not reproduce. The layout is `formats::pack`'s.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::files::{OutputPath, Replaces, WriteGuard};
use crate::formats::pack::{self, Derivation, LadderFile, Manifest, Pack, PackWriter, Span};
use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::quant::imatrix::KV_QUANTIZE_IMATRIX_FILE;
use crate::quant::plan::parse_preset;
use crate::types::{FileType, GgmlType};

#[derive(Debug, clap::Args)]
pub(super) struct PackArgs {
    /// The model every file of the ladder was made from (held whole in the pack).
    #[arg(long, value_name = "BASE")]
    base: PathBuf,
    /// The importance matrix the ladder was made with (held whole in the pack).
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// The files of the ladder.
    #[arg(required = true)]
    ladder: Vec<PathBuf>,
    /// The pack to write.
    #[arg(short = 'o', long = "output", value_name = "PACK")]
    output: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(super) struct UnpackArgs {
    /// The pack (`quantforge pack`'s output).
    pack: PathBuf,
    /// Where the files go (made if missing).
    #[arg(required_unless_present = "list")]
    outdir: Option<PathBuf>,
    /// The files to make (default: all of them, the base and importance matrix included).
    files: Vec<String>,
    /// List what the pack holds and how each file is made, and make nothing.
    #[arg(long)]
    list: bool,
}

pub(super) fn pack(args: PackArgs, json: bool) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut names = vec![file_name(&args.base)?];
    names.extend(args.imatrix.iter().map(|p| file_name(p)).collect::<anyhow::Result<Vec<_>>>()?);
    for path in &args.ladder {
        let name = file_name(path)?;
        anyhow::ensure!(!names.contains(&name), "two files named {name}: a pack holds files by name");
        names.push(name);
    }
    let mut guard = WriteGuard::default();
    guard.protect(&args.base, "the base model");
    if let Some(imatrix) = &args.imatrix {
        guard.protect(imatrix, "the importance matrix");
    }
    for path in &args.ladder {
        guard.protect(path, "a file of the ladder");
    }
    let output = guard.check(&args.output, Replaces::AnyFile)?;
    let mut writer = PackWriter::create(&output)?;
    let scratch = crate::formats::scratch_dir(parent_of(output.resolved()))?;
    let base = writer.add_file(&args.base, file_name(&args.base)?)?;
    let imatrix = match &args.imatrix {
        Some(path) => Some(writer.add_file(path, file_name(path)?)?),
        None => None,
    };
    let mut files = Vec::new();
    let mut ladder_bytes = 0;
    for (no, claimed) in args.ladder.iter().enumerate() {
        let name = file_name(claimed)?;
        let size = std::fs::metadata(claimed)?.len();
        ladder_bytes += size;
        let sha256 = crate::files::sha256_file(claimed)?;
        let derived = scratch.path().join(format!("derived-{no}.gguf"));
        let (derivation, spans) = match best_derivation(claimed, &args.base, args.imatrix.as_deref(), &derived)? {
            Some((derivation, spans)) => (Some(derivation), spans),
            None => (None, vec![Span::Literal { offset: 0, length: size }]),
        };
        let stored = pack::literal_bytes(&spans);
        let pieces = match stored {
            0 => Vec::new(),
            _ => writer.add_spans(claimed, &spans)?,
        };
        let how = match (&derivation, stored) {
            (Some(d), 0) => format!("{d}"),
            (Some(d), _) => format!("{d}, {} of its bytes stored", human_bytes(stored as f64)),
            (None, _) => "stored (no derivation from the base reproduces it)".to_owned(),
        };
        say!("{name}: {how}");
        let _ = std::fs::remove_file(&derived);
        files.push(LadderFile { name, size, sha256, derivation, pieces });
    }
    let manifest = Manifest {
        version: pack::PACK_VERSION,
        quantforge: env!("CARGO_PKG_VERSION").to_owned(),
        base,
        imatrix,
        files,
    };
    let packed = writer.finish(&manifest)?;
    if json {
        let files = entries(&manifest);
        return super::json::print(&super::json::Packed { output: args.output, bytes: packed, ladder_bytes, files });
    }
    println!(
        "wrote {}: {} ({:.3}× the base), holding {} files of {} ({:.1}× smaller), in {:.1} s",
        args.output.display(),
        human_bytes(packed as f64),
        packed as f64 / manifest.base.size as f64,
        manifest.files.len(),
        human_bytes(ladder_bytes as f64),
        ladder_bytes as f64 / packed as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The derivation from `base` that reproduces the most of `claimed`, and
/// `claimed` as spans of its output (left at `derived`); `None` when the
/// file names no preset quantforge makes.
fn best_derivation(
    claimed: &Path,
    base: &Path,
    imatrix: Option<&Path>,
    derived: &Path,
) -> anyhow::Result<Option<(Derivation, Vec<Span>)>> {
    let Ok(model) = ModelFile::open(claimed, OpenOptions::default()) else { return Ok(None) };
    let file_type = model.metadata.get("general.file_type").and_then(|v| v.as_u64());
    let recorded = model.metadata.get_str(KV_QUANTIZE_IMATRIX_FILE).map(str::to_owned);
    let imatrix_name = recorded.clone().filter(|_| imatrix.is_some());
    let preset = file_type.and_then(|id| FileType::from_id(id as u32)).map(FileType::name);
    // A typed derivation is tried alone: refining a preset's choices is moot.
    let (first, typed) = match preset.filter(|p| parse_preset(p).is_ok()) {
        Some(preset) => (Derivation { preset: preset.to_owned(), flags: Vec::new(), imatrix: imatrix_name }, false),
        None => match typed_derivation(&model, file_type, imatrix_name) {
            Some(derivation) => (derivation, true),
            None => return Ok(None),
        },
    };
    let mut best: Option<(Derivation, Vec<Span>)> = None;
    let mut tried = Vec::new();
    let mut next = Some(first);
    while let Some(derivation) = next.take() {
        tried.push(derivation.clone());
        let attempt = scratch_name(derived, tried.len());
        if let Err(e) = derive(&derivation, base, imatrix, &attempt) {
            say!("  {derivation}: {e:#}");
            continue;
        }
        let spans = pack::delta(claimed, &attempt)?;
        let stored = pack::literal_bytes(&spans);
        next = match stored {
            _ if typed => None,
            0 => None,
            _ => refine(
                &derivation,
                &model,
                &ModelFile::open(&attempt, OpenOptions::default())?,
                imatrix.and(recorded.as_ref()),
            )
            .filter(|d| !tried.contains(d)),
        };
        if best.as_ref().is_none_or(|(_, b)| stored < pack::literal_bytes(b)) {
            std::fs::rename(&attempt, derived)?;
            best = Some((derivation, spans));
        } else {
            std::fs::remove_file(&attempt)?;
        }
    }
    Ok(best)
}

/// For a file of a preset quantforge does not make: a derivation that
/// makes each tensor of a type quantforge writes in that type (one
/// `--tensor-type` per type, naming its tensors) and records the file's
/// type, so that only the other tensors' bytes (and the tensor infos naming
/// their types) are stored. `None` when no tensor has such a type.
fn typed_derivation(model: &ModelFile, file_type: Option<u64>, imatrix: Option<String>) -> Option<Derivation> {
    let mut by_type: Vec<(GgmlType, Vec<String>)> = Vec::new();
    for tensor in model.tensors.iter().filter(|t| t.ggml_type != GgmlType::F32) {
        if !crate::codecs::can_quantize(tensor.ggml_type) {
            continue;
        }
        let escaped = regex::escape(&tensor.name);
        match by_type.iter_mut().find(|(ty, _)| *ty == tensor.ggml_type) {
            Some((_, names)) => names.push(escaped),
            None => by_type.push((tensor.ggml_type, vec![escaped])),
        }
    }
    if by_type.is_empty() {
        return None;
    }
    let mut flags = Vec::new();
    if let Some(id) = file_type {
        flags.extend(["--override-kv".to_owned(), format!("general.file_type=int:{id}")]);
    }
    for (ty, names) in by_type {
        let pattern = format!("^({})$={}", names.join("|"), ty.name().to_lowercase());
        flags.extend(["--tensor-type".to_owned(), pattern]);
    }
    Some(Derivation { preset: "Q8_0".to_owned(), flags, imatrix })
}

/// The next derivation worth trying after `tried` made `made`: flags for
/// the output and token-embedding types the claimed file has, `--pure`
/// when every quantized matrix has the preset's default type, else the
/// other choice of importance matrix (`imatrix`: the name the file records
/// of one, when the pack holds one).
fn refine(tried: &Derivation, claimed: &ModelFile, made: &ModelFile, imatrix: Option<&String>) -> Option<Derivation> {
    let type_of = |model: &ModelFile, name: &str| model.tensors.iter().find(|t| t.name == name).map(|t| t.ggml_type);
    let mut next = tried.clone();
    let mut add = |flag: &str, value: Option<String>| {
        if !next.flags.iter().any(|f| f == flag) {
            next.flags.push(flag.to_owned());
            next.flags.extend(value);
        }
    };
    for (tensor, flag) in [("token_embd.weight", "--token-embedding-type"), ("output.weight", "--output-tensor-type")] {
        if let (Some(want), Some(got)) = (type_of(claimed, tensor), type_of(made, tensor))
            && want != got
        {
            add(flag, Some(want.name().to_owned()));
        }
    }
    let default = FileType::from_name(&tried.preset).and_then(FileType::default_type);
    let mut quantized = claimed.tensors.iter().filter(|t| t.dims.len() >= 2 && t.ggml_type.is_quantized()).peekable();
    if quantized.peek().is_some() && quantized.all(|t| Some(t.ggml_type) == default) {
        add("--pure", None);
    }
    if next == *tried && imatrix.is_some() {
        next.imatrix = match tried.imatrix {
            Some(_) => None,
            None => imatrix.cloned(),
        };
    }
    (next != *tried).then_some(next)
}

fn derive(derivation: &Derivation, base: &Path, imatrix: Option<&Path>, out: &Path) -> anyhow::Result<()> {
    let mut flags: Vec<String> = Vec::new();
    if let Some(name) = &derivation.imatrix {
        let path = imatrix.ok_or_else(|| anyhow::anyhow!("no importance matrix"))?;
        flags.extend(["--imatrix".into(), path.to_string_lossy().into_owned(), "--imatrix-name".into(), name.clone()]);
    }
    flags.extend(derivation.flags.iter().cloned());
    super::quantize::quantize_quietly(&flags, base, out, std::slice::from_ref(&derivation.preset))
}

pub(super) fn unpack(args: UnpackArgs, json: bool) -> anyhow::Result<()> {
    let pack = Pack::open(&args.pack)?;
    let manifest = &pack.manifest;
    if args.list && json {
        return super::json::print(&entries(manifest));
    }
    if args.list {
        print_list(manifest);
        return Ok(());
    }
    let outdir = args.outdir.as_deref().expect("clap requires OUTDIR without --list");
    let mut names: Vec<&str> = manifest.imatrix.iter().map(|f| f.name.as_str()).collect();
    names.insert(0, &manifest.base.name);
    names.extend(manifest.files.iter().map(|f| f.name.as_str()));
    let wanted: Vec<&str> = match args.files.is_empty() {
        true => names.clone(),
        false => args.files.iter().map(String::as_str).collect(),
    };
    if let Some(unknown) = wanted.iter().find(|w| !names.contains(w)) {
        anyhow::bail!("{}: no file `{unknown}` in the pack; it holds {}", args.pack.display(), names.join(", "));
    }
    std::fs::create_dir_all(outdir).with_context(|| format!("cannot create {}", outdir.display()))?;
    // Every file the pack names stays inside OUTDIR, and none is the pack.
    let mut guard = WriteGuard::within(outdir, "the output directory");
    guard.protect(&args.pack, "the pack being unpacked");
    let scratch = crate::formats::scratch_dir(outdir)?;
    let started = std::time::Instant::now();
    // The base and the importance matrix go where asked, else to scratch.
    let place = |name: &str| match wanted.contains(&name) {
        true => guard.check(&outdir.join(name), Replaces::AnyFile),
        false => guard.check(&scratch.path().join(name), Replaces::AnyFile),
    };
    let base = place(&manifest.base.name)?;
    pack.extract(&manifest.base, &base)?;
    let imatrix = match &manifest.imatrix {
        Some(packed) => {
            let path = place(&packed.name)?;
            pack.extract(packed, &path)?;
            Some(path)
        }
        None => None,
    };
    for file in manifest.files.iter().filter(|f| wanted.contains(&f.name.as_str())) {
        let derived = scratch.path().join("derived.gguf");
        if let Some(derivation) = &file.derivation {
            derive(derivation, base.resolved(), imatrix.as_ref().map(OutputPath::resolved), &derived)
                .map_err(|e| anyhow::anyhow!("{}: {derivation}: {e:#}", file.name))?;
        }
        let out = guard.check(&outdir.join(&file.name), Replaces::AnyFile)?;
        pack.assemble(file, file.derivation.as_ref().map(|_| derived.as_path()), &out)?;
        let _ = std::fs::remove_file(&derived);
        say!("{}: {} bytes, sha256 checked", file.name, file.size);
    }
    if json {
        let files = entries(manifest).into_iter().filter(|e| wanted.contains(&e.name.as_str())).collect();
        return super::json::print(&super::json::Unpacked { directory: outdir.to_owned(), files });
    }
    println!("unpacked {} files into {} in {:.1} s", wanted.len(), outdir.display(), started.elapsed().as_secs_f64());
    Ok(())
}

/// What the pack holds, the base first, and how each file is made.
fn entries(manifest: &Manifest) -> Vec<super::json::PackEntry> {
    let whole = |file: &pack::PackedFile, role| super::json::PackEntry {
        name: file.name.clone(),
        size: file.size,
        sha256: file.sha256.clone(),
        role,
        derivation: None,
        stored_bytes: file.size,
    };
    let mut entries = vec![whole(&manifest.base, "base")];
    entries.extend(manifest.imatrix.iter().map(|imatrix| whole(imatrix, "imatrix")));
    entries.extend(manifest.files.iter().map(|file| super::json::PackEntry {
        name: file.name.clone(),
        size: file.size,
        sha256: file.sha256.clone(),
        role: "ladder",
        derivation: file.derivation.as_ref().map(ToString::to_string),
        stored_bytes:
            file.pieces.iter().filter(|p| matches!(p, pack::Piece::Stored { .. })).map(pack::Piece::length).sum(),
    }));
    entries
}

fn print_list(manifest: &Manifest) {
    for entry in entries(manifest) {
        let how = match (entry.role, &entry.derivation, entry.stored_bytes) {
            ("base", _, _) => "base".to_owned(),
            ("imatrix", _, _) => "importance matrix".to_owned(),
            (_, Some(d), 0) => d.clone(),
            (_, Some(d), stored) => format!("{d}, {stored} bytes stored"),
            (_, None, _) => "stored".to_owned(),
        };
        println!("{}  {:>12}  {how}", entry.name, entry.size);
    }
}

fn file_name(path: &Path) -> anyhow::Result<String> {
    let name = path.file_name().and_then(|n| n.to_str());
    name.map(str::to_owned).ok_or_else(|| anyhow::anyhow!("{}: no file name in UTF-8", path.display()))
}

fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

fn scratch_name(derived: &Path, attempt: usize) -> PathBuf {
    derived.with_extension(format!("attempt{attempt}.gguf"))
}
