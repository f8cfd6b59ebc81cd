//! A parsed `data.pkl` read as a state dict: which globals may appear, what
//! each call means (`_rebuild_tensor_v2/v3`, `_rebuild_parameter`,
//! `OrderedDict`), and where each tensor's elements are in the file.
//!
//! Everything the graph holds is checked before it is trusted: storage keys
//! against the archive's records, declared sizes against the records' bytes,
//! every element a view can reach against its storage. Walking the graph is
//! bounded in depth (a cycle or nesting bomb) and in work (a memo bomb: the
//! same mapping referenced over and over).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use super::super::MAX_CHECKPOINT_DIMS;
use super::super::error::{ErrorKind, FormatError, Result};
use super::super::safetensors::Dtype;
use super::METADATA_PREFIX;
use super::archive::{Archive, StorageRecord};
use super::pickle::{self, Call, Id, Object, Pickle};
use crate::model::{GgufString, Metadata, PlacedElements, Placement, StoredLayout, TensorInfo, Value, element_count};

/// Storage classes by name, with the dtype of their elements (`None`: no
/// ggml type holds it, refused when a tensor uses one).
const TYPED_STORAGES: &[(&str, Option<Dtype>)] = &[
    ("DoubleStorage", Some(Dtype::F64)),
    ("FloatStorage", Some(Dtype::F32)),
    ("HalfStorage", Some(Dtype::F16)),
    ("BFloat16Storage", Some(Dtype::BF16)),
    ("LongStorage", Some(Dtype::I64)),
    ("IntStorage", Some(Dtype::I32)),
    ("ShortStorage", Some(Dtype::I16)),
    ("CharStorage", Some(Dtype::I8)),
    ("ByteStorage", Some(Dtype::U8)),
    ("BoolStorage", Some(Dtype::Bool)),
    ("ComplexFloatStorage", None),
    ("ComplexDoubleStorage", None),
    ("QInt8Storage", None),
    ("QUInt8Storage", None),
    ("QInt32Storage", None),
];

/// `torch.<name>` dtypes, as `_rebuild_tensor_v3` names them.
const DTYPES: &[(&str, Option<Dtype>)] = &[
    ("float64", Some(Dtype::F64)),
    ("float32", Some(Dtype::F32)),
    ("float16", Some(Dtype::F16)),
    ("bfloat16", Some(Dtype::BF16)),
    ("int64", Some(Dtype::I64)),
    ("int32", Some(Dtype::I32)),
    ("int16", Some(Dtype::I16)),
    ("int8", Some(Dtype::I8)),
    ("uint8", Some(Dtype::U8)),
    ("bool", Some(Dtype::Bool)),
    ("uint16", Some(Dtype::U16)),
    ("uint32", Some(Dtype::U32)),
    ("uint64", Some(Dtype::U64)),
    ("float8_e4m3fn", Some(Dtype::F8E4M3)),
    ("float8_e5m2", Some(Dtype::F8E5M2)),
    ("float8_e4m3fnuz", Some(Dtype::F8E4M3Fnuz)),
    ("float8_e5m2fnuz", Some(Dtype::F8E5M2Fnuz)),
    ("float8_e8m0fnu", Some(Dtype::F8E8M0)),
    ("complex64", Some(Dtype::C64)),
    ("complex128", None),
];

/// The globals a state dict is made of; every other is refused unread.
pub fn is_allowed_global(module: &str, name: &str) -> bool {
    match module {
        "collections" => name == "OrderedDict",
        "torch._utils" => {
            matches!(
                name,
                "_rebuild_tensor_v2" | "_rebuild_tensor_v3" | "_rebuild_parameter" | "_rebuild_parameter_with_state"
            )
        }
        "torch.storage" => name == "UntypedStorage",
        "torch" => {
            name == "UntypedStorage"
                || name == "Size"
                || TYPED_STORAGES.iter().any(|&(n, _)| n == name)
                || DTYPES.iter().any(|&(n, _)| n == name)
        }
        _ => false,
    }
}

/// The element size of every storage the pickle names (a storage key with
/// its typed storage class), for the legacy format, whose storages follow
/// one another with only their element counts between them. A key named
/// with two different sizes is an error, at the second.
pub(super) fn storage_element_sizes(pickle: &Pickle) -> std::result::Result<HashMap<String, u64>, (u64, String)> {
    let mut sizes = HashMap::new();
    for (id, object) in pickle.objects.iter().enumerate() {
        let Object::Tuple(fields) = object else { continue };
        let [tag, class, key, ..] = fields[..] else { continue };
        let (Object::Str(tag), Object::Global { name: class, .. }, Object::Str(key)) =
            (pickle.get(tag), pickle.get(class), pickle.get(key))
        else {
            continue;
        };
        if tag != "storage" {
            continue;
        }
        let Some(&(_, Some(dtype))) = TYPED_STORAGES.iter().find(|&&(n, _)| n == class) else {
            return Err((pickle.offset(id), format!("storage `{key}` is a {class}, which no ggml type holds")));
        };
        let size = dtype.bits() / 8;
        match sizes.get(key) {
            Some(&known) if known != size => {
                return Err((
                    pickle.offset(id),
                    format!("storage `{key}` has elements of {known} and of {size} bytes"),
                ));
            }
            Some(_) => {}
            None => {
                sizes.insert(key.clone(), size);
            }
        }
    }
    Ok(sizes)
}

/// How deep mappings may nest (a Lightning checkpoint's `state_dict` is 1).
const MAX_NESTING: usize = 16;

/// Reads the state dict in `archive`'s pickle. `path` is the checkpoint's,
/// for errors.
pub fn read(path: &Path, archive: &Archive) -> Result<(Metadata, Vec<TensorInfo>)> {
    let pickle = pickle::parse(&archive.pickle, &is_allowed_global).map_err(|e| {
        FormatError::at(
            path,
            archive.pickle_offset + e.offset,
            ErrorKind::Invalid(format!("{} {e}", archive.pickle_name)),
        )
    })?;
    let mut walk = Walk {
        path,
        archive,
        pickle: &pickle,
        // Each object of a state dict is visited a few times at most; a walk
        // far past that is following shared references around.
        budget: 16 * pickle.objects.len() as u64 + 1024,
        tensors: Vec::new(),
        names: HashSet::new(),
        metadata: Vec::new(),
    };
    let Some(entries) = walk.mapping(pickle.root)? else {
        let kind = pickle::kind(pickle.get(pickle.root));
        return Err(walk.error(pickle.root, format!("the checkpoint holds {kind}, not a mapping of names to tensors")));
    };
    walk.entries(&entries, "", 0)?;
    Ok((Metadata::from_unique_entries(walk.metadata), walk.tensors))
}

struct Walk<'a> {
    path: &'a Path,
    archive: &'a Archive,
    pickle: &'a Pickle,
    budget: u64,
    tensors: Vec<TensorInfo>,
    /// Every name read so far, tensors' and values' alike.
    names: HashSet<String>,
    metadata: Vec<(String, Value)>,
}

/// A tensor as `_rebuild_tensor_v2/v3` describes it.
struct View {
    dtype: Dtype,
    storage_key: String,
    /// Elements of `dtype` the storage declares.
    storage_elements: u64,
    storage_offset: u64,
    /// Outermost first, as PyTorch lists them.
    size: Vec<u64>,
    stride: Vec<u64>,
}

impl<'a> Walk<'a> {
    fn error(&self, id: Id, message: String) -> FormatError {
        let offset = self.pickle.offset(id);
        FormatError::at(
            self.path,
            self.archive.pickle_offset + offset,
            ErrorKind::Invalid(format!("{} byte {offset}: {message}", self.archive.pickle_name)),
        )
    }

    fn visit(&mut self, id: Id) -> Result<&'a Object> {
        if self.budget == 0 {
            return Err(
                self.error(id, "the pickle refers to the same objects far more often than a state dict does".into())
            );
        }
        self.budget -= 1;
        Ok(self.pickle.get(id))
    }

    fn global_of(&self, id: Id) -> Option<(&'a str, &'a str)> {
        match self.pickle.get(id) {
            Object::Global { module, name } => Some((module, name)),
            _ => None,
        }
    }

    /// The call's callable, when `id` is a call.
    fn call(&mut self, id: Id) -> Result<Option<(&'a Call, &'a str)>> {
        let pickle = self.pickle;
        Ok(match self.visit(id)? {
            Object::Call(call) => match pickle.get(call.callable) {
                Object::Global { name, .. } => Some((call, name.as_str())),
                _ => None,
            },
            _ => None,
        })
    }

    /// A mapping's entries, or `None` when `id` is not a mapping.
    fn mapping(&mut self, id: Id) -> Result<Option<Vec<(Id, Id)>>> {
        let pickle = self.pickle;
        match self.visit(id)? {
            Object::Dict(entries) => Ok(Some(entries.clone())),
            Object::Call(call) if self.global_of(call.callable) == Some(("collections", "OrderedDict")) => {
                if !matches!(pickle.get(call.args), Object::Tuple(args) if args.is_empty()) {
                    return Err(self.error(id, "an OrderedDict built from arguments; torch.save passes none".into()));
                }
                if !call.appended.is_empty() {
                    return Err(self.error(id, "items appended to an OrderedDict".into()));
                }
                if let Some(state) = call.state {
                    // A state dict's `_metadata` attribute: module versions, not weights.
                    let only_metadata = matches!(pickle.get(state), Object::Dict(attrs)
                        if attrs.iter().all(|&(k, _)| matches!(pickle.get(k), Object::Str(k) if k == "_metadata")));
                    if !only_metadata {
                        return Err(self.error(state, "an OrderedDict with attributes other than `_metadata`".into()));
                    }
                }
                Ok(Some(call.items.clone()))
            }
            _ => Ok(None),
        }
    }

    fn entries(&mut self, entries: &[(Id, Id)], prefix: &str, depth: usize) -> Result<()> {
        for &(key, value) in entries {
            let name = match self.visit(key)? {
                Object::Str(key) => format!("{prefix}{key}"),
                Object::Int(key) => format!("{prefix}{key}"),
                other => {
                    let kind = pickle::kind(other);
                    return Err(self.error(key, format!("a key that is {kind}; state dict keys are strings")));
                }
            };
            self.entry(name, value, depth)?;
        }
        Ok(())
    }

    fn entry(&mut self, name: String, id: Id, depth: usize) -> Result<()> {
        if let Some(view) = self.tensor(id, &name)? {
            let tensor = self.place(&name, id, view)?;
            if !self.names.insert(name.clone()) {
                return Err(self.error(id, format!("`{name}` appears twice")));
            }
            self.tensors.push(tensor);
            return Ok(());
        }
        if let Some(entries) = self.mapping(id)? {
            if depth == MAX_NESTING {
                return Err(self.error(id, format!("`{name}` nests mappings deeper than {MAX_NESTING}")));
            }
            return self.entries(&entries, &format!("{name}."), depth + 1);
        }
        let value = match self.pickle.get(id) {
            Object::Bool(v) => Value::Bool(*v),
            Object::Int(v) => Value::I64(*v),
            Object::Float(v) => Value::F64(*v),
            Object::Str(v) => Value::String(GgufString::from(v.clone())),
            other => {
                let kind = pickle::kind(other);
                return Err(self.error(
                    id,
                    format!(
                        "`{name}` holds {kind}; a checkpoint is read as tensors, mappings of them, and scalar values"
                    ),
                ));
            }
        };
        if !self.names.insert(name.clone()) {
            return Err(self.error(id, format!("`{name}` appears twice")));
        }
        self.metadata.push((format!("{METADATA_PREFIX}{name}"), value));
        Ok(())
    }

    /// The view `id` describes, when it is a tensor or a parameter.
    fn tensor(&mut self, id: Id, name: &str) -> Result<Option<View>> {
        let Some((call, callable)) = self.call(id)? else { return Ok(None) };
        let args = self.tuple(call.args)?;
        let view = match callable {
            "_rebuild_parameter" | "_rebuild_parameter_with_state" => {
                let expected = if callable == "_rebuild_parameter" { 3 } else { 4 };
                if args.len() != expected {
                    return Err(self.error(id, format!("`{name}`: {callable} with {} arguments", args.len())));
                }
                self.hooks(args[2], name)?;
                return match self.tensor(args[0], name)? {
                    Some(view) => Ok(Some(view)),
                    None => Err(self.error(args[0], format!("`{name}`: a parameter that holds no tensor"))),
                };
            }
            "_rebuild_tensor_v2" | "_rebuild_tensor_v3" => {
                let v3 = callable == "_rebuild_tensor_v3";
                let fixed = if v3 { 7 } else { 6 };
                if args.len() != fixed && args.len() != fixed + 1 {
                    return Err(self.error(id, format!("`{name}`: {callable} with {} arguments", args.len())));
                }
                self.hooks(args[5], name)?;
                if let Some(&metadata) = args.get(fixed) {
                    let empty = matches!(self.pickle.get(metadata), Object::None)
                        || matches!(self.pickle.get(metadata), Object::Dict(d) if d.is_empty());
                    if !empty {
                        return Err(self.error(metadata, format!("`{name}` carries tensor attributes; none are read")));
                    }
                }
                let dtype = if v3 { Some(self.dtype(args[6], name)?) } else { None };
                self.view(args[0], args[1], args[2], args[3], dtype, name)?
            }
            _ => return Ok(None),
        };
        if !call.items.is_empty() || !call.appended.is_empty() || call.state.is_some() {
            return Err(self.error(id, format!("`{name}`: a tensor with state added after it was built")));
        }
        Ok(Some(view))
    }

    fn hooks(&mut self, id: Id, name: &str) -> Result<()> {
        match self.mapping(id)? {
            Some(hooks) if hooks.is_empty() => Ok(()),
            Some(_) => Err(self.error(id, format!("`{name}` has backward hooks; quantforge reads weights only"))),
            None => Err(self.error(id, format!("`{name}`: backward hooks that are not a mapping"))),
        }
    }

    fn tuple(&mut self, id: Id) -> Result<Vec<Id>> {
        match self.visit(id)? {
            Object::Tuple(items) => Ok(items.clone()),
            other => {
                let kind = pickle::kind(other);
                Err(self.error(id, format!("{kind} where a tuple belongs")))
            }
        }
    }

    fn int(&mut self, id: Id, what: &str, name: &str) -> Result<u64> {
        match self.visit(id)? {
            &Object::Int(v) if v >= 0 => Ok(v as u64),
            Object::Int(v) => Err(self.error(id, format!("`{name}`: {what} is {v}"))),
            other => {
                let kind = pickle::kind(other);
                Err(self.error(id, format!("`{name}`: {what} is {kind}, not an int")))
            }
        }
    }

    /// A size or stride: a tuple of ints, or `torch.Size` of one.
    fn ints(&mut self, id: Id, what: &str, name: &str) -> Result<Vec<u64>> {
        let items = match self.call(id)? {
            Some((call, "Size")) => {
                let args = call.args;
                match self.tuple(args)?[..] {
                    [inner] => self.tuple(inner)?,
                    _ => return Err(self.error(id, format!("`{name}`: {what} is torch.Size of several arguments"))),
                }
            }
            _ => self.tuple(id)?,
        };
        if items.len() as u64 > MAX_CHECKPOINT_DIMS {
            return Err(
                self.error(id, format!("`{name}` has {} dimensions, more than {MAX_CHECKPOINT_DIMS}", items.len()))
            );
        }
        items.into_iter().map(|item| self.int(item, what, name)).collect()
    }

    fn dtype(&mut self, id: Id, name: &str) -> Result<Dtype> {
        let found = self.global_of(id).filter(|&(module, _)| module == "torch");
        let Some((_, dtype)) = found else {
            return Err(self.error(id, format!("`{name}`: a dtype that is not a torch dtype")));
        };
        match DTYPES.iter().find(|&&(n, _)| n == dtype) {
            Some(&(_, Some(d))) => Ok(d),
            _ => Err(self.error(id, format!("`{name}` has dtype torch.{dtype}, which no ggml type holds"))),
        }
    }

    fn view(
        &mut self,
        storage: Id,
        offset: Id,
        size: Id,
        stride: Id,
        dtype: Option<Dtype>,
        name: &str,
    ) -> Result<View> {
        let Object::Persistent(pid) = *self.visit(storage)? else {
            return Err(self.error(storage, format!("`{name}`: a storage that is not a persistent id")));
        };
        let fields = self.tuple(pid)?;
        // The legacy format adds a sixth field: a view into another storage.
        let (tag, class, key, numel) = match fields[..] {
            [tag, class, key, _location, numel] => (tag, class, key, numel),
            [tag, class, key, _location, numel, view] => {
                if !matches!(self.visit(view)?, Object::None) {
                    return Err(self.error(view, format!("`{name}`: a storage that is a view of another; not read")));
                }
                (tag, class, key, numel)
            }
            _ => return Err(self.error(pid, format!("`{name}`: a storage id of {} fields, not 5", fields.len()))),
        };
        if !matches!(self.visit(tag)?, Object::Str(tag) if tag == "storage") {
            return Err(self.error(tag, format!("`{name}`: a persistent id that is not a storage")));
        }
        let storage_key = match self.visit(key)? {
            Object::Str(key) => key.clone(),
            other => {
                let kind = pickle::kind(other);
                return Err(self.error(key, format!("`{name}`: a storage key that is {kind}")));
            }
        };
        let class_name = match self.global_of(class) {
            Some((_, class_name)) => class_name.to_owned(),
            None => return Err(self.error(class, format!("`{name}`: a storage class that is not a global"))),
        };
        let numel = self.int(numel, "the storage's size", name)?;
        let (dtype, storage_elements) = if class_name == "UntypedStorage" {
            let Some(dtype) = dtype else {
                return Err(self.error(class, format!("`{name}`: an untyped storage with no dtype")));
            };
            // An untyped storage counts bytes.
            (dtype, numel / (dtype.bits() / 8))
        } else {
            match TYPED_STORAGES.iter().find(|&&(n, _)| n == class_name) {
                Some(&(_, Some(d))) if dtype.is_none_or(|given| given == d) => (d, numel),
                Some(&(_, Some(d))) => {
                    return Err(self.error(
                        class,
                        format!("`{name}`: a {class_name} (of {d}) read as {}", dtype.expect("a dtype was given")),
                    ));
                }
                _ => return Err(self.error(class, format!("`{name}` is in a {class_name}, which no ggml type holds"))),
            }
        };
        let storage_offset = self.int(offset, "the storage offset", name)?;
        let dims = self.ints(size, "a dimension", name)?;
        let strides = self.ints(stride, "a stride", name)?;
        if dims.len() != strides.len() {
            return Err(
                self.error(stride, format!("`{name}` has {} dimensions and {} strides", dims.len(), strides.len()))
            );
        }
        Ok(View { dtype, storage_key, storage_elements, storage_offset, size: dims, stride: strides })
    }

    /// Where `view`'s elements are in the file, checked against its storage.
    fn place(&self, name: &str, id: Id, view: View) -> Result<TensorInfo> {
        let invalid = |message: String| self.error(id, format!("`{name}`: {message}"));
        let Some((ggml_type, layout)) = view.dtype.read_as() else {
            return Err(invalid(format!("dtype {}, which no ggml type holds", view.dtype)));
        };
        let record: StorageRecord = *self.archive.storages.get(&view.storage_key).ok_or_else(|| {
            invalid(format!("storage `{}` has no record `data/{}` in the archive", view.storage_key, view.storage_key))
        })?;
        if !record.stored {
            return Err(invalid(format!(
                "storage `{}` is compressed; torch.save stores storages as they are",
                view.storage_key
            )));
        }
        let element_size = view.dtype.bits() / 8;
        let storage_bytes = view.storage_elements.checked_mul(element_size).filter(|&b| b <= record.len);
        let Some(storage_bytes) = storage_bytes else {
            return Err(invalid(format!(
                "storage `{}` declares {} elements of {}, more than its {} bytes",
                view.storage_key, view.storage_elements, view.dtype, record.len
            )));
        };
        let Some(count) = element_count(&view.size) else {
            return Err(FormatError::at(
                self.path,
                self.archive.pickle_offset + self.pickle.offset(id),
                ErrorKind::ElementCountOverflow { tensor: name.into(), shape: view.size },
            ));
        };
        // The farthest element from the first, in elements.
        let reach = view.size.iter().zip(&view.stride).try_fold(0u64, |acc, (&n, &s)| {
            n.checked_sub(1).map_or(Some(acc), |last| acc.checked_add(last.checked_mul(s)?))
        });
        let span = match (count, reach) {
            (0, _) => Some(0),
            (_, Some(reach)) => reach.checked_add(1),
            (_, None) => None,
        };
        let end = span.and_then(|span| view.storage_offset.checked_add(span)?.checked_mul(element_size));
        let start = view.storage_offset.checked_mul(element_size);
        let (Some(start), Some(end)) = (start, end) else {
            return Err(invalid("its extent overflows".into()));
        };
        if end > storage_bytes || start > storage_bytes {
            return Err(invalid(format!(
                "elements up to byte {end} of storage `{}`, which has {storage_bytes}",
                view.storage_key
            )));
        }
        let dims: Vec<u64> = if view.size.is_empty() { vec![1] } else { view.size.iter().rev().copied().collect() };
        let layout = if is_contiguous(&view.size, &view.stride) {
            layout
        } else {
            let conversion = match layout {
                StoredLayout::Converted(conversion) => Some(conversion),
                _ => None,
            };
            let strides = view.stride.iter().rev().copied().collect();
            StoredLayout::Placed(Arc::new(Placement {
                elements: PlacedElements::Strided { strides, element_size },
                conversion,
            }))
        };
        Ok(TensorInfo {
            name: name.to_owned(),
            dims,
            ggml_type,
            file_offset: record.offset + start,
            stored_len: end - start,
            layout,
        })
    }
}

/// Row-major with no gaps; a dimension of one element may have any stride.
fn is_contiguous(size: &[u64], stride: &[u64]) -> bool {
    let mut expected = 1;
    for (&n, &s) in size.iter().zip(stride).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n;
    }
    true
}
